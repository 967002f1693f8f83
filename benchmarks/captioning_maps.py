"""Where each object word of a test scene's reference caption was read, for several trained captioners side by
side: one row per model (weights saved by `captioning_quality.py`), one panel per word of the caption, each the
teacher-forced attention map upsampled over the image on one colour scale for all panels, the map's peak (the
Pointing Game's point) as a cross and the box of the object the word names (white) when it names one.

    python benchmarks/captioning_maps.py --index 3 soft-current-hybrid_seed0_15min \
        soft-current-fade1000-hybrid_seed0_15min --out docs/results/figures/captioning_fade.png

A model is named by its results file in benchmarks/results/captioning (NAME.json and NAME.weights.h5): the JSON's
record rebuilds the model, so the data and seed are the run's.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "captioning"
IMAGE_SIZE, MAX_LENGTH = 64, 20


def load_run(name, results=RESULTS):
    """(record, model, splits, vocabulary) of the run saved as ``results/NAME.json`` + ``NAME.weights.h5``."""
    from attnlayers.applications.captioning import data
    from attnlayers.applications.captioning.builders import build_captioner

    record = json.loads((results / f"{name}.json").read_text())
    splits = data.load_scenes(8000, 500, 1000, image_size=IMAGE_SIZE, seed=record["seed"])
    vocabulary = data.CaptionVocabulary.build(splits.train)
    model = build_captioner(
        record["model"], vocabulary.vocabulary_size, seed=record["seed"], image_size=IMAGE_SIZE,
        max_length=MAX_LENGTH, query=record.get("query"), estimator=record.get("estimator") or "reinforce",
        doubly_stochastic=record.get("doubly_stochastic") or 0.0,
        doubly_stochastic_steps=record.get("doubly_stochastic_steps") or 0,  # absent / None: a constant penalty
        backbone=record.get("encoder", "small"),
        self_attention=record.get("self_attention", False), filters=record.get("filters"))
    model((splits.test.images[:1], np.ones((1, 2), "int32")))
    model.load_weights(results / f"{name}.weights.h5")
    return record, model, splits, vocabulary


def plot(names, index, out, results=RESULTS, dpi=80):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from attnlayers.applications.captioning import predict
    from attnlayers.visualize import upsample_attention

    runs = [load_run(name, results) for name in names]
    test = runs[0][2].test
    words = test.captions[index][0].split()
    image = test.images[index].astype("float64") / 255.0
    fig, axes = plt.subplots(len(runs), len(words) + 1, figsize=(1.15 * (len(words) + 1), 1.4 * len(runs)),
                             squeeze=False, layout="constrained")
    for row, (name, (record, model, splits, vocabulary)) in zip(axes, zip(names, runs)):
        if splits.test.captions[index] != test.captions[index]:
            raise SystemExit(f"{name} was trained on another split (seed {record['seed']}); compare runs of one seed.")
        maps = predict.teacher_forced_attention(model, splits.test.select([index]), vocabulary,
                                                max_length=model.generation_length(None))
        if maps is None:
            raise SystemExit(f"{name} is a {record['model']} captioner, which has no attention maps.")
        maps = maps[0]
        up = upsample_attention(maps.reshape(len(maps), *model.grid_shape), image.shape[:2])  # (T, H, W)
        scale = up.max()
        row[0].imshow(image, interpolation="nearest")
        steps = record.get("doubly_stochastic_steps")
        penalty = f"fading eq. 14\n({steps} steps)" if steps else "constant\neq. 14"
        row[0].set_title(f"{record.get('encoder', 'small')}, {penalty}, PG {record['pointing_game']:.2f}", fontsize=7)
        for t, ax in enumerate(row[1:]):
            heat = up[t] / scale
            ax.imshow(np.clip(image * (0.15 + 0.85 * heat[..., None]), 0, 1), interpolation="nearest")
            y, x = np.unravel_index(np.argmax(up[t]), up[t].shape)
            ax.plot(x, y, "+", color="red", markersize=9, markeredgewidth=2)
            k = int(test.word_objects[index][t])
            if k >= 0:
                y0, x0, y1, x1 = test.objects[index][k].box
                ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, color="white", lw=1))
            ax.set_title(f"{words[t]} ({maps[t].max():.2f})", fontsize=7)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"test scene {index}: teacher-forced maps on one scale per row; (max alpha); + the peak", fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    print(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", help="results names (NAME.json and NAME.weights.h5), one row each")
    parser.add_argument("--index", type=int, default=0, help="the test scene")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "maps.png")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--dpi", type=int, default=80)
    args = parser.parse_args(argv)
    plot(args.names, args.index, args.out, args.results, args.dpi)
    return 0


if __name__ == "__main__":
    sys.exit(main())
