"""The shared layer-test harness (in the spirit of keras' and keras-hub's ``run_layer_test``).

``run_layer_test`` puts one layer configuration through: build and call, output shapes, the symbolic
(functional-model) path, get_config round trip, ``.keras`` round trip, ``jit_compile=True``, mixed_float16
and mixed_bfloat16, gradients reaching every trainable weight, and (optionally) the mask rules: masked
positions change nothing and a query with nothing visible gets a zero output.
Works under the TensorFlow and JAX backends.
"""

import inspect
import os
import tempfile

import keras
import numpy as np
from keras import ops

BACKEND = keras.backend.backend()


def _as_dict(input_data):
    return input_data if isinstance(input_data, dict) else {"__first__": input_data}


def _call(layer, inputs, call_kwargs, **extra):
    if "__first__" in inputs:
        return layer(inputs["__first__"], **call_kwargs, **extra)
    return layer(**inputs, **call_kwargs, **extra)


def _flat(outputs):
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def _functional_model(layer, inputs, call_kwargs):
    symbolic = {
        name: keras.Input(shape=np.shape(value)[1:], dtype=str(np.asarray(value).dtype), name=name.strip("_"))
        for name, value in inputs.items()
    }
    outputs = _call(layer, symbolic, call_kwargs)
    return keras.Model(list(symbolic.values()), outputs), [inputs[n] for n in symbolic]


def _call_with_weights_of(fresh, layer, inputs, call_kwargs):
    """Builds ``fresh`` (a layer of ``layer``'s config), copies ``layer``'s weights into it and calls it at
    ``training=False``. Under JAX the build is a symbolic call and the call one compiled program: eager, each
    primitive of each new dtype is its own XLA compilation (the float32 eager call above already ran)."""
    if BACKEND != "jax":
        _call(fresh, inputs, call_kwargs, training=False)
        fresh.set_weights(layer.get_weights())
        return _call(fresh, inputs, call_kwargs, training=False)
    import jax

    _functional_model(fresh, inputs, call_kwargs)
    fresh.set_weights(layer.get_weights())
    variables = fresh.trainable_variables + fresh.non_trainable_variables

    def call(values, args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):  # __call__: casts as eagerly
            return _call(fresh, args, call_kwargs, training=False)

    return jax.jit(call)([v.value for v in variables], inputs)


def check_gradients(layer, inputs, call_kwargs, training=True):
    """Every trainable weight gets a finite gradient that is not identically zero."""
    variables = layer.trainable_variables
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            outputs = _flat(_call(layer, inputs, call_kwargs, training=training))
            loss = sum(ops.sum(ops.square(ops.cast(o, "float32"))) for o in outputs)
        grads = tape.gradient(loss, [v.value for v in variables])
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]  # IndexedSlices -> dense
    elif BACKEND == "jax":
        import jax

        non_trainable = [v.value for v in layer.non_trainable_variables]
        args = {k: v for k, v in inputs.items()}
        if "training" in inspect.signature(layer.call).parameters:  # stateless_call does not filter it
            call_kwargs = {**call_kwargs, "training": training}

        def loss_fn(trainable):
            if "__first__" in args:
                outputs, _ = layer.stateless_call(
                    trainable, non_trainable, args["__first__"], **call_kwargs
                )
            else:
                outputs, _ = layer.stateless_call(trainable, non_trainable, **args, **call_kwargs)
            return sum(ops.sum(ops.square(ops.cast(o, "float32"))) for o in _flat(outputs))

        # One compiled program for the forward and backward pass (as fit runs it) instead of one XLA compilation
        # per primitive of each, which is what an eager jax.grad costs on the CPU.
        grads = jax.jit(jax.grad(loss_fn))([v.value for v in variables])
    else:  # pragma: no cover
        return
    for variable, grad in zip(variables, grads):
        assert grad is not None, f"no gradient reaches {variable.path}"
        grad = np.asarray(grad)
        assert np.all(np.isfinite(grad)), f"non-finite gradient for {variable.path}"
        assert np.any(grad != 0), f"zero gradient for {variable.path}"


