"""NMT tokenizers and tf.data batches: reserved ids, round trips, the dataset's shapes, buckets and truncation (and
its count), and tokenizers served from a SavedModel. Readers, the trans-de-en corpus and the synthetic task have
their own test_data_*.py files."""

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import tensorflow as tf
from attnlayers.applications import nmt

# --------------------------------------------------------------------------------------------------
# Shared, built once per module (tokenizers train in well under a second); the corpus fixtures are in conftest.py.


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
    with pytest.warns(UserWarning, match=r"^50 of 50 sentence pairs \(100\.0%\) are truncated"):
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


def _word_counts(pairs, max_source_length, max_target_length):
    """What count_truncated must say for word-level tokenizers (one token per word)."""
    cut_source = [len(s.split()) > max_source_length for s in pairs.source]
    cut_target = [len(t.split()) > max_target_length - 1 for t in pairs.target]
    return {
        "sources": sum(cut_source),
        "targets": sum(cut_target),
        "pairs": sum(a or b for a, b in zip(cut_source, cut_target)),
        "total": len(pairs),
    }


def test_count_truncated(synthetic_splits, synthetic_tokenizers):
    pairs = synthetic_splits.train
    for lengths in ((5, 6), (8, 4), (7, 7), (10, 11), (64, 64)):
        counts = nmt.count_truncated(pairs, synthetic_tokenizers, *lengths)
        assert counts == _word_counts(pairs, *lengths), lengths
    assert nmt.count_truncated(pairs, synthetic_tokenizers) == {  # defaults: those of make_dataset
        "sources": 0,
        "targets": 0,
        "pairs": 0,
        "total": len(pairs),
    }
    counts = nmt.count_truncated(pairs, synthetic_tokenizers, max_source_length=5, max_target_length=6)
    assert 0 < counts["sources"] < counts["total"] and counts["sources"] == counts["targets"]  # same word counts
    assert nmt.count_truncated(nmt.Pairs([], []), synthetic_tokenizers) == {
        "sources": 0,
        "targets": 0,
        "pairs": 0,
        "total": 0,
    }
    with pytest.raises(ValueError, match="max_target_length"):
        nmt.count_truncated(pairs, synthetic_tokenizers, 8, 1)
    with pytest.raises(ValueError, match="max_source_length"):
        nmt.count_truncated(pairs, synthetic_tokenizers, 0, 8)


def test_truncation_warns_once_per_call_with_the_count(synthetic_splits, synthetic_tokenizers):
    pairs = synthetic_splits.validation
    expected = _word_counts(pairs, 5, 7)
    assert 0 < expected["pairs"] < len(pairs)
    calls = (
        lambda: nmt.make_dataset(pairs, synthetic_tokenizers, max_source_length=5, max_target_length=7),
        lambda: nmt.make_dataset(pairs, synthetic_tokenizers, max_source_length=5, max_target_length=7, shuffle=False),
        lambda: nmt.encode_pairs(pairs, synthetic_tokenizers, max_source_length=5, max_target_length=7),
    )
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert len(caught) == 1, [str(w.message) for w in caught]
        warning = caught[0]
        assert warning.category is UserWarning and warning.filename == __file__  # points at the caller
        message = str(warning.message)
        assert message.startswith(
            f"{expected['pairs']} of {len(pairs)} sentence pairs ({100 * expected['pairs'] / len(pairs):.1f}%) "
            f"are truncated: {expected['sources']} sources longer than max_source_length=5 tokens, "
            f"{expected['targets']} targets longer than max_target_length - 1 = 6 tokens"
        ), message
        assert "count_truncated" in message
    # Nothing cut: no warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nmt.make_dataset(pairs, synthetic_tokenizers, max_source_length=10, max_target_length=11)
        nmt.encode_pairs(pairs, synthetic_tokenizers)
    assert not [w for w in caught if "truncated" in str(w.message)]


def test_dataset_argument_errors(synthetic_splits, synthetic_tokenizers):
    pairs = synthetic_splits.validation
    with pytest.raises(ValueError, match="`batch_size` must be a positive integer; received batch_size=0"):
        nmt.make_dataset(pairs, synthetic_tokenizers, batch_size=0)
    with pytest.raises(ValueError, match="`max_source_length` must be a positive integer"):
        nmt.encode_pairs(pairs, synthetic_tokenizers, max_source_length=0)
    with pytest.raises(ValueError, match="`max_target_length` must be an integer >= 2"):
        nmt.encode_pairs(pairs, synthetic_tokenizers, max_target_length=1)


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
