"""`held_out_sizes`: validation / test sizes that grow smoothly with the corpus (no jump at 3x the asked size),
leave training the majority, and are the asked sizes on a large corpus."""

import pytest
from attnlayers.applications import nmt


def test_sizes_scale_smoothly_with_the_corpus():
    sizes = nmt.data.held_out_sizes
    assert sizes(2999) == {"num_test": 299, "num_validation": 299}
    assert sizes(3000) == {"num_test": 300, "num_validation": 300}
    assert sizes(16795) == {"num_test": 1000, "num_validation": 1000}  # de-en: as before
    assert sizes(30) == {"num_test": 3, "num_validation": 3}  # 10% of 30, not 2 by float rounding
    assert sizes(5000, num_test=200, num_validation=100) == {"num_test": 200, "num_validation": 100}
    previous = 0
    for n in range(3, 12000, 7):
        got = sizes(n)
        held = got["num_test"] + got["num_validation"]
        assert got["num_test"] == got["num_validation"] >= 1
        assert 0 <= got["num_test"] - previous <= 1, n  # never a jump: at most one pair more per 7 pairs
        assert n >= 5 and n - held > n / 2 or n < 5, n  # training keeps the majority from 5 pairs on
        previous = got["num_test"]


def test_sizes_split_whole_small_corpora():
    for n in (3, 5, 12, 99):
        pairs = nmt.Pairs([f"s {i}" for i in range(n)], [f"t {i}" for i in range(n)])
        splits = nmt.split_pairs(pairs, **nmt.data.held_out_sizes(n))
        assert len(splits.train) >= 1 and len(splits.validation) == len(splits.test) == max(1, n // 10)


def test_size_errors():
    with pytest.raises(ValueError, match="Only 2 sentence pairs: training, validation and test need at least one"):
        nmt.data.held_out_sizes(2)
    with pytest.raises(ValueError, match="num_test >= 1 and num_validation >= 1; received num_test=0"):
        nmt.data.held_out_sizes(100, num_test=0)
    with pytest.raises(ValueError, match=r"0 < fraction < 0.5; received fraction=0.5"):
        nmt.data.held_out_sizes(100, fraction=0.5)
