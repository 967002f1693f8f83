"""Masks of the wrong size where the inputs' sizes are only known at run time (tf.function with an
input_signature of None batch / length): a runtime error that names the mask, the expected and the received
shape, not a SelectV2 / broadcasting error deep inside the attention. Under XLA and JAX jit (static shapes at
compile time) correct masks still compile and agree with eager."""

import keras
import numpy as np
import pytest
from keras import ops

import attnlayers

B, T, S, D = 2, 3, 5, 8
RNG = np.random.default_rng(0)
QUERY = RNG.normal(size=(B, T, D)).astype("float32")
VALUE = RNG.normal(size=(B, S, D)).astype("float32")
TF = keras.backend.backend() == "tensorflow"
tf_only = pytest.mark.skipif(not TF, reason="tf.function with dynamic shapes is TensorFlow's")

LAYERS = {
    "MultiHeadAttention": lambda: attnlayers.MultiHeadAttention(num_heads=2, key_dim=4),
    "Attention": lambda: attnlayers.Attention(),
    "Attention-additive": lambda: attnlayers.Attention(score="additive"),
    "LocalAttention": lambda: attnlayers.LocalAttention(window=1),
}

GOOD = {
    "value_mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool),
    "query_mask": np.array([[1, 1, 0], [1, 1, 1]], bool),
    "attention_mask": np.tril(np.ones((T, S), bool), 2)[None].repeat(B, 0),
}
# name -> (wrong mask, its static rank-compatible signature, the expected layout in the message)
BAD = {
    "value_mask-length": ("value_mask", np.ones((B, S + 2), bool), r"\(B, S\)"),
    "value_mask-batch": ("value_mask", np.ones((B + 1, S), bool), r"\(B, S\)"),
    "query_mask-length": ("query_mask", np.ones((B, T + 1), bool), r"\(B, T\)"),
    "attention_mask-keys": ("attention_mask", np.ones((B, T, S + 1), bool), r"\(B, T, S\)"),
}


def _layer(name):
    layer = LAYERS[name]()
    layer(QUERY, VALUE)  # build
    return layer


@pytest.fixture(scope="module")
def layers():
    return {name: _layer(name) for name in LAYERS}


def _dynamic_call(layer, mask_name, jit_compile=False):
    import tensorflow as tf

    rank = {"value_mask": 2, "query_mask": 2, "attention_mask": 3}[mask_name]
    signature = [tf.TensorSpec((None, None, D)), tf.TensorSpec((None, None, D)),
                 tf.TensorSpec((None,) * rank, tf.bool)]
    return tf.function(lambda q, v, m: layer(q, v, **{mask_name: m}), input_signature=signature,
                       jit_compile=jit_compile)


@tf_only
@pytest.mark.parametrize("layer_name", LAYERS)
@pytest.mark.parametrize("case", BAD)
def test_wrong_mask_under_dynamic_shapes_is_named(layers, layer_name, case):
    import tensorflow as tf

    mask_name, mask, layout = BAD[case]
    run = _dynamic_call(layers[layer_name], mask_name)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"`{mask_name}` must have shape {layout}"):
        run(QUERY, VALUE, mask)
    # The message carries the shape received.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"received shape\] \[" + " ".join(map(str, mask.shape))):
        run(QUERY, VALUE, mask)


@tf_only
@pytest.mark.parametrize("layer_name", LAYERS)
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_right_masks_under_dynamic_shapes_match_eager(layers, layer_name, jit_compile):
    layer = layers[layer_name]
    for mask_name, mask in GOOD.items():
        expected = ops.convert_to_numpy(layer(QUERY, VALUE, **{mask_name: mask}))
        got = _dynamic_call(layer, mask_name, jit_compile)(QUERY, VALUE, mask).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=mask_name)
    # A mask axis of size 1 still broadcasts.
    _dynamic_call(layer, "value_mask")(QUERY, VALUE, np.ones((1, S), bool))


@tf_only
def test_prepare_memory_checks_value_mask_at_run_time(layers):
    import tensorflow as tf

    layer = layers["Attention"]
    prepare = tf.function(
        lambda v, m: layer.prepare_memory(v, value_mask=m)["value_mask"],
        input_signature=[tf.TensorSpec((None, None, D)), tf.TensorSpec((None, None), tf.bool)],
    )
    np.testing.assert_array_equal(prepare(VALUE, GOOD["value_mask"]).numpy(), GOOD["value_mask"])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`value_mask` must have shape \(B, S\)"):
        prepare(VALUE, np.ones((B, S - 1), bool))


@tf_only
def test_attention_pooling_mask_checked_at_run_time():
    import tensorflow as tf

    layer = attnlayers.AttentionPooling()
    layer(VALUE)
    pool = tf.function(lambda x, m: layer(x, mask=m),
                       input_signature=[tf.TensorSpec((None, None, D)), tf.TensorSpec((None, None), tf.bool)])
    pool(VALUE, GOOD["value_mask"])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`mask` must have shape \(B, S\)"):
        pool(VALUE, np.ones((B, S + 1), bool))


@tf_only
def test_static_shapes_add_no_runtime_assertion(layers):
    """Where every size is known while tracing, the check is static only: no Assert op in the graph."""
    import tensorflow as tf

    layer = layers["MultiHeadAttention"]
    graph = tf.function(lambda q, v, m: layer(q, v, value_mask=m)).get_concrete_function(
        tf.TensorSpec((B, T, D)), tf.TensorSpec((B, S, D)), tf.TensorSpec((B, S), tf.bool)
    ).graph
    assert not [op for op in graph.get_operations() if op.type == "Assert"]


@pytest.mark.parametrize("layer_name", LAYERS)
def test_wrong_value_mask_eager_and_under_jit_is_a_value_error(layers, layer_name):
    """Eager (any backend) and under jax.jit (static shapes while tracing): the static check, a ValueError."""
    layer = layers[layer_name]
    bad = np.ones((B, S + 2), bool)
    with pytest.raises(ValueError, match="value_mask"):
        layer(QUERY, VALUE, value_mask=bad)
    if keras.backend.backend() == "jax":
        import jax

        run = jax.jit(lambda q, v, m: layer(q, v, value_mask=m))
        np.testing.assert_allclose(
            np.asarray(run(QUERY, VALUE, GOOD["value_mask"])),
            ops.convert_to_numpy(layer(QUERY, VALUE, value_mask=GOOD["value_mask"])), rtol=1e-5, atol=1e-5,
        )
        with pytest.raises(ValueError, match="value_mask"):
            run(QUERY, VALUE, bad)
