"""GPT-2's byte-level BPE tokenizer (Radford et al. 2019, section 2.2), run as TensorFlow ops.

    paths = train_byte_level_bpe(lines, 8000, "tokenizer/")           # offline: vocab.json + merges.txt
    tokenizer = GPT2Tokenizer(*paths)                                  # or GPT2Tokenizer.from_directory("gpt2/")
    ids = tokenizer.tokenize(["Hello, world!", "日本語 😀"])            # tf.RaggedTensor int32 (2, None)
    tokenizer.detokenize(ids)                                          # [b"Hello, world!", b"日本語 😀"] (UTF-8)

The algorithm is the shared byte-level BPE of ``applications.core.tokenizers.byte_bpe`` (RoBERTa's tokenizer runs it
too; its docstring says what is keras-hub's and what is ours): text is split into pre-tokens by GPT-2's regex, each
pre-token's UTF-8 bytes are written as the 256 printable "byte symbols" of GPT-2 (a space is "Ġ", a newline "Ċ"), and
the merges of merges.txt are applied in rank order. Every byte has a symbol in the vocabulary, so any UTF-8 text
(emoji, CJK, combining accents, tabs, runs of spaces, leading and trailing whitespace, NUL, the empty string)
round-trips exactly: ``detokenize(tokenize(t)) == t``, byte for byte (byte strings that are not UTF-8 came back
exactly too in our checks, though no reference tokenizes them). The end-of-text token ``<|endoftext|>``
(`END_OF_TEXT`) is a special token: where the text holds that string it becomes the one id ``end_token_id``, never
split, as in Hugging Face's GPT-2 tokenizers. There is no padding token (GPT-2 has none; keras-hub's GPT2Tokenizer
calls id 0, "!", its padding).

Training (`train_byte_level_bpe`) uses Hugging Face ``tokenizers`` (``models.BPE`` with the ``ByteLevel``
pre-tokenizer, i.e. GPT-2's regex and byte symbols, and a ``BpeTrainer``): it is maintained, fast (Rust),
deterministic, and writes exactly the vocab.json / merges.txt format of GPT-2's published files, which this class,
keras-hub and transformers' ``GPT2Tokenizer`` read. keras-hub has no BPE trainer. ``tokenizers`` is also a
dependency of keras-hub 0.32 itself; it is imported only when needed, with an error naming the pip package.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable

import tensorflow as tf

from attnlayers.validation import is_int

from ..core.inputs.files import replace_atomically
from ..core.tokenizers import byte_bpe
from ..core.tokenizers.byte_bpe import (  # noqa: F401 (GPT's names of the shared byte-level BPE)
    BYTE_SYMBOLS,
    ByteLevelBPE,
    core_regex_split,
    read_merges,
    row_ids,
    special_segment_ids,
)
from .checkpoint import MERGES_FILE, VOCABULARY_FILE

__all__ = ["BYTE_SYMBOLS", "END_OF_TEXT", "GPT2Tokenizer", "TOKENIZER_CONFIG_FILE", "core_regex_split", "pretokenize",
           "read_merges", "read_vocabulary", "row_ids", "special_segment_ids", "train_byte_level_bpe"]

END_OF_TEXT = "<|endoftext|>"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
_REQUIRED = {END_OF_TEXT: "the end-of-text token"}


def read_vocabulary(vocabulary) -> dict:
    """GPT-2's vocabulary as ``{token: id}``: ``core.tokenizers.byte_bpe.read_vocabulary`` with `END_OF_TEXT`
    required.

    Args:
        vocabulary: the path of a vocab.json (a JSON object token -> id, GPT-2's encoder.json) or a dict.

    Raises:
        ValueError: naming the file, when it is missing or not JSON, or the vocabulary is not ``{str: int}``, its
            ids are not 0 .. V-1 each once, it lacks one of the 256 byte symbols or lacks `END_OF_TEXT`.
    """
    return byte_bpe.read_vocabulary(vocabulary, required=_REQUIRED)


def pretokenize(text, split=byte_bpe.regex_split):
    """GPT-2's pre-tokens (its regex's matches, ``<|endoftext|>`` kept whole) as TensorFlow ops.

    Args:
        text: a (B,) tf.string tensor of UTF-8 text.
        split: the regex splitter, ``split(text, pattern) -> (begin, end)`` byte offsets: tensorflow_text's (the
            default) or :func:`core_regex_split` (core ops only, for SavedModels served without tensorflow_text;
            the same pre-tokens).

    Returns:
        a tf.string `tf.RaggedTensor` (B, None): each text's pre-tokens, whose concatenation is the text.
    """
    return byte_bpe.pretokenize(text, split, keep_whole=(END_OF_TEXT,))


class GPT2Tokenizer(ByteLevelBPE):
    """GPT-2's byte-level BPE tokenizer: UTF-8 text to token ids and back with TensorFlow ops (tf.data maps,
    SavedModels), exactly reversible.

    Args:
        vocabulary: the path of a vocab.json (GPT-2's encoder.json) or a dict token -> id, holding the 256 byte
            symbols and `END_OF_TEXT`.
        merges: the path of a merges.txt (GPT-2's vocab.bpe) or a list of "left right" rules, in rank order.

    Attributes:
        end_token_id: the id of ``<|endoftext|>``; ``start_token_id`` is the same id (GPT-2 uses it for both, as
            keras-hub's GPT2Tokenizer).
        vocabulary_size: the number of tokens.
        bpe: the ``keras_hub.tokenizers.BytePairTokenizer`` whose tables run the merges.

    Raises:
        ValueError: naming the file (and line) for a missing or malformed vocab.json or merges.txt.
    """

    def __init__(self, vocabulary, merges, *, name: str | None = None):
        super().__init__(vocabulary, merges, required=_REQUIRED, name=name)
        self.end_token_id = self.start_token_id = self._token_ids[END_OF_TEXT]
        # keras-hub's own way of keeping a special token whole: the cache maps it to itself.
        self.bpe.cache.insert(tf.constant([END_OF_TEXT]), tf.constant([END_OF_TEXT]))

    @classmethod
    def from_directory(cls, directory, **kwargs) -> GPT2Tokenizer:
        """The tokenizer of a Hugging Face GPT-2 directory: its vocab.json and merges.txt (the files
        `load_hf_checkpoint` records as ``info["vocabulary"]`` and ``info["merges"]``).

        Args:
            directory: the Hugging Face tokenizer directory.
            **kwargs: constructor arguments.

        Returns:
            A :class:`GPT2Tokenizer`.

        Raises:
            ValueError: naming the missing file, or a tokenizer_config.json asking for ``add_prefix_space``
                (a space added before the text, which this tokenizer does not do).
        """
        paths = [os.path.join(directory, name) for name in (VOCABULARY_FILE, MERGES_FILE)]
        for path in paths:
            if not os.path.isfile(path):
                raise ValueError(
                    f"`directory` {os.fspath(directory)!r} has no {os.path.basename(path)}; a Hugging Face GPT-2 "
                    f"tokenizer directory holds {VOCABULARY_FILE} and {MERGES_FILE}."
                )
        config = os.path.join(directory, TOKENIZER_CONFIG_FILE)
        if os.path.isfile(config):
            with open(config, encoding="utf-8") as f:
                if json.load(f).get("add_prefix_space"):
                    raise ValueError(f"{config!r} sets add_prefix_space, which GPT2Tokenizer does not support.")
        return cls(*paths, **kwargs)

    def tokenize(self, text):
        """UTF-8 strings to token ids (no special token added; ``<|endoftext|>`` in the text is ``end_token_id``).

        Args:
            text: a string, or a 1-D batch of strings (Python, NumPy or tf.string tensor).

        Returns:
            int32 ids: a 1-D tensor for a string; a `tf.RaggedTensor` (B, None) for a batch.
        """
        return super().tokenize(text)

    __call__ = tokenize

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def _tokenize_batch(self, text):
        return self._pretokenized_ids(pretokenize(text))

    def detokenize(self, ids):
        """Token ids to UTF-8 bytes: the exact text that `tokenize` read (``<|endoftext|>`` stays in the text).

        Args:
            ids: int ids, (T,) or (B, T), dense or ragged; each in [0, vocabulary_size).

        Returns:
            a tf.string scalar for (T,), a (B,) tf.string tensor for (B, T) (``.decode("utf-8")`` each).

        Raises:
            tf.errors.InvalidArgumentError: for an id outside [0, vocabulary_size).
        """
        return super().detokenize(ids)


# ----------------------------------------------------------------------------------------------------------------
# Training


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "train_byte_level_bpe needs Hugging Face's tokenizers: `pip install tokenizers`."
        ) from None
    return tokenizers


def train_byte_level_bpe(
    texts: Iterable[str],
    vocabulary_size: int,
    directory,
    *,
    min_frequency: int = 2,
) -> tuple:
    """Learns a GPT-2-style byte-level BPE offline and writes its vocab.json and merges.txt.

    Hugging Face ``tokenizers``' ``BpeTrainer`` on GPT-2's pre-tokens (the ``ByteLevel`` pre-tokenizer: GPT-2's
    regex, no prefix space), starting from all 256 byte symbols, with `END_OF_TEXT` as the special token (id 0).
    The same texts and arguments give the same files.

    Args:
        texts: training text (strings: lines or documents).
        vocabulary_size: the most tokens: 256 byte symbols + ``<|endoftext|>`` + the merges (little text gives
            fewer merges).
        directory: created if missing; its ``vocab.json`` and ``merges.txt`` are replaced, each written to a
            temporary name and renamed into place.
        min_frequency: a pair merges only if it occurs at least this often.

    Returns:
        ``(vocabulary_path, merges_path)``: `GPT2Tokenizer`'s arguments.

    Raises:
        ValueError: when `texts` has no non-empty string, `vocabulary_size` is below 257 or `min_frequency` below 1.
        ImportError: naming the pip package, when ``tokenizers`` is not installed.
    """
    if isinstance(texts, (str, bytes)):
        raise ValueError("`texts` must be an iterable of strings, not one string.")
    texts = [text for text in texts if text]
    if not texts:
        raise ValueError("`texts` must hold at least one non-empty string; received none.")
    minimum = len(BYTE_SYMBOLS) + 1
    if not is_int(vocabulary_size) or vocabulary_size < minimum:
        raise ValueError(
            f"`vocabulary_size` must be an integer >= {minimum} (the 256 byte symbols and {END_OF_TEXT}); "
            f"received vocabulary_size={vocabulary_size!r}."
        )
    if not is_int(min_frequency) or min_frequency < 1:
        raise ValueError(f"`min_frequency` must be an integer >= 1; received min_frequency={min_frequency!r}.")
    model = _train(_import_tokenizers(), texts, int(vocabulary_size), int(min_frequency))
    return _save(model, directory)


def _train(tokenizers, texts, vocabulary_size, min_frequency):
    """The trained ``tokenizers.models.BPE``."""
    byte_level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocabulary_size, min_frequency=min_frequency, special_tokens=[END_OF_TEXT],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer.model


def _save(model, directory):
    """Writes the model's vocab.json and merges.txt into ``directory`` atomically; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    with tempfile.TemporaryDirectory() as scratch:
        written = dict(zip((VOCABULARY_FILE, MERGES_FILE), model.save(scratch), strict=True))
        for name in (VOCABULARY_FILE, MERGES_FILE):
            source, target = written[name], os.path.join(directory, name)
            if os.path.basename(source) != name:
                raise RuntimeError(f"tokenizers saved {source!r} where {name} was expected.")
            replace_atomically(target, lambda path, source=source: shutil.copyfile(source, path))
            paths.append(target)
    return tuple(paths)
