"""Transformer-XL against GPT on the KJV: the same sizes, the same segment length, the same batches and steps, then
held-out perplexity, Transformer-XL's with an evaluation memory of 0, 1x and 4x the segment.

    python benchmarks/transformer_xl_kjv.py --steps 1500 --seeds 0 1          # the full run (-> results + table)
    python benchmarks/transformer_xl_kjv.py --steps 40 --segment-length 32 --batch-size 8 --held-out-segments 16
    python benchmarks/transformer_xl_kjv.py --table

Data: the KJV (chapters as documents, 5 percent held out with split seed 0), a byte-level BPE of --vocab-size
trained on the training chapters. The training stream is cut in Transformer-XL's stateful order
(``gpt.data.stateful_windows``: B contiguous streams, segments of T), and BOTH models train on exactly these batches
in this order, one pass after another (Transformer-XL's memory emptied at each pass' start). The held-out stream is
cut the same way (B rows); GPT reads each held-out segment alone, Transformer-XL reads them in order with a memory
of 0 (each segment alone, as GPT), T and 4 T steps (``transformer_xl.memory_perplexity``). --held-out-segments
caps the held-out steps (a quick run); the results say how many tokens were scored.

Sizes: GPT "tiny" (2 layers, d 128, 2 heads, d_ff 512, no dropout): GPT with learned positions (T of them),
Transformer-XL with relative positional attention (W_{k,R}, u, v per layer) and a training memory of
--memory-length steps (default T). The same compile: mean NLL over the real labels, AdamW (0.9 / 0.95, weight
decay 0.1 off biases / norms / embeddings, clipping 1.0), learning rate warm-up + cosine to zero over the steps, XLA.
Each seed initializes both models after ``keras.utils.set_random_seed(seed)``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import measure
import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "transformer_xl"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500, help="training steps of each model (default 1500)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds (default 0 1)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--segment-length", type=int, default=128, help="T, both models (default 128)")
    parser.add_argument("--memory-length", type=int, default=None, help="Transformer-XL's training M (default T)")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--warmup-fraction", type=float, default=0.05)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--held-out-segments", type=int, default=None,
                        help="score only the first this many held-out steps (default: all)")
    parser.add_argument("--tokenizer", type=pathlib.Path, default=RESULTS / "tokenizer",
                        help="where the BPE is written (and read again by later runs of the same size)")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--table", action="store_true", help="print the table of the saved results and exit")
    return parser.parse_args(argv)


def prepare(args):
    """The tokenizer and the training / held-out token streams (split seed 0)."""
    from attnlayers.applications.core.inputs.corpora import bible_documents, split_documents
    from attnlayers.applications.gpt import data
    from attnlayers.applications.gpt.runs import training_tokenizer

    texts = data.document_texts(bible_documents())
    train_texts, held_texts = split_documents(texts, held_out=0.05, seed=0)
    directory = args.tokenizer / f"v{args.vocab_size}"
    existing = directory if (directory / "merges.txt").is_file() else None
    tokenizer, _, _ = training_tokenizer(train_texts, args.vocab_size, directory, vocabulary=existing)
    end = tokenizer.end_token_id
    streams = [data.token_stream(data.tokenize_documents(t, tokenizer), end) for t in (train_texts, held_texts)]
    return tokenizer, streams[0], streams[1]


def build(args, kind, vocabulary_size, end, seed):
    import keras
    from attnlayers.applications.core.training.optimizers import decoupled_adamw
    from attnlayers.applications.core.training.schedules import WarmupCosineDecay
    from attnlayers.applications.gpt import GPT, GPTConfig
    from attnlayers.applications.gpt.runs import causal_lm_loss
    from attnlayers.applications.gpt.transformer_xl import TransformerXL, TransformerXLConfig

    sizes = {"num_layers": 2, "num_heads": 2, "hidden_dim": 128, "intermediate_dim": 512, "dropout": 0.0,
             "vocabulary_size": vocabulary_size, "end_token_id": end, "pad_token_id": end}
    keras.utils.set_random_seed(seed)
    if kind == "gpt":
        model = GPT(GPTConfig(max_sequence_length=args.segment_length, **sizes))
    else:
        memory = args.segment_length if args.memory_length is None else args.memory_length
        model = TransformerXL(TransformerXLConfig(segment_length=args.segment_length, memory_length=memory,
                                                  batch_size=args.batch_size, **sizes))
    schedule = WarmupCosineDecay(args.learning_rate, args.steps, warmup_fraction=args.warmup_fraction)
    model.compile(optimizer=decoupled_adamw(schedule, args.weight_decay), loss=causal_lm_loss(), jit_compile=True)
    return model


def train(model, windows, mask, batch_size, steps):
    """``steps`` train_on_batch calls over the stateful batches in order, pass after pass (the memory emptied at
    each pass' start); returns (the last loss, seconds)."""
    from attnlayers.applications.gpt import data

    x, y, weights = data.lm_examples(windows, mask)
    per_pass = len(windows) // batch_size
    begin, loss = time.perf_counter(), float("nan")
    for step in range(steps):
        s = step % per_pass
        if s == 0 and hasattr(model, "reset_memory"):
            model.reset_memory()
        rows = slice(s * batch_size, (s + 1) * batch_size)
        loss = float(model.train_on_batch({k: v[rows] for k, v in x.items()}, y[rows], sample_weight=weights[rows]))
    return loss, time.perf_counter() - begin


def gpt_perplexity(model, windows, mask, batch_size):
    """Each held-out segment alone, token-weighted."""
    import keras
    from keras import ops

    total = tokens = 0.0
    for start in range(0, len(windows), batch_size):
        w, m = windows[start:start + batch_size], mask[start:start + batch_size]
        logits = model(w[:, :-1], padding_mask=m[:, :-1])
        nll = keras.losses.sparse_categorical_crossentropy(w[:, 1:], ops.cast(logits, "float32"), from_logits=True)
        total += float(ops.sum(nll * m[:, 1:].astype("float32")))
        tokens += float(m[:, 1:].sum())
    return {"perplexity": float(np.exp(total / tokens)), "loss": total / tokens, "tokens": int(tokens)}


def run(args, seed, tokenizer, train_stream, held_stream):
    from attnlayers.applications.gpt import data
    from attnlayers.applications.gpt.transformer_xl import memory_perplexity

    end, T, B = tokenizer.end_token_id, args.segment_length, args.batch_size
    windows, mask = data.stateful_windows(train_stream, B, T, end)
    held_windows, held_mask = data.stateful_windows(held_stream, B, T, end)
    if args.held_out_segments is not None:
        held_windows, held_mask = held_windows[:args.held_out_segments * B], held_mask[:args.held_out_segments * B]
    result = {"seed": seed, "steps": args.steps, "batch_size": B, "segment_length": T,
              "memory_length": T if args.memory_length is None else args.memory_length,
              "vocabulary": tokenizer.vocabulary_size, "learning_rate": args.learning_rate,
              "train_steps_per_pass": len(windows) // B, "held_out_steps": len(held_windows) // B,
              "machine": f"{measure.processor()}, {measure.cores()} cores (shared: times inflated)"}
    for kind in ("gpt", "transformer_xl"):
        model = build(args, kind, tokenizer.vocabulary_size, end, seed)
        loss, seconds = train(model, windows, mask, B, args.steps)
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)  # not the memory variables
        entry = {"trainable_parameters": trainable, "final_training_loss": loss, "train_seconds": seconds}
        if kind == "gpt":
            entry["held_out"] = gpt_perplexity(model, held_windows, held_mask, B)
        else:
            entry["held_out"] = {f"memory_{m}": memory_perplexity(model, held_windows, held_mask, B, m)
                                 for m in (0, T, 4 * T)}
        result[kind] = entry
        print(f"  seed {seed} {kind}: final loss {loss:.3f}, {seconds:.0f} s of training", flush=True)
    return result


