"""The sentence-level objective that BERT-style pretraining adds to the masked LM, one option through the data
(``pretraining_dataset(sentence_objective=...)``), the model (``BertPretrainer(backbone, sentence_objective=...)``)
and the runs (``PretrainingSettings.sentence_objective``, examples/pretrain_bert.py ``--objective``):

    "nsp"  next sentence prediction (BERT; Devlin et al. 2019, section 3.1 "Task #2"): is B the text that follows A
           in its document (0 = IsNext) or a segment of another document (1 = NotNext)?
    "sop"  sentence-order prediction (ALBERT; Lan et al. 2020, section 3.1 "Inter-sentence coherence loss"): two
           consecutive segments of one document, in their order (0) or swapped (1).
    None   no sentence objective: the masked LM alone (RoBERTa; Liu et al. 2019, section 4.2, which drops NSP;
           with the dynamic masking of its section 4.1, the data's default for every objective here).

Both sentence objectives classify the backbone's pooled output (the tanh pooler over [CLS]) into 2 classes, so they
need a backbone with a pooler; the masked LM alone works with any backbone (DistilBERT's has no pooler).

``RECIPES`` names the three families' choices: ``RECIPES["roberta"]`` is None.
"""

from __future__ import annotations

__all__ = ["RECIPES", "SENTENCE_OBJECTIVES", "check_sentence_objective"]

SENTENCE_OBJECTIVES = ("nsp", "sop", None)
# The family whose pretraining each objective follows -> its sentence objective (examples/pretrain_bert.py --objective).
RECIPES = {"bert": "nsp", "roberta": None, "albert": "sop"}


def check_sentence_objective(sentence_objective):
    """``sentence_objective`` if it is one of ``SENTENCE_OBJECTIVES`` ("nsp", "sop" or None), else a ValueError
    naming the argument and the choices."""
    if isinstance(sentence_objective, str) and sentence_objective in SENTENCE_OBJECTIVES:
        return sentence_objective
    if sentence_objective is None:
        return None
    raise ValueError(
        f"`sentence_objective` must be 'nsp' (next sentence prediction, BERT), 'sop' (sentence-order prediction, "
        f"ALBERT) or None (the masked LM alone, RoBERTa); received sentence_objective={sentence_objective!r}."
    )