def check_masking(layer, inputs, call_kwargs, input_name, mask_arg, zero_rows=True, seed=0):
    """Masked positions of ``inputs[input_name]`` change nothing; a fully masked row gives a zero output.

    With ``zero_rows=False`` (layers with residual connections, which pass a padded position's own input
    on), the first output is compared only at unmasked positions and fully masked rows are not checked
    for zeros.

    Builds a (B, S) mask whose last batch row is fully masked, perturbs masked positions and compares.
    """
    rng = np.random.default_rng(seed)
    value = np.asarray(inputs[input_name])
    batch, length = value.shape[:2]
    mask = rng.random((batch, length)) < 0.6
    mask[0, 0] = True
    mask[-1] = False  # a row with nothing visible
    kwargs = {**call_kwargs, mask_arg: mask}
    out = _flat(_call(layer, inputs, kwargs, training=False))
    perturbed = dict(inputs)
    noise = rng.normal(size=value.shape).astype(value.dtype) * 10
    perturbed[input_name] = np.where(mask[(...,) + (None,) * (value.ndim - 2)], value, value + noise)
    out2 = _flat(_call(layer, perturbed, kwargs, training=False))
    for index, (a, b) in enumerate(zip(out, out2)):
        a, b = _np(a), _np(b)
        assert np.all(np.isfinite(a)), "non-finite output with masks"
        if index == 0 and not zero_rows and a.shape[:2] == mask.shape:
            a, b = a[mask], b[mask]
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg="a masked position changed the output")
    if not zero_rows:
        return
    context = _np(out[0])
    np.testing.assert_allclose(context[-1], 0.0, atol=0, err_msg="fully masked row must give zeros")
    if len(out) > 1:
        np.testing.assert_allclose(_np(out[1])[-1], 0.0, atol=0, err_msg="fully masked row: weights 0")


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    call_kwargs=None,
    expected_output_shape=None,
    expected_num_trainable_weights=None,
    run_mixed_precision=True,
    run_jit=True,
    run_saving=True,
    run_gradients=True,
    gradient_training=True,
    mask_check=None,
    deterministic=True,
):
    """Runs the standard checks on one layer configuration.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor kwargs.
        input_data: one array (the first call argument) or a dict of named call arguments (arrays).
        call_kwargs: non-tensor call arguments (e.g. ``return_attention_scores=True``).
        expected_output_shape: a shape, or a tuple of shapes for several outputs.
        expected_num_trainable_weights: checked if given.
        mask_check: dict(input_name=..., mask_arg=...) to run :func:`check_masking`.
        deterministic: outputs at ``training=False`` are reproducible (compared across round trips).
    """
    call_kwargs = dict(call_kwargs or {})
    inputs = _as_dict(input_data)

    # 1. Build and call.
    layer = layer_cls(**init_kwargs)
    outputs = _call(layer, inputs, call_kwargs, training=False)
    flat = _flat(outputs)
    if expected_output_shape is not None:
        shapes = expected_output_shape if isinstance(expected_output_shape[0], tuple) else (expected_output_shape,)
        assert [tuple(o.shape) for o in flat] == [tuple(s) for s in shapes], (
            f"output shapes {[tuple(o.shape) for o in flat]} != expected {shapes}"
        )
    for o in flat:
        assert np.all(np.isfinite(_np(o))), "non-finite output"
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights

    # 2. Config round trip: same config, same outputs with the same weights.
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config
    clone_out = _call(clone, inputs, call_kwargs, training=False)
    clone.set_weights(layer.get_weights())
    if deterministic:
        clone_out = _call(clone, inputs, call_kwargs, training=False)
        for a, b in zip(flat, _flat(clone_out)):
            np.testing.assert_allclose(_np(a), _np(b), atol=1e-6)

    # 3. Functional model (symbolic shapes) and .keras round trip.
    model, model_inputs = _functional_model(layer, inputs, call_kwargs)
    for sym, real in zip(_flat(model.outputs), flat):
        assert tuple(sym.shape)[1:] == tuple(real.shape)[1:], f"symbolic {sym.shape} vs eager {real.shape}"
    expected = [_np(o) for o in _flat(model(model_inputs, training=False))]
    if deterministic:
        for a, b in zip(expected, flat):
            np.testing.assert_allclose(a, _np(b), atol=1e-6)
    if run_saving:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            loaded = keras.saving.load_model(path)
        if deterministic:
            for a, b in zip(expected, _flat(loaded(model_inputs, training=False))):
                np.testing.assert_allclose(a, _np(b), atol=1e-6, err_msg=".keras round trip changed outputs")

    # 4. XLA.
    if run_jit:
        model.compile(jit_compile=True)
        jitted = _flat(model.predict_on_batch(model_inputs))
        if deterministic:
            for a, b in zip(expected, jitted):
                np.testing.assert_allclose(a, _np(b), atol=1e-4, err_msg="jit_compile changed outputs")

    # 5. Mixed precision: compute dtype honoured, outputs finite and close to float32.
    if run_mixed_precision:
        for policy, atol in (("mixed_float16", 2e-2), ("mixed_bfloat16", 1e-1)):
            mixed = layer_cls.from_config({**config, "dtype": policy})  # fresh sublayer objects
            mixed_out = _flat(_call_with_weights_of(mixed, layer, inputs, call_kwargs))
            for a, b in zip(flat, mixed_out):
                assert keras.backend.standardize_dtype(b.dtype) == policy.split("_")[1], (
                    f"{policy}: output dtype {b.dtype}"
                )
                b = _np(b)
                assert np.all(np.isfinite(b)), f"{policy}: non-finite output"
                if deterministic:
                    np.testing.assert_allclose(_np(a), b, atol=atol, rtol=atol, err_msg=policy)

    # 6. Gradients reach every trainable weight.
    if run_gradients and layer.trainable_weights:
        check_gradients(layer, inputs, call_kwargs, training=gradient_training)

    # 7. Masks.
    if mask_check:
        check_masking(layer, inputs, call_kwargs, **mask_check)
    return layer


