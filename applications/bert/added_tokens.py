"""Special tokens cut out of raw text before it is tokenized: moved to ``applications.core.tokenizers.added_tokens``
(the XLNet application's tokenizer uses them too); the names stay importable here."""

from ..core.tokenizers.added_tokens import AddedTokens, read_strip_flags

__all__ = ["AddedTokens", "read_strip_flags"]
