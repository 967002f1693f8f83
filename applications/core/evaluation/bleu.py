"""Corpus BLEU (Papineni et al. 2002) as sacrebleu computes it (Post 2018): 13a tokenization, one reference per
hypothesis, 0-100. sacrebleu is imported on first use (the ``examples`` / ``test`` extras install it)."""

from __future__ import annotations


__all__ = ["corpus_bleu"]


def corpus_bleu(hypotheses, references, *, tokenize="13a", lowercase=False):
    """Corpus BLEU of detokenized ``hypotheses`` against one reference each.

    ``BLEU = BP * exp(sum_{n=1..4} log p_n / 4)``, ``BP = min(1, exp(1 - r / c))`` (Papineni et al. 2002, section
    2.3), with n-gram precisions p_n counted over the whole corpus.

    Args:
        hypotheses: N strings.
        references: N strings (``references[i]`` is the reference of ``hypotheses[i]``).
        tokenize: sacrebleu's tokenizer ("13a", the WMT standard; "intl", "char", "none", ...).
        lowercase: compare case-insensitively.

    Returns:
        A float in [0, 100].
    """
    import sacrebleu

    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu needs one reference per hypothesis; received {len(hypotheses)} hypotheses "
                         f"for {len(references)} references.")
    if not all(isinstance(t, str) for t in hypotheses + references):
        raise ValueError("corpus_bleu needs strings (detokenized text) as hypotheses and references.")
    return sacrebleu.corpus_bleu(hypotheses, [references], tokenize=tokenize, lowercase=lowercase).score
