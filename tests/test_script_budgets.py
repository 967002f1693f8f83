"""--epochs and --minutes mean the same in every training script: --minutes alone trains until the budget ends,
--epochs alone runs that many epochs, both stop at whichever comes first; --help says so. The optimizer's flags are
checked alike in every script that has them. And a learned vocabulary smaller than asked for says why."""

import importlib.util
import pathlib

import pytest

from attnlayers.applications.core.runs.cli import UNBOUNDED_EPOCHS, budget_epochs
from attnlayers.applications.core.runs.recipe import describe_vocabulary

ROOT = pathlib.Path(__file__).resolve().parents[1]

# script -> (the arguments it needs, its default epochs)
SCRIPTS = {"train_gpt": ([], 10), "pretrain_bert": ([], 10), "finetune_bert": (["--task", "pos"], 3),
           "train_nmt": ([], 10), "train_captioning": ([], 30), "train_vit": ([], 100), "pretrain_xlnet": ([], 10)}
# the scripts with core.optimizers' flags
OPTIMIZER_SCRIPTS = ("train_gpt", "pretrain_bert", "finetune_bert", "train_vit", "pretrain_xlnet")


def _script(name):
    spec = importlib.util.spec_from_file_location(f"{name}_budget", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_one_meaning_of_epochs_and_minutes(name, capsys):
    script, (needed, default) = _script(name), SCRIPTS[name]

    def epochs(*argv):
        args = script.parse_args([*needed, *argv])
        return budget_epochs(args.epochs, args.minutes, default)

    assert epochs() == default
    assert epochs("--minutes", "5") == UNBOUNDED_EPOCHS  # until the budget ends
    assert epochs("--minutes", "5", "--epochs", "2") == 2  # whichever first
    with pytest.raises(SystemExit):
        script.parse_args([*needed, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "with --minutes, as many as the budget allows" in text and "with --epochs, whichever ends first" in text
    for bad, message in ((["--epochs", "0"], "--epochs must be at least 1"),
                         (["--minutes", "0"], "--minutes must be a positive number")):
        with pytest.raises(SystemExit):
            script.parse_args([*needed, *bad])
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("name", OPTIMIZER_SCRIPTS)
def test_optimizer_flags_are_checked_alike(name, capsys):
    script, needed = _script(name), SCRIPTS[name][0]
    for bad, message in ((["--batch-size", "0"], "--batch-size must be at least 1"),
                         (["--warmup", "1"], "--warmup-fraction must be between 0 and 1"),
                         (["--learning-rate", "0"], "--learning-rate must be a positive number"),
                         (["--weight-decay", "-0.1"], "--weight-decay must be a number >= 0")):
        with pytest.raises(SystemExit):
            script.parse_args([*needed, *bad])
        assert message in capsys.readouterr().err


def test_a_vocabulary_smaller_than_asked_says_why():
    assert describe_vocabulary(4096, 4096, "BPE") == "vocabulary 4,096 BPE tokens"
    assert describe_vocabulary(357, None, "BPE") == "vocabulary 357 BPE tokens"  # read, not learned
    assert describe_vocabulary(357, 4000, "BPE").startswith(
        "vocabulary 357 BPE tokens (fewer than --vocab-size 4,000: the training text has no more distinct pieces")
