"""The synthetic translation task: deterministic, varied, correctly aligned, split and tokenized."""

import pytest
import tensorflow as tf
from attnlayers.applications import nmt

# --------------------------------------------------------------------------------------------------
# Synthetic task


def test_synthetic_is_deterministic_and_varied():
    a, b = nmt.synthetic_pairs(300, seed=5), nmt.synthetic_pairs(300, seed=5)
    assert a == b
    assert nmt.synthetic_pairs(300, seed=6).source != a.source
    lengths = {len(s.split()) for s in a.source}
    assert lengths == set(range(3, 11))
    assert len(set(a.source)) == len(a)
    short = nmt.synthetic_pairs(50, min_length=2, max_length=4)
    assert {len(s.split()) for s in short.source} <= {2, 3, 4}


@pytest.mark.parametrize("reorder", ["swap", "reverse", "none"])
def test_synthetic_alignment_is_correct(reorder):
    word_class, translation = nmt.synthetic_dictionary()
    assert len(set(translation.values())) == len(translation)  # a bijection
    assert not set(translation) & set(translation.values())  # disjoint vocabularies
    pairs = nmt.synthetic_pairs(200, seed=2, reorder=reorder)
    crossed = 0
    for source, target, alignment in zip(pairs.source, pairs.target, pairs.alignments):
        s, t = source.split(), target.split()
        assert len(s) == len(t) == len(alignment) and sorted(alignment) == list(range(len(s)))
        assert [translation[s[i]] for i in alignment] == t
        if reorder == "reverse":
            assert alignment == list(range(len(s)))[::-1]
        elif reorder == "none":
            assert alignment == list(range(len(s)))
        else:  # an adjective moves behind its noun; everything else stays
            for j, i in enumerate(alignment):
                if i != j:
                    crossed += 1
                    if i == j + 1:
                        assert word_class[s[j]] == "adjective" and word_class[s[i]] == "noun"
                else:
                    assert word_class[s[i]] != "adjective"
    if reorder == "swap":
        assert crossed > 100  # a non-trivial reordering
    back = pairs.swap()
    assert back.source == pairs.target
    for a, inverse in zip(pairs.alignments, back.alignments):
        assert [a[j] for j in inverse] == list(range(len(a)))


def test_synthetic_task_is_split_and_tokenized_one_token_per_word():
    splits, tokenizers = nmt.synthetic_task(500, max_length=8, num_test=40, num_validation=30, seed=4)
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (430, 30, 40)
    assert splits.test.alignments is not None
    assert max(len(s.split()) for s in splits.train.source) <= 6  # [START] + 6 words + [END] = 8
    source = splits.test.source[0]
    ids = tokenizers.source.tokenize(tf.constant([source])).to_list()[0]
    assert len(ids) == len(source.split())
    assert tokenizers.source.detokenize(tf.constant([ids])).numpy()[0].decode() == source
    again, _ = nmt.synthetic_task(500, max_length=8, num_test=40, num_validation=30, seed=4)
    assert again.test == splits.test


def test_synthetic_argument_errors():
    with pytest.raises(ValueError, match="reorder"):
        nmt.synthetic_pairs(10, reorder="shuffle")
    with pytest.raises(ValueError, match="min_length=5, max_length=3"):
        nmt.synthetic_pairs(10, min_length=5, max_length=3)
    with pytest.raises(ValueError, match="distinct"):
        nmt.synthetic_pairs(10_000, min_length=1, max_length=1)


def test_synthetic_errors_name_the_argument():
    with pytest.raises(ValueError, match="`num_pairs` must be a positive integer; received num_pairs=0"):
        nmt.synthetic_pairs(0)
    with pytest.raises(ValueError, match="Unknown `reorder` 'shuffle'; expected one of"):
        nmt.synthetic_pairs(10, reorder="shuffle")
    with pytest.raises(ValueError, match="`min_length` must be a positive integer; received min_length=0"):
        nmt.synthetic_pairs(10, min_length=0)
    with pytest.raises(ValueError, match="could not find 10000 distinct sentences of 1 to 1 words"):
        nmt.synthetic_pairs(10_000, min_length=1, max_length=1)
    with pytest.raises(
        ValueError,
        match=r"synthetic_task needs max_length >= 5 \(3 words \+ \[START\] \+ \[END\]\); "
        "received max_length=4",
    ):
        nmt.synthetic_task(100, max_length=4)
