"""GPT training against keras-hub: our GPT and ``keras_hub.models.GPT2CausalLM`` of the same sizes trained in one
process on exactly the same token batches, then their held-out perplexity and training step time.

    python benchmarks/gpt_training.py --steps 150 600 --seeds 0 1      # -> results/gpt/training/*.json + a table
    python benchmarks/gpt_training.py --table

Data: the KJV (chapters as documents, 5 percent held out with split seed 0), a byte-level BPE of --vocab-size trained
on the training chapters, windows of --sequence-length + 1 tokens (``attnlayers.applications.gpt.data``); a run's
batches are its seed's permutation of the training windows, the same for both models (x = {"token_ids",
"padding_mask"}, y = the next tokens, sample weight = the padding mask).

Both models: the GPT "tiny" sizes (2 layers, d 128, 2 heads, d_ff 512, no dropout), each with its own
initialization drawn after ``keras.utils.set_random_seed(seed)`` (ours: GPT-2's, the residual projections scaled by
1 / sqrt(2 n_layer); keras-hub's: N(0, 0.02) everywhere); the same compile: the recipe's loss (mean NLL over the
real labels), token-weighted perplexity metric, AdamW (betas 0.9 / 0.95, weight decay 0.1 off biases, norms and
embeddings, global norm clipping 1.0), learning rate warm-up + cosine to zero over the run's steps
(``WarmupCosineDecay``), and the same ``jit_compile`` (--jit / --no-jit, stated in the results). Two toggles of ours
(stated in the results, and in the file names when set): --vocabulary-padding M (the output layer's vocabulary
rounded up to a multiple of M) and --loss-chunk-size C (the chunked loss from the hidden states, C tokens a chunk).

Step time: blocks of --block steps alternate between the two models (which goes first alternates too), so that
machine noise hits both; the first block of each (compilation) is not timed. The ratio is ours / keras-hub over the
timed blocks (and the median of the per-block ratios). Held-out perplexity: every held-out window, token-weighted.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import measure
import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "gpt" / "training"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[150, 600], help="step budgets (default 150 600)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds (default 0 1)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--warmup-fraction", type=float, default=0.05)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--block", type=int, default=25, help="steps per timed block (default 25)")
    parser.add_argument("--jit", dest="jit_compile", action="store_true", default=True,
                        help="compile both training steps with XLA (default)")
    parser.add_argument("--no-jit", dest="jit_compile", action="store_false")
    parser.add_argument("--vocabulary-padding", type=int, default=1, metavar="M",
                        help="ours: GPTConfig(vocabulary_padding=M) (default 1: none)")
    parser.add_argument("--loss-chunk-size", type=int, default=None, metavar="C",
                        help="ours: the chunked loss, C tokens a chunk (default: the loss from the logits)")
    parser.add_argument("--tokenizer", type=pathlib.Path, default=RESULTS / "tokenizer",
                        help="where the BPE is written (and read again by later runs of the same settings)")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--table", action="store_true", help="print the table of the saved results and exit")
    return parser.parse_args(argv)


def prepare(args):
    """The tokenizer and the training / held-out windows (split seed 0)."""
    from attnlayers.applications.core.inputs.corpora import bible_documents, split_documents
    from attnlayers.applications.gpt import data
    from attnlayers.applications.gpt.runs import training_tokenizer

    texts = data.document_texts(bible_documents())
    train_texts, held_texts = split_documents(texts, held_out=0.05, seed=0)
    directory = args.tokenizer / f"v{args.vocab_size}"
    existing = directory if (directory / "merges.txt").is_file() else None
    tokenizer, _, _ = training_tokenizer(train_texts, args.vocab_size, directory, vocabulary=existing)
    end = tokenizer.end_token_id
    windows = [data.lm_windows(data.token_stream(data.tokenize_documents(texts, tokenizer), end),
                               args.sequence_length, end) for texts in (train_texts, held_texts)]
    return tokenizer, windows[0], windows[1]


def models(args, vocabulary_size, end, seed):
    """(ours, keras-hub's), each initialized after set_random_seed(seed)."""
    import keras
    import keras_hub
    from attnlayers.applications.gpt import GPT, GPTConfig

    sizes = {"num_layers": 2, "num_heads": 2, "hidden_dim": 128, "intermediate_dim": 512}
    keras.utils.set_random_seed(seed)
    ours = GPT(GPTConfig(vocabulary_size=vocabulary_size, max_sequence_length=args.sequence_length, dropout=0.0,
                         end_token_id=end, pad_token_id=end, vocabulary_padding=args.vocabulary_padding, **sizes))
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=vocabulary_size, dropout=0.0,
                                             max_sequence_length=args.sequence_length, **sizes)
    hub = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    return ours, hub


def compile_same(model, args, steps, chunk_size=None):
    from attnlayers.applications.core.training.metrics import Perplexity
    from attnlayers.applications.core.training.optimizers import decoupled_adamw
    from attnlayers.applications.core.training.schedules import WarmupCosineDecay
    from attnlayers.applications.gpt.runs import causal_lm_loss

    schedule = WarmupCosineDecay(args.learning_rate, steps, warmup_fraction=args.warmup_fraction)
    model.compile(optimizer=decoupled_adamw(schedule, args.weight_decay), loss=causal_lm_loss(chunk_size),
                  weighted_metrics=[Perplexity()], jit_compile=args.jit_compile)


