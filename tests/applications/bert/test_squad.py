"""SQuAD: the v1.1 / v2.0 reader on fixture files the test writes (fields, unanswerable questions, errors that name
the place in the file), the character -> token span mapping on hand-made offsets, and the round trip
answer -> token labels -> decode_answers -> answer text."""

import json

import numpy as np
import pytest
from attnlayers.applications.bert.heads import decode_answers
from attnlayers.applications.bert.squad import (
    SquadAnswer,
    SquadExample,
    char_span_to_token_span,
    parse_squad,
    read_squad,
    token_span_to_text,
)

CONTEXT = "Normandy is a region in France. The Normans gave their name to it in the 10th century."
V11 = {
    "version": "1.1",
    "data": [{"title": "Normans", "paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "q1", "question": "In what country is Normandy?",
         "answers": [{"text": "France", "answer_start": 24}, {"text": "France.", "answer_start": 24}]},
        {"id": "q2", "question": "When did the Normans name it?",
         "answers": [{"text": "10th century", "answer_start": 73}]},
    ]}]}],
}
V20 = {
    "version": "v2.0",
    "data": [{"title": "Normans", "paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "a", "question": "In what country is Normandy?", "is_impossible": False,
         "answers": [{"text": "France", "answer_start": 24}]},
        {"id": "b", "question": "Who gave their name to France?", "is_impossible": True, "answers": [],
         "plausible_answers": [{"text": "The Normans", "answer_start": 32}]},
    ]}]}],
}


