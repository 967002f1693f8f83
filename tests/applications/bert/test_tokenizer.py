"""BERT WordPiece tokenizer: round trips on a tiny vocab.txt, lower-casing and accent stripping on and off (checked
against Hugging Face's `tokenizers`), Unicode normalisation against Hugging Face's Python `BertTokenizer` (literals),
special tokens, Hugging Face config files, vocabulary training, and errors."""

import json

import keras
import pytest
import tensorflow as tf
from attnlayers.applications.bert.tokenizer import (
    SPECIAL_TOKENS,
    BertTokenizer,
    normalize,
    read_tokenizer_options,
    read_vocabulary,
    train_vocabulary,
)

WORDS = ["the", "quick", "brown", "fox", "jump", "##s", "##ed", "over", "lazy", "dog", "cafe", "café", "Cafe", "The",
         "un", "##aff", "##able", ",", ".", "!", "naive", "naïve"]


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in SPECIAL_TOKENS + tuple(WORDS)), encoding="utf-8")
    return path


def pieces(tokenizer, text):
    return [t.decode() for t in tokenizer.id_to_token(tokenizer.tokenize(text)).numpy()]


def test_round_trip_on_a_tiny_vocabulary(vocab_file):
    tokenizer = BertTokenizer(vocab_file)
    assert tokenizer.vocabulary_size == len(SPECIAL_TOKENS) + len(WORDS)
    assert tokenizer.special_token_ids == (0, 1, 2, 3, 4)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id,
            tokenizer.mask_token_id) == (0, 1, 2, 3, 4)
    text = "The quick brown fox jumped over the lazy dogs, unaffable!"
    assert pieces(tokenizer, text) == ["the", "quick", "brown", "fox", "jump", "##ed", "over", "the", "lazy", "dog",
                                       "##s", ",", "un", "##aff", "##able", "!"]
    single = tokenizer.tokenize(text)
    assert isinstance(single, tf.Tensor) and single.dtype == tf.int32 and single.shape.rank == 1
    back = "the quick brown fox jumped over the lazy dogs , unaffable !"
    assert tokenizer.detokenize(single).numpy().decode() == back
    batch = tokenizer.tokenize([text, "", "zebra fox"])
    assert isinstance(batch, tf.RaggedTensor) and batch.dtype == tf.int32
    rows = batch.to_list()
    assert rows[0] == single.numpy().tolist() and rows[1] == []
    assert rows[2] == [tokenizer.unk_token_id, tokenizer.token_to_id("fox")]  # a word it cannot spell: one [UNK]
    back = tokenizer.detokenize(batch).numpy().tolist()
    assert back[1:] == [b"", b"[UNK] fox"]
    # padded dense ids: [PAD] is dropped, other special tokens stay visible
    dense = tf.constant([[2] + rows[2] + [3, 0, 0], [2, 4, 3, 0, 0, 0]])
    assert tokenizer.detokenize(dense).numpy().tolist() == [b"[CLS] [UNK] fox [SEP]", b"[CLS] [MASK] [SEP]"]
    assert tokenizer.get_vocabulary() == list(SPECIAL_TOKENS) + WORDS
    # the same vocabulary from a list, and written back
    from_list = BertTokenizer(list(SPECIAL_TOKENS) + WORDS)
    assert from_list.tokenize([text]).to_list() == [rows[0]]
    saved = vocab_file.parent / "saved.txt"
    from_list.save_vocabulary(saved)
    assert saved.read_text(encoding="utf-8") == vocab_file.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, ["the", "cafe", "naive", "cafe"]),  # uncased: lower-case and strip accents
        ({"lowercase": True, "strip_accents": False}, ["the", "café", "naïve", "cafe"]),
        ({"lowercase": False}, ["The", "[UNK]", "naïve", "cafe"]),  # cased: "Café" is not in the vocabulary
        ({"lowercase": False, "strip_accents": True}, ["The", "Cafe", "naive", "cafe"]),
    ],
)
def test_lowercase_and_strip_accents(vocab_file, options, expected):
    tokenizer = BertTokenizer(vocab_file, **options)
    assert pieces(tokenizer, "The Café naïve cafe") == expected
    # Hugging Face's BertWordPieceTokenizer with the same options gives the same ids
    from tokenizers import BertWordPieceTokenizer

    lowercase = options.get("lowercase", True)
    reference = BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase,
                                       strip_accents=options.get("strip_accents", lowercase))
    for text in ["The Café naïve cafe", "The quick, brown fox jumps over the lazy dog!", "CAFÉ Naïve THE"]:
        expected_ids = reference.encode(text, add_special_tokens=False).ids
        assert tokenizer.tokenize(text).numpy().tolist() == expected_ids, text


