"""XLNet's SentencePiece tokenizer on a unigram model trained here with XLNet's special pieces: ids from the
SentencePiece library on the text prepared as Hugging Face's tokenizers prepare it (in plain Python), special tokens
in the text, the A <sep> B <sep> <cls> layout against `inputs.pack`, in a tf.data map. Hugging Face's transformers
on a Unicode set: benchmarks/bert_family_tokenizer_reference.py."""

import io
import json
import unicodedata

import pytest
import tensorflow as tf
from attnlayers.applications.xlnet import inputs
from attnlayers.applications.xlnet.tokenizer import XLNetTokenizer

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "Café naïve résumé Ångström façade.", "ΟΔΟΣ οδός Σίσυφος κύλησε.",
    "日本語のテキスト 我爱北京", "Hello world, hello there, hello again", "numbers 1234, 56 and 7.89",
] * 4
UNICODE = ["Hello   World!", "Café NAÏVE e\u0301te\u0301", "ΟΔΟΣ", "日本語 😀🦄", "a\u2028b\u3000c\u00a0d\x85e",
           "  lead trail ", "``quoted''", "ﬁne x² ＡＢＣ", ""]
# xlnet-base-cased's first nine pieces
SPECIAL = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]


def xlnet_prepare(text, lower=False):
    """XLNet's preparation in Hugging Face's tokenizers (transformers 5's XLNetTokenizer), in plain Python."""
    text = unicodedata.normalize("NFKD", text.replace("``", '"').replace("''", '"'))
    text = "".join(c.lower() if lower else c for c in text if not unicodedata.category(c).startswith("M"))
    return " ".join(text.split())


def test_xlnet_ids_special_tokens_and_layout(tmp_path):
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(  # <unk> 0, <s> 1, </s> 2, then the control symbols in order
        sentence_iterator=iter(SENTENCES), model_writer=model, vocab_size=100, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1, control_symbols=SPECIAL[3:])
    (tmp_path / "spiece.model").write_bytes(model.getvalue())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "keep_accents": False}))
    tokenizer = XLNetTokenizer.from_directory(tmp_path)
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    assert [processor.id_to_piece(i) for i in range(9)] == SPECIAL and tokenizer.vocabulary_size == len(processor)
    assert tokenizer.special_token_ids == (5, 0, 3, 4, 6)  # pad, unk, cls, sep, mask
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.eod_token_id, tokenizer.eop_token_id) == (1, 2,
                                                                                                                7, 8)
    expected = [processor.encode(xlnet_prepare(text)) for text in UNICODE]
    assert tokenizer.tokenize(UNICODE).to_list() == expected
    lower = XLNetTokenizer.from_directory(tmp_path, do_lower_case=True)
    lowered = [processor.encode(xlnet_prepare(text, lower=True)) for text in UNICODE]
    assert lower.tokenize(UNICODE).to_list() == lowered != expected  # cased by default
    hello = processor.encode("Hello")
    assert tokenizer.tokenize("Hello <mask><sep>Hello<eod> <eop>").numpy().tolist() == [*hello, 6, 4, *hello, 7, 8]
    assert tokenizer.detokenize(tokenizer.tokenize("Hello world")).numpy() == b"Hello world"

    # A <sep> B <sep> <cls>, segment ids 0 / 1 / 2, as inputs.pack; the longer segment loses tokens first, B on a
    # tie (the reference's _truncate_seq_pair and Hugging Face's longest_first)
    a, b = tokenizer.tokenize(["Hello world, hello there", "numbers"]), tokenizer.tokenize(["Café", "the lazy dog"])
    for length in (8, 9, 40):
        packed = tokenizer.pack(a, b, sequence_length=length)
        reference, cut = inputs.pack(a.to_list(), b.to_list(), sequence_length=length, tokenizer=tokenizer)
        assert cut == (0 if length == 40 else 2)
        assert {key: value.numpy().tolist() for key, value in packed.items()} == {
            key: value.tolist() for key, value in reference.items()}
    single = tokenizer.pack(hello, sequence_length=len(hello) + 4, padding_side="left")  # Hugging Face's side
    assert single["token_ids"].numpy().tolist() == [5, 5, *hello, 4, 3]
    assert single["segment_ids"].numpy().tolist() == [0, 0] + [0] * len(hello) + [0, 2]
    assert single["padding_mask"].numpy().tolist() == [False, False] + [True] * (len(hello) + 2)
    with pytest.raises(ValueError, match="`sequence_length` must be an integer >= 4"):
        tokenizer.pack([[7]], [[7]], sequence_length=3)

    # in a graph: a tf.data map
    dataset = tf.data.Dataset.from_tensor_slices(UNICODE).batch(4).map(
        lambda text: tokenizer.pack(tokenizer.tokenize(text), sequence_length=12))
    rows = [row for batch in dataset for row in batch["token_ids"].numpy().tolist()]
    assert rows == [(ids[:10] + [4, 3] + [5] * 12)[:12] for ids in expected]
