"""Confidence signals by hand, assessing a prediction, abstention, FB-RAG's agreement weights and auto's ladder."""

from __future__ import annotations

import math

import pytest

from ragfunnel.confidence import Abstaining, abstain, abstained, assess, measuring_every_signal, using_calibration
from ragfunnel.confidence.calibration import CalibrationFile, Calibrator
from ragfunnel.confidence.signals import (
    draft_signals,
    form_signals,
    logprob_signals,
    support_signals,
)
from ragfunnel.errors import ConfigError
from ragfunnel.llm.base import Capabilities
from ragfunnel.llm.fake import FakeLLM
from ragfunnel.llm.openai import _token_logprobs
from ragfunnel.llm.speed import SpeedProfile
from ragfunnel.methods import make_method
from ragfunnel.methods.auto import Auto
from ragfunnel.methods.config import AutoConfig
from ragfunnel.types import Chunk, Prediction, Sample, ScoredChunk, StageTrace, Trace

WORDS = " ".join(f"word{i}" for i in range(3000))


def test_logprob_signals_by_hand():
    assert logprob_signals([-0.5, -1.5, 0.0]) == {"answer_logprob_mean": pytest.approx(-2 / 3),
                                                  "answer_logprob_min": -1.5}
    assert logprob_signals([]) == {}


def test_support_counts_the_answers_words_in_what_was_read():
    read = ["The dam was built by Ada Lovelace in 1843.", "Nothing here about it."]
    s = support_signals("Ada Lovelace!", read)
    assert s["support"] == 1.0 and s["support_chunks"] == pytest.approx(math.log(2))  # the whole answer: 1 chunk
    assert support_signals("Ada Lovelace, 1843", read)["support_chunks"] == 0.0  # words found, not together
    half = support_signals("Charles Babbage Lovelace 1843", read)  # 2 of 4 words found, whole answer nowhere
    assert half["support"] == 0.5 and half["support_chunks"] == 0.0
    assert support_signals("the", read) == {}  # nothing left after normalising (articles drop)
    scored = support_signals("Ada Lovelace", [*read, "Ada Lovelace again"], [2.0, 4.0, 1.0])
    assert scored["support_score"] == 0.5  # the best chunk holding it scored 2 of the best 4
    assert support_signals("Babbage", read, [2.0, 4.0])["support_score"] == 0.0