def test_runs_in_graphs_and_survives_clear_session(vocab_file):
    tokenizer = BertTokenizer(vocab_file)
    expected = tokenizer.tokenize(["the fox", "lazy dogs"]).to_list()
    keras.backend.clear_session()  # destroys TensorFlow resources; the WordPiece model is a constant buffer
    assert tokenizer.tokenize(["the fox", "lazy dogs"]).to_list() == expected
    ds = tf.data.Dataset.from_tensor_slices(["the fox", "lazy dogs"]).map(tokenizer.tokenize)
    assert [ids.numpy().tolist() for ids in ds] == expected


def test_special_tokens_are_looked_up_by_name(tmp_path):
    # bert-base-uncased's layout: [PAD] 0, [unused*], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103
    vocabulary = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "fox"]
    tokenizer = BertTokenizer(vocabulary)
    assert tokenizer.special_token_ids == (0, 100, 101, 102, 103)
    assert tokenizer.token_to_id("fox") == 104
    with pytest.raises(ValueError, match="'wolf' is not in the vocabulary"):
        tokenizer.token_to_id("wolf")


def test_errors_for_bad_vocabularies(tmp_path):
    with pytest.raises(ValueError, match="`vocabulary` is empty"):
        BertTokenizer([])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="`vocabulary` is empty.*empty.txt"):
        BertTokenizer(empty)
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \['\[MASK\]'\]"):
        BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "fox"])
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \['\[PAD\]', '\[SEP\]'\]"):
        read_vocabulary(["[UNK]", "[CLS]", "[MASK]"])
    with pytest.raises(ValueError, match=r"repeated tokens.*\['fox'\]"):
        BertTokenizer(list(SPECIAL_TOKENS) + ["fox", "fox"])
    with pytest.raises(ValueError, match="empty token at id 5"):
        BertTokenizer(list(SPECIAL_TOKENS) + ["", "fox"])
    with pytest.raises(ValueError, match="path to a vocab.txt or a list"):
        BertTokenizer(3)
    with pytest.raises(ValueError, match="`text` must be a string or a 1-D batch"):
        BertTokenizer(list(SPECIAL_TOKENS)).tokenize([["a"]])


def test_options_from_hugging_face_files(tmp_path, vocab_file):
    assert read_tokenizer_options(tmp_path) == {"lowercase": True, "strip_accents": None, "split_on_cjk": True}
    (tmp_path / "config.json").write_text(json.dumps({"do_lower_case": False, "hidden_size": 8}))
    assert read_tokenizer_options(tmp_path)["lowercase"] is False
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "strip_accents": False,
                                                                "tokenize_chinese_chars": False}))
    assert read_tokenizer_options(tmp_path) == {"lowercase": True, "strip_accents": False, "split_on_cjk": False}
    tokenizer = BertTokenizer.from_directory(tmp_path)  # vocab.txt is in tmp_path
    assert (tokenizer.lowercase, tokenizer.strip_accents, tokenizer.split_on_cjk) == (True, False, False)
    assert pieces(tokenizer, "Café") == ["café"]
    assert BertTokenizer.from_directory(tmp_path, strip_accents=True).strip_accents is True
    # only a fast tokenizer's tokenizer.json
    other = tmp_path / "fast"
    other.mkdir()
    normalizer = {"type": "BertNormalizer", "lowercase": False, "strip_accents": None, "handle_chinese_chars": True}
    (other / "tokenizer.json").write_text(json.dumps({"normalizer": normalizer}))
    assert read_tokenizer_options(other) == {"lowercase": False, "strip_accents": None, "split_on_cjk": True}
    with pytest.raises(ValueError, match="`directory` must hold a vocab.txt"):
        BertTokenizer.from_directory(other)


def test_train_vocabulary(tmp_path):
    texts = ["The quick brown fox jumps over the lazy dog.", "Foxes jumped; dogs slept!", "A café, naïvely."] * 5
    path = tmp_path / "vocab.txt"
    vocabulary = train_vocabulary(texts, 80, path)
    assert tuple(vocabulary[:5]) == SPECIAL_TOKENS and len(vocabulary) <= 80
    assert path.read_text(encoding="utf-8").splitlines() == vocabulary
    assert any(token.startswith("##") for token in vocabulary)
    assert not any(token != token.lower() or "é" in token for token in vocabulary if token not in SPECIAL_TOKENS)
    tokenizer = BertTokenizer(path)
    ids = tokenizer.tokenize(texts).flat_values.numpy()
    assert tokenizer.unk_token_id not in ids and ids.min() >= len(SPECIAL_TOKENS)
    cased = train_vocabulary(texts, 80, lowercase=False)
    assert "T" in cased and "é" in cased
    with pytest.raises(ValueError, match="`texts` must hold at least one non-empty string"):
        train_vocabulary(["", "  "], 80)
    with pytest.raises(ValueError, match="vocabulary_size=5"):
        train_vocabulary(texts, 5)


