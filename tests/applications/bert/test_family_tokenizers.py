"""The BERT family's tokenizers: RoBERTa's byte-level BPE on a vocab.json / merges.txt written here (ids worked out
from the merges by hand, and Hugging Face's `tokenizers` on the same files), ALBERT's and XLM-RoBERTa's SentencePiece
on a model trained here (ids from the SentencePiece library on the text prepared as Hugging Face's tokenizers
prepare it, in plain Python), special tokens in the text, pair packing and padding, and the one entry point that
picks the tokenizer from a checkpoint directory. Hugging Face's transformers on a Unicode set:
benchmarks/bert_family_tokenizer_reference.py."""

import io
import json
import unicodedata

import pytest
import tensorflow as tf

from attnlayers.applications.bert.family_tokenizers import tokenizer_from_directory
from attnlayers.applications.bert.roberta_tokenizer import RobertaTokenizer
from attnlayers.applications.bert.sentencepiece_tokenizer import AlbertTokenizer, XLMRobertaTokenizer
from attnlayers.applications.bert.tokenizer import BertTokenizer
from attnlayers.applications.core.tokenizers.byte_bpe import BYTE_SYMBOLS

# ----------------------------------------------------------------------------------------------------------------
# RoBERTa: <s> <pad> </s> <unk>, the 256 byte symbols (byte b at id 4 + b), three merges, <mask>

MERGES = ["h e", "Ġ t", "Ġt he"]  # rank order
VOCABULARY = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{s: 4 + b for b, s in enumerate(BYTE_SYMBOLS)},
              "he": 260, "Ġt": 261, "Ġthe": 262, "<mask>": 263}


def byte_ids(text):
    return [4 + b for b in text.encode("utf-8")]


@pytest.fixture(scope="module")
def roberta_directory(tmp_path_factory):
    directory = tmp_path_factory.mktemp("roberta")
    (directory / "vocab.json").write_text(json.dumps(VOCABULARY), encoding="utf-8")
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(MERGES) + "\n", encoding="utf-8")
    return directory


def test_roberta_ids_special_tokens_and_packing(roberta_directory):
    import tokenizers

    # <mask> takes the whitespace on its left, as roberta-base's tokenizer files say
    (roberta_directory / "tokenizer_config.json").write_text(json.dumps(
        {"added_tokens_decoder": {"263": {"content": "<mask>", "lstrip": True}}}))
    tokenizer = RobertaTokenizer.from_directory(roberta_directory)
    t, space, a, b = byte_ids("t")[0], byte_ids(" ")[0], byte_ids("a")[0], byte_ids("b")[0]
    # "the" alone: h e merges, nothing else applies; " the": h e, then Ġ t, then Ġt he
    cases = {
        "the the": [t, 260, 262],
        "é😀": byte_ids("é😀"),  # no merge: one id per UTF-8 byte
        "a  the": [a, space, 262],  # GPT-2's regex: a run of spaces gives its last one to the word
        "the<mask> </s>x<|endoftext|>": [t, 260, 263, space, 2, *byte_ids("x<|endoftext|>")],
        "a \u3000<mask>the": [a, 263, t, 260],  # lstrip: the spaces before <mask> go with it
        "": [],
    }
    ids = tokenizer.tokenize(list(cases)).to_list()
    assert ids == list(cases.values())
    reference = tokenizers.Tokenizer(tokenizers.models.BPE(VOCABULARY, [tuple(m.split()) for m in MERGES]))
    reference.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    reference.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", tokenizers.AddedToken("<mask>", lstrip=True)])
    assert ids == [encoding.ids for encoding in reference.encode_batch(list(cases))]
    assert tokenizer.detokenize(tf.ragged.constant(ids)).numpy().tolist()[:2] == [b"the the", "é😀".encode()]
    assert tokenizer.special_token_ids == (1, 3, 0, 2, 263) and not tokenizer.add_prefix_space

    # <s> A </s></s> B </s>, segment ids 0, <pad> (1) after; a long pair loses tokens from its longer segment
    packed = tokenizer.pack(tf.ragged.constant([[a], [a, a, a, a]]), tf.ragged.constant([[b, b], [b]]),
                            sequence_length=8)
    assert packed["token_ids"].numpy().tolist() == [[0, a, 2, 2, b, b, 2, 1], [0, a, a, a, 2, 2, b, 2]]
    assert packed["segment_ids"].numpy().sum() == 0
    assert packed["padding_mask"].numpy().sum(axis=1).tolist() == [7, 8]
    single = tokenizer.pack([t, 260], sequence_length=5)
    assert single["token_ids"].numpy().tolist() == [0, t, 260, 2, 1]
    with pytest.raises(ValueError, match="`sequence_length` must be an integer >= 4"):
        tokenizer.pack([[a]], [[b]], sequence_length=3)