def test_draft_signals_by_hand():
    samples = [Sample("", "r", "Paris"), Sample("", "r", "Paris France"), Sample("", "r", ""),
               Sample("", "r", "Lyon")]
    s = draft_signals(samples, "Paris")
    # pairs: (Paris, Paris France) F1 = 2/3, (Paris, Lyon) 0, (Paris France, Lyon) 0
    assert s["draft_agreement"] == pytest.approx((2 / 3) / 3)
    assert s["draft_final_agreement"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert s["drafts_answered"] == 0.75
    assert draft_signals([Sample("", "r", "")], "Paris") == {"drafts_answered": 0.0}
    assert draft_signals([], "Paris") == {}


@pytest.mark.parametrize(("question", "answer", "match"), [
    ("Was the bridge built before 1900?", "yes", 1.0),
    ("Was the bridge built before 1900?", "The bridge was old", 0.0),
    ("Is it red or blue?", "red", None),  # a choice between two, not a yes/no question
    ("How many pumps were replaced?", "three", 1.0),
    ("When did the main open?", "in 1998", 1.0),
    ("When did the main open?", "after the flood", 0.0),
    ("Who laid the main?", "Kestrel Water", None),
])
def test_form_signals_check_the_answers_kind(question, answer, match):
    s = form_signals(question, answer)
    assert s.get("type_match") == match
    assert s["answer_words"] == pytest.approx(math.log1p(len(answer.split())))


def test_echo_is_the_share_of_the_answers_words_the_question_holds():
    assert form_signals("Which city in Western Australia hosts the games?", "Perth, Western Australia")["echo"] == \
        pytest.approx(2 / 3)
    assert form_signals("Who wrote it?", "Ada")["echo"] == 0.0


@pytest.mark.parametrize(("answer", "declined"), [("The text does not mention it.", 1.0), ("unanswerable", 1.0),
                                                  ("Not specified", 1.0), ("Ada Lovelace", 0.0)])
def test_declining_answers_are_flagged(answer, declined):
    assert form_signals("Who?", answer)["declined"] == declined


def _calibration(weights: dict[str, float], *, bias: float = 0.0, held_out: float | None = 0.8) -> CalibrationFile:
    names = tuple(weights)
    model = Calibrator("default", names, (0.0,) * len(names), (1.0,) * len(names), tuple(weights.values()), bias)
    return CalibrationFile(models={"default": model},
                           held_out={} if held_out is None else {"default": {"auroc": held_out, "ece": 0.05,
                                                                             "rows": 40.0}})


def _prediction(answer: str = "word7", method: str = "op") -> Prediction:
    chunk = Chunk("c0", "word6 word7 word8", "doc", 0, 3)
    return Prediction(answer=answer, method=method, chunks_used=[ScoredChunk(chunk, 1.0)], trace=Trace([]))


def test_assess_adds_signals_a_confidence_and_a_stage(tmp_path):
    path = tmp_path / "cal.json"
    _calibration({"support": 2.0}).save(path)
    with using_calibration(path):
        p = assess(_prediction(), llm=None, task="qa", question="Which word?")
    assert p.signals["support"] == 1.0 and p.confidence == pytest.approx(1 / (1 + math.exp(-2.0)))
    stage = p.trace.stages[-1]
    assert stage.name == "confidence" and stage.detail["signals"]["support"] == 1.0
    assert p.to_dict()["confidence"] == round(p.confidence, 4)


def test_summaries_and_empty_answers_get_no_confidence():
    assert assess(_prediction(), llm=None, task="summary", question="Sum up").confidence is None
    assert assess(_prediction(answer=""), llm=None, task="qa", question="Which?").signals == {}


def test_the_judge_is_asked_after_the_answer_and_its_answer_is_a_signal():
    class Judging(FakeLLM):
        capabilities = Capabilities(yes_probability=True)

        def yes_probability(self, prompt, answer, check):
            self.judged = (prompt, answer, check)
            return 0.25

    llm = Judging(lambda p, i: "word7", context_window=8192)
    with measuring_every_signal():
        p = make_method("op", strong=llm, budget=500, chunk_words=100).run("Which word?", WORDS)
    assert p.signals["judge_yes"] == 0.25
    assert llm.judged[0] == p.prompt and llm.judged[1] == "word7" and "Yes or No" in llm.judged[2]


def test_abstaining_withholds_unsure_answers_and_says_so():
    sure, unsure = _prediction(), _prediction()
    sure.confidence, unsure.confidence = 0.8, 0.2
    assert abstain(sure, 0.5) is sure
    withheld = abstain(unsure, 0.5)
    assert withheld.answer == "unanswerable" and abstained(withheld)
    assert withheld.trace.stages[-1].detail == {"withheld": "word7", "confidence": 0.2, "below": 0.5}
    assert abstain(_prediction(), 0.5).answer == "word7"  # no confidence: nothing to abstain on
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        Abstaining(object(), 1.5)


def test_fb_weighs_the_drafts_by_their_agreement():
    fb = make_method("fb", light=FakeLLM(lambda p, i: "x"), strong=FakeLLM(lambda p, i: "x"))
    agree = [Sample("", "r", "Paris")] * 3
    assert fb.forward_weights(agree) == (0.5, 0.5, 1.0)
    split = [Sample("", "r", "Paris"), Sample("", "r", "Lyon")]
    assert fb.forward_weights(split) == (0.0, 1.0, 0.0)  # contradicting drafts: the question's scores alone
    assert fb.forward_weights([Sample("", "r", "")] * 2) == (0.5, 0.5, None)  # nothing to agree on: the paper's
    plain = make_method("fb", light=FakeLLM(lambda p, i: "x"), strong=FakeLLM(lambda p, i: "x"),
                        agreement_weighted=False)
    assert plain.forward_weights(split) == (0.5, 0.5, None)


def test_fb_records_the_weights_it_used():
    light = FakeLLM(lambda p, i: ["Rationale: a\nAnswer: word7", "Rationale: b\nAnswer: word9"][i % 2],
                    context_window=8192)
    strong = FakeLLM(lambda p, i: "word7", context_window=8192)
    p = make_method("fb", light=light, strong=strong, budget=500, chunk_words=100, samples=2).run("Which?", WORDS)
    detail = p.trace.stage("stage2_forward").detail
    assert detail["draft_agreement"] == 0.0 and detail["eta_forward"] == 0.0 and detail["eta_backward"] == 1.0


# --- auto's ladder ---------------------------------------------------------------------------------------------


def _auto(prefer: str, answers: dict[str, str], *, draft: str = "Rationale: r\nAnswer: word7", **kwargs) -> Auto:
    """auto over scripted models: OP's and LC's prompts are answered by ``answers['op']`` and ``['lc']``
    (told apart by length), FB-RAG's final answer by ``answers['fb']`` (its prompt follows the drafts; an
    answer that is an exception is raised). The light model drafts ``draft``."""
    import ragfunnel.llm.speed as speed

    state = {"drafted": False}

    def strong_reply(prompt: str, i: int) -> str:
        if len(prompt.split()) > 2000:
            return answers["lc"]
        reply = answers["fb"] if state["drafted"] else answers["op"]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def light_reply(prompt: str, i: int) -> str:
        state["drafted"] = True
        return draft

    light = FakeLLM(light_reply, name="light", context_window=8192)
    strong = FakeLLM(strong_reply, name="strong", context_window=8192)
    speed._measured.update({"FakeLLM:light": SpeedProfile(400, 40), "FakeLLM:strong": SpeedProfile(100, 10)})
    return Auto(AutoConfig(budget=500, chunk_words=100, prefer=prefer, **kwargs), light=light, strong=strong)


@pytest.fixture
def bm25_ranking(monkeypatch):
    """The shared ranking without MiniLM: these tests script which chunks BM25 puts first."""
    import ragfunnel.retrieve.ranking as ranking
    from ragfunnel.errors import MissingExtra

    def missing(*args, **kwargs):
        raise MissingExtra("onnxruntime and tokenizers", "embed")

    monkeypatch.setattr(ranking, "dense_scores", missing)
    monkeypatch.setattr(ranking, "_fallback_reported", True)


@pytest.fixture
def support_decides(tmp_path, bm25_ranking):
    """A calibration where an answer found in the text read is confident and one that is not is unsure."""
    path = tmp_path / "cal.json"
    _calibration({"support": 6.0}, bias=-3.0, held_out=0.8).save(path)
    return path


def test_a_confident_first_answer_stops_the_climb(support_decides):
    with using_calibration(support_decides):
        p = _auto("quality", {"op": "word7", "fb": "word9", "lc": "word8"}).run("Which word?", WORDS)
    climb = p.trace.stages[-1]
    assert [r["method"] for r in climb.detail["rungs"]] == ["op"] and "reaches" in climb.detail["stopped"]
    assert p.method == "auto:op" and p.answer == "word7"


def test_an_unsure_answer_climbs_and_the_most_confident_is_kept(support_decides):
    with using_calibration(support_decides):
        p = _auto("quality", {"op": "Nowhere Town", "fb": "word9", "lc": "word8"},
                  draft="Rationale: r\nAnswer: word1507").run("Which word is word2500?", WORDS)
    climb = p.trace.stages[-1]
    assert [r["method"] for r in climb.detail["rungs"]] == ["op", "fb"]  # fb is sure: lc never runs
    assert climb.detail["rungs"][1]["added_chunks"] == [15]  # the drafts' chunk, which OP did not read
    assert climb.detail["answered_by"] == "fb" and p.method == "auto:fb" and p.answer == "word9"
    assert {s.detail.get("rung") for s in p.trace.stages[1:-1]} == {"op", "fb"}  # every rung's stages are kept


def test_a_climb_streams_every_rungs_stages_once_as_the_trace_keeps_them(support_decides):
    from tests.helpers.methods import Listener, streamed

    with using_calibration(support_decides):
        listener, p = streamed(lambda: _auto("quality", {"op": "Nowhere", "fb": "Elsewhere", "lc": "word8"})
                               .run("Which word?", WORDS))
    assert [r["method"] for r in p.trace.stages[-1].detail["rungs"]] == ["op", "fb", "lc"]
    assert listener.done == Listener().final(p)  # no stage re-sent, none renamed, none dropped


def test_balanced_never_climbs_and_quality_climbs_to_lc(support_decides):
    unsure = {"op": "Nowhere", "fb": "Elsewhere", "lc": "word8"}
    with using_calibration(support_decides):
        fast = _auto("balanced", unsure).run("Which word?", WORDS)
        best = _auto("quality", unsure).run("Which word?", WORDS)
    assert [r["method"] for r in fast.trace.stages[-1].detail["rungs"]] == ["op"]
    assert fast.trace.stages[0].detail["ladder"] == []
    assert [r["method"] for r in best.trace.stages[-1].detail["rungs"]] == ["op", "fb", "lc"]
    assert best.answer == "word8"


def test_a_rung_that_would_read_the_same_chunks_is_skipped(support_decides):
    # Drafts that share no word with the text leave FB-RAG's ranking the question's own, so its final
    # chunks are OP's: its strong model never answers, and the climb goes on to LC, which reads the rest.
    with using_calibration(support_decides):
        p = _auto("quality", {"op": "Nowhere", "fb": "never asked", "lc": "word8"},
                  draft="Rationale: zzz\nAnswer: qqq").run("Which word is word42?", WORDS)
    rungs = p.trace.stages[-1].detail["rungs"]
    assert [r["method"] for r in rungs] == ["op", "fb", "lc"] and "skipped" in rungs[1]
    op_read = set(rungs[0]["added_chunks"])
    assert op_read and set(rungs[2]["added_chunks"]) == set(range(30)) - op_read  # LC adds every other chunk
    assert "stage2_forward" in [s.name for s in p.trace.stages]  # the drafts' cost stays in the trace
    assert not any(s.name == "stage3_generate" for s in p.trace.stages)
    assert p.answer == "word8" and p.method == "auto:lc"


def test_once_every_chunk_was_read_no_rung_runs(support_decides):
    auto = _auto("quality", {"op": "never asked", "fb": "never asked", "lc": "never asked"})
    for rung in ("op", "fb", "lc"):  # after LC went first (a document the strong model holds)
        assert auto._rung(rung, "Which word?", WORDS, choices=None, read=set(range(30)),
                          everything=set(range(30))) == (None, [])


def test_a_rung_that_fails_keeps_the_answer_already_made(support_decides):
    from ragfunnel.errors import BackendUnavailable

    with using_calibration(support_decides):
        p = _auto("quality", {"op": "Nowhere", "fb": BackendUnavailable("the server at :8000 is down"),
                              "lc": "word8"}, draft="Rationale: r\nAnswer: word1507").run(
            "Which word is word2500?", WORDS)
    climb = p.trace.stages[-1].detail
    assert [r["method"] for r in climb["rungs"]] == ["op", "fb"] and "server at :8000" in climb["rungs"][1]["failed"]
    assert "fb failed" in climb["stopped"] and p.answer == "Nowhere" and p.method == "auto:op"


def test_a_calibration_that_has_not_earned_it_never_climbs(tmp_path):
    path = tmp_path / "cal.json"
    _calibration({"support": 6.0}, bias=-3.0, held_out=0.52).save(path)
    with using_calibration(path):
        p = _auto("quality", {"op": "Nowhere", "fb": "word9", "lc": "word8"}).run("Which word?", WORDS)
    assert "has not shown" in p.trace.stages[-1].detail["stopped"] and p.answer == "Nowhere"


def test_the_time_limit_stops_the_climb(support_decides):
    auto = _auto("quality", {"op": "Nowhere", "fb": "word9", "lc": "word8"}, max_seconds=1000)
    plan = auto.plan("Which word?", WORDS)
    auto.config = auto.config.changed(max_seconds=plan.predicted_seconds["op"] + 0.5 * plan.predicted_seconds["fb"])
    with using_calibration(support_decides):
        p = auto.run("Which word?", WORDS)
    assert "past the" in p.trace.stages[-1].detail["stopped"] and p.answer == "Nowhere"


def test_prefer_must_be_known():
    with pytest.raises(ConfigError, match="prefer must be one of speed, balanced, quality"):
        make_method("auto", prefer="fastest")


# --- what backends send back ----------------------------------------------------------------------------------


def test_openai_logprobs_are_read_from_chat_and_completion_choices():
    chat = {"logprobs": {"content": [{"token": "Par", "logprob": -0.1}, {"token": "is", "logprob": -0.2}]}}
    completion = {"logprobs": {"token_logprobs": [None, -0.3, -0.4]}}
    assert _token_logprobs(chat) == (-0.1, -0.2)
    assert _token_logprobs(completion) == (-0.3, -0.4)
    assert _token_logprobs({}) == () and _token_logprobs({"logprobs": {"content": [{"logprob": "x"}]}}) == ()


def test_stage_listeners_see_the_confidence_stage():
    seen: list[StageTrace] = []
    from ragfunnel.types import on_stage

    with on_stage(seen.append):
        make_method("op", strong=FakeLLM(lambda p, i: "word7", context_window=8192), budget=500,
                    chunk_words=100).run("Which word?", WORDS)
    assert [s.name for s in seen][-1] == "confidence"


def test_a_draft_that_repeats_its_rationale_label_shows_the_rationale_alone():
    from ragfunnel.prompts import parse_sample

    s = parse_sample("Rationale: The rationale is: the second passage names her.\nAnswer: Ada")
    assert s.rationale == "the second passage names her." and s.answer == "Ada"


def test_a_calibration_fitted_on_other_weights_is_warned_about_once(tmp_path, caplog):
    path = tmp_path / "cal.json"
    fitted = _calibration({"support": 1.0})
    from dataclasses import replace

    replace(fitted, fingerprints={"strong": "c" * 64}).save(path)
    llm = FakeLLM(lambda p, i: "word7", name="other", context_window=8192)
    with using_calibration(path), caplog.at_level("WARNING"):
        for _ in range(2):
            make_method("op", strong=llm, budget=500, chunk_words=100).run("Which word?", WORDS)
    warnings = [r.getMessage() for r in caplog.records if "strong" in r.getMessage()]
    assert len(warnings) == 1 and "cccccccccccc" in warnings[0] and "FakeLLM:other" in warnings[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--abstain", "1.5"], "--abstain"),
    (["--prefer", "fastest"], "--prefer"),
])
def test_abstain_and_prefer_out_of_range_are_usage_errors(tmp_path, args, message):
    from click.testing import CliRunner

    from ragfunnel.cli.main import main

    doc = tmp_path / "doc.txt"
    doc.write_text(WORDS)
    result = CliRunner().invoke(main, ["ask", "Which word?", "--context", str(doc), *args])
    assert result.exit_code == 2 and message in result.output


def test_prefer_is_refused_by_methods_other_than_auto(tmp_path):
    from click.testing import CliRunner

    from ragfunnel.cli.main import main

    doc = tmp_path / "doc.txt"
    doc.write_text(WORDS)
    result = CliRunner().invoke(main, ["ask", "Which word?", "--context", str(doc), "--method", "op",
                                       "--prefer", "quality"])
    assert result.exit_code == 1 and "does not take --prefer" in result.output


def test_costly_signals_are_read_only_where_the_calibration_weighs_them(tmp_path):
    class Judging(FakeLLM):
        capabilities = Capabilities(yes_probability=True)
        asked = 0

        def yes_probability(self, prompt, answer, check):
            self.asked += 1
            return 0.5

    llm = Judging(lambda p, i: "word7", context_window=8192)
    for weights, asked in (({"support": 1.0}, 0), ({"support": 1.0, "judge_yes": 1.0}, 1)):
        path = tmp_path / f"cal{asked}.json"
        _calibration(weights).save(path)
        llm.asked = 0
        with using_calibration(path):
            p = make_method("op", strong=llm, budget=500, chunk_words=100).run("Which word?", WORDS)
        assert llm.asked == asked and ("judge_yes" in p.signals) == bool(asked)