def gradient(fn, x):
    """d sum(fn(x)) / dx as NumPy, under the TensorFlow or JAX backend (fn maps a tensor to a tensor)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = ops.sum(ops.cast(fn(x), "float32"))
        return np.asarray(ops.convert_to_numpy(ops.cast(tape.gradient(y, x), "float32")))
    import jax

    g = jax.grad(lambda x: ops.sum(ops.cast(fn(x), "float32")))(ops.convert_to_tensor(x))
    return np.asarray(ops.convert_to_numpy(ops.cast(g, "float32")))


def outputs_and_gradients(layer, inputs, **kwargs):
    """The layer's (output, scores) and the gradients of sum(output^2) with respect to every trainable weight and
    to ``inputs`` (a dict of float arrays passed by name), as NumPy, under TensorFlow or JAX (jitted: one
    compilation instead of one per op)."""
    names = sorted(inputs)
    kwargs = {**kwargs, "return_attention_scores": True}
    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = {name: tf.convert_to_tensor(inputs[name]) for name in names}
        with tf.GradientTape() as tape:
            tape.watch(list(tensors.values()))
            outputs = layer(**tensors, **kwargs)
            loss = ops.sum(ops.square(outputs[0]))
        grads = tape.gradient(loss, [v.value for v in layer.trainable_variables] + [tensors[n] for n in names])
        return [_np(o) for o in outputs], [np.asarray(g) for g in grads]
    import jax

    non_trainable = [v.value for v in layer.non_trainable_variables]

    def loss_fn(trainable, tensors):
        outputs, _ = layer.stateless_call(trainable, non_trainable, **tensors, **kwargs)
        return ops.sum(ops.square(outputs[0])), outputs

    (_, outputs), (g_weights, g_inputs) = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True))(
        [v.value for v in layer.trainable_variables], {n: ops.convert_to_tensor(inputs[n]) for n in names}
    )
    return [_np(o) for o in outputs], [np.asarray(g) for g in g_weights] + [np.asarray(g_inputs[n]) for n in names]


def np_softmax(x, mask=None, axis=-1):
    """Reference softmax from the definition, with the fully-masked rule (weights 0)."""
    x = np.asarray(x, dtype="float64")
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    total = e.sum(axis=axis, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