# Hugging Face's Python `BertTokenizer` (BasicTokenizer + WordpieceTokenizer, do_lower_case=True) on bert-base-uncased's
# vocab.txt: (text, tokens, ids), printed by `PYTHONPATH=/tmp/hfref python benchmarks/bert_tokenizer_reference.py`
# (its docstring says how to install the reference). Its Rust `BertTokenizerFast` differs only on a word-final "Σ"
# ("σ" there, "ς" in str.lower() and here).
HUGGING_FACE_UNCASED = [
    ('Straße',
     ['st', '##raße'],
     [2358, 27807]),
    ('ﬁne ﬂow',
     ['ﬁ', '##ne', 'ﬂ', '##ow'],
     [1984, 2638, 1985, 5004]),
    ('ＡＢＣ',
     ['[UNK]'],
     [100]),
    ('x² ½ ™ Ⅻ',
     ['x', '##²', '½', '™', '[UNK]'],
     [1060, 10701, 1092, 1580, 100]),
    ('Hello, World! The quick brown fox.',
     ['hello', ',', 'world', '!', 'the', 'quick', 'brown', 'fox', '.'],
     [7592, 1010, 2088, 999, 1996, 4248, 2829, 4419, 1012]),
    ('ΟΔΟΣ οδός',
     ['ο', '##δ', '##ος', 'ο', '##δ', '##ος'],
     [1169, 29722, 15297, 1169, 29722, 15297]),
    ('İstanbul',
     ['istanbul'],
     [9960]),
    ('été café naïve Ångström',
     ['et', '##e', 'cafe', 'naive', 'ang', '##strom'],
     [3802, 2063, 7668, 15743, 17076, 15687]),
    ('ÄÖÜ äöü Σίσυφος',
     ['ao', '##u', 'ao', '##u', 'σ', '##ι', '##σ', '##υ', '##φ', '##ος'],
     [20118, 2226, 20118, 2226, 1173, 18199, 29733, 29735, 29736, 15297]),
    ('zero\u200bwidth',
     ['zero', '##wi', '##dt', '##h'],
     [5717, 9148, 11927, 2232]),
    ('bell\x07ring',
     ['bell', '##ring'],
     [4330, 4892]),
    ('tab\there\nnew\rline',
     ['tab', 'here', 'new', 'line'],
     [21628, 2182, 2047, 2240]),
    ('non\xa0breaking\u3000ideographic',
     ['non', 'breaking', 'id', '##eo', '##graphic'],
     [2512, 4911, 8909, 8780, 14773]),
    ('form\x0cfeed',
     ['form', '##fe', '##ed'],
     [2433, 7959, 2098]),
    ('\ufeffbom � replacement',
     ['bo', '##m', 'replacement'],
     [8945, 2213, 6110]),
    ('我爱北京天安门',
     ['我', '[UNK]', '北', '京', '天', '安', '[UNK]'],
     [1855, 100, 1781, 1755, 1811, 1820, 100]),
    ('日本語のテキスト',
     ['日', '本', '語', 'の', '##テ', '##キ', '##ス', '##ト'],
     [1864, 1876, 1950, 1671, 30239, 30227, 30233, 30240]),
    ('한국어 텍스트',
     ['ᄒ', '##ᅡ', '##ᆫ', '##ᄀ', '##ᅮ', '##ᆨ', '##ᄋ', '##ᅥ', 'ᄐ', '##ᅦ', '##ᆨ', '##ᄉ', '##ᅳ', '##ᄐ', '##ᅳ'],
     [1469, 30006, 30021, 29991, 30014, 30020, 29999, 30008, 1467, 30009, 30020, 29997, 30017, 30003, 30017]),
    ('emoji 😀 🎉 👍🏽',
     ['em', '##oj', '##i', '[UNK]', '[UNK]', '[UNK]'],
     [7861, 29147, 2072, 100, 100, 100]),
    ('naïve résumé — “quotes” «guillemets» …',
     ['naive', 'resume', '—', '“', 'quotes', '”', '«', 'gui', '##lle', '##met', '##s', '»', '…'],
     [15743, 13746, 1517, 1523, 16614, 1524, 1077, 26458, 6216, 11368, 2015, 1090, 1529]),
    ('$100 ^caret^ `tick` ~tilde~ |pipe|',
     ['$', '100', '^', 'care', '##t', '^', '`', 'tick', '`', '~', 'til', '##de', '~', '|', 'pipe', '|'],
     [1002, 2531, 1034, 2729, 2102, 1034, 1036, 16356, 1036, 1066, 18681, 3207, 1066, 1064, 8667, 1064]),
    ('DŽungla ǅ ǈ',
     ['d', '##zu', '##ng', '##la', '[UNK]', '[UNK]'],
     [1040, 9759, 3070, 2721, 100, 100]),
    ('Ⅰ Ⅱ ① ⑴ ㍱',
     ['[UNK]', '[UNK]', '[UNK]', '[UNK]', '[UNK]'],
     [100, 100, 100, 100, 100]),
    ('ǰ ŉ ﬀ ﬃ',
     ['j', '[UNK]', '[UNK]', '[UNK]'],
     [1046, 100, 100, 100]),
    ('Ǆ ẞ',
     ['[UNK]', 'ß'],
     [100, 1096]),
    ('\u2028line\u2029para',
     ['line', 'para'],
     [2240, 11498]),
    ('\x00null\x1fsep',
     ['null', '##se', '##p'],
     [19701, 3366, 2361]),
    ('Ὀδυσσεύς ΚΑΛΟΣ',
     ['ο', '##δ', '##υ', '##σ', '##σ', '##ε', '##υ', '##ς', 'κ', '##α', '##λ', '##ος'],
     [1169, 29722, 29735, 29733, 29733, 29723, 29735, 19579, 1164, 14608, 29727, 15297]),
]


