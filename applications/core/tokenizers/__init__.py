"""The in-graph tokenizer algorithms that more than one application uses (TensorFlow, imported on first use):
``byte_bpe`` (byte-level BPE: GPT-2's pre-tokenizer and byte symbols, vocab.json / merges.txt, keras-hub's merges;
GPT-2's and RoBERTa's tokenizers are built on it), ``sentencepiece`` (a SentencePiece model with Hugging Face's
special tokens and whitespace split: ALBERT's, XLM-RoBERTa's and XLNet's tokenizers), ``added_tokens`` (special
tokens matched in raw text), ``case`` (Hugging Face's lower-casing), ``directory`` (reading a tokenizer directory).

Each module is an attribute of the package, imported on first use (core/lazy.py); nothing is imported here.
"""

from ..lazy import lazy_attributes, submodule_names

__all__ = submodule_names(__name__)  # the package's modules, each imported on first use

__getattr__ = lazy_attributes(__name__)
