"""Multi-head attention and Transformer blocks: attnlayers against keras and keras-hub.

Forward + backward at B=8, T=512, d_model=512, 8 heads (d_ff 2048 for the blocks), float32, TensorFlow
backend on CPU (see harness.py); one cached decoding step (forward only) at B=8 against a cache of 1024.

Both sides get the same seeded initializers, so they hold identical weights and compute the same function
(the max |diff| column checks it), except where noted:

- mha / mha_causal: ``keras.layers.MultiHeadAttention(8, 64)`` vs ``attnlayers.MultiHeadAttention(8, 64)``,
  self-attention (T == S, so keras' top-left causal alignment and ours agree).
- encoder_block: ``keras_hub.layers.TransformerEncoder(2048, 8)`` vs
  ``attnlayers.TransformerEncoderBlock(8, 2048)`` (post-LN, ReLU, no padding).
- decoder_block: ``keras_hub.layers.TransformerDecoder(2048, 8)`` vs ``attnlayers.TransformerDecoderBlock(8, 2048)``
  with an encoder sequence of 512 (causal self-attention + cross-attention + FFN).
- cached_step: one decoding step (query length 1, cache length 1024, update index 512), forward only:
  keras-hub ``CachedMultiHeadAttention(8, 64)`` vs ``attnlayers.MultiHeadAttention(8, 64)`` with ``cache=``.

Run:  .venv/bin/python benchmarks/bench_transformer.py                       (--help for flags)
      .venv/bin/python benchmarks/bench_transformer.py --only mha --repeats 15 --modes graph
"""

import harness  # first: it selects the TensorFlow backend
import keras
import keras_hub
from harness import Entry, Side, normal

import attnlayers

SIZES = {"batch": 8, "length": 512, "dim": 512, "heads": 8, "ffn": 2048, "cache": 1024}


def init():
    """The same seeded initializers on both sides -> identical weights of identical shapes."""
    return {"kernel_initializer": keras.initializers.GlorotUniform(seed=1), "bias_initializer": "zeros"}


def sequence(s, seed=1):
    return normal(s["batch"], s["length"], s["dim"], seed=seed)


def self_inputs(s):
    return {"x": sequence(s)}


def cross_inputs(s):
    return {"x": sequence(s), "memory": sequence(s, seed=2)}


def cache_inputs(s):
    head = s["dim"] // s["heads"]
    return {"x": normal(s["batch"], 1, s["dim"], seed=3), "cache": normal(s["batch"], 2, s["cache"], s["heads"], head, seed=4)}


def mha(cls, s):
    return cls(num_heads=s["heads"], key_dim=s["dim"] // s["heads"], **init())


def mha_entry(name, causal):
    call = lambda layer, x: layer(x["x"], x["x"], use_causal_mask=causal)  # noqa: E731
    return Entry(
        name,
        inputs=self_inputs,
        peer=Side(f"keras.layers.MultiHeadAttention(8, 64), use_causal_mask={causal}",
                  make=lambda s: mha(keras.layers.MultiHeadAttention, s), call=call),
        ours=Side(f"attnlayers.MultiHeadAttention(8, 64), use_causal_mask={causal}",
                  make=lambda s: mha(attnlayers.MultiHeadAttention, s), call=call),
        same_math=True,
    )


def cached_step(layer, x):
    output, _ = layer(x["x"], x["x"], cache=x["cache"], cache_update_index=512)
    return output


ENTRIES = [
    mha_entry("mha", causal=False),
    mha_entry("mha_causal", causal=True),
    Entry(
        "encoder_block",
        inputs=self_inputs,
        peer=Side("keras_hub.layers.TransformerEncoder(2048, 8)",
                  make=lambda s: keras_hub.layers.TransformerEncoder(s["ffn"], s["heads"], **init()),
                  call=lambda layer, x: layer(x["x"])),
        ours=Side("attnlayers.TransformerEncoderBlock(8, 2048)",
                  make=lambda s: attnlayers.TransformerEncoderBlock(s["heads"], s["ffn"], **init()),
                  call=lambda layer, x: layer(x["x"])),
        same_math=True,
    ),
    Entry(
        "decoder_block",
        inputs=cross_inputs,
        peer=Side("keras_hub.layers.TransformerDecoder(2048, 8), causal, with encoder sequence",
                  make=lambda s: keras_hub.layers.TransformerDecoder(s["ffn"], s["heads"], **init()),
                  call=lambda layer, x: layer(x["x"], x["memory"])),
        ours=Side("attnlayers.TransformerDecoderBlock(8, 2048), causal, with encoder sequence",
                  make=lambda s: attnlayers.TransformerDecoderBlock(s["heads"], s["ffn"], **init()),
                  call=lambda layer, x: layer(x["x"], x["memory"])),
        same_math=True,
    ),
    Entry(
        "cached_step",
        inputs=cache_inputs,
        peer=Side("keras_hub.layers.CachedMultiHeadAttention(8, 64), one step, cache 1024",
                  make=lambda s: mha(keras_hub.layers.CachedMultiHeadAttention, s), call=cached_step),
        ours=Side("attnlayers.MultiHeadAttention(8, 64), cache=, one step, cache 1024",
                  make=lambda s: mha(attnlayers.MultiHeadAttention, s), call=cached_step),
        backward=False,
        note="keras-hub attends over all 1024 cache slots unmasked; ours masks the unwritten ones (so outputs differ)",
    ),
]

if __name__ == "__main__":
    harness.main(ENTRIES, name="transformer", sizes=SIZES, description=__doc__)