def print_table(results):
    print("| seed | steps | T | GPT ppl | TXL ppl, memory 0 | memory T | memory 4T | held-out tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: (r["steps"], r["segment_length"], r["seed"])):
        T, txl = r["segment_length"], r["transformer_xl"]["held_out"]
        print(f"| {r['seed']} | {r['steps']} | {T} | {r['gpt']['held_out']['perplexity']:.2f} | "
              f"{txl['memory_0']['perplexity']:.2f} | {txl[f'memory_{T}']['perplexity']:.2f} | "
              f"{txl[f'memory_{4 * T}']['perplexity']:.2f} | {r['gpt']['held_out']['tokens']:,} |")


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        print_table([json.loads(p.read_text()) for p in sorted(args.results.glob("seed*-steps*.json"))])
        return 0
    start = time.perf_counter()
    tokenizer, train_stream, held_stream = prepare(args)
    print(f"data: {len(train_stream):,} training / {len(held_stream):,} held-out tokens, vocabulary "
          f"{tokenizer.vocabulary_size}; segments of {args.segment_length}, batch {args.batch_size}", flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        result = run(args, seed, tokenizer, train_stream, held_stream)
        path = args.results / f"seed{seed}-steps{args.steps}-T{args.segment_length}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        results.append(result)
    print_table(results)
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
