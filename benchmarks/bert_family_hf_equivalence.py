"""The BERT family against transformers (PyTorch, CPU): for RoBERTa, XLM-RoBERTa, DistilBERT and ALBERT, a tiny
random transformers model (``RobertaModel``, ``XLMRobertaModel``, ``DistilBertModel``, ``AlbertModel`` built from
a config, every parameter perturbed) is saved in both key layouts (the bare model's ``save_pretrained``, pooler
included, and a ``...ForMaskedLM`` holding the same encoder: the family's prefix, the MLM head, no pooler) and read
by our load_hf_checkpoint; then our save_hf_checkpoint's files (from the bare one), bare and prefixed, are read by
the bare class. Compared: the last hidden state over real tokens and the pooled output where both sides have one
(DistilBERT has none; a masked-LM file has none), max |difference|, bar 1e-4. The reference side also counts the
weights of base-size AlbertModel and DistilBertModel (the published sizes) beside our closed form.

    python -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0+cpu transformers
    python benchmarks/bert_family_hf_equivalence.py --reference-python /tmp/refvenv/bin/python

torch and transformers stay out of the library's environment (and out of this process: torch next to TensorFlow is
fragile): the reference runs this script's ``--reference-worker`` in that interpreter, exchanging .npy / .json files.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

SIZES = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
         "intermediate_size": 64}
# family: (bare model class, class with the MLM head, its base-model attribute, the config's extra keys)
FAMILIES = {
    "roberta": ("RobertaModel", "RobertaForMaskedLM", "roberta",
                {**SIZES, "max_position_embeddings": 34, "type_vocab_size": 1, "pad_token_id": 1,
                 "layer_norm_eps": 1e-5}),
    "xlm-roberta": ("XLMRobertaModel", "XLMRobertaForMaskedLM", "roberta",
                    {**SIZES, "max_position_embeddings": 34, "type_vocab_size": 1, "pad_token_id": 1,
                     "layer_norm_eps": 1e-5}),
    "distilbert": ("DistilBertModel", "DistilBertForMaskedLM", "distilbert",
                   {"vocab_size": 99, "dim": 32, "n_layers": 3, "n_heads": 4, "hidden_dim": 64,
                    "max_position_embeddings": 32}),
    "albert": ("AlbertModel", "AlbertForMaskedLM", "albert",
               {**SIZES, "embedding_size": 16, "max_position_embeddings": 32, "num_hidden_groups": 1,
                "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}),
}
CONFIG_CLASSES = {"roberta": "RobertaConfig", "xlm-roberta": "XLMRobertaConfig", "distilbert": "DistilBertConfig",
                  "albert": "AlbertConfig"}
# The published base sizes whose weights the reference counts (albert-base-v2; distilbert-base-uncased).
BASE_SIZES = {
    "albert": {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 768, "num_hidden_layers": 12,
               "num_attention_heads": 12, "intermediate_size": 3072},
    "distilbert": {},  # DistilBertConfig's defaults are distilbert-base's
}


# ---- the reference (runs in the torch + transformers interpreter; imports nothing of attnlayers) -----------------


def _reference_outputs(torch, model, directory, label):
    def tensor(name):
        return torch.from_numpy(np.load(os.path.join(directory, f"{name}.npy")).astype("int64"))

    inputs = {"input_ids": tensor("ids"), "attention_mask": tensor("mask")}
    if label.split(":")[0] == "albert":
        inputs["token_type_ids"] = tensor("segments")
    with torch.no_grad():
        out = model(**inputs)
    np.save(os.path.join(directory, f"sequence_{label}.npy"), out.last_hidden_state.numpy())
    pooled = getattr(out, "pooler_output", None)
    if pooled is not None:
        np.save(os.path.join(directory, f"pooled_{label}.npy"), pooled.numpy())


def reference_worker(directory, step):
    """``make``: per family a random bare model (every parameter perturbed, so that zero biases and LayerNorm's 1 / 0
    cannot hide a swapped tensor) saved bare, the same encoder inside the family's masked-LM model saved prefixed,
    the bare model's outputs, and the base-size weight counts. ``read``: our files loaded by transformers, their
    outputs and loading info."""
    import torch
    import transformers

    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    report = {"torch": torch.__version__, "transformers": transformers.__version__, "loading": {}, "counts": {}}
    for family, (bare, with_head, attribute, keys) in FAMILIES.items():
        if step == "make":
            torch.manual_seed(0)
            config = getattr(transformers, CONFIG_CLASSES[family])(**keys)
            model = getattr(transformers, bare)(config).eval()
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.add_(0.05 * torch.randn_like(parameter))
            model.save_pretrained(os.path.join(directory, f"hf_{family}_bare"))
            head_model = getattr(transformers, with_head)(config).eval()
            getattr(head_model, attribute).load_state_dict(model.state_dict(), strict=False)  # all but the pooler
            head_model.save_pretrained(os.path.join(directory, f"hf_{family}_prefixed"))
            _reference_outputs(torch, model, directory, f"{family}:hf")
        else:
            for layout in ("bare", "prefixed"):
                model, loading = getattr(transformers, bare).from_pretrained(
                    os.path.join(directory, f"ours_{family}_{layout}"), output_loading_info=True)
                report["loading"][f"{family}:{layout}"] = {
                    key: sorted(loading[key]) for key in ("missing_keys", "unexpected_keys", "mismatched_keys")}
                _reference_outputs(torch, model.eval(), directory, f"{family}:{layout}")
    if step == "make":
        for family, sizes in BASE_SIZES.items():
            model = getattr(transformers, FAMILIES[family][0])(getattr(transformers, CONFIG_CLASSES[family])(**sizes))
            report["counts"][family] = sum(p.numel() for p in model.parameters())
    with open(os.path.join(directory, f"reference_{step}.json"), "w") as f:
        json.dump(report, f)


# ---- ours --------------------------------------------------------------------------------------------------------


def _inputs(batch, length, seed):
    """Right-padded random token ids (real ids in [3, V), never a pad id; padded with 1, RoBERTa's <pad>, which
    DistilBERT's and ALBERT's attention masks hide), their mask, and segment ids (A / B, read by ALBERT)."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(length, 3, batch).astype(int)
    mask = np.arange(length)[None] < lengths[:, None]
    ids = np.where(mask, rng.integers(3, SIZES["vocab_size"], (batch, length)), 1).astype("int32")
    segments = np.where(mask & (np.arange(length)[None] >= lengths[:, None] // 2), 1, 0).astype("int32")
    return ids, mask, segments


def _ours(backbone, family, ids, mask, segments):
    from keras import ops

    inputs = {"token_ids": ids, "padding_mask": mask}
    if family == "albert":
        inputs["segment_ids"] = segments
    out = backbone(inputs)
    pooled = out.get("pooled_output")
    return (np.asarray(ops.convert_to_numpy(out["sequence_output"])),
            None if pooled is None else np.asarray(ops.convert_to_numpy(pooled)))


def _worker(args, directory, step):
    started = time.perf_counter()
    subprocess.run([args.reference_python, os.path.abspath(__file__), "--reference-worker", directory, "--step", step],
                   check=True)
    with open(os.path.join(directory, f"reference_{step}.json")) as f:
        return json.load(f), time.perf_counter() - started


def run(args, directory):
    from attnlayers.applications.bert import BertConfig
    from attnlayers.applications.bert.checkpoint import load_hf_checkpoint, save_hf_checkpoint

    ids, mask, segments = _inputs(args.batch, args.length, args.seed)
    np.save(os.path.join(directory, "ids.npy"), ids)
    np.save(os.path.join(directory, "mask.npy"), mask.astype("int64"))
    np.save(os.path.join(directory, "segments.npy"), segments)
    made, seconds = _worker(args, directory, "make")
    print(f"transformers {made['transformers']} / torch {made['torch']} (reference worker {seconds:.1f} s); "
          f"{SIZES}; batch {args.batch}, length {args.length}, real tokens per row {mask.sum(1).tolist()}")
    print()
    print("| family | direction | last hidden state max abs diff (real tokens) | pooled output max abs diff |")
    print("|---|---|---|---|")
    worst, ours_by_family = 0.0, {}

    def row(family, label, ours, reference_label):
        nonlocal worst
        sequence = np.load(os.path.join(directory, f"sequence_{reference_label}.npy"))
        difference = float(np.abs(np.where(mask[..., None], ours[0] - sequence, 0)).max())
        pooled_text, pooled = "none (no pooler)", 0.0
        pooled_path = os.path.join(directory, f"pooled_{reference_label}.npy")
        if ours[1] is not None:
            pooled = float(np.abs(ours[1] - np.load(pooled_path)).max())
            pooled_text = f"{pooled:.3e}"
        worst = max(worst, difference, pooled)
        print(f"| {family} | {label} | {difference:.3e} | {pooled_text} |")

    for family in FAMILIES:
        for layout in ("prefixed", "bare"):
            backbone, info = load_hf_checkpoint(os.path.join(directory, f"hf_{family}_{layout}"))
            ours = _ours(backbone, family, ids, mask, segments)
            row(family, f"ours (load_hf_checkpoint, {layout} file, prefix {info['prefix']!r}) vs transformers", ours,
                f"{family}:hf")
        ours_by_family[family] = ours  # the bare file's backbone, pooler included
        for layout in ("bare", "prefixed"):
            save_hf_checkpoint(backbone, os.path.join(directory, f"ours_{family}_{layout}"),
                               prefixed=layout == "prefixed")
    loading, seconds = _worker(args, directory, "read")
    for family in FAMILIES:
        for layout in ("bare", "prefixed"):
            row(family, f"transformers from_pretrained(save_hf_checkpoint(ours), {layout}) vs ours",
                ours_by_family[family], f"{family}:{layout}")
    problems = {key: value for key, value in loading["loading"].items() if any(value.values())}
    print(f"transformers' loading info on our files (missing / unexpected / mismatched keys): "
          f"{problems or 'none in any file'} (reference worker {seconds:.1f} s)")
    print()
    ours_counts = {"albert": BertConfig.preset("base", family="albert").parameter_count(),
                   "distilbert": BertConfig.preset("base", family="distilbert", num_layers=6).parameter_count()}
    for family, count in made["counts"].items():
        print(f"{family} base weights: transformers {FAMILIES[family][0]} {count:,}; ours (BertConfig.preset('base', "
              f"family={family!r}{', num_layers=6' if family == 'distilbert' else ''}).parameter_count()) "
              f"{ours_counts[family]:,}: {'equal' if count == ours_counts[family] else 'DIFFERENT'}")
    counts_equal = all(made["counts"][family] == ours_counts[family] for family in made["counts"])
    passed = worst <= args.bar and not problems and counts_equal
    print(f"worst max |diff| {worst:.3e} (bar <= {args.bar:g}): {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-python", help="an interpreter with torch and transformers (required)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bar", type=float, default=1e-4, help="the largest max |diff| that passes (default 1e-4)")
    parser.add_argument("--reference-worker", help=argparse.SUPPRESS)
    parser.add_argument("--step", choices=("make", "read"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_worker:
        return reference_worker(args.reference_worker, args.step)
    if not args.reference_python:
        parser.error("--reference-python is required: an interpreter with torch and transformers (the reference "
                     "runs there, not in this process)")
    with tempfile.TemporaryDirectory(prefix="bert_family_hf_") as directory:
        return run(args, directory)


if __name__ == "__main__":
    sys.exit(main())
