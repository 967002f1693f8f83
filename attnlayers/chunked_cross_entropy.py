"""Token cross-entropy from hidden states and the output matrix, in chunks of rows: the (N, V) float32 logits are
never formed (the fused classifier of llm.c; Liger-Kernel's fused linear cross-entropy).

For rows n (tokens) with hidden state h_n (d,), output matrix W (V_pad, d) and label y_n:

    z_n = h_n W^T (V_pad logits, float32);  columns >= V (a padded vocabulary) set to -inf: exp(-inf) = 0
    NLL_n = logsumexp_v z_nv - z_n,y_n                                   (cross-entropy of softmax(z_n))
    loss = sum_n w_n NLL_n                                               (w: the sample weight, 0 = ignored)
    dloss/dz_n = w_n (softmax(z_n) - onehot(y_n))                        (zero at padded columns)
    dloss/dh_n = dloss/dz_n W,   dloss/dW = sum_n (dloss/dz_n)^T h_n     (the same GEMMs as the plain backward)

The rows are taken ``chunk_size`` at a time in a loop: each chunk's logits live only while its share of the loss
and of both gradients is computed, so the memory a step holds for the backward is O(N d + V d) (the two gradients,
kept from the forward pass and scaled by the incoming gradient) instead of O(N V); the arithmetic is that of the
plain loss and its backward (three GEMMs), with no recomputation. The forward value and the gradients equal the
plain ``sparse_categorical_crossentropy`` of float32 logits to float32 rounding.

In a custom training loop with a GPT (``fit`` does this itself when compiled with
``applications.core.training.losses.ChunkedCrossEntropy``):

    hidden = model.hidden_states(token_ids, padding_mask, training=True)        # (B, T, d), no logits
    loss = chunked_cross_entropy_mean(hidden, model.output_matrix, labels, padding_weights,
                                      vocabulary_size=model.config.vocabulary_size)
"""

from keras import ops

from attnlayers.validation import check_rank, positive_int

DEFAULT_CHUNK_SIZE = 1024


def chunked_cross_entropy(hidden, output_matrix, labels, sample_weight=None, *, vocabulary_size=None,
                          chunk_size=DEFAULT_CHUNK_SIZE, gradients=True):
    """``sum_n w_n NLL_n`` of the logits ``hidden @ output_matrix^T``, computed ``chunk_size`` rows at a time.

    Args:
        hidden: (..., d) final hidden states (any float dtype: the GEMMs run in it, the softmax in float32).
        output_matrix: (V_pad, d), the output projection as rows (a tied token embedding; ``transpose(kernel)``
            of a Dense head). Cast to ``hidden``'s dtype.
        labels: int (...), the target ids, in [0, V) wherever the weight is not 0 (ignored positions may hold
            anything, e.g. -100: they are clipped and contribute nothing).
        sample_weight: None or (...) float weights (0 = ignored: padding, prompts).
        vocabulary_size: V <= V_pad, the real vocabulary: columns >= V are masked out of the softmax. None: V_pad.
        chunk_size: rows per chunk (at most N = prod(...)); N is padded with ignored rows to a multiple of it.
        gradients: True: differentiable, both gradients computed during the forward pass (training); False: the
            value alone (evaluation: one GEMM per chunk).

    Returns:
        A float32 scalar, ``sum_n w_n NLL_n`` (divide by ``sum(sample_weight)`` for the mean).
    """
    check_rank(output_matrix.shape, 2, "output_matrix", "(V, d)")
    chunk_size = positive_int(chunk_size, "chunk_size")
    table_size, d = output_matrix.shape
    vocabulary_size = table_size if vocabulary_size is None else positive_int(vocabulary_size, "vocabulary_size")
    if vocabulary_size > table_size:
        raise ValueError(f"`vocabulary_size` must be <= the output matrix's {table_size} rows; received "
                         f"vocabulary_size={vocabulary_size}.")
    if hidden.shape[-1] != d:
        raise ValueError(f"`hidden` (..., {d}) must match `output_matrix` ({table_size}, {d}); received hidden of "
                         f"shape {tuple(hidden.shape)}.")
    h = ops.reshape(hidden, (-1, d))
    y = ops.reshape(ops.cast(labels, "int32"), (-1,))
    w = ops.ones_like(y, "float32") if sample_weight is None else ops.reshape(ops.cast(sample_weight, "float32"),
                                                                                (-1,))
    rows = ops.shape(h)[0]
    if isinstance(rows, int):  # static: no chunk larger than the batch (a small batch is one chunk, unpadded)
        chunk_size = max(1, min(chunk_size, rows))
    pad = (-rows) % chunk_size
    if not isinstance(pad, int) or pad:  # ignored rows up to a whole number of chunks
        h = ops.pad(h, ((0, pad), (0, 0)))
        y = ops.pad(y, ((0, pad),))
        w = ops.pad(w, ((0, pad),))
    y = ops.where(w > 0, ops.clip(y, 0, vocabulary_size - 1), 0)
    chunks = (rows + pad) // chunk_size
    matrix = ops.cast(output_matrix, output_matrix.dtype)  # a tensor (TensorFlow: not the variable itself)
    if not gradients:
        return _loop(h, ops.cast(matrix, h.dtype), y, w, chunks, chunk_size, vocabulary_size, gradients=False)[0]

    @ops.custom_gradient
    def loss_and_gradients(h, matrix):
        total, d_h, d_table = _loop(h, ops.cast(matrix, h.dtype), y, w, chunks, chunk_size, vocabulary_size,
                                    gradients=True)

        def backward(*upstream, **_):  # d total = upstream: both gradients scale by it
            g = upstream[0]  # dloss/dmatrix kept in float32 (summed over the chunks) until the matrix's dtype
            return ops.cast(g, d_h.dtype) * d_h, ops.cast(g * d_table, matrix.dtype)

        return total, backward

    return loss_and_gradients(h, matrix)


