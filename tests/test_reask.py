"""auto's second read of an answer that cannot fit its question (methods/reask.py), with FakeLLM for the
control flow; whether it helps the bundled model is measured in benchmarks/reask.py."""

from __future__ import annotations

import pytest

from ragfunnel.llm.fake import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.methods.reask import note, wanted

pytestmark = pytest.mark.unit

CONTEXT = ("The Harbour Bridge of Lindvik was opened in 1932 by the mayor. " * 3 + "Lindvik lies in Norway. " * 3) * 4


def test_what_is_wanted_is_said_for_each_kind_of_question():
    assert wanted("When was the bridge opened?") == "a date or a year"
    assert wanted("How many people live there?") == "a number"
    assert wanted("Who was born first, Ada Brun or Tomas Verhoef?") == (
        "one of the two it names, Ada Brun or Tomas Verhoef")
    assert wanted("桥是哪一年开通的？") is None  # a Chinese question's kind is not guessed
    assert note("When was the bridge opened?", "Norway", "type") == (
        'Note: "Norway" is not a date or a year, and the question asks for a date or a year. Answer with a date '
        'or a year, as the text states it.')
    assert note("If Gallu is a demon Lilu is what?", "Lilu", "echo").startswith('Note: "Lilu" only repeats words')


def _auto(first: str, second: str = "", **options) -> tuple:
    """auto whose model answers ``first``, and ``second`` once told what is wanted."""
    llm = FakeLLM(lambda prompt, i: second if "Note:" in prompt else first)
    return make_method("auto", light=llm, strong=llm, budget=200, **options), llm


def test_an_answer_of_the_wrong_kind_is_asked_again_and_the_fitting_one_kept():
    auto, llm = _auto("Norway", "1932")
    p = auto.run("When was the Harbour Bridge of Lindvik opened?", CONTEXT)
    assert p.answer == "1932"
    escalate = next(s for s in p.trace.stages if s.name == "escalate")
    assert escalate.detail["reask"] == {"check": "type", "answer": "1932", "kept": True}
    assert [s.name for s in p.trace.stages].count("reask") == 1
    second = llm.calls[-1][0]
    assert second.startswith(llm.calls[0][0].rsplit("Question:", 1)[0])  # the same passages, read first
    assert '"Norway" is not a date or a year' in second


def test_a_second_answer_that_fails_too_leaves_the_first():
    auto, _ = _auto("Norway", "not mentioned")
    p = auto.run("When was the Harbour Bridge of Lindvik opened?", CONTEXT)
    assert p.answer == "Norway"
    escalate = next(s for s in p.trace.stages if s.name == "escalate")
    assert escalate.detail["reask"] == {"check": "type", "answer": "not mentioned", "kept": False}
    names = [s.name for s in p.trace.stages]
    assert names.count("confidence") == 1 and names.index("confidence") < names.index("reask")  # not assessed again


def test_a_fitting_answer_is_not_asked_again_nor_is_anything_when_turned_off():
    auto, llm = _auto("1932")
    assert auto.run("When was the Harbour Bridge of Lindvik opened?", CONTEXT).answer == "1932"
    assert len(llm.calls) == 1
    auto, llm = _auto("Norway", reask=False)
    assert auto.run("When was the Harbour Bridge of Lindvik opened?", CONTEXT).answer == "Norway"
    assert len(llm.calls) == 1


def test_a_context_with_lone_surrogates_is_answered_and_its_seconds_kept_in_the_ledger():
    auto, _ = _auto("1932")
    from ragfunnel.methods.auto import LEDGER  # noqa: PLC0415
    from ragfunnel.text import check_context  # noqa: PLC0415
    text = CONTEXT + " broken \ud800 text."
    before = LEDGER.spent(check_context(text))
    assert auto.run("When was the Harbour Bridge of Lindvik opened?", text).answer == "1932"
    assert LEDGER.spent(check_context(text)) > before
