"""Checking an answer against its question, by hand: each check, what skips it, and the signal and trace entry
it leaves on an assessed prediction."""

from __future__ import annotations

import pytest

from ragfunnel.confidence import assess, using_calibration
from ragfunnel.confidence.answer_check import ANSWER_CHECKS, check_answer, stopped_early
from ragfunnel.confidence.calibration import CalibrationFile, Calibrator
from ragfunnel.llm.fake import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.methods.base import Generation, as_prediction
from ragfunnel.types import Chunk, Completion, Prediction, ScoredChunk, StageTrace, Trace

BRIDGE = "In which town was the winner of the 1987 Orla Cup born?"
CHAIN = ["Tomas Verhoef", "Zwolle"]  # the chain's intermediate answers; its last hop answers the question


@pytest.mark.parametrize(("question", "answer", "failed"), [
    # when: a date, a year or a time word fits; a place does not
    ("When was the Keld footbridge rebuilt?", "in 1998", None),
    ("When was the Keld footbridge rebuilt?", "after the flood", None),
    ("When was the Keld footbridge rebuilt?", "3 May 1921", None),
    ("In what year was the Keld footbridge rebuilt?", "the river Swale", "type"),
    ("When was the Keld footbridge rebuilt?", "the river Swale", "type"),
    # how many: a numeral or a number word
    ("How many pumps were replaced?", "three", None),
    ("How many pumps were replaced?", "27,340", None),
    ("How many pumps were replaced?", "the old ones", "type"),
    # who / where: anything but a bare number or date
    ("Who won the 1987 Orla Cup?", "Tomas Verhoef", None),
    ("Who won the 1987 Orla Cup?", "1962", "type"),
    ("Where was Tomas Verhoef born?", "Zwolle", None),
    ("Where was Tomas Verhoef born?", "12 January 1919", "type"),
    # an auxiliary-led comparison: one of its options, or the answer is of the wrong kind
    ("Was Ilse Brand or Marta Sobel born first?", "Marta Sobel", None),
    ("Was Ilse Brand or Marta Sobel born first?", "Tomas Verhoef", "type"),
    # yes/no: only a statement of five words or more that says neither yes nor no
    ("Are Medici and Senet both board games?", "Yes", None),
    ("Are Medici and Senet both board games?", "No, Senet is a board game but Medici is not.", None),
    ("Are Medici and Senet both board games?", "backgammon and chess", None),  # short: may be what is asked about
    ("Were other baselines tested?", "SVM, Word Count Baseline, Human Performance", None),  # a list, no statement
    ("Are Medici and Senet both board games?", "Medici is a card game played in Florence", "type"),
])
def test_the_type_check_reads_the_kind_the_question_asks_for(question, answer, failed):
    assert check_answer(question, answer) == failed


@pytest.mark.parametrize(("question", "answer", "failed"), [
    (BRIDGE, "the Orla Cup", "echo"),
    ("Which Orla Cup winner kept a bicycle shop?", "the Orla Cup winner's", "echo"),  # possessive, same name
    (BRIDGE, "Zwolle", None),
    # A comparison's answer is an option, and the question holds every word of it.
    ("Who was born first, Ilse Brand or Marta Sobel?", "Marta Sobel", None),
    ("Who won an award first, the Brothers Quay, or Alexandra Shiva?", "Brothers Quay", None),
    # A yes or no is the answer, however much of the question the rest repeats.
    ("Is the bridge necessary for the crossing?", "No, the bridge is not necessary", None),
])
def test_an_echo_repeats_the_question_without_answering_it(question, answer, failed):
    assert check_answer(question, answer) == failed


def test_an_earlier_hop_is_one_before_the_chains_last():
    assert check_answer(BRIDGE, "Tomas Verhoef", CHAIN) == "earlier_hop"
    assert check_answer(BRIDGE, "Verhoef", CHAIN) == "earlier_hop"  # token F1 2/3 with the first hop
    assert check_answer(BRIDGE, "Zwolle", CHAIN) is None  # the chain's last hop is its answer
    assert check_answer(BRIDGE, "Utrecht", CHAIN) is None
    assert check_answer(BRIDGE, "Tomas Verhoef", ["Tomas Verhoef"]) is None  # one hop: nothing earlier
    assert check_answer(BRIDGE, "Tomas Verhoef") is None  # no chain ran
    # A hop the chain came back to at its end is its answer, not an earlier hop.
    assert not stopped_early("Tomas Verhoef", ["Tomas Verhoef", "Zwolle", "Tomas Verhoef"])


