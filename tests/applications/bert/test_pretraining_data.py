"""BERT pre-training data: packing and truncation (against the reference's truncate_seq_pair and keras-hub's
packer), NSP pairs (50/50 labels, negatives from other documents), MLM masking statistics (15% chosen; 80/10/10,
with tolerances of three binomial standard deviations), whole-word masking, the tf.data pipeline and a SavedModel
that serves tokenize -> pack -> mask; the other sentence objectives: ALBERT's sentence-order pairs, RoBERTa's single
segments (the masked LM alone) and their batches."""

import random

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from attnlayers.applications.bert.pretraining_data import (
    IN_ORDER,
    IS_NEXT,
    NOT_NEXT,
    SWAPPED,
    MaskedLMMasker,
    document_segments,
    is_truncated,
    next_sentence_pairs,
    pack,
    pretraining_dataset,
    sentence_order_pairs,
    tokenize_documents,
)
from attnlayers.applications.bert.tokenizer import SPECIAL_TOKENS, BertTokenizer

# 5 special tokens (ids 0-4), 60 word-initial pieces w0..w59 (ids 5-64), 20 continuation pieces ##x0..##x19
WORD_PIECES = [f"w{i}" for i in range(60)]
SUFFIX_PIECES = [f"##x{i}" for i in range(20)]
VOCABULARY = list(SPECIAL_TOKENS) + WORD_PIECES + SUFFIX_PIECES
PAD, UNK, CLS, SEP, MASK = range(5)
NUM_REPLACEMENTS = len(VOCABULARY) - len(SPECIAL_TOKENS)  # a random replacement is one of these
Z = 3.0  # tolerance: three binomial standard deviations


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(VOCABULARY)


def within_binomial(successes, trials, p):
    return abs(successes - trials * p) <= Z * np.sqrt(trials * p * (1 - p))


# --------------------------------------------------------------------------------------------------
# pack


