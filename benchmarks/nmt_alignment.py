"""Did attention find the alignment? (The bar: >= 90% for the Bahdanau and Luong models.)

Trains each attention model on the synthetic task of examples/quickstart.py (4000 generated pairs, adjectives
swapped behind their noun, gold word alignments known, one token per word) and measures on the 200 held-out
test pairs the share of target words whose strongest attention weight (teacher forcing) lies on the gold source
word, with test BLEU (greedy) alongside.

    python benchmarks/nmt_alignment.py                  # bahdanau, luong, local; a few minutes on 2 cores
    python benchmarks/nmt_alignment.py --models luong --epochs 6
"""

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "nmt"
LENGTH = 16


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["bahdanau", "luong", "local"],
                        choices=["bahdanau", "luong", "local", "transformer"])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import keras

    from attnlayers.applications import nmt
    from attnlayers.applications.nmt import evaluate

    splits, tokenizers = nmt.synthetic_task(4000, max_length=LENGTH, seed=args.seed)
    batches = dict(max_source_length=LENGTH, max_target_length=LENGTH, batch_size=32)
    train = nmt.make_dataset(splits.train, tokenizers, seed=args.seed, **batches)
    rows = []
    for name in args.models:
        keras.utils.set_random_seed(args.seed)
        vocabulary = (tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size)
        if name == "transformer":
            model = nmt.build_model(name, *vocabulary, num_layers=2, d_model=64, num_heads=4, intermediate_dim=128,
                                    dropout=0.1, max_length=LENGTH)
            model.compile_for_translation(learning_rate=3e-3)
        else:
            model = nmt.build_model(name, *vocabulary, embedding_dim=64, units=128, dropout=0.1)
            model.compile_for_translation(learning_rate=3e-3)
        start = time.perf_counter()
        model.fit(train, epochs=args.epochs, verbose=0)
        seconds = time.perf_counter() - start
        accuracy = evaluate.alignment_accuracy(model, tokenizers, splits.test)
        bleu, _ = evaluate.evaluate_bleu(model, tokenizers, splits.test, max_source_length=LENGTH, max_length=LENGTH)
        rows.append({"model": name, "epochs": args.epochs, "train_seconds": round(seconds, 1),
                     "alignment_accuracy": accuracy, "bleu_greedy": round(bleu, 2)})
        print(json.dumps(rows[-1]), flush=True)
    print("\n| model | epochs | train (s) | alignment accuracy | test BLEU (greedy) |\n|---|---|---|---|---|")
    for r in rows:
        accuracy = r["alignment_accuracy"]
        shown = ", ".join(f"{a:.3f}" for a in accuracy) if isinstance(accuracy, list) else f"{accuracy:.3f}"
        print(f"| {r['model']} | {r['epochs']} | {r['train_seconds']} | {shown} | {r['bleu_greedy']:.1f} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "alignment.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
