"""attnlayers' BertBackbone against keras_hub.models.BertBackbone with the same weights, in one process.

1. Equivalence: keras-hub's weights copied into ours (``copy_keras_hub_weights``), padded inputs, the max |diff|
   of the sequence output (real tokens) and of the pooled output. The bar is 1e-5 against keras-hub with the
   erf GELU (ours, and Hugging Face's); keras-hub as shipped uses the tanh approximation, whose difference
   (about 1e-3) is printed for information.
2. Speed: forward + backward (gradient of sum(outputs) w.r.t. every weight), tf.function graph mode, through
   benchmarks/harness.py: warm-up (tracing), then the two models alternate (ABBA) for --repeats rounds; medians.
   "bert" times keras-hub as shipped (tanh GELU), "bert_erf" keras-hub with the erf GELU (the same function as
   ours: its max|diff| column checks it, at every position since the timing inputs have no padding). The bar is
   ours / keras-hub <= 1.0.

Run:  .venv/bin/python benchmarks/bert_equivalence.py            (--help; e.g. --layers 4 --repeats 9)
"""

import argparse
import sys

import harness  # first: it selects the TensorFlow backend
import keras
import keras_hub
import numpy as np
import tensorflow as tf
from attnlayers.applications.bert import BertBackbone, BertConfig
from attnlayers.applications.bert.checkpoint import copy_keras_hub_weights
from harness import Entry, Side

# BERT-Base's width and vocabulary, fewer layers (the ratio is per layer; 12 would only take longer).
SIZES = {"batch": 8, "length": 128, "layers": 2, "dim": 768, "heads": 12, "ffn": 3072, "vocabulary": 30522}
BAR_DIFF, BAR_RATIO = 1e-5, 1.0


def keras_hub_backbone(s, exact_gelu=False):
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=s["vocabulary"], num_layers=s["layers"], num_heads=s["heads"], hidden_dim=s["dim"],
        intermediate_dim=s["ffn"], max_sequence_length=max(512, s["length"]),
    )
    rng = np.random.default_rng(0)  # perturb every weight: LayerNorm's 1 / 0 and zero biases hide no slip
    for w in backbone.weights:
        w.assign(w.value + 0.02 * rng.standard_normal(w.shape).astype("float32"))
    if exact_gelu:  # keras-hub's blocks use GELU's tanh approximation; ours is the erf form
        for layer in backbone.transformer_layers:
            layer._feedforward_intermediate_dense.activation = keras.activations.gelu
    return backbone


def ours_like(peer, s):
    config = BertConfig(vocabulary_size=s["vocabulary"], max_sequence_length=max(512, s["length"]),
                        num_layers=s["layers"], num_heads=s["heads"], hidden_dim=s["dim"], intermediate_dim=s["ffn"])
    return copy_keras_hub_weights(peer, BertBackbone(config))


def token_inputs(s, padded):
    rng = np.random.default_rng(1)
    batch, length = s["batch"], s["length"]
    lengths = np.linspace(length, max(2, length // 8), batch).astype(int) if padded else np.full(batch, length)
    mask = np.arange(length)[None] < lengths[:, None]
    tokens = np.where(mask, rng.integers(1, s["vocabulary"], (batch, length)), 0).astype("int32")
    segments = (mask & (np.arange(length)[None] >= lengths[:, None] // 2)).astype("int32")
    return tokens, segments, mask


def equivalence(s):
    tokens, segments, mask = token_inputs(s, padded=True)
    print(f"equivalence: sizes {s}; padded rows, real tokens per row {mask.sum(1).tolist()}")
    worst = 0.0
    for label, exact in (("keras-hub, erf GELU (the bar)", True), ("keras-hub as shipped, tanh GELU", False)):
        keras.utils.set_random_seed(0)
        peer = keras_hub_backbone(s, exact_gelu=exact)
        ours = ours_like(peer, s)
        theirs = peer({"token_ids": tokens, "segment_ids": segments, "padding_mask": mask.astype("int32")})
        out = ours({"token_ids": tokens, "segment_ids": segments, "padding_mask": mask})
        sequence = np.abs(np.asarray(out["sequence_output"]) - np.asarray(theirs["sequence_output"]))[mask].max()
        pooled = np.abs(np.asarray(out["pooled_output"]) - np.asarray(theirs["pooled_output"])).max()
        print(f"  vs {label:34s} max |diff| sequence_output (real tokens) {sequence:.3e}, pooled_output {pooled:.3e}")
        if exact:
            worst = max(sequence, pooled)
        del peer, ours
    print(f"  equivalence: {worst:.3e} (bar <= {BAR_DIFF:g}): {'PASS' if worst <= BAR_DIFF else 'FAIL'}\n", flush=True)
    return worst


def timing_inputs(s):
    tokens, segments, mask = token_inputs(s, padded=False)
    return {"token_ids": tf.constant(tokens), "segment_ids": tf.constant(segments), "padding_mask": tf.constant(mask)}


def entry(name, exact_gelu):
    built = {}

    def make_peer(s):
        built["peer"] = keras_hub_backbone(s, exact_gelu)
        return built["peer"]

    def call_peer(model, x):
        out = model({**x, "padding_mask": tf.cast(x["padding_mask"], "int32")})
        return out["sequence_output"], out["pooled_output"]

    def call_ours(model, x):
        out = model(x)
        return out["sequence_output"], out["pooled_output"]

    gelu = "erf GELU (patched)" if exact_gelu else "tanh GELU, as shipped"
    return Entry(
        name, inputs=timing_inputs, same_math=exact_gelu,
        peer=Side(f"keras_hub.models.BertBackbone ({gelu})", make=make_peer, call=call_peer),
        ours=Side("attnlayers.applications.bert.BertBackbone (weights copied from the peer)",
                  make=lambda s: ours_like(built["peer"], s), call=call_ours),
        note="forward + backward of sum(sequence_output) + sum(pooled_output) w.r.t. every weight",
    )


ENTRIES = [entry("bert", exact_gelu=False), entry("bert_erf", exact_gelu=True)]


def main():
    argv = ["--modes", "graph", "--no-memory"] + sys.argv[1:]  # graph mode unless --modes says otherwise
    if any(a in ("-h", "--help", "--list") for a in argv):
        return harness.main(ENTRIES, name="bert", sizes=SIZES, description=__doc__, argv=argv)
    sizes_parser = argparse.ArgumentParser(add_help=False)
    for key, value in SIZES.items():
        sizes_parser.add_argument(f"--{key}", type=type(value), default=value)
    sizes = vars(sizes_parser.parse_known_args(argv)[0])
    worst = equivalence(sizes)
    results = harness.main(ENTRIES, name="bert", sizes=SIZES, description=__doc__, argv=argv)
    print()
    for r in results:
        ok = r["ratio"] <= BAR_RATIO
        print(f"{r['entry']} [{r['mode']}]: ours / keras-hub forward+backward median time ratio {r['ratio']:.3f} "
              f"(paired {r['paired_ratio_median']:.3f}; {r['ours']['median_ms']:.1f} ms vs "
              f"{r['peer']['median_ms']:.1f} ms) (bar <= {BAR_RATIO}): {'PASS' if ok else 'FAIL'}")
    print(f"equivalence max |diff| {worst:.3e} (bar <= {BAR_DIFF:g}): {'PASS' if worst <= BAR_DIFF else 'FAIL'}")


if __name__ == "__main__":
    main()
