"""GPT-2 byte-level BPE tokenizer: exact round trips on hard text with a vocabulary trained here, the same ids as
Hugging Face's `tokenizers` on the same files, the end-of-text token, graphs / SavedModels / clear_session, errors
naming the file, and deterministic training.

The tokenizer is TensorFlow ops (keras-hub's BytePairTokenizer tables, tensorflow_text regexes): the file needs
TensorFlow and tensorflow_text, whatever the Keras backend."""

import json
import os
import sys

import keras
import pytest
import tensorflow as tf

from attnlayers.applications import gpt
from attnlayers.applications.gpt.tokenizer import (
    BYTE_SYMBOLS,
    END_OF_TEXT,
    GPT2Tokenizer,
    pretokenize,
    train_byte_level_bpe,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's the dog's day; they've said we'll see.",
    "Byte-level BPE never meets an unknown character: café, naïve, 日本語, emoji 😀 and all.",
    "    indented code:\n\tfor i in range(10):\n\t\tprint(i)  # done\n",
    "Numbers 1234567890 and 3.14159, symbols !@#$%^&*() and repeated     spaces.",
] * 8

HARD = [
    "", " ", "   ", "a", " a", "a ", "hello  world", "  leading and trailing  ", "\n", "\n\n", "a\n\nb", "a \n b",
    "\t\tx", "x\t", "line one\r\nline two\n", "héllo", "he\u0301llo (combining accent)", "日本語のテキスト",
    "😀👍🏽 emoji, 👨‍👩‍👧 family", "I'm can't we've they'll   's", "१२३ ६", "a६b ६६", "ĴA ĴAKE",
    "no\u00a0break \u3000ideographic \u2009thin \u2028line \x0bvertical \x85next", "nul\x00in\x00\x00the middle",
    "\u200bzero width", "Ġ and Ċ are byte symbols", "x <|endoftext|> y", "<|endoftext|><|endoftext|>",
    "<|endoftext|>", "<|endoftext", "\uffff\U0010ffff",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return train_byte_level_bpe(CORPUS, 400, tmp_path_factory.mktemp("bpe"))


@pytest.fixture(scope="module")
def tokenizer(files):
    return GPT2Tokenizer(*files)


def read(path, mode="r"):
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        return f.read()


def hugging_face(files):
    """Hugging Face's GPT-2 tokenization of the same files (GPT2TokenizerFast's pipeline)."""
    import tokenizers

    reference = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(files[0]), str(files[1])))
    reference.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    reference.decoder = tokenizers.decoders.ByteLevel()
    reference.add_special_tokens([END_OF_TEXT])
    return reference


def test_round_trip_is_exact_and_matches_hugging_face(files, tokenizer):
    ids = tokenizer.tokenize(HARD)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32 and ids.shape.rank == 2
    back = tokenizer.detokenize(ids).numpy().tolist()
    assert [text.decode("utf-8") for text in back] == HARD
    assert [b"".join(p) for p in pretokenize(tf.constant(HARD)).numpy()] == [t.encode() for t in HARD]
    reference = hugging_face(files)
    assert ids.to_list() == [encoding.ids for encoding in reference.encode_batch(HARD)]
    # one string: 1-D ids; dense padded ids detokenize too (the padding id is the caller's to drop)
    single = tokenizer("It's 😀")
    assert isinstance(single, tf.Tensor) and single.shape.rank == 1
    assert tokenizer.detokenize(single).numpy().decode() == "It's 😀"
    assert tokenizer.tokenize([]).shape.as_list() == [0, None]


def test_end_of_text_is_one_special_token(files, tokenizer):
    end = tokenizer.end_token_id
    assert end == tokenizer.start_token_id == tokenizer.token_to_id(END_OF_TEXT) == 0  # trained: special first
    assert tokenizer.tokenize(END_OF_TEXT).numpy().tolist() == [end]
    ids = tokenizer.tokenize("a<|endoftext|>b").numpy().tolist()
    assert ids.count(end) == 1 and ids == [tokenizer.token_to_id("a"), end, tokenizer.token_to_id("b")]
    # text near the special token is ordinary text: no id of it, and no stand-in string turned into it
    for text in ("<|endoftext", "ĴA", "endoftext"):
        assert end not in tokenizer.tokenize(text).numpy().tolist()
    a = tokenizer.token_to_id("a")
    assert tokenizer.detokenize([a, end, end]).numpy().decode() == "a" + END_OF_TEXT * 2
    assert tokenizer.id_to_token(tf.ragged.constant([[end, a]])).to_list() == [[END_OF_TEXT.encode(), b"a"]]


