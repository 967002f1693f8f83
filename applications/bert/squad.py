"""SQuAD v1.1 / v2.0 (Rajpurkar et al. 2016, 2018) for :class:`~attnlayers.applications.bert.heads.BertSpanQA`:
the JSON reader and the character-to-token span mapping.

The file layout (both versions; v2.0 adds ``is_impossible`` and ``plausible_answers``)::

    {"version": "v2.0", "data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [
        {"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": <char index>}, ...],
         "is_impossible": false}]}]}]}

    examples = read_squad("train-v2.0.json")              # [SquadExample(id, question, context, answers, ...)]
    span = char_span_to_token_span(offsets, answer.answer_start, answer.answer_end, context_mask)
    # (first token, last token) of the answer, or None when the window does not hold it ([CLS], (0, 0), then)
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np


__all__ = ["SquadAnswer", "SquadExample", "char_span_to_token_span", "parse_squad", "read_squad", "token_span_to_text"]


@dataclasses.dataclass(frozen=True)
class SquadAnswer:
    """One answer: its ``text`` and the index of its first character in the context; ``answer_end`` is the index
    after its last (``context[answer_start:answer_end] == text``)."""

    text: str
    answer_start: int

    @property
    def answer_end(self):
        return self.answer_start + len(self.text)


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question on one paragraph.

    Attributes:
        id: the question's id (unique in the file).
        question, context: the texts.
        answers: a tuple of :class:`SquadAnswer` (one in training files, up to several in dev files; empty
            when ``is_impossible``).
        is_impossible: SQuAD 2.0's unanswerable questions (False in v1.1).
        title: the article's title.
        plausible_answers: SQuAD 2.0's wrong-but-plausible spans of unanswerable questions (not targets).
    """

    id: str
    question: str
    context: str
    answers: tuple = ()
    is_impossible: bool = False
    title: str = ""
    plausible_answers: tuple = ()


def _fail(source, where, message):
    raise ValueError(f"{source}: {where}: {message}")


def _field(obj, key, kind, source, where, optional=False, default=None):
    if not isinstance(obj, dict):
        _fail(source, where, f"expected a JSON object; received {type(obj).__name__}.")
    if key not in obj:
        if optional:
            return default
        _fail(source, where, f"missing the field {key!r} (fields present: {sorted(obj)}).")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (int in kinds and isinstance(value, bool) and bool not in kinds):
        names = " or ".join({str: "a string", list: "a list", int: "an integer", bool: "a boolean",
                             dict: "an object"}[k] for k in kinds)
        _fail(source, f"{where}.{key}", f"expected {names}; received {type(value).__name__} {value!r:.60}.")
    return value


def _answers(qa, key, context, source, where, check_answers):
    answers = []
    for k, answer in enumerate(_field(qa, key, list, source, where, optional=True, default=[])):
        at = f"{where}.{key}[{k}]"
        text = _field(answer, "text", str, source, at)
        start = _field(answer, "answer_start", int, source, at)
        if not 0 <= start <= len(context) - len(text):
            _fail(source, f"{at}.answer_start",
                  f"{start} puts the answer ({len(text)} characters) outside the context ({len(context)} characters).")
        if check_answers and context[start:start + len(text)] != text:
            _fail(source, at,
                  f"the context at answer_start={start} reads {context[start:start + len(text)]!r}, not the answer "
                  f"text {text!r} (pass check_answers=False to accept it).")
        answers.append(SquadAnswer(text, start))
    return tuple(answers)


