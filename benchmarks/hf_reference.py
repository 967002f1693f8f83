"""What the Hugging Face equivalence benchmarks share (bert_hf_equivalence.py, gpt_hf_equivalence.py,
gpt_llama_hf_equivalence.py): their command line, transformers set up quietly on 2 threads, right-padded random
token inputs, and the Markdown table of logit differences over real tokens.

torch and transformers are dev references, never library dependencies: ``pip install torch==2.13.0+cpu
transformers``. They are imported by :func:`start_transformers`, not here.
"""

import argparse

import numpy as np


def equivalence_arguments(description, what, argv=None, **extra):
    """The shared flags: --checkpoint (a Hugging Face directory of ``what``; default: random ones), --batch, --seed
    and --bar (the max |diff| that passes), plus ``extra`` as ``{flag: (type, default, help)}``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help=f"a Hugging Face {what} directory (default: random ones)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bar", type=float, default=1e-4, help="the largest max |diff| that passes (default 1e-4)")
    for flag, (kind, default, help_text) in extra.items():
        parser.add_argument(flag, type=kind, default=default, help=help_text)
    return parser.parse_args(argv)


def start_transformers():
    """torch on 2 threads (this machine's cores) and transformers without progress bars or warnings; returns
    (torch, transformers)."""
    import torch
    import transformers

    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    return torch, transformers


def token_inputs(config, batch, seed, *, low=0):
    """Right-padded (B, T) int32 random token ids in [low, V) of lengths from T = min(24, max_sequence_length) down
    to 3, padded with ``config.pad_token_id``, and their bool mask (True at real tokens)."""
    rng = np.random.default_rng(seed)
    length = min(24, config.max_sequence_length)
    lengths = np.linspace(length, 3, batch).astype(int)
    mask = np.arange(length)[None] < lengths[:, None]
    ids = np.where(mask, rng.integers(low, config.vocabulary_size, (batch, length)), config.pad_token_id)
    return ids.astype("int32"), mask


class LogitTable:
    """A Markdown table of logit differences, one row per direction (ours vs theirs), printed as it goes.

    Columns: max |ours - theirs| over real tokens (what the bar reads), optionally over all positions, the largest
    |logit| (the scale the difference is read against) and the next-token argmax agreement over real tokens.
    """

    def __init__(self, all_positions=False):
        self.all_positions = all_positions
        self.worst = 0.0
        extra = " all positions |" if all_positions else ""
        print()
        print(f"| direction | max abs diff of logits, real tokens |{extra} max abs logit | argmax agreement |")
        print("|---|---|" + ("---|" if all_positions else "") + "---|---|")

    def row(self, label, ours, theirs, mask):
        """Prints one row for logits ``ours`` and ``theirs`` (B, T, V) and ``mask`` (B, T); returns the max |diff|
        over real tokens (and keeps the worst in ``self.worst``)."""
        worst = float(np.abs(np.where(mask[..., None], ours - theirs, 0)).max())
        argmax = (ours.argmax(-1) == theirs.argmax(-1))[mask].mean()
        scale = np.abs(theirs[mask]).max()
        everywhere = f" {np.abs(ours - theirs).max():.3e} |" if self.all_positions else ""
        print(f"| {label} | {worst:.3e} |{everywhere} {scale:.2f} | {argmax:.4f} |")
        self.worst = max(self.worst, worst)
        return worst


def verdict(worst, bar, *conditions):
    """The last line: the worst max |diff| against the bar, PASS when it is within and every condition holds."""
    passed = worst <= bar and all(conditions)
    return f"worst max |diff| {worst:.3e} (bar <= {bar:g}): {'PASS' if passed else 'FAIL'}"