def test_runs_in_graphs_saved_models_and_survives_clear_session(tokenizer, tmp_path):
    texts = tf.constant(["hello  world\n", "日本 <|endoftext|> café"])
    expected = tokenizer.tokenize(texts).to_list()

    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(tokenizer.tokenize)
    assert next(iter(dataset)).to_list() == expected

    class Serving(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, text):
            ids = self.tokenizer.tokenize(text)
            return {"ids": ids.to_tensor(-1), "text": self.tokenizer.detokenize(ids)}

    keras.backend.clear_session()  # the tables belong to the tokenizer, not to the Keras session
    assert tokenizer.tokenize(texts).to_list() == expected
    tf.saved_model.save(Serving(tokenizer), str(tmp_path / "serving"))
    keras.backend.clear_session()
    loaded = tf.saved_model.load(str(tmp_path / "serving"))
    out = loaded.round_trip(texts)
    assert out["text"].numpy().tolist() == texts.numpy().tolist()
    assert [[i for i in row if i >= 0] for row in out["ids"].numpy().tolist()] == expected
    unseen = loaded.round_trip(tf.constant(["zebra quagga 😀"]))  # words the cache has not met
    assert unseen["text"].numpy().tolist() == ["zebra quagga 😀".encode()]


def test_from_directory_and_the_package_exports(files, tokenizer, tmp_path):
    directory = os.path.dirname(files[0])
    loaded = GPT2Tokenizer.from_directory(directory)
    assert loaded.vocabulary_size == tokenizer.vocabulary_size <= 400
    assert loaded.get_vocabulary() == tokenizer.get_vocabulary() and loaded.end_token_id == tokenizer.end_token_id
    assert gpt.GPT2Tokenizer is GPT2Tokenizer and gpt.train_byte_level_bpe is train_byte_level_bpe
    with pytest.raises(ValueError, match="has no vocab.json"):
        GPT2Tokenizer.from_directory(tmp_path)
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes(read(os.path.join(directory, name), "rb"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_prefix_space": True}))
    with pytest.raises(ValueError, match="add_prefix_space"):
        GPT2Tokenizer.from_directory(tmp_path)


def test_missing_or_malformed_files_are_named(files, tmp_path):
    vocab_path, merges_path = files
    vocabulary, merges = json.loads(read(vocab_path)), read(merges_path)
    def write(name, text):
        (tmp_path / name).write_text(text, encoding="utf-8")
        return tmp_path / name

    byte_symbols_only = json.dumps({symbol: i for i, symbol in enumerate(BYTE_SYMBOLS)})
    cases = [
        ((tmp_path / "absent.json", merges_path), r"absent.json' does not exist"),
        ((vocab_path, tmp_path / "absent.txt"), r"absent.txt' does not exist"),
        ((write("broken.json", "{'not': json"), merges_path), r"broken.json' is not valid UTF-8 JSON"),
        ((write("list.json", "[1, 2]"), merges_path), r"list.json' must hold a non-empty JSON object"),
        ((write("ids.json", json.dumps({**vocabulary, "extra": 10**6})), merges_path), r"ids.json': the ids must"),
        ((write("bytes.json", json.dumps({"a": 0, END_OF_TEXT: 1})), merges_path), r"bytes.json' lacks 255 of"),
        ((write("end.json", byte_symbols_only), merges_path), r"end.json' lacks the end-of-text token"),
        ((vocab_path, write("three.txt", "#version: 0.2\nĠ t h\n")), r"three.txt', line 2: expected two tokens"),
        ((vocab_path, write("unknown.txt", merges + "Ġzz zzq\n")), r"unknown.txt', line \d+: the merge 'Ġzz zzq'"),
    ]
    for arguments, message in cases:
        with pytest.raises(ValueError, match=message):
            GPT2Tokenizer(*arguments)


def test_bad_inputs_are_refused(tokenizer):
    with pytest.raises(ValueError, match="`text` must be a string or a 1-D batch"):
        tokenizer.tokenize([["a"]])
    with pytest.raises(ValueError, match="`ids` must be"):
        tokenizer.detokenize(tf.zeros([1, 1, 1], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="id >= vocabulary_size"):
        tokenizer.detokenize([1, tokenizer.vocabulary_size])
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative id"):
        tokenizer.detokenize([[-1]])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tokenizer.token_to_id("no such token")


def test_training_is_deterministic_atomic_and_checked(files, tmp_path, monkeypatch):
    again = train_byte_level_bpe(CORPUS, 400, tmp_path / "again")
    for first, second in zip(files, again, strict=True):
        assert read(first, "rb") == read(second, "rb")
    assert sorted(os.listdir(tmp_path / "again")) == ["merges.txt", "vocab.json"]  # no temporary left behind
    vocabulary = json.loads(read(again[0]))
    assert len(vocabulary) == 400 and set(BYTE_SYMBOLS) <= set(vocabulary)
    assert read(again[1]).startswith("#version: 0.2\n")
    for texts, size, message in (([], 400, "`texts`"), (["", ""], 400, "`texts`"), ("a text", 400, "`texts`"),
                                 (CORPUS, 256, "`vocabulary_size`"), (CORPUS, 300.5, "`vocabulary_size`")):
        with pytest.raises(ValueError, match=message):
            train_byte_level_bpe(texts, size, tmp_path / "bad")
    with pytest.raises(ValueError, match="`min_frequency`"):
        train_byte_level_bpe(CORPUS, 400, tmp_path / "bad", min_frequency=0)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match="pip install tokenizers"):
        train_byte_level_bpe(CORPUS, 400, tmp_path / "bad")
