"""NMT data: readers, the trans-de-en loader and its splits, the synthetic task, tokenizers, tf.data batches."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from attnlayers.applications import nmt
from attnlayers.applications.nmt import data

# --------------------------------------------------------------------------------------------------
# Shared, built once per module (the corpus loads in about a second, tokenizers train in well under one).


@pytest.fixture(scope="module")
def de_en():
    if not os.path.exists(nmt.DE_EN_PATH):
        # A real absence on a user's machine; CI installs the corpus (.ci/run), so there it is a failure.
        message = f"German-English pairs not installed at {nmt.DE_EN_PATH}: apt-get install trans-de-en"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return nmt.load_de_en()


@pytest.fixture(scope="module")
def de_en_splits(de_en):
    return nmt.split_pairs(de_en)


@pytest.fixture(scope="module")
def synthetic_splits():
    return nmt.split_pairs(nmt.synthetic_pairs(600, seed=3), num_test=100, num_validation=50)


@pytest.fixture(scope="module")
def synthetic_tokenizers(synthetic_splits):
    return nmt.build_tokenizers(synthetic_splits, model_type="word")


@pytest.fixture(scope="module")
def de_en_tokenizers(de_en_splits):
    train = de_en_splits.train[:3000]
    return nmt.build_tokenizers(train, source_vocabulary_size=1500, target_vocabulary_size=1500)


# --------------------------------------------------------------------------------------------------
# Readers


def test_read_tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Guten Morgen.\tGood morning.\n\n  Danke! \tThanks!\r\n", encoding="utf-8")
    pairs = nmt.read_tsv(path)
    assert pairs.source == ["Guten Morgen.", "Danke!"]
    assert pairs.target == ["Good morning.", "Thanks!"]
    assert list(pairs) == [("Guten Morgen.", "Good morning."), ("Danke!", "Thanks!")]
    assert len(pairs) == 2 and pairs[1] == ("Danke!", "Thanks!")


@pytest.mark.parametrize("bad_line", ["no tab here", "one\ttwo\tthree"])
def test_read_tsv_names_file_and_line(tmp_path, bad_line):
    path = tmp_path / "bad.tsv"
    path.write_text(f"a\tb\n{bad_line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.tsv, line 2: expected 2 tab-separated fields"):
        nmt.read_tsv(path)


def test_read_parallel(tmp_path):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("Hallo Welt.\n\nTschüss.\n", encoding="utf-8")
    tgt.write_text("Hello world.\n\nBye.", encoding="utf-8")  # no final newline: still 3 lines
    pairs = nmt.read_parallel(src, tgt)
    assert pairs.source == ["Hallo Welt.", "", "Tschüss."]
    assert pairs.target == ["Hello world.", "", "Bye."]


def test_read_parallel_line_count_mismatch(tmp_path):
    src, tgt = tmp_path / "a.de", tmp_path / "b.en"
    src.write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    tgt.write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"3 lines in .*a\.de and 2 lines in .*b\.en"):
        nmt.read_parallel(src, tgt)


def test_pairs_validates_lengths():
    with pytest.raises(ValueError, match="2 sources and 1 targets"):
        nmt.Pairs(["a", "b"], ["x"])


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
    key = data._content_key
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


# --------------------------------------------------------------------------------------------------
# Tokenizers


def test_reserved_ids(de_en_tokenizers, synthetic_tokenizers):
    assert (nmt.PAD_ID, nmt.UNK_ID, nmt.START_ID, nmt.END_ID) == (0, 1, 2, 3)
    assert nmt.RESERVED_TOKENS == ("[PAD]", "[UNK]", "[START]", "[END]")
    for tokenizer in (de_en_tokenizers.source, de_en_tokenizers.target, synthetic_tokenizers.source):
        assert tuple(tokenizer.get_vocabulary()[:4]) == nmt.RESERVED_TOKENS
        assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id) == (0, 1, 2, 3)
    assert not de_en_tokenizers.shared
    assert de_en_tokenizers.source.vocabulary_size == 1500
    assert synthetic_tokenizers.source.vocabulary_size == 4 + 96  # model_type="word": one id per word


def test_round_trip(de_en_splits, de_en_tokenizers):
    texts = de_en_splits.train.source[:200]
    ids = de_en_tokenizers.source.tokenize(texts)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert int(tf.reduce_min(ids.flat_values)) > nmt.END_ID  # no reserved ids for known text
    back = [t.decode("utf-8") for t in de_en_tokenizers.source.detokenize(ids).numpy()]
    assert back == texts
    text = "Er sagte, dass er's nicht wüsste."
    single = de_en_tokenizers.source.tokenize(text)
    assert single.shape.rank == 1
    assert de_en_tokenizers.source.detokenize(single).numpy().decode() == text


def test_word_tokenizer_gives_one_id_per_synthetic_word(synthetic_splits, synthetic_tokenizers):
    texts = synthetic_splits.test.target
    ids = synthetic_tokenizers.target.tokenize(texts)
    assert ids.row_lengths().numpy().tolist() == [len(t.split()) for t in texts]
    assert [t.decode() for t in synthetic_tokenizers.target.detokenize(ids).numpy()] == texts


def test_unknown_characters_and_empty_strings(de_en_tokenizers):
    tokenizer = de_en_tokenizers.source
    ids = tokenizer.tokenize(["Das ist ☃ gut.", "", "你好", "   "])
    rows = ids.to_list()
    assert nmt.UNK_ID in rows[0] and rows[1] == [] and rows[3] == []
    assert set(rows[2]) <= {nmt.UNK_ID, tokenizer.tokenize("a").numpy()[0]} and nmt.UNK_ID in rows[2]
    text = tokenizer.detokenize(ids).numpy()
    assert text[0].decode() == "Das ist [UNK] gut." and text[1] == b"" and text[3] == b""
    assert tokenizer.detokenize(tf.zeros([2, 0], tf.int32)).numpy().tolist() == [b"", b""]


def test_detokenize_drops_reserved_and_stops_at_end(de_en_tokenizers):
    tokenizer = de_en_tokenizers.target
    words = tokenizer.tokenize("This is good.").numpy().tolist()
    padded = tf.constant([[nmt.START_ID] + words + [nmt.END_ID] + words + [0, 0], [nmt.START_ID] + words + [0] * 7])
    assert tokenizer.detokenize(padded).numpy().tolist() == [b"This is good.", b"This is good."]
    ragged = tf.ragged.constant([words + [nmt.END_ID, 5], [nmt.END_ID] + words])
    assert tokenizer.detokenize(ragged).numpy().tolist() == [b"This is good.", b""]


def test_vocabulary_comes_from_training_text_only(synthetic_splits, tmp_path):
    from_splits = nmt.build_tokenizers(synthetic_splits, model_type="word")
    tampered = nmt.Splits(
        train=synthetic_splits.train,
        validation=nmt.Pairs(["zzzz"], ["qqqq"]),
        test=nmt.Pairs(["xxxx yyyy"], ["wwww"]),
    )
    assert nmt.build_tokenizers(tampered, model_type="word").source.model_proto == from_splits.source.model_proto
    held_out = from_splits.source.tokenize(["xxxx yyyy"]).to_list()[0]
    assert held_out and set(held_out) == {nmt.UNK_ID}
    # shared vocabulary, save / load
    shared = nmt.build_tokenizers(synthetic_splits, model_type="word", shared=True)
    assert shared.shared and shared.source.vocabulary_size == 4 + 2 * 96
    path = tmp_path / "source.model"
    from_splits.source.save(path)
    assert nmt.SubwordTokenizer.load(path).get_vocabulary() == from_splits.source.get_vocabulary()
    with pytest.raises(ValueError, match="non-empty sentence"):
        nmt.train_sentencepiece(["", "  "], 100)
    with pytest.raises(ValueError, match="reserved tokens; received 4"):
        nmt.train_sentencepiece(["a b"], 4)


# --------------------------------------------------------------------------------------------------
# tf.data pipeline


def _check_batch(source, target_in, target_out):
    for tensor in (source, target_in, target_out):
        assert tensor.dtype == tf.int32 and tensor.shape.rank == 2
    source, target_in, target_out = source.numpy(), target_in.numpy(), target_out.numpy()
    assert target_in.shape == target_out.shape and source.shape[0] == target_in.shape[0]
    assert (target_in[:, 0] == nmt.START_ID).all()
    for s, ti, to in zip(source, target_in, target_out):
        n = int((to != nmt.PAD_ID).sum())
        assert (to[n:] == 0).all() and (ti[n:] == 0).all()  # padded with 0, at the end only
        assert to[n - 1] == nmt.END_ID and nmt.END_ID not in ti and nmt.START_ID not in to
        np.testing.assert_array_equal(ti[1:n], to[: n - 1])  # shifted by one
        m = int((s != nmt.PAD_ID).sum())
        assert (s[m:] == 0).all() and (s[:m] > nmt.END_ID).all()


def test_dataset_batches(synthetic_splits, synthetic_tokenizers):
    ds = nmt.make_dataset(synthetic_splits.train, synthetic_tokenizers, batch_size=16, bucket_boundaries=[5, 8])
    assert ds.element_spec[1].shape.as_list() == [None, None]
    count, sizes = 0, []
    for (source, target_in), target_out in ds:
        _check_batch(source, target_in, target_out)
        count += int(source.shape[0])
        lengths = np.maximum(
            (source.numpy() != 0).sum(1), (target_in.numpy() != 0).sum(1)
        )  # bucketed: every batch lies within one bucket
        bucket = np.digitize(lengths, [5.5, 8.5])
        assert len(set(bucket)) == 1
        sizes.append(int(source.shape[1]))
    assert count == len(synthetic_splits.train)
    assert len(set(sizes)) > 1  # each batch padded to its own length

    def first_batches(seed):
        fresh = nmt.make_dataset(
            synthetic_splits.train, synthetic_tokenizers, batch_size=16, bucket_boundaries=[5, 8], seed=seed
        )
        return [b[1].numpy().tolist() for b in fresh.take(2)]

    assert first_batches(0) == first_batches(0)  # seeded
    assert first_batches(0) != first_batches(9)


def test_dataset_in_order_with_weights_and_truncation(de_en_splits, de_en_tokenizers):
    pairs = de_en_splits.validation[:50]
    ds = nmt.make_dataset(
        pairs,
        de_en_tokenizers,
        batch_size=20,
        shuffle=False,
        max_source_length=6,
        max_target_length=5,
        sample_weight=True,
    )
    batches = list(ds)
    assert [b[1].shape[0] for b in batches] == [20, 20, 10]
    (source, target_in), target_out, weight = batches[0]
    _check_batch(source, target_in, target_out)
    assert source.shape[1] <= 6 and target_in.shape[1] <= 5
    expected = de_en_tokenizers.target.tokenize(pairs.target[0]).numpy()[:4].tolist()
    assert target_out.numpy()[0].tolist() == expected + [nmt.END_ID]  # truncated, still ends in [END]
    assert weight.dtype == tf.float32
    np.testing.assert_array_equal(weight.numpy(), (target_out.numpy() != 0).astype("float32"))


def test_dataset_fixed_shapes(synthetic_splits, synthetic_tokenizers):
    ds = nmt.make_dataset(
        synthetic_splits.validation,
        synthetic_tokenizers,
        batch_size=8,
        max_source_length=12,
        max_target_length=13,
        pad_to_max_length=True,
        drop_remainder=True,
    )
    assert ds.element_spec[0][0].shape.as_list() == [8, 12]
    assert ds.element_spec[1].shape.as_list() == [8, 13]
    (source, target_in), target_out = next(iter(ds))
    _check_batch(source, target_in, target_out)
    with pytest.raises(ValueError, match="max_target_length"):
        nmt.make_dataset(synthetic_splits.validation, synthetic_tokenizers, max_target_length=1)


# --------------------------------------------------------------------------------------------------
# Export: the tokenizers inside a SavedModel serve with only tensorflow and tensorflow_text


def test_tokenizers_export_and_reload_without_attnlayers(synthetic_tokenizers, tmp_path):
    class Exported(tf.Module):
        def __init__(self, tokenizers):
            super().__init__()
            self.source = tokenizers.source
            self.target = tokenizers.target

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def tokenize(self, text):
            return self.source.tokenize(text).to_tensor()

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def detokenize(self, ids):
            return self.target.detokenize(ids)

    module = Exported(synthetic_tokenizers)
    texts = ["peta kufu fedi", ""]
    target_ids = synthetic_tokenizers.target.tokenize(["tar ron", "hux"]).to_tensor()
    target_ids = tf.concat([tf.fill([2, 1], nmt.START_ID), target_ids, tf.fill([2, 1], nmt.END_ID)], axis=1)
    expected_ids = module.tokenize(tf.constant(texts)).numpy().tolist()
    expected_text = module.detokenize(target_ids).numpy().tolist()
    assert expected_text == [b"tar ron", b"hux"]
    path = str(tmp_path / "tokenizers")
    tf.saved_model.save(module, path, signatures={"tokenize": module.tokenize, "detokenize": module.detokenize})

    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("attnlayers", "keras_hub", "sentencepiece"):
                    raise ImportError("blocked: " + name)

        sys.meta_path.insert(0, Block())
        import tensorflow as tf
        import tensorflow_text  # registers the SentencePiece ops

        module = tf.saved_model.load({path!r})
        assert module.tokenize(tf.constant({texts!r})).numpy().tolist() == {expected_ids!r}
        out = module.signatures["detokenize"](ids=tf.constant({target_ids.numpy().tolist()!r}))
        assert list(out.values())[0].numpy().tolist() == {expected_text!r}
        print("served", sorted(m for m in sys.modules if m.split(".")[0] in ("attnlayers", "keras_hub")))
        """
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "served []" in result.stdout
