"""Smoke test of benchmarks/scheduled_sampling.py at a tiny size (captioning on 64 generated scenes, 3 seconds of
training, 8 test images): it trains with scheduled sampling, writes its JSON (BLEU-4 and exact match, greedy and
beam; eps logged; the exposure-bias accuracies) and prints the table; bad flags are refused with the reason."""

import importlib.util
import json
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "scheduled_sampling.py"


def _script():
    spec = importlib.util.spec_from_file_location("scheduled_sampling_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_captioning_run(tmp_path, capsys):
    script = _script()
    argv = ["--task", "captioning", "--minutes", "0.05", "--num-train", "64", "--num-test", "8", "--batch-size",
            "16", "--scheduled-sampling", "inverse_sigmoid:1", "--results", str(tmp_path)]
    assert script.main(argv) == 0
    (path,) = tmp_path.glob("*.json")
    assert path.name == "captioning-soft-inverse_sigmoid_1-seed0-0.05min.json"
    result = json.loads(path.read_text())
    assert result["scheduled_sampling"] == "inverse_sigmoid:1" and result["prediction"] == "sample"
    assert result["final_epsilon"] == pytest.approx(0.5)  # the first step: 1 / (1 + e^0)
    for key in ("bleu4_greedy", "bleu4_beam3", "exact_match_greedy", "exact_match_beam3"):
        assert 0 <= result[key] <= 100
    bias = result["exposure_bias"]
    assert bias["gap"] == pytest.approx(bias["teacher_forced_accuracy"] - bias["free_running_accuracy"])
    assert bias["sequences"] == 8 and bias["tokens"] > 8
    out = capsys.readouterr().out
    assert "| soft | 0 | 0.05 | inverse_sigmoid:1 (sample; final eps 0.50) | " in out
    assert "teacher-forced acc | free-running acc | gap |" in out


@pytest.mark.parametrize("argv, message", [
    (["--compare"], "--compare needs --scheduled-sampling SCHEDULE"),
    (["--task", "captioning", "--model", "luong"], "--model luong is not a captioning model"),
    (["--scheduled-sampling", "linear:1"], "--scheduled-sampling linear:1: Sampling schedule 'linear:1' lacks c"),
    (["--model", "luong", "--variant", "huge"], "--variant must be one of"),
])
def test_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit):
        _script().parse_args(argv)
    assert message in capsys.readouterr().err


def test_exposure_length_stays_within_the_models_limit():
    """The Transformer generates at most its position table (48 here): the exposure bias is measured over 48 steps,
    not the 49 (48 reference tokens + the start token) that crashed the first 20-minute Transformer pair."""
    from attnlayers.applications.nmt import variants

    script = _script()
    transformer, _ = variants.build_recipe("transformer", 40, 40, "tiny", max_length=script.NMT_MAX_LENGTH,
                                          shared_embeddings=True)
    rnn, _ = variants.build_recipe("luong", 40, 40, "tiny")
    assert script.exposure_length(transformer, script.NMT_MAX_LENGTH + 1) == script.NMT_MAX_LENGTH
    assert script.exposure_length(rnn, script.NMT_MAX_LENGTH + 1) == script.NMT_MAX_LENGTH + 1
