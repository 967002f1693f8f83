"""The GPT training recipe end to end on a small text written here (examples/train_gpt.py --corpus text:PATH): the
windows and their masks, the loss and the perplexity ignoring padding (masked by the padding mask, not by id), the
reported held-out perplexity equal to a NumPy computation over the held-out tokens, the best held-out epoch's weights
kept and saved when a later epoch is worse, the progress lines under a time budget, the saved Hugging Face
checkpoint giving the trained model's logits, the run's default folder, and a run resumed from its backup after an
interruption."""

import contextlib
import importlib.util
import io
import json
import os
import pathlib

import keras
import numpy as np
import pytest
from texts import write_documents

from attnlayers.applications.gpt import data, runs  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
# --no-jit under TensorFlow only: there XLA's compilation costs more than it saves at this size; under JAX a step
# that is not jitted runs op by op, which is slower.
FLAGS = ["--config", "tiny", "--vocab-size", "300", "--sequence-length", "16", "--batch-size", "8", "--epochs", "2",
         "--minutes", "10", "--learning-rate", "3e-3", "--held-out", "0.2", "--verbose", "2",
         *(["--no-jit"] if keras.backend.backend() == "tensorflow" else [])]


def _settings(**overrides):
    return runs.TrainingSettings(**{"vocabulary_size": 300, "sequence_length": 16, "batch_size": 8, "epochs": 2,
                                       "learning_rate": 3e-3, "held_out": 0.2,
                                       "jit_compile": keras.backend.backend() == "jax", **overrides})  # as FLAGS


class Keep(keras.callbacks.Callback):
    """Keeps the trained model."""

    def on_train_end(self, logs=None):
        Keep.model_ = self.model