def test_pack_layout(tokenizer):
    packed = pack(tf.ragged.constant([[10, 11, 12], [20]]), tf.ragged.constant([[30, 31], [40, 41, 42]]),
                  sequence_length=10, tokenizer=tokenizer)
    assert set(packed) == {"token_ids", "segment_ids", "padding_mask"}
    assert packed["token_ids"].dtype == tf.int32 and packed["segment_ids"].dtype == tf.int32
    assert packed["padding_mask"].dtype == tf.bool and packed["token_ids"].shape.as_list() == [2, 10]
    np.testing.assert_array_equal(packed["token_ids"], [[CLS, 10, 11, 12, SEP, 30, 31, SEP, PAD, PAD],
                                                        [CLS, 20, SEP, 40, 41, 42, SEP, PAD, PAD, PAD]])
    np.testing.assert_array_equal(packed["segment_ids"], [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0],
                                                          [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(packed["padding_mask"], packed["token_ids"] != PAD)
    # one segment; one example; dense (B, T) ids and lists
    single = pack([10, 11], sequence_length=5, tokenizer=tokenizer)
    np.testing.assert_array_equal(single["token_ids"], [CLS, 10, 11, SEP, PAD])
    np.testing.assert_array_equal(single["segment_ids"], [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(single["padding_mask"], [True, True, True, True, False])
    dense = pack(tf.constant([[10, 11], [12, 13]]), [[20], [21, 22]], sequence_length=6, tokenizer=tokenizer)
    np.testing.assert_array_equal(dense["token_ids"], [[CLS, 10, 11, SEP, 20, SEP], [CLS, 12, 13, SEP, 21, SEP]])


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens):
    """google-research/bert run_classifier.py: drop the last token of the longer segment (B on a tie)."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b)
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
    return tokens_a, tokens_b


def test_pack_truncates_the_longer_segment_first(tokenizer):
    rng = random.Random(0)
    sequence_length = 12
    a = [[5 + rng.randrange(60) for _ in range(rng.randrange(0, 16))] for _ in range(300)]
    b = [[5 + rng.randrange(60) for _ in range(rng.randrange(0, 16))] for _ in range(300)]
    packed = pack(tf.ragged.constant(a), tf.ragged.constant(b), sequence_length=sequence_length, tokenizer=tokenizer)
    truncated = is_truncated(tf.ragged.constant(a), tf.ragged.constant(b), sequence_length=sequence_length).numpy()
    expected_truncated = []
    for row, (tokens_a, tokens_b) in enumerate(zip(a, b, strict=True)):
        cut_a, cut_b = truncate_seq_pair(tokens_a, tokens_b, sequence_length - 3)
        expected = [CLS] + cut_a + [SEP] + cut_b + [SEP]
        expected += [PAD] * (sequence_length - len(expected))
        assert packed["token_ids"][row].numpy().tolist() == expected
        expected_truncated.append(len(tokens_a) + len(tokens_b) > sequence_length - 3)
    assert truncated.tolist() == expected_truncated and 0 < truncated.sum() < len(a)
    # keras-hub's packer with truncate="round_robin" agrees; "waterfall" does not
    for truncate, same in (("round_robin", True), ("waterfall", False)):
        packer = keras_hub.layers.MultiSegmentPacker(sequence_length, start_value=CLS, end_value=SEP, pad_value=PAD,
                                                     truncate=truncate)
        token_ids, _ = packer((a, b))
        assert np.array_equal(np.asarray(token_ids), packed["token_ids"]) == same
    assert is_truncated([1, 2, 3], sequence_length=4).numpy() == np.True_
    assert is_truncated([1, 2, 3], sequence_length=5).numpy() == np.False_


def test_pack_errors(tokenizer):
    with pytest.raises(ValueError, match=r"`sequence_length` must be an integer >= 3.*\[CLS\] A \[SEP\] B \[SEP\]"
                                         r".*sequence_length=2"):
        pack([[5]], [[6]], sequence_length=2, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"`sequence_length` must be an integer >= 2.*sequence_length=1"):
        pack([[5]], sequence_length=1, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="`segments_a` and `segments_b` must both be batches"):
        pack([[5]], [6], sequence_length=8, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="`segments_b` must hold integer token ids"):
        pack([[5]], tf.constant([[0.5]]), sequence_length=8, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="`segments_a` must hold integer token ids"):
        pack(tf.zeros([1, 2, 3], tf.int32), sequence_length=8, tokenizer=tokenizer)


BATCH_MISMATCH = r"`segments_a` and `segments_b` must have the same batch size.*batch size {} for segments_a and {} " \
                 r"for segments_b"


def test_pack_rejects_segments_of_different_batch_sizes(tokenizer):
    # lists gave uninitialised memory as ids, B longer than A dropped rows, the tokenizer's output segfaulted
    for a, b in (([[5, 6], [7]], [[8]]), ([[5, 6]], [[8], [9]])):
        with pytest.raises(ValueError, match=BATCH_MISMATCH.format(len(a), len(b))):
            pack(a, b, sequence_length=8, tokenizer=tokenizer)
        with pytest.raises(ValueError, match=BATCH_MISMATCH.format(len(a), len(b))):
            is_truncated(a, b, sequence_length=8)
    with pytest.raises(ValueError, match=BATCH_MISMATCH.format(2, 1)):
        pack(tokenizer.tokenize(["w1 w2", "w3"]), tokenizer.tokenize(["w4"]), sequence_length=8, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=BATCH_MISMATCH.format(1, 2)):
        pack(tf.constant([[5, 6]]), tf.ragged.constant([[8], [9, 10]]), sequence_length=8, tokenizer=tokenizer)


def test_pack_checks_batch_sizes_in_graphs(tokenizer):
    spec = tf.RaggedTensorSpec([None, None], tf.int32)  # batch sizes unknown when traced: checked when run
    packed = tf.function(lambda a, b: pack(a, b, sequence_length=8, tokenizer=tokenizer)["token_ids"],
                         input_signature=[spec, spec])
    truncated = tf.function(lambda a, b: is_truncated(a, b, sequence_length=8), input_signature=[spec, spec])
    a, b = tf.ragged.constant([[5, 6], [7]]), tf.ragged.constant([[8], [9]])
    np.testing.assert_array_equal(packed(a, b), pack(a, b, sequence_length=8, tokenizer=tokenizer)["token_ids"])
    for function in (packed, truncated):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"must have the same batch size.*\[2\].*segments_a"
                                                                 r".*\[1\].*segments_b"):
            function(a, b[:1])


def test_pack_asks_for_token_ids(tokenizer):
    expected = r"must hold integer token ids: a \(B, None\) ragged tensor, a \(B, T\) tensor, a list of lists of ints"
    tokenize_first = r".*Raw text must first go through the tokenizer: pass `tokenizer.tokenize\(texts\)`"
    for text in ("w1 w2", ["w1 w2", "w3"], [["w1", "w2"]], tf.constant(["w1 w2"])):
        with pytest.raises(ValueError, match=r"`segments_a` " + expected + r".*string" + tokenize_first):
            pack(text, sequence_length=8, tokenizer=tokenizer)
        with pytest.raises(ValueError, match=r"`segments_b` " + expected + tokenize_first):
            pack([[5]] if isinstance(text, (list, tf.Tensor)) else [5], text, sequence_length=8, tokenizer=tokenizer)
    for floats in ([[0.5, 1.5]], [1.0], tf.constant([[0.5]]), tf.ragged.constant([[0.5], []])):
        with pytest.raises(ValueError, match=r"`segments_a` " + expected + r".*received float32"):
            pack(floats, sequence_length=8, tokenizer=tokenizer)
        with pytest.raises(ValueError, match=r"`segments_a` " + expected + r".*received float32"):
            is_truncated(floats, sequence_length=8)
    with pytest.raises(ValueError, match=r"`segments_a` " + expected + r".*received a list"):
        pack([[5, "w1"]], sequence_length=8, tokenizer=tokenizer)
    # empty segments are still token ids
    np.testing.assert_array_equal(pack([[], []], [[5], []], sequence_length=5, tokenizer=tokenizer)["token_ids"],
                                  [[CLS, SEP, 5, SEP, PAD], [CLS, SEP, SEP, PAD, PAD]])


# --------------------------------------------------------------------------------------------------
# Next sentence prediction pairs


def tagged_documents(num_documents=60, seed=0):
    """Sentence s of document d is [1000 * d + s] repeated 2-9 times: every token tells where it comes from."""
    rng = random.Random(seed)
    return [[[1000 * d + s] * rng.randint(2, 9) for s in range(rng.randint(1, 12))] for d in range(num_documents)]


def sentence_runs(tokens):
    """The (document, sentence) of each run of equal tokens."""
    runs = [tokens[0]] + [t for previous, t in zip(tokens, tokens[1:], strict=False) if t != previous]
    return [divmod(t, 1000) for t in runs]


def test_next_sentence_pairs():
    documents = tagged_documents(200)
    pairs = next_sentence_pairs(documents, 20, seed=1)
    labels = np.asarray([p.next_sentence_label for p in pairs])
    assert set(labels) == {IS_NEXT, NOT_NEXT} and (IS_NEXT, NOT_NEXT) == (0, 1)
    assert len(pairs) > 300 and within_binomial((labels == IS_NEXT).sum(), len(labels), 0.5)
    for pair in pairs:
        a, b = sentence_runs(pair.segment_a), sentence_runs(pair.segment_b)
        assert {d for d, _ in a} == {pair.document_a} and {d for d, _ in b} == {pair.document_b}
        assert pair.segment_a and pair.segment_b
        sentences_a, sentences_b = [s for _, s in a], [s for _, s in b]
        assert sentences_a == list(range(sentences_a[0], sentences_a[-1] + 1))  # whole, consecutive sentences
        assert sentences_b == list(range(sentences_b[0], sentences_b[-1] + 1))
        if pair.next_sentence_label == IS_NEXT:  # B is what follows A in the same document
            assert pair.document_b == pair.document_a and sentences_b[0] == sentences_a[-1] + 1
        else:  # B comes from another document
            assert pair.document_b != pair.document_a
    # segments fill the target length; about 10% of the documents use a shorter one
    lengths = [len(p.segment_a) + len(p.segment_b) for p in pairs if p.next_sentence_label == IS_NEXT]
    assert np.median(lengths) >= 15
    # seeded
    assert next_sentence_pairs(documents, 20, seed=1) == pairs
    assert next_sentence_pairs(documents, 20, seed=2) != pairs
    # single-sentence documents start no pair, but are negatives for others
    short = [[[1000 * d + 0] * 3] for d in range(1, 40)]
    pairs = next_sentence_pairs([[[0] * 3, [1] * 3]] + short, 6, seed=0, short_sequence_probability=0.0)
    assert all(p.document_a == 0 for p in pairs)


def test_next_sentence_pairs_errors(tokenizer):
    with pytest.raises(ValueError, match="at least 2 non-empty documents.*received 1 of 3"):
        next_sentence_pairs([[[5, 6], [7]], [], [[]]], 10)
    with pytest.raises(ValueError, match="`max_tokens` must be an integer >= 2"):
        next_sentence_pairs(tagged_documents(3), 1)
    with pytest.raises(ValueError, match="`short_sequence_probability` must be a number in"):
        next_sentence_pairs(tagged_documents(3), 10, short_sequence_probability=1.5)
    documents = tokenize_documents([["w1 w2", "", "w3 w4x9z"], ["w5"], []], tokenizer)
    assert documents == [[[6, 7], [8, UNK]], [[10]], []]  # "w4x9z" is a word WordPiece cannot spell
    with pytest.raises(ValueError, match="each a list of sentences; received a string"):
        tokenize_documents(["w1 w2. w3 w4."], tokenizer)


# --------------------------------------------------------------------------------------------------
# Masked language model


def random_batch(batch=64, length=128, seed=0):
    """Ids with [CLS] / [SEP] / [UNK] / [MASK] inside and padding at the end of most rows."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, len(VOCABULARY), size=(batch, length)).astype(np.int32)
    lengths = rng.integers(length // 4, length + 1, size=batch)
    token_ids[:, 0] = CLS
    for row, n in enumerate(lengths):
        token_ids[row, rng.integers(2, n - 1)] = SEP
        token_ids[row, n - 1] = SEP
        token_ids[row, rng.integers(1, n - 1, size=2)] = (UNK, MASK)
        token_ids[row, n:] = PAD
    return {"token_ids": tf.constant(token_ids), "padding_mask": tf.constant(token_ids != PAD),
            "segment_ids": tf.zeros_like(token_ids)}


def check_predictions(inputs, outputs, max_predictions):
    """Positions ascending and padded with 0, ids the original ones, tokens changed only at positions."""
    original, masked = inputs["token_ids"].numpy(), outputs["token_ids"].numpy()
    positions, ids = outputs["mask_positions"].numpy(), outputs["mask_ids"].numpy()
    weights = outputs["mask_weights"].numpy()
    assert positions.shape == ids.shape == weights.shape == (len(original), max_predictions)
    assert outputs["mask_positions"].dtype == tf.int32 and outputs["mask_weights"].dtype == tf.float32
    chosen = np.zeros(original.shape, bool)
    for row in range(len(original)):
        n = int(weights[row].sum())
        assert weights[row].tolist() == [1.0] * n + [0.0] * (max_predictions - n)
        assert (np.diff(positions[row, :n]) > 0).all() and (positions[row, n:] == 0).all() and (ids[row, n:] == 0).all()
        assert (ids[row, :n] == original[row, positions[row, :n]]).all()
        chosen[row, positions[row, :n]] = True
    assert (masked[~chosen] == original[~chosen]).all()
    np.testing.assert_array_equal(outputs["segment_ids"], inputs["segment_ids"])  # other keys pass through
    return chosen


def test_masking_statistics(tokenizer):
    inputs = random_batch()
    original = inputs["token_ids"].numpy()
    candidate = inputs["padding_mask"].numpy() & (original >= len(SPECIAL_TOKENS))
    chosen_total = changed = masks = randoms = 0
    candidates_total = 0
    for seed in range(3):
        outputs = MaskedLMMasker(tokenizer, max_predictions=40)(inputs, seed=[seed, 7])
        chosen = check_predictions(inputs, outputs, 40)
        assert not (chosen & ~candidate).any()  # never [PAD] [UNK] [CLS] [SEP] [MASK], never padding
        masked = outputs["token_ids"].numpy()
        # per row: round(15%) of the candidates (the cap of 40 is not reached at length 128)
        expected = np.maximum(1, np.round(np.float32(0.15) * candidate.sum(1).astype(np.float32)))
        np.testing.assert_array_equal(chosen.sum(1), expected)
        chosen_total += chosen.sum()
        candidates_total += candidate.sum()
        masks += (masked[chosen] == MASK).sum()
        randoms += ((masked[chosen] != MASK) & (masked[chosen] != original[chosen])).sum()
        changed += (masked[chosen] != original[chosen]).sum()
        assert (masked[chosen] >= len(SPECIAL_TOKENS))[masked[chosen] != MASK].all()  # replacements not special
    assert candidates_total > 10_000
    assert within_binomial(chosen_total, candidates_total, 0.15)
    assert within_binomial(masks, chosen_total, 0.8)
    # 10% random tokens, of which 1 / NUM_REPLACEMENTS happen to be the original token
    p_random_differs = 0.1 * (1 - 1 / NUM_REPLACEMENTS)
    assert within_binomial(randoms, chosen_total, p_random_differs)
    assert within_binomial(chosen_total - changed, chosen_total, 1 - 0.8 - p_random_differs)


def test_masking_caps_seeds_and_single_examples(tokenizer):
    inputs = random_batch(batch=8, seed=1)
    masker = MaskedLMMasker(tokenizer, max_predictions=5)
    outputs = masker(inputs, seed=3)
    chosen = check_predictions(inputs, outputs, 5)
    assert (chosen.sum(1) == 5).all()  # 15% of >= 29 candidates is more than 5
    again = masker(inputs, seed=3)
    for key in outputs:
        np.testing.assert_array_equal(outputs[key], again[key])
    assert not np.array_equal(masker(inputs, seed=4)["mask_positions"], outputs["mask_positions"])
    # one example (L,), and a short one: at least one prediction, never more than the candidates
    single = masker({"token_ids": tf.constant([CLS, 9, SEP, PAD]),
                     "padding_mask": tf.constant([True, True, True, False])}, seed=0)
    assert single["mask_positions"].numpy().tolist() == [1, 0, 0, 0, 0]
    assert single["mask_weights"].numpy().tolist() == [1, 0, 0, 0, 0] and single["mask_ids"].numpy()[0] == 9
    empty = masker({"token_ids": tf.constant([[CLS, SEP, PAD]]), "padding_mask": tf.constant([[True, True, False]])}, 0)
    assert empty["mask_weights"].numpy().sum() == 0
    with pytest.raises(ValueError, match="`mask_token_rate` \\+ `random_token_rate` must be at most 1"):
        MaskedLMMasker(tokenizer, mask_token_rate=0.8, random_token_rate=0.3)
    with pytest.raises(ValueError, match="`max_predictions` must be a positive integer"):
        MaskedLMMasker(tokenizer, max_predictions=0)


def word_batch(batch=48, words=30, seed=0):
    """Rows of words of 1-4 pieces (w* then ##x*), and each token's word number (-1 for special tokens)."""
    rng = np.random.default_rng(seed)
    rows, word_of = [], []
    for _ in range(batch):
        tokens, owner = [CLS], [-1]
        for w in range(words):
            size = rng.integers(1, 5)
            tokens += [rng.integers(5, 65)] + list(rng.integers(65, 85, size=size - 1))
            owner += [w] * size
        rows.append(tokens + [SEP])
        word_of.append(owner + [-1])
    length = max(map(len, rows))
    token_ids = np.full((batch, length), PAD, np.int32)
    owners = np.full((batch, length), -1)
    for row, (tokens, owner) in enumerate(zip(rows, word_of, strict=True)):
        token_ids[row, : len(tokens)], owners[row, : len(owner)] = tokens, owner
    return {"token_ids": tf.constant(token_ids), "padding_mask": tf.constant(token_ids != PAD)}, owners


def test_whole_word_masking(tokenizer):
    inputs, owners = word_batch()
    candidates = (owners >= 0).sum(1)
    for whole_word_masking in (True, False):
        masker = MaskedLMMasker(tokenizer, max_predictions=40, whole_word_masking=whole_word_masking)
        outputs = masker({**inputs, "segment_ids": tf.zeros_like(inputs["token_ids"])}, seed=0)
        chosen = check_predictions({**inputs, "segment_ids": tf.zeros_like(inputs["token_ids"])}, outputs, 40)
        partial = 0
        for row in range(len(owners)):
            for word in np.unique(owners[row][chosen[row]]):
                pieces = chosen[row][owners[row] == word]
                partial += not pieces.all()
        budget = np.maximum(1, np.round(np.float32(0.15) * candidates.astype(np.float32)))
        if whole_word_masking:
            assert partial == 0  # every chosen word has all its pieces chosen
            assert (chosen.sum(1) <= budget).all() and (chosen.sum(1) >= budget - 3).all()  # greedy fill
            assert chosen.sum() > 0.95 * budget.sum()
        else:
            assert partial > 20  # without it, words are cut
            np.testing.assert_array_equal(chosen.sum(1), budget)


# --------------------------------------------------------------------------------------------------
# The pipeline


def text_documents(num_documents=40, seed=0):
    rng = random.Random(seed)

    def word():
        return rng.choice(WORD_PIECES) + "".join(p[2:] for p in rng.sample(SUFFIX_PIECES, rng.randint(0, 2)))

    return [[" ".join(word() for _ in range(rng.randint(3, 12))) for _ in range(rng.randint(2, 10))]
            for _ in range(num_documents)]


def test_pretraining_dataset(tokenizer):
    documents = text_documents()
    ds = pretraining_dataset(documents, tokenizer, sequence_length=32, max_predictions=6, batch_size=16, seed=5,
                             whole_word_masking=True)
    features, labels, weights = ds.element_spec
    assert set(features) == {"token_ids", "segment_ids", "padding_mask", "mask_positions"}
    assert {k: (v.dtype, v.shape.as_list()) for k, v in features.items()} == {
        "token_ids": (tf.int32, [None, 32]), "segment_ids": (tf.int32, [None, 32]),
        "padding_mask": (tf.bool, [None, 32]), "mask_positions": (tf.int32, [None, 6])}
    assert {k: (v.dtype, v.shape.as_list()) for k, v in labels.items()} == {
        "mlm": (tf.int32, [None, 6]), "nsp": (tf.int32, [None])}
    assert {k: (v.dtype, v.shape.as_list()) for k, v in weights.items()} == {
        "mlm": (tf.float32, [None, 6]), "nsp": (tf.float32, [None])}
    epoch = list(ds)
    nsp = np.concatenate([y["nsp"] for _, y, _ in epoch])
    assert within_binomial((nsp == IS_NEXT).sum(), len(nsp), 0.5)
    for x, y, w in epoch:
        token_ids, positions = x["token_ids"].numpy(), x["mask_positions"].numpy()
        assert (token_ids[:, 0] == CLS).all() and ((token_ids == SEP).sum(1) == 2).all()
        np.testing.assert_array_equal(x["padding_mask"], token_ids != PAD)  # no [PAD] among the replacements
        assert (w["mlm"].numpy().sum(1) >= 1).all() and (w["nsp"].numpy() == 1).all()
        masked = np.take_along_axis(token_ids, positions, 1)[w["mlm"].numpy() > 0]
        assert (masked == MASK).mean() > 0.5 and (y["mlm"].numpy()[w["mlm"].numpy() > 0] >= 5).all()
    # the same run again gives the same data; the next epoch, new masks and order
    first = next(iter(pretraining_dataset(documents, tokenizer, sequence_length=32, max_predictions=6,
                                          batch_size=16, seed=5, whole_word_masking=True)))
    for key in first[0]:
        np.testing.assert_array_equal(first[0][key], epoch[0][0][key])
    assert not np.array_equal(next(iter(ds))[0]["token_ids"], epoch[0][0]["token_ids"])
    # dynamic_masking=False: the same batches in every pass, however many passes came before
    fixed = pretraining_dataset(documents, tokenizer, sequence_length=32, max_predictions=6, batch_size=16, seed=5,
                                dynamic_masking=False)
    passes = [next(iter(fixed)) for _ in range(2)]
    for key in passes[0][0]:
        np.testing.assert_array_equal(passes[0][0][key], passes[1][0][key])
    # static batches
    static = pretraining_dataset(documents, tokenizer, sequence_length=32, batch_size=16, drop_remainder=True)
    assert static.element_spec[0]["token_ids"].shape.as_list() == [16, 32]
    with pytest.raises(ValueError, match="`sequence_length` must be at least 5"):
        pretraining_dataset(documents, tokenizer, sequence_length=4)


def test_pretraining_dataset_trains_a_model(tokenizer):
    """The (features, labels, sample_weights) structure is what `model.fit` takes for {"mlm", "nsp"} outputs."""
    ds = pretraining_dataset(text_documents(12), tokenizer, sequence_length=24, max_predictions=4, batch_size=8)
    inputs = {"token_ids": keras.Input((24,), dtype="int32", name="token_ids"),
              "segment_ids": keras.Input((24,), dtype="int32", name="segment_ids"),
              "padding_mask": keras.Input((24,), dtype="bool", name="padding_mask"),
              "mask_positions": keras.Input((4,), dtype="int32", name="mask_positions")}
    h = keras.layers.Embedding(len(VOCABULARY), 8)(inputs["token_ids"])
    h = h + keras.layers.Embedding(2, 8)(inputs["segment_ids"])
    h = h * keras.ops.cast(inputs["padding_mask"], "float32")[..., None]
    gathered = keras.ops.take_along_axis(h, inputs["mask_positions"][..., None], axis=1)
    outputs = {"mlm": keras.layers.Dense(len(VOCABULARY), name="mlm")(gathered),
               "nsp": keras.layers.Dense(2, name="nsp")(h[:, 0])}
    model = keras.Model(inputs, outputs)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
    model.compile("adam", loss={"mlm": loss, "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    history = model.fit(ds, epochs=1, verbose=0, shuffle=False).history
    assert np.isfinite(history["loss"][0]) and {"mlm_loss", "nsp_loss"} <= set(history)


def test_serving_savedmodel(tokenizer, tmp_path):
    """tokenize -> pack -> mask are TensorFlow ops: they export and serve from a SavedModel."""
    masker = MaskedLMMasker(tokenizer, max_predictions=4)

    class Serving(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer, self.masker = tokenizer, masker

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)])
        def __call__(self, first, second):
            a, b = self.tokenizer.tokenize(first), self.tokenizer.tokenize(second)
            packed = pack(a, b, sequence_length=12, tokenizer=self.tokenizer)
            masked = self.masker(packed, tf.constant([1, 2]))
            return {**masked, "truncated": is_truncated(a, b, sequence_length=12)}

    first, second = tf.constant(["w1 w2x0", "w3 w4 w5 w6 w7 w8 w9"]), tf.constant(["w9", "w10 w11 w12 w13 w14"])
    module = Serving()
    expected = module(first, second)
    tf.saved_model.save(module, str(tmp_path / "serving"))
    del module
    served = tf.saved_model.load(str(tmp_path / "serving"))(first, second)
    assert set(served) == set(expected)
    for key in expected:
        np.testing.assert_array_equal(served[key], expected[key])
    assert served["truncated"].numpy().tolist() == [False, True]
    assert served["token_ids"].shape == (2, 12) and served["mask_positions"].shape == (2, 4)


# --------------------------------------------------------------------------------------------------
# The other sentence objectives: ALBERT's sentence order, RoBERTa's masked LM alone


def test_sentence_order_pairs_are_consecutive_segments_in_order_or_swapped():
    """SOP (Lan et al. 2020, 3.1): A and B are consecutive text of one document; label 0 = in order, 1 = swapped."""
    documents = tagged_documents(200)
    pairs = sentence_order_pairs(documents, 20, seed=1)
    labels = np.asarray([p.sentence_order_label for p in pairs])
    assert (IN_ORDER, SWAPPED) == (0, 1) and set(labels) == {IN_ORDER, SWAPPED}
    assert len(pairs) > 300 and within_binomial((labels == IN_ORDER).sum(), len(labels), 0.5)
    for pair in pairs:
        a, b = sentence_runs(pair.segment_a), sentence_runs(pair.segment_b)
        assert {d for d, _ in a + b} == {pair.document}  # never another document's text
        sentences_a, sentences_b = [s for _, s in a], [s for _, s in b]
        assert sentences_a == list(range(sentences_a[0], sentences_a[-1] + 1))  # whole, consecutive sentences
        assert sentences_b == list(range(sentences_b[0], sentences_b[-1] + 1))
        if pair.sentence_order_label == IN_ORDER:  # B is what follows A
            assert sentences_b[0] == sentences_a[-1] + 1
        else:  # the same two segments, swapped: A is what follows B
            assert sentences_a[0] == sentences_b[-1] + 1
    # no sentence is used twice (both segments of a chunk are kept; nothing is put back)
    used = [run for p in pairs for run in sentence_runs(p.segment_a) + sentence_runs(p.segment_b)]
    assert len(used) == len(set(used))
    assert sentence_order_pairs(documents, 20, seed=1) == pairs and sentence_order_pairs(documents, 20, seed=2) != pairs
    # one document is enough (NSP needs two); none with two sentences is refused
    assert sentence_order_pairs([[[1], [2]]], 4, short_sequence_probability=0.0)[0].document == 0
    with pytest.raises(ValueError, match="at least 2 non-empty sentences.*none with two"):
        sentence_order_pairs([[[5, 6]], [[7], []]], 10)


def test_document_segments_cover_each_document_in_order_once():
    """RoBERTa's DOC-SENTENCES: whole consecutive sentences of one document, at most max_tokens, each used once."""
    documents = tagged_documents(100)
    segments = document_segments(documents, 20, seed=3, short_sequence_probability=0.0)
    for segment in segments:
        runs = sentence_runs(segment)
        assert len({d for d, _ in runs}) == 1
        assert [s for _, s in runs] == list(range(runs[0][1], runs[-1][1] + 1))
        assert len(segment) <= 20 or len(runs) == 1  # a longer segment is one long sentence
    assert [run for segment in segments for run in sentence_runs(segment)] == [
        (d, s) for d, document in enumerate(documents) for s in range(len(document))]  # all, in order, once
    # each segment is as full as the next sentence allows
    for segment, following in zip(segments, segments[1:], strict=False):
        if sentence_runs(segment)[0][0] == sentence_runs(following)[0][0]:
            assert len(segment) + following.count(following[0]) > 20
    with pytest.raises(ValueError, match="a document with a token"):
        document_segments([[[]], []], 8)


def test_pretraining_dataset_sentence_objectives(tokenizer):
    documents = text_documents(12)
    options = dict(sequence_length=24, max_predictions=4, batch_size=8, seed=2)
    sop = pretraining_dataset(documents, tokenizer, sentence_objective="sop", **options)
    _, labels, weights = sop.element_spec
    assert set(labels) == set(weights) == {"mlm", "sop"}
    assert labels["sop"].shape.as_list() == [None] and labels["sop"].dtype == tf.int32
    batches = list(sop)
    assert set(np.concatenate([y["sop"].numpy() for _, y, _ in batches])) == {IN_ORDER, SWAPPED}
    assert all((w["sop"].numpy() == 1).all() for _, _, w in batches)
    for x, _, _ in batches:  # pairs: [CLS] A [SEP] B [SEP]
        assert ((x["token_ids"].numpy() == SEP).sum(1) == 2).all() and (x["segment_ids"].numpy().max(1) == 1).all()
    # None: the masked LM alone, single segments [CLS] S [SEP]
    alone = pretraining_dataset(documents, tokenizer, sentence_objective=None, **options)
    features, labels, weights = alone.element_spec
    assert set(features) == {"token_ids", "segment_ids", "padding_mask", "mask_positions"}
    assert set(labels) == set(weights) == {"mlm"}
    sequences = 0
    for x, y, w in alone:
        token_ids = x["token_ids"].numpy()
        assert (token_ids[:, 0] == CLS).all() and ((token_ids == SEP).sum(1) == 1).all()
        assert (x["segment_ids"].numpy() == 0).all() and (w["mlm"].numpy().sum(1) >= 1).all()
        sequences += len(token_ids)
    assert sequences == len(document_segments(tokenize_documents(documents, tokenizer), 22, seed=2))
    with pytest.raises(ValueError, match=r"`sentence_objective` must be 'nsp'.*'sop'.*None.*received "
                                         r"sentence_objective='mlm'"):
        pretraining_dataset(documents, tokenizer, sentence_objective="mlm")
    with pytest.raises(ValueError, match="`sequence_length` must be at least 3"):
        pretraining_dataset(documents, tokenizer, sentence_objective=None, sequence_length=2)