def test_matches_hugging_face_bert_on_unicode():
    # bert-base-uncased's ids: the reference's tokens at their ids, fillers elsewhere ("[" splits them off any word)
    vocabulary = [f"[filler{i}]" for i in range(30522)]
    for token, i in zip(SPECIAL_TOKENS, (0, 100, 101, 102, 103), strict=True):
        vocabulary[i] = token
    for _, tokens, ids in HUGGING_FACE_UNCASED:
        for token, i in zip(tokens, ids, strict=True):
            assert vocabulary[i] in (token, f"[filler{i}]")
            vocabulary[i] = token
    tokenizer = BertTokenizer(vocabulary)
    texts = [text for text, _, _ in HUGGING_FACE_UNCASED]
    got = tokenizer.tokenize(texts).to_list()
    mismatches = [(text, [vocabulary[i] for i in row], tokens)
                  for (text, tokens, ids), row in zip(HUGGING_FACE_UNCASED, got, strict=True) if row != ids]
    assert not mismatches
    # no NFKC / case folding: "ß", ligatures, superscripts, fullwidth letters and Roman numerals are kept as they are
    assert pieces(tokenizer, "Straße") == ["st", "##raße"]
    assert [tokenizer.tokenize(t).numpy().tolist() for t in ("ＡＢＣ", "Ⅻ")] == [[100], [100]]


def test_normalize_follows_python_str_lower():
    texts = ["İstanbul ΟΔΟΣ Σ Straße ＡＢＣ ﬁ Ⅻ", "tab\there\u00a0nbsp zero\u200bwidth bell\x07 \ufffd"]
    got = [t.decode() for t in normalize(tf.constant(texts), strip_accents=False).numpy()]
    assert got == ["i\u0307stanbul οδος σ straße ａｂｃ ﬁ ⅻ", "tab here nbsp zerowidth bell "]
    assert got[0] == texts[0].lower()
    assert normalize(tf.constant("Éte\u0301 İ")).numpy().decode() == "ete i"
    assert normalize(tf.constant("Éte\u0301"), lowercase=False, strip_accents=True).numpy().decode() == "Ete"


@pytest.mark.parametrize("text", [123, None, [1, 2], ["a", 3], 1.5])
def test_tokenize_rejects_what_is_not_text(vocab_file, text):
    with pytest.raises(ValueError, match=r"`text` must be a string or a list / tensor of strings; received"):
        BertTokenizer(vocab_file).tokenize(text)
    if text == [1, 2]:
        with pytest.raises(ValueError, match="received a tensor of dtype int32 and shape"):
            BertTokenizer(vocab_file).tokenize(tf.constant(text))