# ----------------------------------------------------------------------------------------------------------------
# SentencePiece: a unigram model trained here

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "Café naïve résumé Ångström façade.", "ΟΔΟΣ οδός Σίσυφος κύλησε.",
    "日本語のテキスト 我爱北京", "emoji 😀 🎉 and more text here", "hello world, hello there, hello again",
    "numbers 1234, 56 and 7.89", "Straße ﬁne ＡＢＣ x²",
] * 4
UNICODE = ["Hello   World!", "Café NAÏVE e\u0301te\u0301", "ΟΔΟΣ", "日本語 😀🦄", "a\u2028b\u3000c\u00a0d\x85e", "  lead trail ",
           "``quoted''", "ﬁne x² ＡＢＣ", "", "Straße"]


def train_model(**options):
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES), model_writer=model, vocab_size=90, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1, **options)
    return model.getvalue()


def albert_prepare(text):
    """ALBERT's preparation in Hugging Face's tokenizers (transformers 5's AlbertTokenizer), in plain Python."""
    text = unicodedata.normalize("NFKD", text.replace("``", '"').replace("''", '"'))
    text = "".join(c.lower() for c in text if not unicodedata.category(c).startswith("M"))
    return " ".join(text.split())


def test_albert_and_xlm_roberta_ids_special_tokens_and_packing(tmp_path):
    import sentencepiece

    albert_model = train_model(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"])
    (tmp_path / "spiece.model").write_bytes(albert_model)
    albert = tokenizer_from_directory(tmp_path)  # by its file
    assert isinstance(albert, AlbertTokenizer)
    processor = sentencepiece.SentencePieceProcessor(model_proto=albert_model)
    assert albert.special_token_ids == (0, 1, 2, 3, 4) and albert.vocabulary_size == processor.get_piece_size()
    assert albert.tokenize(UNICODE).to_list() == [processor.encode(albert_prepare(text)) for text in UNICODE]
    hello = processor.encode("hello")
    assert albert.tokenize("Hello[MASK] [SEP]").numpy().tolist() == [*hello, 4, 3]
    packed = albert.pack(albert.tokenize(["hello"]), albert.tokenize(["hello"]), sequence_length=3 + 2 * len(hello))
    assert packed["token_ids"].numpy().tolist() == [[2, *hello, 3, *hello, 3]]
    assert packed["segment_ids"].numpy().tolist() == [[0] * (2 + len(hello)) + [1] * (1 + len(hello))]
    assert albert.detokenize(albert.tokenize("hello world")).numpy() == b"hello world"

    xlmr_model = train_model()  # SentencePiece's defaults: <unk> 0, <s> 1, </s> 2
    (tmp_path / "sentencepiece.bpe.model").write_bytes(xlmr_model)
    xlmr = XLMRobertaTokenizer(tmp_path / "sentencepiece.bpe.model")
    processor = sentencepiece.SentencePieceProcessor(model_proto=xlmr_model)
    size = processor.get_piece_size()
    assert xlmr.special_token_ids == (1, 3, 0, 2, size + 1) and xlmr.vocabulary_size == size + 2
    fairseq = [[3 if i == 0 else i + 1 for i in processor.encode(" ".join(text.split()))] for text in UNICODE]
    assert xlmr.tokenize(UNICODE).to_list() == fairseq
    assert fairseq[3][-1] == 3  # "🦄" is no piece of the model: <unk>, fairseq's 3
    hello = [i + 1 for i in processor.encode("Hello")]
    packed = xlmr.pack([hello], [hello], sequence_length=5 + 2 * len(hello))
    assert packed["token_ids"].numpy().tolist() == [[0, *hello, 2, 2, *hello, 2, 1]]
    assert packed["segment_ids"].numpy().sum() == 0 and packed["padding_mask"].numpy().sum() == 4 + 2 * len(hello)

    # in a graph: a tf.data map
    dataset = tf.data.Dataset.from_tensor_slices(UNICODE).batch(5).map(xlmr.tokenize)
    assert [row for batch in dataset for row in batch.to_list()] == fairseq

    # seeding clears the kernels that own the SentencePiece resource: a named error, not TensorFlow's NotFoundError
    tf.random.set_seed(0)
    with pytest.raises(RuntimeError, match="XLMRobertaTokenizer.*resource was destroyed.*after seeding"):
        xlmr.tokenize("Hello")


def test_the_entry_point_picks_the_tokenizer_from_the_directory(tmp_path, roberta_directory):
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a")))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "distilbert"}))
    assert isinstance(tokenizer_from_directory(tmp_path), BertTokenizer)
    assert isinstance(tokenizer_from_directory(roberta_directory), RobertaTokenizer)  # by its files
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    with pytest.raises(ValueError, match="has no vocab.json; a Hugging Face RoBERTa tokenizer directory"):
        tokenizer_from_directory(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type 'gpt2' is not of the BERT family"):
        tokenizer_from_directory(tmp_path)
