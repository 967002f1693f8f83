"""Backend workarounds for loops whose body calls layers (an attention RNN decoder's teacher-forced loop).

- :func:`scan` is ``keras.ops.scan`` whose gradient also compiles with XLA under TensorFlow.
- :class:`LoopVariables` carries the variables a loop body assigns (random seeds) through a JAX scan.

Private: the layers use them; nothing here is public API.
"""

import keras
from keras import ops

_BACKEND = keras.backend.backend()


def scan(body, carry, xs, length):
    """``ops.scan(body, carry, xs)`` for a ``body`` whose per-step outputs have the carry's structure.

    On TensorFlow, Keras' scan is a ``tf.while_loop`` without ``maximum_iterations``, whose gradient XLA cannot
    compile ("XLA compilation requires a fixed tensor list size"): training with ``jit_compile=True`` would
    fail. There the loop is an ``ops.while_loop`` bounded by ``length`` that writes each step's outputs into
    (T, ...) buffers with ``ops.scatter_update`` (differentiable, unlike ``slice_update`` on TensorFlow).
    JAX's scan is differentiable and compiles as is.

    Args:
        body: ``body(carry, x_t) -> (carry, y_t)`` with ``y_t`` structured like ``carry``.
        carry: the initial carry, a nest of tensors.
        xs: a nest of time-major tensors (T, ...), sliced along axis 0.
        length: T (int or scalar tensor).

    Returns:
        ``(last_carry, ys)``: ``ys`` has the carry's structure with a leading (T,) axis.
    """
    if _BACKEND != "tensorflow":
        return ops.scan(body, carry, xs)
    buffers = keras.tree.map_structure(lambda c: ops.repeat(ops.zeros_like(c)[None], length, axis=0), carry)

    def loop_body(t, carry, buffers):
        carry, ys = body(carry, keras.tree.map_structure(lambda x: ops.take(x, t, axis=0), xs))
        index = ops.reshape(t, (1, 1))
        buffers = keras.tree.map_structure(lambda b, y: ops.scatter_update(b, index, y[None]), buffers, ys)
        return t + 1, carry, buffers

    _, carry, buffers = ops.while_loop(
        lambda t, carry, buffers: t < length, loop_body, (ops.convert_to_tensor(0, "int32"), carry, buffers),
        maximum_iterations=length,
    )
    return carry, buffers


class LoopVariables:
    """Threads variables that a loop body assigns (random seeds) through a JAX scan as loop values.

    JAX's traced scan body cannot assign a variable, so the values ride in the carry. On entry a
    ``keras.StatelessScope`` is opened over every variable of ``layer``, each mapped to its current value (the
    one of the enclosing scope of ``fit`` / ``stateless_call`` when there is one, so gradients still reach the
    traced weights): inside it ``variable.value`` reads and ``variable.assign`` records without touching the
    variable. The body :meth:`write` s the carried values, runs, and :meth:`read` s the assigned ones back. On
    exit every variable whose value changed in the scope is assigned, which records the update in the
    enclosing scope, or assigns the variable when called eagerly. With no ``variables`` it does nothing (the
    TensorFlow loop assigns variables itself).

    Values are mapped as the layer reads them: under a mixed-precision policy a float variable maps to its
    compute-dtype rounding, which is what the body computes with (a float32 sublayer inside a mixed decoder
    sees its weights so rounded inside the loop; the variables themselves are never assigned from them).

    Example::

        with LoopVariables(layer, seed_variables) as loop_variables:
            carry["threaded"] = loop_variables.read()
            def body(carry, x):
                loop_variables.write(carry["threaded"])
                ...                                   # draws random numbers, assigns the seeds
                return {..., "threaded": loop_variables.read()}, ...
            last, ys = scan(body, carry, xs, length)
            loop_variables.write(last["threaded"])
    """

    def __init__(self, layer, variables):
        self.layer, self.variables = layer, list(variables)
        self.scope, self.initial = None, []

    def __enter__(self):
        if self.variables:
            self.scope = keras.StatelessScope([(v, v.value) for v in self.layer.variables])
            self.initial = [(v, self.scope.get_current_value(v)) for v in self.layer.variables]
            self.scope.__enter__()
        return self

    def read(self):
        """The current values of the threaded variables (a list of tensors)."""
        return [v.value for v in self.variables]

    def write(self, values):
        """Sets the threaded variables' values in the scope."""
        for variable, value in zip(self.variables, values):
            variable.assign(value)

    def __exit__(self, *exc):
        if self.scope is None:
            return False
        final = [self.scope.get_current_value(v) for v, _ in self.initial]
        self.scope.__exit__(*exc)
        if exc[0] is None:
            for (variable, initial), value in zip(self.initial, final):
                if value is not None and value is not initial:
                    variable.assign(value)
        return False
