"""Localization against training steps: how far attention localizes on the generated scenes when the budget is
counted in steps rather than minutes, for the attnlayers captioners of `captioning.builders` under any Keras
backend (on a GPU under KERAS_BACKEND=jax: thousands of steps in minutes, where benchmarks/captioning_quality.py
gets about 800-1500 steps in 15 minutes on this machine's CPU).

Each configuration trains on the 8000 training scenes of `--seed` (the data, the initialization and the batch
order) for `--steps` steps of 64, and every `--every` steps prints the training loss, the validation loss and the
localization of the 1000 test scenes' object words (teacher forcing, as in captioning_quality.py): the strict rule
(the peak inside the box), by word kind, and the Pointing Game (within 15 px at 224 px: 4.3 px here).

    python benchmarks/captioning_steps.py --steps 5000 --every 1000 \\
        '{"label": "8x8"}' '{"label": "16x16", "filters": [32, 64]}' '{"label": "hard", "model": "hard"}'

A configuration is a JSON object: "label", and build_captioner's arguments ("model": soft | hard | none |
transformer, "query", "estimator", "doubly_stochastic", "filters", "position_embedding", "backbone" ("vit"),
"self_attention", "learning_rate", ...).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="+", type=json.loads, help="JSON objects, one per model (see above)")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--every", type=int, default=1000, help="evaluate every this many steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import keras
    import numpy as np

    from attnlayers.applications.captioning import data, predict
    from attnlayers.applications.captioning.builders import build_captioner

    splits = data.load_scenes(8000, 500, 1000, image_size=64, seed=args.seed)
    vocabulary = data.CaptionVocabulary.build(splits.train)
    index, caption_in, caption_out = data.encode_captions(splits.train, vocabulary, max_length=20)
    val_index, val_in, val_out = data.encode_captions(splits.validation, vocabulary, max_length=20)
    print(f"backend {keras.backend.backend()}, seed {args.seed}, batch {args.batch_size}", flush=True)
    for config in args.configs:
        config = dict(config)
        label, name = config.pop("label", "model"), config.pop("model", "soft")
        keras.utils.set_random_seed(args.seed)
        model = build_captioner(name, vocabulary.vocabulary_size, seed=args.seed, image_size=64, max_length=20,
                                **config)
        rng = np.random.default_rng(args.seed)
        order = np.zeros(0, int)
        done, curve, start = 0, [], time.time()
        while done < args.steps:
            steps = min(args.every, args.steps - done)
            while len(order) < steps * args.batch_size:  # epochs of reshuffled examples, back to back
                order = np.concatenate([order, rng.permutation(len(index))])
            batch, order = order[: steps * args.batch_size], order[steps * args.batch_size:]
            history = model.fit((splits.train.images[index[batch]], caption_in[batch]), caption_out[batch],
                                batch_size=args.batch_size, shuffle=False, verbose=0)
            done += steps
            val_loss = model.evaluate((splits.validation.images[val_index], val_in), val_out, batch_size=250,
                                      verbose=0)[0]
            found = predict.localization(model, splits.test, vocabulary)
            row = {"steps": done, "loss": round(float(history.history["loss"][-1]), 3),
                   "val_loss": round(float(val_loss), 3), "localization": round(found.get("localization", 0), 3),
                   "pointing_game": round(found.get("pointing_game", 0), 3),
                   "by_kind": {k: round(v, 2) for k, v in found.get("localization_by_kind", {}).items()}}
            curve.append(row)
            print(label, row, f"{time.time() - start:.0f} s", flush=True)
        print("RESULT", json.dumps({"label": label, "model": name, **config, "seed": args.seed, "curve": curve}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