class Diverge(keras.callbacks.Callback):
    """After the last step of the second epoch (before its validation) adds noise of standard deviation 1 to every
    trained weight: that epoch's held-out loss is far worse than the first's, as when a run diverges."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 1 and batch + 1 == self.params["steps"]:
            if keras.backend.backend() == "jax":
                self.model.jax_state_sync()  # the loop's state into the variables, read back after the epoch
            rng = np.random.default_rng(0)
            for variable in self.model.trainable_variables:
                value = keras.ops.convert_to_numpy(variable)
                variable.assign(value + rng.normal(size=value.shape).astype(value.dtype))


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "train_gpt.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """examples/train_gpt.py on the text for 2 epochs (within a 10-minute budget), the second one spoiled by
    :class:`Diverge`: (out folder, printed text, the kept model, the corpus)."""
    script = _script("train_gpt_script")
    folder = tmp_path_factory.mktemp("gpt")
    corpus, out = write_documents(folder / "corpus.txt"), folder / "run"
    run_training = runs.run_training
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runs, "run_training", lambda *a, **k: run_training(*a, callbacks=[Diverge(), Keep()], **k))
        keras.config.set_dtype_policy("float32")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = script.main(FLAGS + ["--viewer", "--corpus", f"text:{corpus}", "--out", str(out)])
    assert status == 0
    return out, printed.getvalue(), Keep.model_, corpus


def test_windows_overlap_by_one_and_only_the_last_is_padded():
    stream = data.token_stream([np.array([5, 6, 7]), np.array([8, 9])], end_token_id=0)
    np.testing.assert_array_equal(stream, [0, 5, 6, 7, 0, 8, 9, 0])
    windows, mask = data.lm_windows(stream, 3, pad_token_id=0)
    np.testing.assert_array_equal(windows, [[0, 5, 6, 7], [7, 0, 8, 9], [9, 0, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    x, y, weights = data.lm_examples(windows, mask)
    # Every token after the first is a real label exactly once; the padding (pad id = end id) is weighted 0.
    np.testing.assert_array_equal(y[weights > 0], stream[1:])
    np.testing.assert_array_equal(x["token_ids"], windows[:, :-1])
    assert data.unigram_perplexity([1, 1], [0, 1]) == pytest.approx(2.0)
    # drop_remainder: only full batches, with a static batch size (TPUs, jit_compile)
    batched = data.lm_dataset(windows, mask, 2, drop_remainder=True)
    assert batched.element_spec[1].shape.as_list() == [2, 3] and len(list(batched)) == 1
    assert [len(y) for _, y, _ in data.lm_dataset(windows, mask, 2)] == [2, 1]


def test_padding_changes_neither_the_loss_nor_the_perplexity(trained):
    from attnlayers.applications.core.training.metrics import Perplexity

    *_, model, _ = trained
    rng = np.random.default_rng(0)
    vocabulary, end = model.config.vocabulary_size, model.end_token_id
    windows = rng.integers(1, vocabulary, size=(3, 17)).astype("int32")
    mask = np.ones_like(windows, bool)
    mask[2, 9:] = False  # the padded last window
    windows[~mask] = end  # GPT-2's padding id is its end id, which is also a real label elsewhere
    windows[0, 5] = end
    x, y, weights = data.lm_examples(windows, mask)

    def scores(x, y):
        logits = keras.ops.convert_to_numpy(model(x))
        loss = float(runs.causal_lm_loss()(y, logits, sample_weight=weights))
        metric = Perplexity()
        metric.update_state(y, logits, sample_weight=weights)
        return loss, float(metric.result()), logits

    loss, perplexity, logits = scores(x, y)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_p, y[..., None], -1)[..., 0]
    expected = nll[weights > 0].mean()  # the end-token label at [0, 4] counts; padding does not
    assert loss == pytest.approx(expected, rel=1e-5) and perplexity == pytest.approx(np.exp(expected), rel=1e-5)
    other_x = {"token_ids": np.where(x["padding_mask"], x["token_ids"], rng.integers(1, vocabulary, x["token_ids"].shape)),
               "padding_mask": x["padding_mask"]}
    other_y = np.where(weights > 0, y, rng.integers(1, vocabulary, y.shape))
    other_loss, other_perplexity, _ = scores(other_x, other_y)
    assert other_loss == pytest.approx(loss, rel=1e-6) and other_perplexity == pytest.approx(perplexity, rel=1e-6)


def test_run_reports_exact_held_out_perplexity_beside_the_baseline(trained):
    from attnlayers.applications.core.inputs.corpora import split_documents
    from attnlayers.applications.gpt import GPT2Tokenizer

    out, printed, model, corpus = trained
    result = json.loads((out / "results.json").read_text())
    assert result["task"] == "language_model" and result["training"]["epochs"] == 2
    history = result["training"]["history"]
    assert len(history["perplexity"]) == 2 and len(history["val_perplexity"]) == 2
    held, baselines = result["held_out"], result["baselines"]
    assert 1.0 < held["perplexity"] < baselines["unigram_perplexity"]  # the text is easy: it must beat unigrams
    assert "unigram baseline" in printed and "sampled (top-p 0.9)" in printed and len(result["samples"]) == 3
    # The reported perplexity is exp(sum NLL / tokens) over every held-out label, recomputed here in NumPy.
    tokenizer = GPT2Tokenizer.from_directory(str(out / "checkpoint"))
    _, held_texts = split_documents(data.read_text_documents(corpus), held_out=0.2, seed=0)
    ids = data.tokenize_documents(held_texts, tokenizer)
    windows, mask = data.lm_windows(data.token_stream(ids, tokenizer.end_token_id), 16, tokenizer.end_token_id)
    x, y, weights = data.lm_examples(windows, mask)
    logits = keras.ops.convert_to_numpy(model(x)).astype(np.float64)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_p, y[..., None], -1)[..., 0]
    assert held["tokens"] == int(weights.sum())
    assert held["perplexity"] == pytest.approx(np.exp(nll[weights > 0].sum() / weights.sum()), rel=1e-4)
    if result["pictures"]:  # matplotlib installed
        assert pathlib.Path(result["pictures"][0]).stat().st_size > 0
    assert (out / "logs").is_dir()
    from attnlayers.viewer import read_attention_viewer

    viewer = read_attention_viewer(out / "viewer.html")["sets"]["self-attention"]  # --viewer: a held-out prompt
    assert viewer["weights"].shape[:2] == (model.config.num_layers, model.config.num_heads)
    assert np.allclose(np.triu(viewer["weights"], k=1), 0.0)  # causal


def test_the_best_held_out_epoch_is_kept_reported_and_saved(trained):
    """The second epoch diverged: the first epoch's weights are the ones restored, evaluated (the final held-out
    perplexity is the first epoch's exactly), and saved (the checkpoint gives the kept model's logits:
    test_checkpoint_loads_back_with_the_same_logits)."""
    out, printed, _, _ = trained
    result = json.loads((out / "results.json").read_text())
    history, held = result["training"]["history"]["val_perplexity"], result["held_out"]
    assert history[1] > 1e3 * history[0]  # Diverge spoiled the last epoch
    assert result["weights"] is not None and result["weights"]["best_epoch"] == held["epoch"] == 1
    assert result["weights"]["monitor"] == "val_perplexity" and result["weights"]["best"] == history[0]
    assert held["perplexity"] == pytest.approx(history[0], rel=1e-5)
    assert held["loss"] == pytest.approx(result["training"]["history"]["val_loss"][0], rel=1e-5)
    assert "weights: epoch 1 (best val_perplexity" in printed and "the weights of epoch 1, its best" in printed


def test_progress_under_a_time_budget_says_steps_and_time_against_it(trained):
    """With --minutes, the lines say the step and the time against the budget; fit's own "Epoch 1/N" lines (with
    --minutes alone, "Epoch 1/100000": core.cli.UNBOUNDED_EPOCHS) are not printed."""
    printed = trained[1]
    assert "/100000" not in printed and "Epoch 1/" not in printed
    lines = [line for line in printed.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2 and all(" of 10:00 budget  loss " in line for line in lines), lines
    assert lines[0].startswith("epoch 1/2: ") and "val_perplexity" in lines[0]


@pytest.mark.parametrize("argv, out", [
    ([], os.path.join("artifacts", "gpt", "kjv")),  # the KJV's folder, as before
    (["--corpus", "tweets"], os.path.join("artifacts", "gpt", "tweets")),
    (["--corpus", "text:/data/My Notes.v2.txt"], os.path.join("artifacts", "gpt", "my-notes.v2")),
    (["--corpus", "kjv+text:psalms.txt"], os.path.join("artifacts", "gpt", "kjv+psalms")),
    (["--corpus", "text:psalms.txt", "--out", "elsewhere"], "elsewhere"),
])
def test_the_default_folder_follows_the_corpus(argv, out):
    assert _script("train_gpt_out").parse_args(argv).out == out


def test_checkpoint_loads_back_with_the_same_logits(trained):
    from attnlayers.applications.gpt import GPT2Tokenizer, load_hf_checkpoint

    out, _, model, _ = trained
    loaded, info = load_hf_checkpoint(str(out / "checkpoint"))
    assert info["vocabulary"] and info["merges"] and loaded.config == model.config
    tokenizer = GPT2Tokenizer.from_directory(str(out / "checkpoint"))
    assert tokenizer.end_token_id == loaded.end_token_id == loaded.pad_token_id
    ids = np.asarray(tokenizer.tokenize(["and the king saw the city of the lord."]).to_tensor(), "int32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(ids)), keras.ops.convert_to_numpy(model(ids)),
                               atol=1e-5)


# An interrupted run's resume: tests/applications/test_resume_examples.py (the script SIGKILLed and resumed, in both
# backends).


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["--minutes", "-1"], "--minutes must be a positive number"),
    (["--backup-every", "0"], "--backup-every must be at least 1"),
    (["--vocab-size", "100"], "--vocab-size must be at least 257"),
    (["--config", "huge"], "invalid choice"),
    (["--memory-length", "8"], "--memory-length needs --position transformer_xl"),
])
def test_flags_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        _script("train_gpt_flags").parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err

