"""Control flow of every method with the scripted FakeLLM (tokens = words, no model)."""

import logging

import pytest

import ragfunnel
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from tests.helpers.methods import CONTEXT, PARAGRAPHS, scripted


def test_order_preserving_keeps_document_order_and_vanilla_keeps_score_order():
    llm = FakeLLM(scripted())
    q = "When was the light automated and what storm cracked the lantern glass?"
    op = make_method("op", strong=llm, budget=25, chunk_words=10).run(q, CONTEXT)
    van = make_method("vanilla", strong=llm, budget=25, chunk_words=10).run(q, CONTEXT)
    assert [sc.chunk.position for sc in op.chunks_used] == [2, 5]
    assert {sc.chunk.position for sc in van.chunks_used} == {2, 5}
    assert [sc.score for sc in van.chunks_used] == sorted([sc.score for sc in van.chunks_used], reverse=True)
    prompt = llm.calls[0][0]
    assert prompt.index("storm in 1902") < prompt.index("automated")  # OP prompt in document order
    assert op.trace.stage("retrieve").n_out == 2 and op.answer == "Martha Quill"


def test_budget_smaller_than_one_chunk_is_refused():
    with pytest.raises(InputError, match="smaller than one chunk"):
        make_method("op", strong=FakeLLM(scripted()), budget=5, chunk_words=10).run("Who kept it?", CONTEXT)


def test_context_shorter_than_budget_skips_retrieval_and_says_so():
    p = make_method("op", strong=FakeLLM(scripted()), budget=500, chunk_words=10).run("Who kept it?", CONTEXT)
    assert "no retrieval needed" in p.trace.stage("retrieve").detail["skipped"]
    assert len(p.chunks_used) == len(PARAGRAPHS)


def test_fb_rag_forward_lookup_finds_a_chunk_the_question_does_not_name():
    # The question names neither Quill nor the diaries; the light model's drafts do.
    light, strong = FakeLLM(scripted(draft="Rationale: her diaries describe the seabird colonies. "
                                           "Answer: Martha Quill's diaries")), FakeLLM(scripted())
    q = "Whose writing records the birds of the island with the granite lighthouse?"
    fb = make_method("fb-f", light=light, strong=strong, stage1_budget=40, budget=12, chunk_words=10,
                     samples=3)
    p = fb.run(q, CONTEXT)
    assert [sc.chunk.position for sc in p.chunks_used] == [4]
    assert light.calls == [(light.calls[0][0], 3)]  # one prompt, K samples requested together
    assert len(p.samples) == 3 and p.samples[0].answer == "Martha Quill's diaries"
    assert [s.name for s in p.trace.stages] == ["stage1_recall", "stage2_forward", "stage3_generate", "confidence"]
    assert p.trace.stage("stage1_recall").n_out == 4  # 40-token recall budget, 10-word chunks
    op = make_method("op", strong=strong, budget=12, chunk_words=10).run(q, CONTEXT)
    assert [sc.chunk.position for sc in op.chunks_used] != [4]
    # Both rank every chunk; the drafts lift the diaries chunk to the top, the question alone does not.
    assert len(p.ranking) == len(op.ranking) == len(PARAGRAPHS)
    assert p.ranking[0].chunk.position == 4 and op.ranking[0].chunk.position != 4
    assert [sc.score for sc in p.ranking] == sorted((sc.score for sc in p.ranking), reverse=True)


def test_fb_rag_scores_drafts_that_ignore_the_format():
    light = FakeLLM(scripted(draft="seabird colonies winter gales diaries"))
    p = make_method("fb-f", light=light, strong=FakeLLM(scripted()), stage1_budget=40, budget=12,
                    chunk_words=10).run("Whose writing records the birds?", CONTEXT)
    assert [sc.chunk.position for sc in p.chunks_used] == [4]
    assert p.trace.stage("stage2_forward").detail["without_answer"] == 5


def test_fb_rag_falls_back_to_question_when_drafts_match_nothing():
    light = FakeLLM(scripted(draft="zzz qqq"))
    p = make_method("fb-f", light=light, strong=FakeLLM(scripted()), stage1_budget=40, budget=12,
                    chunk_words=10).run("When was the light automated?", CONTEXT)
    assert p.trace.stage("stage2_forward").detail["scored_by"].startswith("question")
    assert [sc.chunk.position for sc in p.chunks_used] == [5]


def test_fb_rag_on_short_context_goes_straight_to_generation():
    light = FakeLLM(scripted())
    p = make_method("fb", light=light, strong=FakeLLM(scripted()), budget=200, stage1_budget=400,
                    chunk_words=10).run("Who kept it?", CONTEXT)
    assert light.calls == [] and "no retrieval" in p.trace.stages[0].detail["skipped"]


