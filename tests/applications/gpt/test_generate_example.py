"""examples/generate.py: its main() on a tiny Hugging Face-layout GPT directory written here (config.json,
model.safetensors, vocab.json, merges.txt): greedy, sampling (same seed same text), beam search, stop strings,
a prompts file, and clear one-line errors (exit status 2) for bad flags and bad input. The --export /
--saved-model round trip is tests/applications/gpt/test_export.py's SavedModel plus one run here (slow: marked)."""

import functools
import importlib.util
import pathlib

import keras
import pytest

from attnlayers.applications.gpt import GPT, GPTConfig, save_hf_checkpoint
from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer, train_byte_level_bpe

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "examples" / "generate.py"
CORPUS = ["The quick brown fox jumps over the lazy dog. The dog sleeps.", "A cat, a hat; the cat sat on the mat!",
          "Numbers 12 and 345.\n\nNew paragraph here."] * 4


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("generate_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Each main() would load the directory again (a model build and a tokenizer, seconds each): the tests load it
    # once per directory. test_bad_directories checks the loader's own errors.
    module.load_checkpoint_uncached = module.load_checkpoint
    module.load_checkpoint = functools.lru_cache(maxsize=None)(module.load_checkpoint)
    return module


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A GPT-2 directory in Hugging Face's layout, as a download or examples/train_gpt.py holds."""
    directory = tmp_path_factory.mktemp("gpt2")
    vocabulary, merges = train_byte_level_bpe(CORPUS, 300, directory / "bpe")
    tokenizer = GPT2Tokenizer(vocabulary, merges)
    keras.utils.set_random_seed(2)
    model = GPT(GPTConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=24, num_layers=1,
                          num_heads=2, hidden_dim=16, intermediate_dim=32, end_token_id=tokenizer.end_token_id))
    save_hf_checkpoint(model, directory / "checkpoint", vocabulary=vocabulary, merges=merges)
    return str(directory / "checkpoint")


def outputs(capsys):
    """The continuation lines printed (each after its "=== i: prompt" header)."""
    lines = capsys.readouterr().out.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line.startswith("=== ")]


def test_greedy_sampling_and_beam_search(script, checkpoint, capsys):
    base = ["--checkpoint", checkpoint, "--prompt", "the cat", "--prompt", "A dog", "--max-new-tokens", "6"]
    assert script.main(base) == 0
    greedy = outputs(capsys)
    assert len(greedy) == 2 and greedy[0].startswith("the cat") and greedy[1].startswith("A dog")
    assert len(greedy[0]) > len("the cat")
    sample = base + ["--search", "sample", "--temperature", "1.5", "--top-k", "20", "--top-p", "0.95", "--seed"]
    assert script.main(sample + ["3"]) == 0
    first = outputs(capsys)
    assert script.main(sample + ["3"]) == 0
    assert outputs(capsys) == first  # the same seed, the same text
    assert script.main(sample + ["4"]) == 0
    assert outputs(capsys) != first
    assert script.main(base + ["--search", "sample", "--temperature", "0"]) == 0
    assert outputs(capsys) == greedy  # temperature 0 is greedy
    assert script.main(base + ["--search", "beam", "--num-beams", "2"]) == 0
    beam = outputs(capsys)
    assert len(beam) == 2
    with pytest.warns(DeprecationWarning, match="--strategy is deprecated; use --search"):  # the flag's old name
        assert script.main(base + ["--strategy", "beam", "--num-beams", "2"]) == 0
    assert outputs(capsys) == beam


