"""NMT data from the trans-de-en dictionary: the line parser, the sentence and lexicon loaders (on small files
written here), the real corpus (its cleanliness and the counts docs/guides/nmt-data.md states), and its leak-free
splits.
"""

import re

import pytest
from attnlayers.applications import nmt
from attnlayers.applications.nmt.data.split import _content_key


# --------------------------------------------------------------------------------------------------
# trans-de-en parsing


def test_parse_strips_annotations_and_normalises():
    line = (
        "Schande {f} | Das ist (wirklich) eine  Schande! [ugs.] :: shame | It’s (really) a “real” shame {adj} <sic> !"
    )
    assert nmt.parse_de_en_line(line) == [("Das ist eine Schande!", 'It\'s a "real" shame!')]


def test_parse_pairs_synonyms_alternative_by_alternative():
    line = (
        "zurückkommen {vi} | Ich komme darauf zurück.; Ich werde darauf zurückkommen. | Sie kam nie zurück. :: "
        "to come back | I’ll get back to you on that. | She never came back."
    )
    assert nmt.parse_de_en_line(line) == [
        ("Ich komme darauf zurück.", "I'll get back to you on that."),
        ("Ich werde darauf zurückkommen.", "I'll get back to you on that."),
        ("Sie kam nie zurück.", "She never came back."),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "# Version :: devel",  # comment
        "Er kam heute sehr spät. | x :: He came very late today.",  # 2 alternatives vs 1
        "Er kam heute sehr spät. :: He came very late/early today.",  # ambiguous alternatives
        "Er wartet auf jdn. sehr lange. :: He waits for sb. very long.",  # placeholders
        "Ist dir je aufgefallen, dass …? :: Has it ever struck you that …?",  # template
        "Er kam spät. :: He was late.",  # 3 words
        "das Abhaken von etw. ganz allein. :: the ticking-off of sth. all alone.",  # not a sentence
    ],
)
def test_parse_rejects_non_sentences(line):
    assert nmt.parse_de_en_line(line) == []