def test_self_route_falls_back_to_long_context_on_unanswerable():
    def reply(prompt, i):
        return "unanswerable" if "unanswerable" in prompt else "1871"
    llm = FakeLLM(reply)
    p = make_method("self-route", strong=llm, budget=12, chunk_words=10).run("When was it built?", CONTEXT)
    assert p.answer == "1871" and p.method == "self-route"
    assert [s.name for s in p.trace.stages] == ["retrieve", "generate_or_decline", "generate", "confidence"]
    assert p.trace.stages[1].detail["route"] == "long_context"


def test_self_route_answers_from_retrieval_when_it_can():
    p = make_method("self-route", strong=FakeLLM(scripted()), budget=12, chunk_words=10).run(
        "Who was the first keeper?", CONTEXT)
    assert p.trace.stages[1].detail["route"] == "rag" and [s.name for s in p.trace.stages] == [
        "retrieve", "generate_or_decline", "confidence"]


def test_long_context_cuts_the_middle_with_a_warning(caplog):
    llm = FakeLLM(scripted(), context_window=300)
    long_text = " ".join(f"w{i}" for i in range(1000))
    with caplog.at_level(logging.WARNING):
        p = make_method("lc", strong=llm).run("Which word?", long_text)
    prompt = llm.calls[0][0]
    assert "w0 " in prompt and "w999" in prompt and " w500 " not in prompt
    assert p.trace.stages[0].detail["truncated_to"] < 300 and "cut to" in caplog.text


def test_reply_without_answer_prefix_is_the_answer():
    p = make_method("op", strong=FakeLLM(scripted(answer="granite, I think\nmore text")), budget=100,
                    chunk_words=10).run("What is it made of?", CONTEXT)
    assert p.answer == "granite, I think"


@pytest.mark.parametrize("question", ["", "   "])
def test_empty_question_is_refused(question):
    with pytest.raises(InputError, match="question is empty"):
        make_method("op", strong=FakeLLM(scripted())).run(question, CONTEXT)


def test_unknown_method_and_option_are_named():
    with pytest.raises(ConfigError, match="valid methods: auto, fb-f, fb, op"):
        make_method("magic")
    with pytest.raises(ConfigError, match="method op does not take samples; it takes task, max_tokens, budget"):
        make_method("op", samples=3)


def test_budget_larger_than_window_is_refused():
    with pytest.raises(ConfigError, match="lower the budget"):
        make_method("op", strong=FakeLLM(scripted(), context_window=100), budget=90, chunk_words=10).run(
            "Who?", CONTEXT)


def test_api_answer_mirrors_the_cli():
    p = ragfunnel.answer("Who was the first keeper?", CONTEXT, method="op", strong=FakeLLM(scripted()),
                         budget=20, chunk_words=10)
    d = p.to_dict()
    assert d["answer"] == "Martha Quill" and d["method"] == "op"
    assert {"position", "score", "text"} <= set(d["chunks_used"][0])
    assert [s["name"] for s in d["trace"]["stages"]] == ["retrieve", "generate", "confidence"]


@pytest.mark.parametrize("method, options", [("lc", {}), ("op", {"budget": 25, "chunk_words": 10}),
                                             ("fb", {"budget": 25, "chunk_words": 10})])
def test_choice_answers_with_the_options_text_not_its_letter(method, options):
    llm = FakeLLM(scripted(answer="B", draft="Rationale: the keeper is named. Answer: B"))
    if method == "fb":
        options["light"] = llm
    p = make_method(method, strong=llm, task="choice", **options).run(
        "Who kept the lamp?", CONTEXT, choices=["Port Ellis", "Martha Quill", "Gull Rock"])
    assert p.answer == "Martha Quill" and p.raw_output == "B"


def test_summary_drafts_are_plain_answers_with_a_capped_length():
    llm = FakeLLM(lambda prompt, i: "The keeper kept the lamp for thirty years.")
    fb = make_method("fb", strong=llm, light=llm, task="longbench/qmsum", budget=25, stage1_budget=40,
                     chunk_words=10)
    assert fb.config.sample_max_tokens == 128 and fb.config.max_tokens == 512  # LongBench's limit is the answer's only
    p = fb.run("What did the keeper do?", CONTEXT)
    drafts = [prompt for prompt, *_ in llm.calls[:1]]
    assert drafts[0].rstrip().endswith("Answer:") and "Rationale" not in drafts[0]
    assert p.trace.stage("stage2_forward").detail["fusion"] == "normalized"
