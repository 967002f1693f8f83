"""XLNet's input layout (Yang et al. 2019, section 2.5; Hugging Face's ``XLNetTokenizer``): the special tokens go at
the END, where the classifier reads <cls>, and segment ids are 0 for A, 1 for B, 2 for <cls>.

    single:  A <sep> <cls>              segment ids 0 ... 0 2
    pair:    A <sep> B <sep> <cls>      segment ids 0 ... 0 1 ... 1 2

Rows are padded on the right (:class:`~attnlayers.applications.xlnet.XLNetClassifier` reads the last REAL token, so
either side works). ``tokenizer`` is any object with ``sep_token_id``, ``cls_token_id`` and ``pad_token_id`` (e.g.
the WordPiece tokenizer of the pretraining recipe, whose [SEP] / [CLS] play <sep> / <cls>).

    features, cut = pack([[7, 8, 9]], [[10, 11]], sequence_length=8, tokenizer=tokenizer)
    # token_ids [[7, 8, 9, SEP, 10, 11, SEP, CLS]], segment_ids [[0, 0, 0, 0, 1, 1, 1, 2]], cut 0
"""

from __future__ import annotations

import numpy as np

from attnlayers.validation import positive_int

CLS_SEGMENT = 2  # Hugging Face's token type id of <cls>


def special_tokens(pair):
    """How many special tokens an input carries: 2 (<sep> <cls>) for one segment, 3 for a pair."""
    return 3 if pair else 2


def truncate_pair(a, b, room):
    """``(a, b)`` cut to at most ``room`` tokens together, a token at a time from the end of the longer one, ``b``
    on a tie (as BERT's and XLNet's data preparation and Hugging Face's longest_first); ``b`` may be None."""
    a, b = list(a), None if b is None else list(b)
    while len(a) + (len(b) if b is not None else 0) > room:
        if b is not None and len(b) >= len(a):  # a tie cuts b, as both references do
            b.pop()
        else:
            a.pop()
    return a, b


def pack(segments_a, segments_b=None, *, sequence_length, tokenizer):
    """Packs token-id lists into XLNet's layout, padded on the right to ``sequence_length``.

    Args:
        segments_a: a list of B token-id lists (A). segments_b: None, or a list of B token-id lists (B).
        sequence_length: T, the pieces per row, special tokens included (at least 3 for pairs, 2 for singles).
        tokenizer: gives ``sep_token_id``, ``cls_token_id`` and ``pad_token_id``.

    Returns:
        ``(features, cut)``: features {"token_ids" int32 (B, T), "segment_ids" int32 (B, T), "padding_mask" bool
        (B, T)}, and how many rows were cut to fit.
    """
    pair = segments_b is not None
    length = positive_int(sequence_length, "sequence_length")
    if length < special_tokens(pair) + 1:
        raise ValueError(f"`sequence_length` must leave room for a token beside the {special_tokens(pair)} special "
                         f"tokens; received {sequence_length}.")
    if pair and len(segments_b) != len(segments_a):
        raise ValueError(f"`segments_a` and `segments_b` must have one entry per row; received {len(segments_a)} "
                         f"and {len(segments_b)}.")
    n = len(segments_a)
    token_ids = np.full((n, length), tokenizer.pad_token_id, np.int32)
    segment_ids = np.zeros((n, length), np.int32)
    padding_mask = np.zeros((n, length), bool)
    room = length - special_tokens(pair)
    cut = 0
    for row in range(n):
        a, b = truncate_pair(segments_a[row], segments_b[row] if pair else None, room)
        cut += int(len(a) < len(segments_a[row]) or (pair and len(b) < len(segments_b[row])))
        tokens = a + [tokenizer.sep_token_id]
        segments = [0] * len(tokens)
        if pair:
            tokens += b + [tokenizer.sep_token_id]
            segments += [1] * (len(b) + 1)
        tokens.append(tokenizer.cls_token_id)
        segments.append(CLS_SEGMENT)
        token_ids[row, :len(tokens)] = tokens
        segment_ids[row, :len(segments)] = segments
        padding_mask[row, :len(tokens)] = True
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}, cut


__all__ = ["CLS_SEGMENT", "pack", "special_tokens", "truncate_pair"]