@pytest.mark.parametrize(("question", "answer"), [
    ("基尔德人行桥是什么时候重建的？", "斯韦尔河"),  # Chinese: its kind is not guessed
    ("The year the Keld footbridge was rebuilt", "the river Swale"),  # no question word
    ("keld footbridge rebuilt year", "the river Swale"),
])
def test_questions_of_unknown_kind_skip_the_type_check(question, answer):
    assert check_answer(question, answer) is None


@pytest.mark.parametrize("answer", ["", "  ", "unanswerable", "The text does not mention it.", "It doesn't say.",
                                    "Unknown", "N/A"])
def test_a_declined_or_empty_answer_fails_nothing(answer):
    # Each of these would fail a check were it an answer: when without a date, and an earlier hop.
    assert check_answer("When was the Orla Cup first held?", answer, [answer, "1950"]) is None


def test_the_first_failed_check_is_named():
    assert ANSWER_CHECKS == ("type", "echo", "earlier_hop")
    # Both of the wrong type and an echo: the type is named.
    assert check_answer("When was the Keld footbridge rebuilt?", "the Keld footbridge") == "type"
    # An echo and an earlier hop: the echo is named.
    assert check_answer(BRIDGE, "the Orla Cup", ["the 1987 Orla Cup", "Zwolle"]) == "echo"


def _prediction(answer: str) -> Prediction:
    chunk = Chunk("c0", "Tomas Verhoef was born in Zwolle in 1962.", "doc", 0, 8)
    return Prediction(answer=answer, method="op", chunks_used=[ScoredChunk(chunk, 1.0)], trace=Trace([]))


def test_assess_records_the_check_as_a_signal_and_in_its_stage():
    failed = assess(_prediction("Zwolle"), llm=None, task="qa", question="When was Tomas Verhoef born?")
    assert failed.signals["answer_check"] == 0.0
    assert failed.trace.stages[-1].detail["check"] == "type"
    assert failed.trace.stages[-1].detail["signals"]["answer_check"] == 0.0
    passed = assess(_prediction("1962"), llm=None, task="qa", question="When was Tomas Verhoef born?")
    assert passed.signals["answer_check"] == 1.0 and passed.trace.stages[-1].detail["check"] is None
    hop = assess(_prediction("Tomas Verhoef"), llm=None, task="qa", question=BRIDGE, hop_answers=CHAIN)
    assert hop.signals["answer_check"] == 0.0 and hop.trace.stages[-1].detail["check"] == "earlier_hop"
    # A multiple-choice answer is one of its options: its form is not checked against the question.
    chosen = assess(_prediction("Zwolle"), llm=None, task="choice", question="When was Tomas Verhoef born?",
                    choices=["Zwolle", "Utrecht"])
    assert "answer_check" not in chosen.signals and chosen.trace.stages[-1].detail["check"] is None


def test_a_method_answer_carries_the_check():
    words = " ".join(f"word{i}" for i in range(600))
    op = make_method("op", strong=FakeLLM(lambda p, i: "Zwolle", context_window=8192), budget=200, chunk_words=50)
    p = op.run("When was word7 written?", words)
    assert p.signals["answer_check"] == 0.0
    assert [s.detail["check"] for s in p.trace.stages if s.name == "confidence"] == ["type"]


def test_as_prediction_passes_a_chains_intermediate_answers_on():
    stage = StageTrace(name="final")
    gen = Generation("Tomas Verhoef", Completion("Tomas Verhoef", 40, 2, 0.0), stage, task="qa", question=BRIDGE)
    assert as_prediction("stepwise", gen, [], [stage], hop_answers=CHAIN).trace.stages[-1].detail["check"] == \
        "earlier_hop"
    assert as_prediction("stepwise", gen, [], [stage]).signals["answer_check"] == 1.0


def test_a_calibration_without_the_signal_is_not_moved_by_it(tmp_path):
    model = Calibrator("default", ("support",), (0.5,), (1.0,), (2.0,), 0.0)
    assert model.predict({"support": 1.0, "answer_check": 0.0}) == model.predict({"support": 1.0})
    path = tmp_path / "cal.json"
    CalibrationFile(models={"default": model}).save(path)
    with using_calibration(path):
        wrong_kind = assess(_prediction("Zwolle"), llm=None, task="qa", question="When was Tomas Verhoef born?")
        right_kind = assess(_prediction("Zwolle"), llm=None, task="qa", question="Where was Tomas Verhoef born?")
    assert wrong_kind.signals["answer_check"] == 0.0 and right_kind.signals["answer_check"] == 1.0
    assert wrong_kind.confidence == right_kind.confidence