def batches(windows, mask, batch_size, steps, seed):
    """``steps`` batches of the training windows in the seed's order (a new permutation each pass)."""
    import tensorflow as tf
    from attnlayers.applications.gpt import data

    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(windows)) for _ in range(-(-steps * batch_size // len(windows)))])
    out = []
    for step in range(steps):
        pick = order[step * batch_size:(step + 1) * batch_size]
        x, y, weights = data.lm_examples(windows[pick], mask[pick])
        out.append(({k: tf.constant(v) for k, v in x.items()}, tf.constant(y), tf.constant(weights)))
    return out


def held_out_perplexity(model, windows, mask):
    import tensorflow as tf
    from attnlayers.applications.gpt import data

    dataset = tf.data.Dataset.from_tensor_slices(data.lm_examples(windows, mask)).batch(64)
    return float(model.evaluate(dataset, return_dict=True, verbose=0)["perplexity"])


def run(args, seed, steps, tokenizer, train, held):
    ours, hub = models(args, tokenizer.vocabulary_size, tokenizer.end_token_id, seed)
    compile_same(ours, args, steps, args.loss_chunk_size)
    compile_same(hub, args, steps)
    data = batches(*train, args.batch_size, steps, seed)
    seconds = {"ours": [], "keras_hub": []}
    named = (("ours", ours), ("keras_hub", hub))
    losses = {}
    for number, start in enumerate(range(0, steps, args.block)):
        block = data[start:start + args.block]
        for name, model in (named if number % 2 == 0 else named[::-1]):
            begin = time.perf_counter()
            for x, y, weights in block:
                logs = model.train_on_batch(x, y, sample_weight=weights, return_dict=True)
            seconds[name].append((time.perf_counter() - begin, len(block)))
            losses[name] = float(logs["loss"])
        print(f"  seed {seed}, steps {min(start + args.block, steps)}/{steps}: loss ours {losses['ours']:.3f}, "
              f"keras-hub {losses['keras_hub']:.3f}", flush=True)
    timed = {name: blocks[1:] for name, blocks in seconds.items()}  # the first block holds the compilation
    per_step = {name: sum(s for s, _ in b) / max(sum(n for _, n in b), 1) for name, b in timed.items()}
    block_ratios = [a[0] / b[0] for a, b in zip(timed["ours"], timed["keras_hub"]) if a[1] == b[1]]
    result = {
        "seed": seed, "steps": steps, "batch_size": args.batch_size, "sequence_length": args.sequence_length,
        "vocabulary": tokenizer.vocabulary_size, "learning_rate": args.learning_rate,
        "warmup_fraction": args.warmup_fraction, "weight_decay": args.weight_decay, "jit_compile": args.jit_compile,
        "vocabulary_padding": args.vocabulary_padding, "loss_chunk_size": args.loss_chunk_size,
        "parameters": {"ours": int(ours.count_params()), "keras_hub": int(hub.count_params())},
        "held_out_windows": len(held[0]), "held_out_tokens": int(held[1][:, 1:].sum()),
        "perplexity": {"ours": held_out_perplexity(ours, *held), "keras_hub": held_out_perplexity(hub, *held)},
        "final_training_loss": losses,
        "step_seconds": per_step, "step_time_ratio": per_step["ours"] / per_step["keras_hub"],
        "median_block_ratio": float(np.median(block_ratios)) if block_ratios else None,
        "compile_block_seconds": {name: blocks[0][0] for name, blocks in seconds.items()},
        "timed_steps": {name: sum(n for _, n in b) for name, b in timed.items()},
        "machine": f"{measure.processor()}, {measure.cores()} cores",
    }
    return result


def print_table(results):
    print("| seed | steps | jit | ours held-out ppl | keras-hub held-out ppl | step time ours / keras-hub "
          "(median block) | s/step ours, keras-hub |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: (r["steps"], r["seed"])):
        toggles = "".join(f", {name} {r[key]}" for key, name in (("vocabulary_padding", "pad"),
                                                                  ("loss_chunk_size", "chunk"))
                          if r.get(key) not in (None, 1))
        print(f"| {r['seed']} | {r['steps']} | {r['jit_compile']}{toggles} | {r['perplexity']['ours']:.2f} | "
              f"{r['perplexity']['keras_hub']:.2f} | {r['step_time_ratio']:.3f} ({r['median_block_ratio']:.3f}) | "
              f"{r['step_seconds']['ours']:.3f}, {r['step_seconds']['keras_hub']:.3f} |")


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        print_table([json.loads(p.read_text()) for p in sorted(args.results.glob("seed*-steps*.json"))])
        return 0
    start = time.perf_counter()
    tokenizer, train, held = prepare(args)
    print(f"data: {len(train[0]):,} training / {len(held[0]):,} held-out windows of {args.sequence_length} + 1, "
          f"vocabulary {tokenizer.vocabulary_size}; jit_compile={args.jit_compile}", flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    results = []
    for steps in args.steps:
        for seed in args.seeds:
            result = run(args, seed, steps, tokenizer, train, held)
            toggles = (f"{'' if args.vocabulary_padding == 1 else f'-pad{args.vocabulary_padding}'}"
                       f"{'' if args.loss_chunk_size is None else f'-chunk{args.loss_chunk_size}'}")
            path = args.results / f"seed{seed}-steps{steps}{'' if args.jit_compile else '-nojit'}{toggles}.json"
            path.write_text(json.dumps(result, indent=1))
            results.append(result)
            print_table([result])
    print(f"\n{len(results)} runs in {(time.perf_counter() - start) / 60:.1f} minutes")
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