def _write(tmp_path, data, name="squad.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_reads_v1_1(tmp_path):
    examples = read_squad(_write(tmp_path, V11))
    assert [e.id for e in examples] == ["q1", "q2"]
    first = examples[0]
    assert isinstance(first, SquadExample)
    assert (first.title, first.question, first.context, first.is_impossible) == (
        "Normans", "In what country is Normandy?", CONTEXT, False)
    assert first.answers == (SquadAnswer("France", 24), SquadAnswer("France.", 24))
    for example in examples:
        for answer in example.answers:
            assert CONTEXT[answer.answer_start:answer.answer_end] == answer.text
    assert examples[1].answers[0].answer_end == 85


def test_reads_v2_0(tmp_path):
    answerable, impossible = read_squad(str(_write(tmp_path, V20)))  # a str path works too
    assert not answerable.is_impossible and answerable.answers == (SquadAnswer("France", 24),)
    assert impossible.is_impossible and impossible.answers == ()
    assert impossible.plausible_answers == (SquadAnswer("The Normans", 32),)
    assert parse_squad(V20) == [answerable, impossible]  # an already-parsed object


def _broken(edit):
    data = json.loads(json.dumps(V11))
    edit(data)
    return data


def _qa(data, q=0):
    return data["data"][0]["paragraphs"][0]["qas"][q]


@pytest.mark.parametrize(
    "data, match",
    [
        ("{not json", r"squad.json: not valid JSON \(line 1, column 2"),
        ([1, 2], r"squad.json: expected a SQuAD file.*'data' list.*received list"),
        ({"version": "1.1"}, r"expected a SQuAD file.*received an object with fields \['version'\]"),
        (_broken(lambda d: d["data"][0].pop("paragraphs")), r"data\[0\]: missing the field 'paragraphs'"),
        (_broken(lambda d: d["data"][0]["paragraphs"][0].pop("context")),
         r"data\[0\].paragraphs\[0\]: missing the field 'context'"),
        (_broken(lambda d: d["data"][0]["paragraphs"][0].update(qas={})),
         r"data\[0\].paragraphs\[0\].qas: expected a list; received dict"),
        (_broken(lambda d: _qa(d, 1).pop("question")), r"qas\[1\]: missing the field 'question'"),
        (_broken(lambda d: _qa(d)["answers"][1].update(answer_start="24")),
         r"qas\[0\].answers\[1\].answer_start: expected an integer; received str"),
        (_broken(lambda d: _qa(d)["answers"][0].update(answer_start=True)),
         r"answers\[0\].answer_start: expected an integer; received bool"),
        (_broken(lambda d: _qa(d, 1)["answers"][0].update(answer_start=80)),
         r"qas\[1\].answers\[0\].answer_start: 80 puts the answer \(12 characters\) outside the context \(86"),
        (_broken(lambda d: _qa(d, 1)["answers"][0].update(answer_start=70)),
         r"qas\[1\].answers\[0\]: the context at answer_start=70 reads 'he 10th cent', not the answer text"),
        (_broken(lambda d: _qa(d, 1).update(id="q1")), r"qas\[1\]: the id 'q1' is used twice \(first at .*qas\[0\]\)"),
        (_broken(lambda d: _qa(d).update(is_impossible=True)), r"question 'q1' is_impossible but has 2 answers"),
        (_broken(lambda d: _qa(d).update(answers=[])), r"question 'q1' has no answers and is not marked is_impossible"),
    ],
)
def test_malformed_files_name_the_place(tmp_path, data, match):
    with pytest.raises(ValueError, match=match):
        read_squad(_write(tmp_path, data))


def test_missing_file_and_lenient_answers(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothing.json not found: read_squad expects a SQuAD"):
        read_squad(tmp_path / "nothing.json")
    with pytest.raises(FileNotFoundError, match=r"is a directory"):
        read_squad(tmp_path)
    shifted = _broken(lambda d: _qa(d, 1)["answers"][0].update(answer_start=70))
    examples = read_squad(_write(tmp_path, shifted), check_answers=False)
    assert examples[1].answers == (SquadAnswer("10th century", 70),)


def _tokenize(question, context):
    """A stand-in WordPiece: [CLS] question [SEP] context [SEP], words split off punctuation and into pieces of at
    most 4 characters, each token with its [start, end) characters in its own text (0, 0 for special tokens)."""
    import re

    def pieces(text):
        for match in re.finditer(r"\w+|[^\w\s]", text):
            for start in range(match.start(), match.end(), 4):
                yield start, min(start + 4, match.end())

    q, c = list(pieces(question)), list(pieces(context))
    offsets = [(0, 0)] + q + [(0, 0)] + c + [(0, 0)]
    segments = [0] * (len(q) + 2) + [1] * (len(c) + 1)
    context_mask = [False] * (len(q) + 2) + [True] * len(c) + [False]
    return np.array(offsets), np.array(segments), np.array(context_mask)


def test_char_span_to_token_span():
    offsets, _, context = _tokenize("Where?", CONTEXT)
    # Tokens of the context: "Norm" "andy" "is" "a" "regi" "on" "in" "Fran" "ce" "." ...
    span = char_span_to_token_span(offsets, 24, 30, context)  # "France"
    assert token_span_to_text(CONTEXT, offsets, *span) == "France"
    assert span[1] - span[0] == 1  # "Fran" "ce"
    span = char_span_to_token_span(offsets, 73, 85, context)
    assert token_span_to_text(CONTEXT, offsets, *span) == "10th century"
    # A span starting or ending inside a token takes the whole token.
    span = char_span_to_token_span(offsets, 2, 6, context)  # "rman" inside "Norm" "andy"
    assert token_span_to_text(CONTEXT, offsets, *span) == "Normandy"
    # The question's offsets index the question: without the mask the question's "Wher" would be taken.
    assert char_span_to_token_span(offsets, 0, 4, context)[0] > 2
    assert char_span_to_token_span(offsets, 0, 4)[0] == 1
    # A window that cut the answer off: None (BERT labels such windows (0, 0), [CLS]).
    window = context & (np.arange(len(context)) < 20)
    assert char_span_to_token_span(offsets, 73, 85, window) is None
    assert char_span_to_token_span(offsets, 0, 4, np.zeros(len(context), bool)) is None
    assert token_span_to_text(CONTEXT, offsets, -1, -1) == ""
    with pytest.raises(ValueError, match=r"offsets.*\(tokens, 2\).*\(3,\)"):
        char_span_to_token_span([1, 2, 3], 0, 1)
    with pytest.raises(ValueError, match=r"char_start < char_end.*char_start=5, char_end=5"):
        char_span_to_token_span(offsets, 5, 5)
    with pytest.raises(ValueError, match=r"token_mask.*one value per token"):
        char_span_to_token_span(offsets, 0, 4, context[:3])


def test_answer_to_labels_to_decoded_text(tmp_path):
    """A reader example -> start / end token labels -> logits peaked there -> decode_answers -> the answer text."""
    for example in read_squad(_write(tmp_path, V11)):
        answer = example.answers[0]
        offsets, _, context = _tokenize(example.question, example.context)
        start, end = char_span_to_token_span(offsets, answer.answer_start, answer.answer_end, context)
        start_logits, end_logits = np.zeros(len(offsets)), np.zeros(len(offsets))
        start_logits[start], end_logits[end] = 5.0, 5.0
        start_logits[0] = end_logits[0] = 9.0  # [CLS] scores higher but is not a valid answer
        decoded = decode_answers(start_logits, end_logits, context)
        assert token_span_to_text(example.context, offsets, decoded.start, decoded.end) == answer.text