def _loop(h, table, y, w, chunks, chunk_size, vocabulary_size, gradients):
    """The rows of ``h`` (chunks * chunk_size, d) ``chunk_size`` at a time -> (sum w NLL, dloss/dh, dloss/dtable),
    the gradients None when not asked for."""
    table_size, d = table.shape
    columns = ops.arange(table_size, dtype="int32")

    def body(i, state):
        total, d_h, d_table = state
        start = i * chunk_size
        h_i = ops.slice(h, (start, 0), (chunk_size, d))
        y_i = ops.slice(y, (start,), (chunk_size,))
        w_i = ops.slice(w, (start,), (chunk_size,))
        z = ops.cast(ops.matmul(h_i, ops.transpose(table)), "float32")  # (c, V_pad) logits
        if vocabulary_size != table_size:
            z = ops.where(columns < vocabulary_size, z, float("-inf"))
        m = ops.max(z, axis=-1, keepdims=True)
        lse = m + ops.log(ops.sum(ops.exp(z - m), axis=-1, keepdims=True))  # logsumexp_v z_v
        target = columns[None, :] == y_i[:, None]  # (c, V_pad) one-hot
        z_y = ops.sum(ops.where(target, z, 0.0), axis=-1, keepdims=True)  # not z * onehot: -inf * 0 is NaN
        nll = ops.squeeze(lse - z_y, -1)
        total = total + ops.sum(ops.where(w_i > 0, nll * w_i, 0.0))
        if not gradients:
            return total, d_h, d_table
        d_z = ops.cast(w_i[:, None] * (ops.exp(z - lse) - ops.cast(target, "float32")), h.dtype)  # w (softmax(z) - onehot(y))
        d_h = ops.slice_update(d_h, (start, 0), ops.matmul(d_z, table))
        d_table = d_table + ops.cast(ops.matmul(ops.transpose(d_z), h_i), "float32")
        return total, d_h, d_table

    zero = ops.zeros((), "float32")
    if gradients:
        state = (zero, ops.zeros_like(h), ops.zeros((table_size, d), "float32"))
    else:
        state = (zero, ops.zeros((), h.dtype), ops.zeros((), "float32"))  # placeholders the loop carries
    if isinstance(chunks, int) and chunks == 1:
        return body(0, state)
    return ops.fori_loop(0, chunks, body, state)


def chunked_cross_entropy_mean(hidden, output_matrix, labels, sample_weight=None, **kwargs):
    """The weighted mean ``sum_n w_n NLL_n / sum_n w_n`` (0 when every weight is 0) of
    :func:`chunked_cross_entropy` (same arguments)."""
    total = chunked_cross_entropy(hidden, output_matrix, labels, sample_weight, **kwargs)
    weights = ops.ones_like(labels, "float32") if sample_weight is None else sample_weight
    count = ops.sum(ops.cast(weights, "float32"))
    return ops.divide_no_nan(total, count)


__all__ = ["DEFAULT_CHUNK_SIZE", "chunked_cross_entropy", "chunked_cross_entropy_mean"]
