"""What the applications' in-graph tokenizers share: token <-> id lookups and tokenize's one-string / batch
dispatch. TensorFlow (imported by the tokenizers that use it, not by ``applications.core``)."""

import tensorflow as tf


__all__ = ["TokenLookup"]


class TokenLookup(tf.Module):
    """A ``tf.Module`` base for tokenizers whose vocabulary lives in the graph.

    A subclass sets ``self._token_ids`` ({token: id}) and ``self._tokens`` (a tf.string tensor of the tokens in id
    order), and defines ``_tokenize_batch`` (a 1-D tf.string batch -> a ``tf.RaggedTensor`` of int32 ids) and
    ``_detokenize_batch`` (a (B, None) ``tf.RaggedTensor`` of int32 ids, int64 row splits -> (B,) tf.string).
    """

    @property
    def vocabulary_size(self) -> int:
        return len(self._token_ids)

    def token_to_id(self, token: str) -> int:
        """The id of one token.

        Args:
            token: a token of the vocabulary.

        Returns:
            Its id, an int.

        Raises:
            ValueError: ``token`` is not in the vocabulary.
        """
        if token not in self._token_ids:
            raise ValueError(f"`token` {token!r} is not in the vocabulary of {self.vocabulary_size} tokens.")
        return self._token_ids[token]

    def id_to_token(self, ids):
        """Ids to their tokens.

        Args:
            ids: int ids of any shape, or a ``tf.RaggedTensor``.

        Returns:
            A tf.string tensor of the same shape (ragged stays ragged).
        """
        if isinstance(ids, tf.RaggedTensor):
            return tf.ragged.map_flat_values(self.id_to_token, ids)
        return tf.gather(self._tokens, tf.cast(ids, tf.int32))

    def tokenize(self, text):
        """Strings to token ids (no special token added).

        Args:
            text: a string, or a 1-D batch of strings (Python, NumPy or tf.string tensor).

        Returns:
            int32 ids: a 1-D tensor for a string; a `tf.RaggedTensor` (B, None) for a batch.
        """
        text = tf.convert_to_tensor(text, tf.string)
        if text.shape.rank == 0:
            return self._tokenize_batch(text[tf.newaxis])[0]
        if text.shape.rank != 1:
            raise ValueError(f"`text` must be a string or a 1-D batch of strings; received shape {text.shape}.")
        return self._tokenize_batch(text)

    def detokenize(self, ids):
        """Token ids to text (what the subclass's ``_detokenize_batch`` writes).

        Args:
            ids: int ids, (T,) or (B, T), dense or ragged.

        Returns:
            a tf.string scalar for (T,), a (B,) tf.string tensor for (B, T).
        """
        ragged = ids if isinstance(ids, tf.RaggedTensor) else tf.convert_to_tensor(ids)
        single = ragged.shape.rank == 1
        if single:
            ragged = ragged[tf.newaxis]
        if ragged.shape.rank != 2:
            raise ValueError(f"`ids` must be (T,) or (B, T); received shape {ragged.shape}.")
        if not isinstance(ragged, tf.RaggedTensor):
            ragged = tf.RaggedTensor.from_tensor(ragged)
        text = self._detokenize_batch(tf.cast(ragged, tf.int32).with_row_splits_dtype(tf.int64))
        return text[0] if single else text