def parse_squad(data, source="<SQuAD data>", check_answers=True):
    """The examples of a parsed SQuAD JSON object (see :func:`read_squad`); ``source`` names it in errors."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        received = f"an object with fields {sorted(data)}" if isinstance(data, dict) else type(data).__name__
        raise ValueError(
            f"{source}: expected a SQuAD file, a JSON object with a 'data' list of articles; received {received}."
        )
    examples, seen = [], {}
    for a, article in enumerate(data["data"]):
        where = f"data[{a}]"
        title = _field(article, "title", str, source, where, optional=True, default="")
        for p, paragraph in enumerate(_field(article, "paragraphs", list, source, where)):
            where_p = f"{where}.paragraphs[{p}]"
            context = _field(paragraph, "context", str, source, where_p)
            for q, qa in enumerate(_field(paragraph, "qas", list, source, where_p)):
                at = f"{where_p}.qas[{q}]"
                qid = _field(qa, "id", (str, int), source, at)
                qid = str(qid)
                if qid in seen:
                    _fail(source, at, f"the id {qid!r} is used twice (first at {seen[qid]}).")
                seen[qid] = at
                question = _field(qa, "question", str, source, at)
                impossible = _field(qa, "is_impossible", bool, source, at, optional=True, default=False)
                answers = _answers(qa, "answers", context, source, at, check_answers)
                plausible = _answers(qa, "plausible_answers", context, source, at, check_answers)
                if impossible and answers:
                    _fail(source, at, f"question {qid!r} is_impossible but has {len(answers)} answers.")
                if not impossible and not answers:
                    _fail(source, at, f"question {qid!r} has no answers and is not marked is_impossible.")
                examples.append(SquadExample(qid, question, context, answers, impossible, title, plausible))
    return examples


def read_squad(path, check_answers=True, encoding="utf-8"):
    """The examples of a SQuAD v1.1 or v2.0 JSON file, in file order.

    Args:
        path: the JSON file.
        check_answers: each answer's text must be the context at its ``answer_start`` (True in the official
            files); False accepts mismatches (the spans stay as the file gives them).
        encoding: the file's text encoding.

    Returns:
        A list of :class:`SquadExample`.

    Raises:
        FileNotFoundError: ``path`` is missing or a directory.
        ValueError: not JSON, or not SQuAD's layout: the message names the file, the place (e.g.
            ``data[0].paragraphs[3].qas[1].answers[0].answer_start``) and what was expected.
    """
    name = os.fspath(path)
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "not found"
        raise FileNotFoundError(f"{name} {what}: read_squad expects a SQuAD v1.1 / v2.0 JSON file.")
    with open(path, encoding=encoding) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}).") \
                from None
        except UnicodeDecodeError as error:
            raise ValueError(f"{name}: not {encoding} text ({error.reason}).") from None
    return parse_squad(data, name, check_answers)


def char_span_to_token_span(offsets, char_start, char_end, token_mask=None):
    """The tokens of a character span: the first token that ends after ``char_start`` and the last that starts
    before ``char_end``, among the tokens of ``token_mask`` (the context's).

    Args:
        offsets: (T, 2) ints, each token's [start, end) characters in the context (a tokenizer's offsets, e.g.
            Hugging Face's ``offset_mapping``); tokens with start == end (special tokens, padding) are skipped.
        char_start, char_end: the answer's [start, end) characters (``SquadAnswer.answer_start`` /
            ``answer_end``), char_start < char_end.
        token_mask: None (every token is a context token) or bool (T,), True at the context's tokens (needed
            when ``offsets`` also holds the question's, which index the question's characters).

    Returns:
        (start_token, end_token), inclusive indices into the T tokens; or None when the tokens do not hold the
        whole answer (a window of a long context that cut it, or a truncated context): BERT trains such windows
        on (0, 0), [CLS].
    """
    offsets = np.asarray(offsets)
    if offsets.ndim != 2 or offsets.shape[-1] != 2:
        raise ValueError(f"`offsets` must have shape (tokens, 2) of [start, end) characters; received {offsets.shape}.")
    if not (0 <= char_start < char_end):
        raise ValueError(
            f"The character span must satisfy 0 <= char_start < char_end; received char_start={char_start}, "
            f"char_end={char_end}."
        )
    usable = offsets[:, 1] > offsets[:, 0]
    if token_mask is not None:
        token_mask = np.asarray(token_mask).astype(bool)
        if token_mask.shape != offsets.shape[:1]:
            raise ValueError(
                f"`token_mask` must have shape ({offsets.shape[0]},), one value per token; received {token_mask.shape}."
            )
        usable &= token_mask
    tokens = np.flatnonzero(usable)
    if not len(tokens):
        return None
    starts, ends = offsets[tokens, 0], offsets[tokens, 1]
    if char_start < starts.min() or char_end > ends.max():
        return None  # the answer begins before or ends after the tokens we have
    first = tokens[np.argmax(ends > char_start)]  # ends is increasing: the first token ending after char_start
    last = tokens[len(starts) - 1 - np.argmax(starts[::-1] < char_end)]  # the last token starting before char_end
    if first > last:
        return None
    return int(first), int(last)


def token_span_to_text(context, offsets, start, end):
    """The context's text of tokens ``start`` .. ``end`` (inclusive): ``context[offsets[start][0]:offsets[end][1]]``
    (the answer string of a :func:`~attnlayers.applications.bert.heads.decode_answers` span; "" for -1)."""
    if start < 0 or end < start:
        return ""
    offsets = np.asarray(offsets)
    return context[int(offsets[start, 0]):int(offsets[end, 1])]
