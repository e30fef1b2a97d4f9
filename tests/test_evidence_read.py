"""Whether each eval row's final context held the evidence, and the report's split of wrong answers by it."""

import json

import pytest

from ragfunnel.errors import InputError
from ragfunnel.eval.report import summarise_run, write_report
from ragfunnel.eval.runner import EvalRow, run_eval
from ragfunnel.journal import ROWS_FILE
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.metrics import evidence_read
from ragfunnel.types import Document, Example


def filler(tag, n):
    return " ".join(f"{tag}{i}" for i in range(n))


# 20-word chunks: chunk 0 is Alpha (its title and 19 words), chunks 1-2 the filler, chunk 3 Beta.
PASSAGES = [Document("Alpha", "Alpha", "Alpha was born in Lyon. " + filler("a", 14)),
            Document("Fill", "Fill", filler("f", 39)),
            Document("Beta", "Beta", "Beta moved to Paris later. " + filler("b", 14))]
CONTEXT = "\n\n".join(d.render() for d in PASSAGES)
QUESTION = "Where was Alpha born?"  # BM25 ranks Alpha's chunk first


def test_evidence_read_hand_computed():
    chunks = ["Alpha was born in Lyon.", "filler words", "Beta moved to The Paris later."]
    assert evidence_read(chunks[:1], chunks, ["Lyon"]) is True  # a chunk read holds the answer
    assert evidence_read(chunks[:1], chunks, ["the paris!"]) is False  # only an unread chunk does (normalised)
    assert evidence_read(chunks[:1], chunks, ["Lyons"]) is None  # no chunk holds it word for word: cannot tell
    assert evidence_read(chunks, chunks, ["Paris", "Rome"]) is True  # any reference answer will do
    # Supporting passages known: every one touched is evidence read, even when no answer stands in the text;
    # one left out is evidence not read, unless a chunk read holds the answer itself.
    assert evidence_read(chunks[:1], chunks, ["yes"], gold_recall=1.0) is True
    assert evidence_read(chunks[:1], chunks, ["yes"], gold_recall=0.5) is False
    assert evidence_read(chunks[:1], chunks, ["Lyon"], gold_recall=0.5) is True
    assert evidence_read(chunks[:1], chunks, ["Paris"], gold_recall=0.0) is False
    assert evidence_read([], [], ["Paris"]) is None


def row_of(path, method, answers, *, gold=True, task="qa", choices=None):
    ex = Example(id="1", question=QUESTION, context=CONTEXT, answers=answers, task=task, choices=choices,
                 passages=PASSAGES if gold else [], meta={"supporting_titles": ["Alpha", "Beta"]} if gold else {})
    (row,) = run_eval([ex], {method.name: method}, path, config={}, progress=False).rows
    return row


def op(budget, task="qa"):
    return make_method("op", strong=FakeLLM(lambda prompt, i: "Lyon"), budget=budget, chunk_words=20, task=task)


@pytest.mark.parametrize(("answers", "budget", "gold", "expected"), [
    (["Lyon"], 20, True, True),  # Alpha's chunk read holds it, though Beta's passage was not touched
    (["Paris"], 20, True, False),  # in Beta's chunk, never read; half the supporting passages touched
    (["Paris"], 200, True, True),  # the whole context fits the budget
    (["yes"], 200, True, True),  # no answer in the text, but every supporting passage touched
    (["yes"], 20, True, False),
    (["Paris"], 20, False, False),  # no supporting passages known: the answer stands in an unread chunk
    (["yes"], 20, False, None),  # nor does any chunk hold the answer: cannot tell
])
def test_rows_record_whether_the_chunks_read_held_the_evidence(tmp_path, answers, budget, gold, expected):
    row = row_of(tmp_path, op(budget), answers, gold=gold)
    assert row.evidence_read is expected
    assert EvalRow.from_json(json.loads(json.dumps(row.to_json()))).evidence_read is expected


def test_long_context_read_the_evidence_when_its_document_holds_it(tmp_path):
    lc = make_method("lc", strong=FakeLLM(lambda prompt, i: "Lyon"))
    assert row_of(tmp_path / "held", lc, ["Paris"], gold=False).evidence_read is True
    # It ranks nothing, and the answer stands nowhere in its document: cannot tell.
    assert row_of(tmp_path / "nowhere", lc, ["yes"], gold=False).evidence_read is None


def test_a_task_without_short_answers_cannot_tell(tmp_path):
    row = row_of(tmp_path, op(20, task="choice"), ["A"], task="choice", choices=["Lyon", "Paris"])
    assert row.evidence_read is None


def test_a_row_written_before_the_field_loads_and_a_wrong_value_is_refused(tmp_path):
    stored = row_of(tmp_path, op(20), ["Lyon"]).to_json()
    del stored["evidence_read"]  # as an older ragfunnel wrote it
    assert EvalRow.from_json(stored).evidence_read is None
    with pytest.raises(InputError, match="'evidence_read' must be true, false or null"):
        EvalRow.from_json(stored | {"evidence_read": "yes"})


def hand_made_run(path, verdicts):
    """A run of op whose rows get the given (f1, evidence_read) each, as if the model had answered so."""
    exs = [Example(id=str(i), question=QUESTION, context=CONTEXT, answers=["Lyon"]) for i in range(len(verdicts))]
    run_eval(exs, {"op": op(20)}, path, config={"dataset": "people.jsonl"}, progress=False)
    rows = [json.loads(x) for x in (path / ROWS_FILE).read_text().splitlines()]
    for r, (f1, evidence) in zip(rows, verdicts, strict=True):
        r["metrics"]["f1"] = f1
        if evidence == "absent":
            del r["evidence_read"]
        else:
            r["evidence_read"] = evidence
    (path / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_report_splits_wrong_answers_by_whether_their_evidence_was_read(tmp_path):
    # Right is F1 >= 0.5: two right (one read, one not), four wrong: two never read the evidence, one read it,
    # one cannot tell. Evidence known on five rows, read on two: recall 0.40.
    hand_made_run(tmp_path, [(1.0, True), (0.5, False), (0.0, False), (0.49, False), (0.2, True), (0.0, None)])
    (s,) = summarise_run(tmp_path)
    assert (s.evidence, s.evidence_recall) == ([True, False, False, False, True], 0.4)
    assert (s.wrong, s.wrong_unread, s.wrong_read) == (4, 2, 1)
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    write_report([tmp_path], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert md[4].endswith("| evidence read | wrong | wrong, evidence not read | wrong, evidence read |")
    assert md[6].endswith("| 0.40 (2/5) | 4 | 2 | 1 |")
    assert md[8].startswith("Right: the first of a row's f1, longbench, accuracy scores is 0.5 or more")


def test_a_run_from_before_evidence_was_recorded_is_still_reported(tmp_path):
    hand_made_run(tmp_path, [(1.0, "absent"), (0.0, "absent")])
    (s,) = summarise_run(tmp_path)
    assert (s.evidence, s.evidence_recall, s.wrong, s.wrong_unread, s.wrong_read) == ([], None, 1, 0, 0)
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    write_report([tmp_path], tmp_path / "out")
    assert (tmp_path / "out" / "report.md").read_text().splitlines()[6].endswith("| - | 1 | - | - |")
