"""BERT pre-training data (Devlin et al. 2019, section 3.1 and appendix A.1): sentence pairs for next sentence
prediction (NSP), packed as [CLS] A [SEP] B [SEP], with 15% of their tokens masked for the masked language model
(MLM).

`pretraining_dataset(documents, tokenizer)` gives a `tf.data.Dataset` of `(features, labels, sample_weights)`
batches for `model.fit` (B = batch_size, L = sequence_length, P = max_predictions):

    features = {
        "token_ids":      int32 (B, L)  [CLS] A [SEP] B [SEP] [PAD]..., the chosen tokens replaced (below)
        "segment_ids":    int32 (B, L)  0 for [CLS], A and its [SEP]; 1 for B and its [SEP]; 0 for padding
        "padding_mask":   bool  (B, L)  True on real tokens, False on padding
        "mask_positions": int32 (B, P)  positions of the tokens to predict, ascending; 0 after the last one
    }
    labels = {
        "mlm": int32 (B, P)  the original token ids at mask_positions; 0 after the last one
        "nsp": int32 (B,)    IS_NEXT = 0: B follows A in its document; NOT_NEXT = 1: B is from another document
    }
    sample_weights = {
        "mlm": float32 (B, P)  1.0 for a real prediction, 0.0 for padding of mask_positions
        "nsp": float32 (B,)    1.0 (keras needs a weight for every output once one has them)
    }

That is the default, `sentence_objective="nsp"`. The other objectives (`objectives.py`) change the pairs and the
labels' keys, nothing else:

    "sop"  ALBERT's sentence-order prediction (Lan et al. 2020, section 3.1): A and B are two consecutive segments of
           one document, cut from a chunk as the NSP pairs are; with probability 0.5 they are swapped. labels and
           sample_weights hold "sop" int32 / float32 (B,) instead of "nsp": IN_ORDER = 0 (A then B, as in the
           document), SWAPPED = 1 (B's text first) -- the ALBERT reference's and Hugging Face's
           `sentence_order_label`. Both segments of a chunk are used, so no sentence is put back.
    None   the masked LM alone (RoBERTa, Liu et al. 2019: no NSP). Sequences are single segments, [CLS] S [SEP], S
           whole consecutive sentences of one document filling up to L - 2 tokens (RoBERTa's DOC-SENTENCES input,
           its section 4.2, which it found slightly better than the FULL-SENTENCES its final recipe packs across
           document ends; a sentence longer than that is cut by `pack`); segment_ids are all 0. labels and
           sample_weights hold "mlm" only.

The NSP label convention is the reference implementation's and Hugging Face's `next_sentence_label`: 0 = IsNext,
1 = NotNext. A model with outputs {"mlm": logits (B, P, V), "nsp": logits (B, 2)} trains on it with sparse
categorical cross-entropy for both; for the MLM loss to be the reference's mean over real predictions
(sum(w * loss) / sum(w)), give it `reduction="mean_with_sample_weight"` (keras' default divides by B * P).
`padding_mask` is exactly token_ids != [PAD] (random replacements are never special tokens). Every batch has
the full static L and P; the last batch is smaller unless `drop_remainder=True` (TPUs want that).

The masking (section 3.1, appendix A.1): of the tokens that are not special ([PAD] [UNK] [CLS] [SEP] [MASK]),
round(15%) per sequence (at least 1, at most P) are chosen at random; each chosen token becomes [MASK] with
probability 0.8, a random token with probability 0.1, and stays itself with probability 0.1, and is predicted in
all three cases. With whole-word masking, the WordPiece pieces of a word ("##" pieces continue the word before
them) are chosen together, words taken in random order while they fit in the budget, as the reference does.
Differences from the reference's create_pretraining_data.py, all deliberate: random replacements are drawn
from the non-special tokens (the reference draws from the whole vocabulary, [PAD] and [CLS] included); [UNK] is
never chosen (as in Hugging Face's data collator); the 15% counts the non-special tokens (the reference counts the
three special tokens too); masks are drawn anew each epoch from `seed` (dynamic masking, Liu et al. 2019; the
reference fixes ten masks by copying the data, dupe_factor=10; `dynamic_masking=False` keeps one set for every
epoch), while the NSP pairs are drawn once (the reference draws them anew for each copy); too-long pairs lose tokens
from the end of the longer segment (the reference removes them from a random end of it).

Lower-level pieces, all TensorFlow ops (usable in a serving SavedModel): `pack` (and `is_truncated`),
`MaskedLMMasker`; in Python: `tokenize_documents`, `next_sentence_pairs`, `sentence_order_pairs` and
`document_segments`.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from attnlayers.validation import is_int, positive_int, rate_in_unit_interval

from ..core.inputs import data_order
from .objectives import check_sentence_objective

__all__ = ["IN_ORDER", "IS_NEXT", "MaskedLMMasker", "NOT_NEXT", "SWAPPED", "SentenceOrderPair", "SentencePair",
           "document_segments", "is_truncated", "next_sentence_pairs", "pack", "pretraining_dataset",
           "sentence_order_pairs", "tokenize_documents"]

# Next sentence labels (reference implementation and Hugging Face).
IS_NEXT = 0
NOT_NEXT = 1
# Sentence-order labels (the ALBERT reference and Hugging Face's `sentence_order_label`).
IN_ORDER = 0
SWAPPED = 1


# --------------------------------------------------------------------------------------------------
# Packing: [CLS] A [SEP] B [SEP]


def _check_sequence_length(sequence_length, pair: bool):
    special = 3 if pair else 2
    if not is_int(sequence_length) or sequence_length < special:
        layout = "[CLS] A [SEP] B [SEP]" if pair else "[CLS] A [SEP]"
        raise ValueError(
            f"`sequence_length` must be an integer >= {special}, room for the special tokens of {layout}; "
            f"received sequence_length={sequence_length!r}."
        )
    return int(sequence_length)


_EXPECTED_IDS = ("integer token ids: a (B, None) ragged tensor, a (B, T) tensor, a list of lists of ints, or one "
                 "example (T,)")


def _ids_error(name, received, dtype=None):
    hint = ""
    if dtype is not None and dtype == tf.string:
        hint = " Raw text must first go through the tokenizer: pass `tokenizer.tokenize(texts)`."
    return ValueError(f"`{name}` must hold {_EXPECTED_IDS}; received {received}.{hint}")


def _as_segments(segments, name):
    """Token ids as a (B, None) int32 RaggedTensor, and whether one unbatched example was given."""
    if isinstance(segments, (str, bytes)):
        raise _ids_error(name, f"a string {segments[:40]!r}", tf.string)
    if isinstance(segments, (list, tuple)):
        try:
            segments = tf.ragged.constant(segments)  # dtype inferred, so that floats and strings are not cast
        except (TypeError, ValueError) as error:
            raise _ids_error(name, f"a list that is not a (B, None) or (T,) nest of ints ({error})") from None
        values = segments.flat_values if isinstance(segments, tf.RaggedTensor) else segments
        if segments.dtype == tf.float32 and values.shape.num_elements() == 0:
            segments = tf.cast(segments, tf.int32)  # empty lists: no token to infer a dtype from
    if not isinstance(segments, tf.RaggedTensor):
        try:
            segments = tf.convert_to_tensor(segments)
        except (TypeError, ValueError) as error:
            raise _ids_error(name, f"{type(segments).__name__} that is not a tensor of ints ({error})") from None
    rank = segments.shape.rank
    if rank not in (1, 2) or not segments.dtype.is_integer:
        raise _ids_error(name, f"{segments.dtype.name} of shape {segments.shape}", segments.dtype)
    single = rank == 1
    if single:
        segments = segments[tf.newaxis]
    if not isinstance(segments, tf.RaggedTensor):
        segments = tf.RaggedTensor.from_tensor(segments)
    return tf.cast(segments, tf.int32), single


def _check_batch_sizes(a, b):
    """A and B must have one row each per example: a static ValueError when both batch sizes are known, else a
    graph assertion (mismatched rows would make the packing kernels read out of bounds)."""
    rows_a, rows_b = a.shape[0], b.shape[0]
    if rows_a is not None and rows_b is not None:
        if rows_a != rows_b:
            raise ValueError(f"`segments_a` and `segments_b` must have the same batch size (one B per A); received "
                             f"batch size {rows_a} for segments_a and {rows_b} for segments_b.")
        return a, b
    check = tf.debugging.Assert(
        tf.equal(a.nrows(), tf.cast(b.nrows(), a.row_splits.dtype)),
        ["`segments_a` and `segments_b` must have the same batch size (one B per A); received batch size",
         a.nrows(), "for segments_a and", b.nrows(), "for segments_b."],
    )
    with tf.control_dependencies([check]):
        a = tf.RaggedTensor.from_row_splits(tf.identity(a.values), tf.identity(a.row_splits), validate=False)
        b = tf.RaggedTensor.from_row_splits(tf.identity(b.values), tf.identity(b.row_splits), validate=False)
    return a, b


def _segments(segments_a, segments_b):
    a, single = _as_segments(segments_a, "segments_a")
    if segments_b is None:
        return [a], single
    b, single_b = _as_segments(segments_b, "segments_b")
    if single != single_b:
        raise ValueError("`segments_a` and `segments_b` must both be batches or both single examples; received one "
                         "of each.")
    return list(_check_batch_sizes(a, b)), single


def is_truncated(segments_a, segments_b=None, *, sequence_length: int):
    """Which inputs `pack` would cut: bool (B,) (a scalar for one example); count them with
    `tf.reduce_sum(tf.cast(..., tf.int32))`. Arguments as for `pack`.

    Args:
        segments_a, segments_b, sequence_length: as for `pack`.
    """
    segments, single = _segments(segments_a, segments_b)
    sequence_length = _check_sequence_length(sequence_length, len(segments) == 2)
    lengths = tf.add_n([s.row_lengths() for s in segments])
    truncated = lengths > sequence_length - len(segments) - 1
    return truncated[0] if single else truncated


def pack(segments_a, segments_b=None, *, sequence_length: int, tokenizer):
    """[CLS] A [SEP] (B [SEP]) [PAD]...: BERT's input layout (section 3, figure 2), cut and padded to one length.

    A pair too long for `sequence_length` loses tokens from the end of its longer segment, one at a time (the
    reference's `truncate_seq_pair`); this is `tensorflow_text.RoundRobinTrimmer`, what keras_hub's
    `MultiSegmentPacker(truncate="round_robin")` runs ("waterfall" would cut B first, whatever A's length).
    `is_truncated` tells which inputs lose tokens.

    Args:
        segments_a: token ids of the first segments: a (B, None) `tf.RaggedTensor`, a (B, T) tensor of ids (every
            position a token), a list of lists, or one example (T,).
        segments_b: the second segments, the same way; None packs single segments, [CLS] A [SEP].
        sequence_length: L, the packed length (at least 3 for pairs, 2 for single segments).
        tokenizer: gives `cls_token_id`, `sep_token_id` and `pad_token_id` (a `BertTokenizer`).

    Returns:
        {"token_ids": int32 (B, L), "segment_ids": int32 (B, L) (0 for [CLS] A [SEP] and padding, 1 for B [SEP]),
        "padding_mask": bool (B, L)} (each (L,) for one example): keras-hub's BERT input names.

    Raises:
        ValueError: when the segments are not integer token ids (raw text must go through `tokenizer.tokenize`
            first), or when A and B have different batch sizes (checked when the graph runs if the batch sizes are
            not known statically).
    """
    segments, single = _segments(segments_a, segments_b)
    sequence_length = _check_sequence_length(sequence_length, len(segments) == 2)
    budget = sequence_length - len(segments) - 1  # [CLS] and one [SEP] per segment
    segments = tf_text.RoundRobinTrimmer(budget).trim(segments)
    token_ids, segment_ids = tf_text.combine_segments(
        segments, start_of_sequence_id=tokenizer.cls_token_id, end_of_segment_id=tokenizer.sep_token_id
    )
    shape = [None, sequence_length]
    packed = {
        "token_ids": token_ids.to_tensor(default_value=tokenizer.pad_token_id, shape=shape),
        "segment_ids": tf.cast(segment_ids.to_tensor(default_value=0, shape=shape), tf.int32),
        "padding_mask": tf.ones_like(token_ids, tf.bool).to_tensor(default_value=False, shape=shape),
    }
    return {key: value[0] for key, value in packed.items()} if single else packed


# --------------------------------------------------------------------------------------------------
# Next sentence prediction pairs (Python, once, before the tf.data pipeline)


class SentencePair(NamedTuple):
    """One NSP example: token ids of segments A and B, the label (IS_NEXT / NOT_NEXT) and the index, in the
    `documents` given to `next_sentence_pairs`, of the document each segment comes from."""

    segment_a: list
    segment_b: list
    next_sentence_label: int
    document_a: int
    document_b: int


class SentenceOrderPair(NamedTuple):
    """One SOP example: token ids of segments A and B (as they are packed: B's text first when swapped), the label
    (IN_ORDER / SWAPPED) and the index, in the `documents` given to `sentence_order_pairs`, of their document."""

    segment_a: list
    segment_b: list
    sentence_order_label: int
    document: int


def tokenize_documents(documents, tokenizer, *, chunk_size: int = 4096) -> list:
    """Documents of sentence strings to documents of token-id lists (empty sentences dropped).

    Args:
        documents: a list of documents, each a list of sentences (strings).
        tokenizer: a `BertTokenizer`.

    Returns:
        A list with one entry per document (empty if none of its sentences has a token), each a list of sentences,
        each a list of int token ids.
    """
    for document in documents:
        if isinstance(document, (str, bytes)):
            raise ValueError(f"`documents` must be a list of documents, each a list of sentences; received a string "
                             f"for a document: {document[:40]!r}.")
    sentences = [sentence for document in documents for sentence in document]
    ids = []
    for start in range(0, len(sentences), chunk_size):
        ids.extend(tokenizer.tokenize(sentences[start : start + chunk_size]).to_list())
    out, position = [], 0
    for document in documents:
        out.append([s for s in ids[position : position + len(document)] if s])
        position += len(document)
    return out


def next_sentence_pairs(documents, max_tokens: int, *, seed: int = 0,
                        short_sequence_probability: float = 0.1) -> list:
    """NSP sentence pairs from tokenized documents (section 3.1, "Task #2"; the reference's
    `create_instances_from_document`).

    Each document is read in chunks of whole sentences that fill `max_tokens` (or, with probability
    `short_sequence_probability` per document, a shorter random target, so that the model also sees short
    inputs). A chunk of at least two sentences is cut at a random sentence boundary into A and B: with probability
    0.5 the pair is (A, B), IS_NEXT; otherwise B is replaced by consecutive sentences from a random sentence of
    another document (never the same one), NOT_NEXT, and the sentences of the true B start the next chunk. A
    document's last lone sentence, which has no next sentence, starts no pair (that keeps the labels 50/50); it
    can still be part of another document's NOT_NEXT B. Pairs may be longer than `max_tokens`: `pack` cuts them.

    Args:
        documents: tokenized documents (`tokenize_documents`): each a list of sentences, each a list of token ids.
        max_tokens: the target length of A + B (the sequence length less [CLS] [SEP] [SEP]), at least 2.
        seed: seeds the Python random generator; the same arguments give the same pairs.
        short_sequence_probability: chance that a document is cut in chunks of a random shorter target.

    Returns:
        A list of `SentencePair`s, in document order.

    Raises:
        ValueError: when fewer than two documents have a token (a NOT_NEXT B needs another document).
    """
    documents, kept, short_sequence_probability = _pair_arguments(documents, max_tokens, short_sequence_probability)
    if len(kept) < 2:
        raise ValueError(
            f"`documents` must have at least 2 non-empty documents (a NOT_NEXT segment comes from another "
            f"document); received {len(kept)} of {len(documents)}."
        )
    rng = random.Random(seed)
    pairs = []
    for index in range(len(kept)):
        pairs.extend(_document_pairs(documents, kept, index, max_tokens, short_sequence_probability, rng))
    return pairs


def sentence_order_pairs(documents, max_tokens: int, *, seed: int = 0,
                         short_sequence_probability: float = 0.1) -> list:
    """Sentence-order prediction pairs from tokenized documents (ALBERT: Lan et al. 2020, section 3.1,
    "Inter-sentence coherence loss"; the ALBERT reference's create_pretraining_data.py without random next
    sentences).

    The documents are cut in chunks exactly as for `next_sentence_pairs` (whole sentences filling `max_tokens`, or a
    shorter random target with probability `short_sequence_probability` per document), and a chunk of at least two
    sentences at a random sentence boundary into A (the first part) and B (the rest): with probability 0.5 the pair
    is (A, B), IN_ORDER = 0; otherwise (B, A), SWAPPED = 1. Positives and negatives are the same consecutive text,
    so only the order tells them apart (NSP's NotNext B, from another document, can be told by its topic).

    Args:
        documents: tokenized documents (`tokenize_documents`): each a list of sentences, each a list of token ids.
        max_tokens: the target length of A + B (the sequence length less [CLS] [SEP] [SEP]), at least 2.
        seed: seeds the Python random generator; the same arguments give the same pairs.
        short_sequence_probability: chance that a document is cut in chunks of a random shorter target.

    Returns:
        A list of `SentenceOrderPair`s, in document order.

    Raises:
        ValueError: when no document has two non-empty sentences (a pair needs two).
    """
    documents, kept, short_sequence_probability = _pair_arguments(documents, max_tokens, short_sequence_probability)
    if not any(len(documents[d]) >= 2 for d in kept):
        raise ValueError(
            f"`documents` must have a document of at least 2 non-empty sentences (sentence-order pairs are two "
            f"consecutive segments of one document); received {len(documents)} documents, none with two."
        )
    rng = random.Random(seed)
    pairs = []
    for index in range(len(kept)):
        pairs.extend(_document_pairs(documents, kept, index, max_tokens, short_sequence_probability, rng,
                                     sentence_order=True))
    return pairs


def document_segments(documents, max_tokens: int, *, seed: int = 0, short_sequence_probability: float = 0.1) -> list:
    """Single segments of whole consecutive sentences of one document, for the masked LM alone (RoBERTa's
    DOC-SENTENCES inputs: Liu et al. 2019, section 4.2).

    Each document is read in order; a segment takes sentences while they fit in the target, `max_tokens` (or, with
    probability `short_sequence_probability` per document, a random shorter one, as for `next_sentence_pairs`);
    the next sentence starts the next segment. Every sentence is used once. A sentence longer than the target is a
    segment of its own (`pack` cuts it).

    Args:
        documents: tokenized documents (`tokenize_documents`): each a list of sentences, each a list of token ids.
        max_tokens: the target length of a segment (the sequence length less [CLS] [SEP]), at least 1.
        seed: seeds the Python random generator (the short targets).
        short_sequence_probability: chance that a document is cut in segments of a random shorter target.

    Returns:
        A list of segments (lists of token ids), in document order.

    Raises:
        ValueError: when no document has a token.
    """
    if not is_int(max_tokens) or max_tokens < 1:
        raise ValueError(f"`max_tokens` must be an integer >= 1; received max_tokens={max_tokens!r}.")
    short_sequence_probability = rate_in_unit_interval(short_sequence_probability, "short_sequence_probability")
    rng = random.Random(seed)
    segments = []
    for document in documents:
        sentences = [list(sentence) for sentence in document if len(sentence)]
        if not sentences:
            continue
        target = rng.randint(1, max_tokens) if rng.random() < short_sequence_probability else max_tokens
        segment = []
        for sentence in sentences:
            if segment and len(segment) + len(sentence) > target:
                segments.append(segment)
                segment = []
            segment = segment + sentence
        segments.append(segment)
    if not segments:
        raise ValueError(f"`documents` must have a document with a token; received {len(documents)} documents, "
                         "all empty.")
    return segments


def _pair_arguments(documents, max_tokens, short_sequence_probability):
    """The pair makers' arguments checked: the documents without empty sentences, the indices of those with a
    sentence, and the probability."""
    if not is_int(max_tokens) or max_tokens < 2:
        raise ValueError(f"`max_tokens` must be an integer >= 2 (a token for A and for B); received "
                         f"max_tokens={max_tokens!r}.")
    short_sequence_probability = rate_in_unit_interval(short_sequence_probability, "short_sequence_probability")
    documents = [[list(sentence) for sentence in document if len(sentence)] for document in documents]
    return documents, [d for d, document in enumerate(documents) if document], short_sequence_probability


def _document_pairs(documents, kept, index, max_tokens, short_sequence_probability, rng, sentence_order=False):
    """One document's pairs: NSP's (`next_sentence_pairs`), or SOP's with ``sentence_order``."""
    document = documents[kept[index]]
    target = rng.randint(2, max_tokens) if rng.random() < short_sequence_probability else max_tokens
    pairs, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or (length >= target and len(chunk) >= 2):
            if len(chunk) >= 2:
                a_end = rng.randint(1, len(chunk) - 1)  # A = chunk[:a_end], the true B = chunk[a_end:]
                segment_a = [t for sentence in chunk[:a_end] for t in sentence]
                if sentence_order:  # SOP: the two consecutive segments, swapped half of the time
                    segment_b = [t for s in chunk[a_end:] for t in s]
                    swapped = rng.random() < 0.5
                    first, second = (segment_b, segment_a) if swapped else (segment_a, segment_b)
                    pairs.append(SentenceOrderPair(first, second, SWAPPED if swapped else IN_ORDER, kept[index]))
                else:
                    pairs.append(_next_sentence_pair(documents, kept, index, chunk, a_end, segment_a, target, rng))
                    if pairs[-1].next_sentence_label == NOT_NEXT:
                        i -= len(chunk) - a_end  # the unused true B starts the next chunk
            chunk, length = [], 0
        i += 1
    return pairs


def _next_sentence_pair(documents, kept, index, chunk, a_end, segment_a, target, rng):
    """NSP: the true B (IS_NEXT) with probability 0.5, else a segment of another document (NOT_NEXT)."""
    if rng.random() < 0.5:
        return SentencePair(segment_a, [t for s in chunk[a_end:] for t in s], IS_NEXT, kept[index], kept[index])
    other = rng.randrange(len(kept) - 1)
    source = kept[other + (other >= index)]  # any document but this one
    segment_b = _random_segment(documents[source], target - len(segment_a), rng)
    return SentencePair(segment_a, segment_b, NOT_NEXT, kept[index], source)


def _random_segment(document, target, rng):
    """Consecutive sentences of `document` from a random one, until `target` tokens (at least one sentence)."""
    segment = []
    for sentence in document[rng.randrange(len(document)):]:
        segment.extend(sentence)
        if len(segment) >= target:
            break
    return segment


# --------------------------------------------------------------------------------------------------
# Masked language model


class MaskedLMMasker(tf.Module):
    """Chooses and masks the tokens the MLM predicts (section 3.1, "Task #1"; appendix A.1), with TensorFlow ops.

    keras_hub's `MaskedLMMaskGenerator` is not used: it cannot mask whole words within a fixed number of
    predictions, and its random ops take their seed from TensorFlow's global state. Here every draw is a stateless
    op of the `seed` argument.

    Args:
        tokenizer: a `BertTokenizer` (its vocabulary and special token ids).
        max_predictions: P, the most tokens predicted per sequence (the length of mask_positions).
        mask_selection_rate: share of the non-special tokens chosen (0.15).
        mask_token_rate: share of the chosen tokens replaced by [MASK] (0.8).
        random_token_rate: share of the chosen tokens replaced by a random non-special token (0.1); the rest
            (1 - mask_token_rate - random_token_rate) keep their token.
        whole_word_masking: choose words, all their WordPiece pieces together, instead of single pieces.

    Call arguments:
        inputs: `pack`'s dict: "token_ids" int (B, L) and "padding_mask" bool (B, L) are read, other keys are
            passed through. (L,) for one example.
        seed: a shape (2,) integer tensor (or an int): the same seed and inputs give the same masks.

    Returns:
        `inputs` with "token_ids" masked, plus "mask_positions" int32 (B, P) (ascending; 0 after the last),
        "mask_ids" int32 (B, P) (the original ids there; 0 after the last) and "mask_weights" float32 (B, P)
        (1.0 for a prediction, 0.0 after the last).
    """

    def __init__(self, tokenizer, *, max_predictions: int = 20, mask_selection_rate: float = 0.15,
                 mask_token_rate: float = 0.8, random_token_rate: float = 0.1, whole_word_masking: bool = False,
                 name: str | None = None):
        super().__init__(name=name)
        self.max_predictions = positive_int(max_predictions, "max_predictions")
        self.mask_selection_rate = rate_in_unit_interval(mask_selection_rate, "mask_selection_rate")
        self.mask_token_rate = rate_in_unit_interval(mask_token_rate, "mask_token_rate")
        self.random_token_rate = rate_in_unit_interval(random_token_rate, "random_token_rate")
        if self.mask_token_rate + self.random_token_rate > 1.0:
            raise ValueError(
                "`mask_token_rate` + `random_token_rate` must be at most 1 (the rest keep their token); received "
                f"{mask_token_rate} + {random_token_rate}."
            )
        self.whole_word_masking = bool(whole_word_masking)
        self.mask_token_id = tokenizer.mask_token_id
        vocabulary = tokenizer.get_vocabulary()
        special = np.zeros(len(vocabulary), bool)
        special[list(tokenizer.special_token_ids)] = True
        if special.all():
            raise ValueError("`tokenizer` has only special tokens; random replacements need another token.")
        self._special = tf.constant(special)
        self._continues_word = tf.constant([t.startswith("##") and len(t) > 2 for t in vocabulary])
        self._replacements = tf.constant(np.flatnonzero(~special), tf.int32)

    def __call__(self, inputs, seed):
        token_ids = tf.cast(tf.convert_to_tensor(inputs["token_ids"]), tf.int32)
        single = token_ids.shape.rank == 1
        padding_mask = tf.cast(inputs["padding_mask"], tf.bool)
        if single:
            token_ids, padding_mask = token_ids[tf.newaxis], padding_mask[tf.newaxis]
        seeds = tf.random.experimental.stateless_split(tf.cast(tf.broadcast_to(seed, [2]), tf.int64), 3)
        chosen = self._choose(token_ids, padding_mask, seeds[0])
        masked = self._replace(token_ids, chosen, seeds[1], seeds[2])
        predictions = self._predictions(token_ids, chosen)
        outputs = {**inputs, "token_ids": masked, **predictions}
        if single:
            outputs.update({key: outputs[key][0] for key in ("token_ids", *predictions)})
        return outputs

    def _choose(self, token_ids, padding_mask, seed):
        """bool (B, L): the tokens to predict."""
        batch, length = tf.shape(token_ids)[0], tf.shape(token_ids)[1]
        special = tf.gather(self._special, token_ids) | ~padding_mask
        candidate = ~special
        if self.whole_word_masking:
            after_special = tf.pad(special[:, :-1], [[0, 0], [1, 0]], constant_values=True)
            starts = ~tf.gather(self._continues_word, token_ids) | special | after_special
        else:
            starts = tf.ones_like(candidate)
        word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # (B, L): the word each token belongs to
        flat_word = word + length * tf.range(batch)[:, tf.newaxis]
        word_length = tf.reshape(  # candidate tokens per word; 0 for special tokens and unused word indices
            tf.math.unsorted_segment_sum(tf.cast(candidate, tf.int32), flat_word, batch * length), [batch, length])
        num_candidates = tf.reduce_sum(tf.cast(candidate, tf.int32), axis=1)
        # 15% of the candidate tokens, at least one, at most P (Devlin et al. 2019, 3.1).
        budget = tf.cast(tf.round(self.mask_selection_rate * tf.cast(num_candidates, tf.float32)), tf.int32)
        budget = tf.minimum(tf.minimum(tf.maximum(budget, 1), self.max_predictions), num_candidates)
        # Words in random order, then each taken while it fits in the budget (the reference's greedy fill).
        priority = tf.where(word_length > 0, tf.random.stateless_uniform([batch, length], seed), -1.0)
        order = tf.argsort(priority, axis=1, direction="DESCENDING", stable=True)
        lengths_in_order = tf.gather(word_length, order, batch_dims=1)

        def take(state, lengths):
            count, _ = state
            fits = (lengths > 0) & (count + lengths <= budget)
            return count + tf.where(fits, lengths, 0), fits

        _, taken_in_order = tf.scan(take, tf.transpose(lengths_in_order),
                                    initializer=(tf.zeros_like(budget), tf.zeros_like(budget, tf.bool)))
        taken = tf.gather(tf.transpose(taken_in_order), tf.argsort(order, axis=1), batch_dims=1)  # by word index
        return tf.gather(taken, word, batch_dims=1) & candidate

    def _replace(self, token_ids, chosen, decision_seed, random_seed):
        """80% [MASK], 10% a random token, 10% unchanged (appendix A.1)."""
        shape = tf.shape(token_ids)
        u = tf.random.stateless_uniform(shape, decision_seed)
        pick = tf.random.stateless_uniform(shape, random_seed, maxval=tf.size(self._replacements), dtype=tf.int32)
        random_ids = tf.gather(self._replacements, pick)
        masked = tf.where(chosen & (u < self.mask_token_rate), self.mask_token_id, token_ids)
        replace = chosen & (u >= self.mask_token_rate) & (u < self.mask_token_rate + self.random_token_rate)
        return tf.where(replace, random_ids, masked)

    def _predictions(self, token_ids, chosen):
        """Positions (ascending), original ids and weights of the chosen tokens, padded to P."""
        length = tf.shape(token_ids)[1]
        position = tf.range(length)[tf.newaxis]
        positions = tf.argsort(tf.where(chosen, position, length + position), axis=1, stable=True)
        positions = positions[:, : self.max_predictions]
        positions = tf.pad(positions, [[0, 0], [0, self.max_predictions - tf.shape(positions)[1]]])
        weights = tf.range(self.max_predictions)[tf.newaxis] < tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1,
                                                                             keepdims=True)
        positions = tf.where(weights, positions, 0)
        mask_ids = tf.where(weights, tf.gather(token_ids, positions, batch_dims=1), 0)
        static = [token_ids.shape[0], self.max_predictions]
        return {
            "mask_positions": tf.ensure_shape(positions, static),
            "mask_ids": tf.ensure_shape(mask_ids, static),
            "mask_weights": tf.ensure_shape(tf.cast(weights, tf.float32), static),
        }


# --------------------------------------------------------------------------------------------------
# The pipeline


def _ragged(segments):
    lengths = np.asarray([len(s) for s in segments], np.int64)
    values = np.fromiter((t for s in segments for t in s), np.int32, count=int(lengths.sum()))
    return tf.RaggedTensor.from_row_lengths(values, lengths)


def pretraining_dataset(
    documents,
    tokenizer,
    *,
    sequence_length: int = 128,
    max_predictions: int = 20,
    batch_size: int = 32,
    seed: int = 0,
    whole_word_masking: bool = False,
    short_sequence_probability: float = 0.1,
    shuffle: bool = True,
    drop_remainder: bool = False,
    dynamic_masking: bool = True,
    sentence_objective: str | None = "nsp",
):
    """MLM + NSP batches for `model.fit` (see the module docstring for the exact structure); MLM + SOP, or MLM
    alone, with `sentence_objective`.

    Args:
        documents: a list of documents, each a list of sentences (strings), in order. At least two documents for
            NSP; for SOP, one of two sentences.
        tokenizer: a `BertTokenizer`.
        sequence_length: L (128 for 90% of BERT's steps, then 512); at least 5 (3 with no sentence objective).
        max_predictions: P, the most masked tokens per sequence (20 for L = 128, 80 for L = 512).
        batch_size: sequences per batch.
        seed: seeds the pairs, their shuffling and the masks (new masks every epoch, the same for every run).
        whole_word_masking: mask all pieces of a chosen word together.
        short_sequence_probability: see `next_sentence_pairs`.
        shuffle: shuffle the sequences each epoch (False: document order).
        drop_remainder: drop the last smaller batch (static batch size).
        dynamic_masking: new masks (and order, with `shuffle`) each epoch (Liu et al. 2019): epoch e's are a pure
            function of (seed, e) (`core.inputs.data_order`: `fit`'s epoch, or this dataset's passes outside `fit`).
            False: the same masks every pass: the batches depend on `seed` alone, however many
            times the dataset was iterated before (Keras' `fit` under a tf.distribute strategy iterates it once
            more than without one, to build the model), as comparisons across placements need.
        sentence_objective: "nsp" (BERT's next sentence prediction: `next_sentence_pairs`, labels "nsp"), "sop"
            (ALBERT's sentence-order prediction: `sentence_order_pairs`, labels "sop", 0 = in order, 1 = swapped)
            or None (the masked LM alone, RoBERTa's: `document_segments` packed as [CLS] S [SEP], labels "mlm"
            only).

    Returns:
        A `tf.data.Dataset` of `(features, labels, sample_weights)`.
    """
    sentence_objective = check_sentence_objective(sentence_objective)
    pair = sentence_objective is not None
    sequence_length = _check_sequence_length(sequence_length, pair=pair)
    if sequence_length < (5 if pair else 3):
        room = "[CLS] [SEP] [SEP] and a token each for A and B" if pair else "[CLS] [SEP] and a token"
        raise ValueError(f"`sequence_length` must be at least {5 if pair else 3} for pre-training ({room}); received "
                         f"sequence_length={sequence_length}.")
    batch_size = positive_int(batch_size, "batch_size")
    masker = MaskedLMMasker(tokenizer, max_predictions=max_predictions, whole_word_masking=whole_word_masking)
    tokenized = tokenize_documents(documents, tokenizer)
    options = dict(seed=seed, short_sequence_probability=short_sequence_probability)
    if sentence_objective == "nsp":
        pairs = next_sentence_pairs(tokenized, sequence_length - 3, **options)
        labels = np.asarray([p.next_sentence_label for p in pairs], np.int32)
    elif sentence_objective == "sop":
        pairs = sentence_order_pairs(tokenized, sequence_length - 3, **options)
        labels = np.asarray([p.sentence_order_label for p in pairs], np.int32)
    if pair:
        slices = (_ragged([p.segment_a for p in pairs]), _ragged([p.segment_b for p in pairs]), labels)
    else:
        slices = (_ragged(document_segments(tokenized, sequence_length - 2, **options)),)
    # Epoch e in (seed, e)'s order (with dynamic_masking; else (seed, 0)'s every pass), whichever process draws it.
    ds = data_order.shuffled_slices(slices, seed, shuffle=shuffle, each_epoch=bool(dynamic_masking))
    ds = ds.ragged_batch(batch_size, drop_remainder=drop_remainder)
    # One random number per batch seeds that batch's masks: a pure function of (seed, epoch, batch) with
    # dynamic_masking (core.inputs.data_order.epoch_seeds), of (seed, batch) without.
    draws = (data_order.epoch_seeds(seed) if dynamic_masking
             else tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=False))
    ds = tf.data.Dataset.zip(ds, draws)

    def make(segments, batch_seed):
        packed = pack(segments[0], segments[1] if pair else None, sequence_length=sequence_length,
                      tokenizer=tokenizer)
        masked = masker(packed, tf.stack([batch_seed, tf.constant(seed, tf.int64)]))
        features = {key: masked[key] for key in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
        labels, weights = {"mlm": masked["mask_ids"]}, {"mlm": masked["mask_weights"]}
        if pair:  # "nsp" or "sop": (B,) labels, weight 1 (keras needs a weight for every output once one has them)
            labels[sentence_objective] = segments[2]
            weights[sentence_objective] = tf.ones_like(segments[2], tf.float32)
        return features, labels, weights

    return ds.map(make, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
