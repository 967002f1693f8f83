"""benchmarks/xlnet_finetune.py's XLNet inputs: BERT's packed rows ([CLS] A [SEP] B [SEP] pad) moved to XLNet's layout
(A [SEP] B [SEP] [CLS] pad, segment ids 0 / 1 / 2), the labels and word ids moving with their tokens; and the table
of a fine-tuning result."""

import importlib.util
import pathlib

import numpy as np

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "xlnet_finetune.py"
CLS, SEP, PAD = 2, 3, 0


def _script():
    spec = importlib.util.spec_from_file_location("xlnet_finetune_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_xlnet_layout_and_table(capsys):
    script = _script()
    ids = np.array([[CLS, 7, 8, SEP, 9, SEP, PAD], [CLS, 7, SEP, PAD, PAD, PAD, PAD]], np.int32)
    features = {"token_ids": ids, "segment_ids": np.array([[0, 0, 0, 0, 1, 1, 0], [0] * 7], np.int32),
                "padding_mask": ids != PAD}
    labels = np.array([[-100, 4, 5, -100, 6, -100, -100], [-100, 4, -100, -100, -100, -100, -100]], np.int32)
    word_ids = np.where(labels >= 0, np.cumsum(labels >= 0, axis=1) - 1, -1)
    out, moved_labels, moved_words = script.xlnet_layout(features, CLS, (labels, -100), (word_ids, -1))
    np.testing.assert_array_equal(out["token_ids"], [[7, 8, SEP, 9, SEP, CLS, PAD], [7, SEP, CLS, PAD, PAD, PAD, PAD]])
    np.testing.assert_array_equal(out["segment_ids"], [[0, 0, 0, 1, 1, 2, 0], [0, 0, 2, 0, 0, 0, 0]])
    np.testing.assert_array_equal(out["padding_mask"], ids != PAD)
    np.testing.assert_array_equal(moved_labels, [[4, 5, -100, 6, -100, -100, -100], [4] + [-100] * 6])
    np.testing.assert_array_equal(moved_words, [[0, 1, -1, 2, -1, -1, -1], [0] + [-1] * 6])
    np.testing.assert_array_equal(features["token_ids"], ids)  # the inputs are not changed

    row = {"task": "pos", "seed": 0, "model": "xlnet", "init": "scratch", "metric": "accuracy",
           "test": {"accuracy": 0.5}, "baseline": {"accuracy": 0.75, "name": "most frequent tag per word"},
           "training": {"steps": 12}}
    script.print_table({"finetune": [row], "pretraining": {}})
    assert "| pos | accuracy | 0 | - | - | - | 0.500 | 0.750 (most frequent tag per word) | 12 |" in (
        capsys.readouterr().out)
