"""Our XLNetBackbone against transformers' XLNet (PyTorch, CPU) on a tiny random model: the max |difference| of the
content stream (``XLNetModel`` on padded token ids with segment ids) and of the query stream (``perm_mask`` from a
sampled factorisation order, ``target_mapping`` the identity), for both key layouts of transformers' files
(``XLNetModel``: bare names; ``XLNetLMHeadModel``: ``transformer.`` prefix) read by our load_hf_checkpoint, then
our save_hf_checkpoint's files read by transformers in both layouts. Bar: 1e-4.

    python -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0+cpu transformers
    python benchmarks/xlnet_transformers.py --reference-python /tmp/refvenv/bin/python

torch and transformers stay out of the library's environment (and out of this process: torch next to TensorFlow is
fragile): the reference runs this script's ``--reference-worker`` in that interpreter, exchanging .npy / .json files.

Compared positions: every position of the content stream (a padded position attends the real tokens and itself
in both); the query stream at real tokens that see at least one key (where the order puts a token first, its
query stream sees nothing: transformers averages every value there, attnlayers gives the attention a zero output).
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

SIZES = {"vocab_size": 64, "d_model": 32, "n_layer": 3, "n_head": 4, "d_inner": 64}


# ---- the reference (runs in the torch + transformers interpreter; imports nothing of attnlayers) -----------------


def _reference_outputs(torch, model, directory, suffix):
    def tensor(name, dtype):
        return torch.from_numpy(np.load(os.path.join(directory, f"{name}.npy")).astype(dtype))

    ids, segments, mask = tensor("ids", "int64"), tensor("segments", "int64"), tensor("mask", "float32")
    perm_mask = tensor("perm_mask", "float32")
    target_mapping = torch.eye(ids.shape[1])[None].expand(ids.shape[0], -1, -1)
    with torch.no_grad():
        content = model(input_ids=ids, token_type_ids=segments, attention_mask=mask).last_hidden_state
        query = model(input_ids=ids, token_type_ids=segments, attention_mask=mask, perm_mask=perm_mask,
                      target_mapping=target_mapping).last_hidden_state  # the query stream g
    np.save(os.path.join(directory, f"content_{suffix}.npy"), content.numpy())
    np.save(os.path.join(directory, f"query_{suffix}.npy"), query.numpy())


def reference_worker(directory, step):
    """``make``: a random XLNetLMHeadModel (every parameter perturbed, so that zero biases and LayerNorm's 1 / 0
    cannot hide a swapped tensor) saved in both layouts, and its outputs. ``read``: our files loaded by
    transformers, and their outputs."""
    import torch
    import transformers

    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    with open(os.path.join(directory, "request.json")) as f:
        request = json.load(f)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if step == "make":
        torch.manual_seed(request["seed"])
        config = transformers.XLNetConfig(**SIZES, dropout=0.1, mem_len=None)
        model = transformers.XLNetLMHeadModel(config).eval()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        model.save_pretrained(os.path.join(directory, "hf_lm_head"))
        model.transformer.save_pretrained(os.path.join(directory, "hf_model"))
        _reference_outputs(torch, model.transformer, directory, "hf")
    else:
        for layout in ("XLNetModel", "XLNetLMHeadModel"):
            model, loading = getattr(transformers, layout).from_pretrained(
                os.path.join(directory, f"ours_{layout}"), output_loading_info=True)
            versions[layout] = {key: sorted(loading[key]) for key in ("missing_keys", "unexpected_keys")}
            _reference_outputs(torch, model.eval() if layout == "XLNetModel" else model.eval().transformer, directory,
                               layout)
    with open(os.path.join(directory, f"reference_{step}.json"), "w") as f:
        json.dump(versions, f)


# ---- ours --------------------------------------------------------------------------------------------------------


def _inputs(batch, length, seed):
    """Right-padded random token ids (pad 5), segments A / B / <cls> = 0 / 1 / 2 as XLNet packs a pair, and a
    factorisation order's masks (ours, True = may attend) with transformers' perm_mask (1 = may not)."""
    from keras import ops

    from attnlayers.permutation import permutation_masks, sample_factorization_order

    rng = np.random.default_rng(seed)
    lengths = np.linspace(length, 4, batch).astype(int)
    mask = np.arange(length)[None] < lengths[:, None]
    ids = np.where(mask, rng.integers(6, SIZES["vocab_size"], (batch, length)), 5).astype("int32")
    segments = np.where(np.arange(length)[None] >= lengths[:, None] // 2, 1, 0)
    segments[np.arange(batch), lengths - 1] = 2
    segments = np.where(mask, segments, 0).astype("int32")
    order = sample_factorization_order(batch, length, seed=[seed, 0], padding_mask=mask)
    content_mask, query_mask = (np.asarray(ops.convert_to_numpy(m)) for m in permutation_masks(order, mask))
    return ids, segments, mask, content_mask, query_mask


def _ours(backbone, ids, segments, mask, content_mask, query_mask):
    from keras import ops

    inputs = {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}
    content = backbone(inputs)
    _, query = backbone.two_stream(inputs, content_mask, query_mask)
    return np.asarray(ops.convert_to_numpy(content)), np.asarray(ops.convert_to_numpy(query))


def _worker(args, directory, step):
    started = time.perf_counter()
    subprocess.run([args.reference_python, os.path.abspath(__file__), "--reference-worker", directory, "--step", step],
                   check=True)
    with open(os.path.join(directory, f"reference_{step}.json")) as f:
        return json.load(f), time.perf_counter() - started


def run(args, directory):
    from attnlayers.applications.xlnet import load_hf_checkpoint, save_hf_checkpoint

    ids, segments, mask, content_mask, query_mask = _inputs(args.batch, args.length, args.seed)
    for name, value in (("ids", ids), ("segments", segments), ("mask", mask),
                        ("perm_mask", 1.0 - query_mask.astype("float32"))):
        np.save(os.path.join(directory, f"{name}.npy"), value)
    with open(os.path.join(directory, "request.json"), "w") as f:
        json.dump({"seed": args.seed}, f)
    versions, seconds = _worker(args, directory, "make")
    seen = mask & query_mask.any(-1)  # query-stream rows compared: real tokens that see a key
    print(f"transformers {versions['transformers']} / torch {versions['torch']} (reference worker {seconds:.1f} s); "
          f"XLNet {SIZES}; batch {args.batch}, length {args.length}, real tokens per row {mask.sum(1).tolist()}, "
          f"query-stream rows compared {int(seen.sum())} of {int(mask.sum())} real")
    print()
    print("| direction | content stream max abs diff (all positions) | query stream max abs diff |")
    print("|---|---|---|")
    worst, rows = 0.0, []

    def row(label, ours, theirs):
        nonlocal worst
        content = float(np.abs(ours[0] - theirs[0]).max())
        query = float(np.abs(ours[1] - theirs[1])[seen].max())
        worst = max(worst, content, query)
        rows.append({"direction": label, "content_max_diff": content, "query_max_diff": query})
        print(f"| {label} | {content:.3e} | {query:.3e} |")

    reference = tuple(np.load(os.path.join(directory, f"{stream}_hf.npy")) for stream in ("content", "query"))
    backbone = None
    for layout, folder in (("XLNetModel", "hf_model"), ("XLNetLMHeadModel", "hf_lm_head")):
        backbone, info = load_hf_checkpoint(os.path.join(directory, folder))
        row(f"ours (load_hf_checkpoint, {layout} file, prefix {info['prefix']!r}) vs transformers",
            _ours(backbone, ids, segments, mask, content_mask, query_mask), reference)
    ours = _ours(backbone, ids, segments, mask, content_mask, query_mask)
    for layout in ("XLNetModel", "XLNetLMHeadModel"):
        save_hf_checkpoint(backbone, os.path.join(directory, f"ours_{layout}"), architecture=layout)
    loading, seconds = _worker(args, directory, "read")
    for layout in ("XLNetModel", "XLNetLMHeadModel"):
        theirs = tuple(np.load(os.path.join(directory, f"{stream}_{layout}.npy")) for stream in ("content", "query"))
        row(f"transformers {layout}.from_pretrained(save_hf_checkpoint(ours)) vs ours", ours, theirs)
    keys = {layout: loading[layout] for layout in ("XLNetModel", "XLNetLMHeadModel")}
    print(f"transformers' loading info on our files (missing / unexpected keys): {keys}")
    passed = worst <= args.bar and not any(any(info.values()) for info in keys.values())
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
    with tempfile.TemporaryDirectory(prefix="xlnet_transformers_") as directory:
        return run(args, directory)


if __name__ == "__main__":
    sys.exit(main())
