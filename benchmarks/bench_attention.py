"""Single-head attention: attnlayers.Attention against keras' core attention layers.

Forward + backward at B=32, T=S=256, D=256, float32, TensorFlow backend on CPU (see harness.py).

Peer choices (the fairest keras configuration for each attnlayers score):

- scaled_dot: ``keras.layers.Attention(score_mode="dot", use_scale=True)``. keras' ``use_scale`` is
  a *learned scalar* initialised to 1, not 1/sqrt(d). We set it to 1/sqrt(D) and freeze it, so both
  sides compute exactly softmax(q k^T / sqrt(D)) v with no trainable weights (outputs are compared).
  keras scales the (B, T, S) logits; attnlayers scales the (B, T, D) query.
- scaled_dot_masked: the same with a (B, S) padding mask (``mask=[None, value_mask]`` for keras).
  keras adds -1e9 to masked logits; attnlayers selects a dtype-aware large negative and also zeroes
  the masked weights afterwards, which is what gives a fully masked row zeros instead of the
  average of its padding (keras' behaviour).
- dot: ``keras.layers.Attention()`` (no scale) against ``score="dot"``: the same function.
- scaled_dot_ops: ``keras.ops.dot_product_attention`` with one head, (B, T, 1, D), the primitive
  under ``keras.layers.MultiHeadAttention``: the same function.
- additive: ``keras.layers.AdditiveAttention()`` computes sum_d scale_d tanh(q_d + k_d) (no
  matrices, query and key must have the same size); attnlayers' ``score="additive"`` is Bahdanau's
  v^T tanh(W_q q + W_k k + b) with real W_q, W_k (units = D). Different functions: attnlayers pays
  for two (B*T, D) x (D, D) matmuls, the bias and their gradients, but reduces the (B, T, S, D) tanh
  with v in one contraction where keras materialises scale * tanh(...) before summing it.
  Both build (B, T, S, D) float32 tensors (2 GiB each at the default sizes): this entry needs about
  14 GB of RAM and a few minutes; shrink it with e.g. ``--batch 8``.

Run:  .venv/bin/python benchmarks/bench_attention.py            (--help for flags)
      .venv/bin/python benchmarks/bench_attention.py --only scaled_dot,dot --repeats 15
"""

import math

import harness  # first: it selects the TensorFlow backend
import keras
import numpy as np
import tensorflow as tf
from harness import Entry, Side, normal

import attnlayers

SIZES = {"batch": 32, "query_length": 256, "key_length": 256, "dim": 256}


def cross_inputs(s):
    return {
        "query": normal(s["batch"], s["query_length"], s["dim"], seed=1),
        "value": normal(s["batch"], s["key_length"], s["dim"], seed=2),
    }


def padded_inputs(s):
    """Cross inputs plus a (B, S) padding mask: sequence b keeps its first S - 2b % S keys."""
    lengths = s["key_length"] - (2 * np.arange(s["batch"])) % s["key_length"]
    mask = np.arange(s["key_length"])[None, :] < lengths[:, None]
    return {**cross_inputs(s), "value_mask": tf.constant(mask)}


def keras_call(layer, x):
    mask = [None, x["value_mask"]] if "value_mask" in x else None
    return layer([x["query"], x["value"]], mask=mask)


def ours_call(layer, x):
    return layer(x["query"], x["value"], value_mask=x.get("value_mask"))


def freeze_scale_to_inverse_sqrt_dim(layer, s):
    layer.scale.assign(1.0 / math.sqrt(s["dim"]))
    layer.scale.trainable = False


def dot_product_attention_one_head(x):
    q = keras.ops.expand_dims(x["query"], 2)  # (B, T, 1, D)
    v = keras.ops.expand_dims(x["value"], 2)  # (B, S, 1, D)
    return keras.ops.squeeze(keras.ops.dot_product_attention(q, v, v), 2)


ENTRIES = [
    Entry(
        "scaled_dot",
        inputs=cross_inputs,
        peer=Side(
            "keras.layers.Attention(score_mode='dot', use_scale=True), scale := 1/sqrt(D), frozen",
            make=lambda s: keras.layers.Attention(score_mode="dot", use_scale=True),
            call=keras_call,
            setup=freeze_scale_to_inverse_sqrt_dim,
        ),
        ours=Side(
            "attnlayers.Attention(score='scaled_dot')",
            make=lambda s: attnlayers.Attention(score="scaled_dot"),
            call=ours_call,
        ),
        same_math=True,
    ),
    Entry(
        "scaled_dot_masked",
        inputs=padded_inputs,
        peer=Side(
            "keras.layers.Attention(score_mode='dot', use_scale=True), scale := 1/sqrt(D), frozen, "
            "mask=[None, value_mask]",
            make=lambda s: keras.layers.Attention(score_mode="dot", use_scale=True),
            call=keras_call,
            setup=freeze_scale_to_inverse_sqrt_dim,
        ),
        ours=Side(
            "attnlayers.Attention(score='scaled_dot'), value_mask=value_mask",
            make=lambda s: attnlayers.Attention(score="scaled_dot"),
            call=ours_call,
        ),
        same_math=True,
        note="padding mask; every query sees >= 1 key, so both sides agree",
    ),
    Entry(
        "dot",
        inputs=cross_inputs,
        peer=Side(
            "keras.layers.Attention()", make=lambda s: keras.layers.Attention(), call=keras_call
        ),
        ours=Side(
            "attnlayers.Attention(score='dot')",
            make=lambda s: attnlayers.Attention(score="dot"),
            call=ours_call,
        ),
        same_math=True,
    ),
    Entry(
        "scaled_dot_ops",
        inputs=cross_inputs,
        peer=Side(
            "keras.ops.dot_product_attention, one head (B, T, 1, D)",
            make=lambda s: dot_product_attention_one_head,
            call=lambda fn, x: fn(x),
        ),
        ours=Side(
            "attnlayers.Attention(score='scaled_dot')",
            make=lambda s: attnlayers.Attention(score="scaled_dot"),
            call=ours_call,
        ),
        same_math=True,
    ),
    Entry(
        "additive",
        inputs=cross_inputs,
        peer=Side(
            "keras.layers.AdditiveAttention() (sum_d scale_d tanh(q_d + k_d), no W)",
            make=lambda s: keras.layers.AdditiveAttention(),
            call=keras_call,
        ),
        ours=Side(
            "attnlayers.Attention(score='additive') (v^T tanh(W_q q + W_k k + b), units=D)",
            make=lambda s: attnlayers.Attention(score="additive"),
            call=ours_call,
        ),
        note="different functions: attnlayers has real W_q, W_k (D x D each) and a bias",
    ),
]

if __name__ == "__main__":
    harness.main(ENTRIES, name="attention", sizes=SIZES, description=__doc__)