def test_max_new_tokens_default_and_clipping(script, checkpoint, capsys):
    base = ["--checkpoint", checkpoint, "--prompt", "the cat", "--prompt", "A dog"]
    assert script.main(base) == 0  # default: up to the model's context (24 tokens)
    captured = capsys.readouterr()
    to_the_end = outputs_of(captured.out)
    assert "note:" not in captured.err
    assert script.main(base + ["--max-new-tokens", "2147483647"]) == 0
    captured = capsys.readouterr()
    assert outputs_of(captured.out) == to_the_end
    assert "--max-new-tokens 2147483647 is more than the context allows (24 tokens, prompt included)" in captured.err
    assert script.main(base + ["--max-new-tokens", "3"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_stop_strings_and_prompts_file(script, checkpoint, capsys, tmp_path):
    base = ["--checkpoint", checkpoint, "--max-new-tokens", "10"]
    assert script.main(base + ["--prompt", "the cat"]) == 0
    free = outputs(capsys)[0][len("the cat"):]
    stop = free[2:4] if len(free) >= 4 else free
    assert stop
    assert script.main(base + ["--prompt", "the cat", "--stop", stop]) == 0
    assert outputs(capsys)[0] == "the cat" + free[: free.index(stop)]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat\n\nA dog\\nsat\n", encoding="utf-8")  # a blank line skipped, \n unescaped
    assert script.main(base + ["--prompts-file", str(prompts)]) == 0
    captured = capsys.readouterr().out
    assert "=== 1: 'the cat'" in captured and "=== 2: 'A dog\\nsat'" in captured


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--prompt", "x"], "one of the arguments --checkpoint --saved-model is required"),
        (["--checkpoint", "C", "--saved-model", "S", "--prompt", "x"], "not allowed with argument"),
        (["--checkpoint", "C", "--prompt", "x", "--top-p", "1.5"], "--top-p must be in (0, 1]"),
        (["--checkpoint", "C", "--prompt", "x", "--search", "sample", "--top-k", "-1"], "--top-k must be >= 0"),
        (["--checkpoint", "C", "--prompt", "x", "--search", "sample", "--temperature", "-1"],
         "--temperature must be >= 0"),
        (["--checkpoint", "C", "--prompt", "x", "--temperature", "0.5"], "apply to --search sample"),
        (["--checkpoint", "C", "--prompt", "x", "--search", "nucleus"], "invalid choice: 'nucleus'"),
        (["--checkpoint", "C", "--prompt", "x", "--search", "beam", "--strategy", "beam"], "deprecated name of --search"),
        (["--checkpoint", "C", "--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
        (["--checkpoint", "C", "--prompt", "x", "--stop", ""], "--stop strings must not be empty"),
        (["--saved-model", "S", "--prompt", "x", "--search", "beam"], "beam search needs --checkpoint"),
        (["--saved-model", "S", "--prompt", "x", "--max-length", "9"], "--max-length is fixed in a SavedModel"),
    ],
)
def test_bad_flags(script, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        script.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--prompt", ""], "`prompts`[0] is empty"),
        (["--prompt", "the cat sat on the mat " * 8], "more than max_sequence_length=24"),
        (["--prompt", "x", "--max-length", "40"], "max_sequence_length=24"),
        ([], "no prompt"),
        (["--prompts-file", "/nonexistent/prompts.txt"], "/nonexistent/prompts.txt"),
    ],
)
def test_bad_input(script, checkpoint, argv, message, capsys):
    assert script.main(["--checkpoint", checkpoint] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("generate.py: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_bad_directories(script, checkpoint, capsys, tmp_path):
    assert script.main(["--checkpoint", str(tmp_path / "missing"), "--prompt", "x"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert script.main(["--checkpoint", str(tmp_path), "--prompt", "x"]) == 2  # no config.json
    assert "config.json" in capsys.readouterr().err
    assert script.main(["--saved-model", checkpoint, "--prompt", "x"]) == 2  # a checkpoint, not a SavedModel
    assert "--saved-model" in capsys.readouterr().err


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="--export writes a TensorFlow SavedModel (the TensorFlow backend)")
def test_export_then_serve(script, checkpoint, capsys, tmp_path, monkeypatch):
    import tensorflow as tf

    # Each --saved-model main() would load the SavedModel again (and compile its loop again): loaded once here, as
    # the checkpoint is (the script fixture); test_bad_directories checks a directory that does not load.
    monkeypatch.setattr(tf.saved_model, "load", functools.lru_cache(maxsize=None)(tf.saved_model.load))
    exported = str(tmp_path / "generate")
    assert script.main(["--checkpoint", checkpoint, "--export", exported, "--max-length", "16",
                        "--input-length", "6", "--prompt", "the cat", "--max-new-tokens", "5"]) == 0
    captured = capsys.readouterr().out
    assert "wrote the SavedModel" in captured
    in_process = outputs_of(captured)
    assert script.main(["--saved-model", exported, "--prompt", "the cat", "--max-new-tokens", "5"]) == 0
    assert outputs(capsys) == in_process  # greedy: the same text from the SavedModel
    # Without --max-new-tokens the SavedModel runs to its loop length (it used to pass 2**31 - 1, which overflowed
    # the loop's int32 length arithmetic: one token, "And God said unto"); more than the loop allows is clipped.
    assert script.main(["--checkpoint", checkpoint, "--max-length", "16", "--prompt", "the cat"]) == 0
    to_the_end = outputs(capsys)
    assert len(to_the_end[0]) > len(in_process[0])
    assert script.main(["--saved-model", exported, "--prompt", "the cat"]) == 0
    assert outputs(capsys) == to_the_end
    assert script.main(["--saved-model", exported, "--prompt", "the cat", "--max-new-tokens", "2147483647"]) == 0
    captured = capsys.readouterr()
    assert outputs_of(captured.out) == to_the_end
    assert "--max-new-tokens 2147483647 is more than the context allows" in captured.err


def outputs_of(text):
    lines = text.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line.startswith("=== ")]