def test_load_direction_and_deduplication(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(
        "# header :: ignored\n"
        "a {n} | Das ist ein gutes Haus. :: a | This is a good house.\n"
        "Das ist ein gutes Haus. :: That is a good house.\n"  # same German, second English: dropped
        "Dies ist ein gutes Haus. :: This is a good house.\n"  # same English, another German: kept
        "Das ist ein gutes Haus. :: This is a good house.\n",  # exact duplicate: dropped
        encoding="utf-8",
    )
    de_en = nmt.load_de_en(path)
    assert list(de_en) == [
        ("Das ist ein gutes Haus.", "This is a good house."),
        ("Dies ist ein gutes Haus.", "This is a good house."),
    ]
    en_de = nmt.load_de_en(path, direction="en-de")
    assert list(en_de) == [
        ("This is a good house.", "Das ist ein gutes Haus."),
        ("That is a good house.", "Das ist ein gutes Haus."),
    ]
    with pytest.raises(ValueError, match="direction"):
        nmt.load_de_en(path, direction="de-fr")
    with pytest.raises(FileNotFoundError, match="trans-de-en"):
        nmt.load_de_en(tmp_path / "missing")


def test_lexicon_keeps_word_and_phrase_entries_and_skips_held_out_lines(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(
        "# header :: ignored\n"
        "Haus {n}; Gebäude {n} | Häuser {pl} :: house; building | houses\n"  # first synonym of each side
        "Er kam nach Hause. | nach Hause kommen :: He came back home. | to come home\n"
        "jdm. etw. geben :: to give sb. sth.\n"  # placeholders
        "eins zwei drei vier fünf sechs sieben :: one two three four five six seven\n"  # > max_words
        "Hund {m} [zool.] :: dog\n"
        "Hund {m} :: dog\n"  # duplicate
        "Katze {f} | Katzen {pl} :: cat\n",  # unaligned alternatives
        encoding="utf-8",
    )
    entries = [("Haus", "house"), ("Häuser", "houses"), ("nach Hause kommen", "to come home"), ("Hund", "dog")]
    assert list(nmt.load_de_en_lexicon(path)) == entries  # the sentence itself is load_de_en's
    assert [(e, d) for d, e in entries] == list(nmt.load_de_en_lexicon(path, direction="en-de"))
    # A held-out sentence (either side, case and punctuation ignored) removes its whole line.
    held_out = nmt.Pairs(["Etwas anderes hier."], ["he came back HOME"])
    assert list(nmt.load_de_en_lexicon(path, held_out=[held_out])) == entries[:2] + entries[3:]
    assert len(nmt.load_de_en_lexicon(path, max_words=7)) == 5
    with pytest.raises(ValueError, match="direction"):
        nmt.load_de_en_lexicon(path, direction="de-fr")
    with pytest.raises(FileNotFoundError, match="trans-de-en"):
        nmt.load_de_en_lexicon(tmp_path / "missing")


# --------------------------------------------------------------------------------------------------
# The real corpus and its splits


def test_de_en_corpus_is_clean(de_en):
    assert 15_000 <= len(de_en) <= 20_000, len(de_en)
    assert len(set(de_en.source)) == len(de_en)  # one target per source
    assert len(set(de_en)) == len(de_en)  # no exact duplicates
    sentence = re.compile(r"^\S.*[.!?][\"']?$")
    for text in de_en.source + de_en.target:
        assert not re.search(r"[{}\[\]<>()/…]", text), text
        assert "  " not in text and text == text.strip() and "’" not in text
        assert sentence.match(text) and len(text.split()) >= 4, text
    assert ("Er zuckte die Achseln.", "He shrugged his shoulders.") in set(de_en)


def test_de_en_split_sizes_and_disjointness(de_en, de_en_splits):
    splits = de_en_splits
    assert len(splits.test) == 1000 and len(splits.validation) == 1000
    assert len(splits.train) == len(de_en) - 2000
    # By construction: the index sets partition the corpus.
    train, valid, test = (set(splits.indices[k]) for k in ("train", "validation", "test"))
    assert not (train & test) and not (valid & test) and not (train & valid)
    assert train | valid | test == set(range(len(de_en)))
    assert splits.test.source == [de_en.source[i] for i in splits.indices["test"]]
    # By content: no test sentence, on either side, case and punctuation aside, is seen elsewhere.
    key = _content_key
    seen = {key(s) for s in splits.train.source + splits.validation.source}
    seen |= {key(t) for t in splits.train.target + splits.validation.target}
    assert not any(key(s) in seen for s in splits.test.source)
    assert not any(key(t) in seen for t in splits.test.target)


def test_de_en_split_is_deterministic_and_seeded(de_en, de_en_splits):
    again = nmt.split_pairs(de_en)
    assert again.indices == de_en_splits.indices
    other = nmt.split_pairs(de_en, seed=1)
    assert other.indices["test"] != de_en_splits.indices["test"]
    # The test set is drawn first: the validation size does not move it.
    assert nmt.split_pairs(de_en, num_validation=500).indices["test"] == de_en_splits.indices["test"]


def test_split_errors():
    pairs = nmt.synthetic_pairs(20)
    with pytest.raises(ValueError, match="num_test=15, num_validation=10 for 20 pairs"):
        nmt.split_pairs(pairs, num_test=15, num_validation=10)
    grouped = nmt.Pairs(["Ein Satz hier.", "Ein Satz, hier!", "Anders hier jetzt."], ["a", "b", "c"])
    splits = nmt.split_pairs(grouped, num_test=1, num_validation=0)  # the two variants stay together
    assert splits.test.source == ["Anders hier jetzt."]
    with pytest.raises(ValueError, match="test with exactly 1 pairs"):
        nmt.split_pairs(nmt.Pairs(["x y", "x y!", "z", "Z."], ["1", "2", "3", "4"]), num_test=1, num_validation=0)


def test_split_errors_state_the_counts():
    with pytest.raises(ValueError) as error:
        nmt.split_pairs(nmt.Pairs([], []))
    assert str(error.value) == (
        "Only 0 sentence pairs to split; need more than num_test + num_validation = 2000 (num_test=1000, "
        "num_validation=1000 for 0 pairs), so that training keeps some."
    )
    pairs = nmt.synthetic_pairs(20)
    with pytest.raises(ValueError, match=r"Only 20 sentence pairs to split; need more than .* = 20 "):
        nmt.split_pairs(pairs, num_test=10, num_validation=10)  # nothing left to train on
    assert len(nmt.split_pairs(pairs, num_test=10, num_validation=9).train) == 1
    with pytest.raises(ValueError, match="`num_test` must be an integer >= 0; received num_test=-1"):
        nmt.split_pairs(pairs, num_test=-1)
    with pytest.raises(ValueError, match="`num_validation` must be an integer >= 0; received num_validation=2.5"):
        nmt.split_pairs(pairs, num_validation=2.5)


def test_de_en_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        nmt.load_de_en(tmp_path / "missing")
    assert str(error.value) == (
        f"{tmp_path / 'missing'} not found: install the Debian package trans-de-en (apt-get install trans-de-en)."
    )
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("Das ist ein gutes Haus.\tThis is a good house.\n", encoding="utf-8")
    for load in (nmt.load_de_en, nmt.load_de_en_lexicon):
        with pytest.raises(ValueError) as error:
            load(tsv)
        assert str(error.value) == f"{tsv} has no `german :: english` line: it is not a trans-de-en dictionary file."
    latin = tmp_path / "latin"
    latin.write_bytes("Haus {n} :: house\nGrüße {pl} :: greetings\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin, line 2: not UTF-8 text \(invalid start byte\)\.$"):
        nmt.load_de_en(latin)
    with pytest.raises(ValueError, match="`min_words` must be a positive integer; received min_words=0"):
        nmt.load_de_en(tsv, min_words=0)
    with pytest.raises(ValueError, match="`max_words` must be a positive integer; received max_words=0"):
        nmt.load_de_en_lexicon(tsv, max_words=0)


def test_de_en_counts_match_the_data_card(de_en, de_en_splits):
    """docs/guides/nmt-data.md states the counts for the 2023-01-30 file; a newer dictionary may differ."""
    with open(nmt.DE_EN_PATH, encoding="utf-8") as f:
        version = f.readline()
    if "2023-01-30" not in version:
        pytest.skip(f"the data card counts the 2023-01-30 file; installed: {version.strip()}")
    assert len(de_en) == 16_795
    assert (len(de_en_splits.train), len(de_en_splits.validation), len(de_en_splits.test)) == (14_795, 1000, 1000)
    assert len(nmt.load_de_en(direction="en-de")) == 16_871
