"""`stepwise`: self-ask over one long context, with the scripted FakeLLM (tokens = words, no model): each
follow-up reads its own best chunks within its budget, no chunk twice; the final answer comes from the chain;
a chain that runs on is ended with a forced final answer; citations point into the context."""

from __future__ import annotations

import pytest

from ragfunnel import answer
from ragfunnel.documents import LocatedContext
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.prompts.self_ask import FINAL, FOLLOW_UP, INTERMEDIATE

# Ten-word paragraphs; chunk_words=10 makes each one a chunk. The answer takes two hops: the 1995 winner
# (paragraph 3), then where that winner was born (paragraph 7).
PARAGRAPHS = [
    "The Tarrow valley rally began in 1971 on forest roads.",
    "Its route crosses three fords and the old quarry bridge.",
    "Spectators gather each autumn at the famous Penhallow hairpin bend.",
    "The 1995 rally was won by driver Edwin Marrack outright.",
    "A flood in 1998 washed away the second ford entirely.",
    "The rally museum keeps a wheel from the 1971 car.",
    "Organisers later moved the finish line to Port Merrin harbour.",
    "Edwin Marrack was born in Lostwithiel, a Cornish market town.",
    "Local bakers sell hot saffron buns along the rally route.",
    "Television first covered the whole event live in 2004 nationwide.",
]
CONTEXT = "\n\n".join(PARAGRAPHS)
QUESTION = "Where was the winner of the 1995 Tarrow valley rally born?"


def chain(*replies: str):
    """The replies of a chain, one per call, then the last one again."""
    given = list(replies)

    def reply(prompt: str, i: int) -> str:
        return given.pop(0) if len(given) > 1 else given[0]
    return reply


def stepwise(llm, **options):
    return make_method("stepwise", strong=llm, **{"budget": 12, "step_budget": 12, "chunk_words": 10,
                                                  "worked_examples": False, **options})


def test_each_follow_up_reads_its_own_best_chunks_and_the_chain_gives_the_answer():
    llm = FakeLLM(chain(f"{FOLLOW_UP} Who won the 1995 rally?", f"{INTERMEDIATE} Edwin Marrack",
                        f"{FOLLOW_UP} Where was Edwin Marrack born?", f"{INTERMEDIATE} Lostwithiel",
                        f"{FINAL} Lostwithiel"))
    p = stepwise(llm).run(QUESTION, CONTEXT)
    assert p.answer == "Lostwithiel" and p.method == "stepwise"
    prompts = [prompt for prompt, _ in llm.calls]
    assert len(prompts) == 5
    assert prompts[1].rstrip().endswith(f"{FOLLOW_UP} Who won the 1995 rally?")
    # One chunk for the question, one more for each follow-up, shown after those read before.
    assert ["Document [2]" in prompt for prompt in prompts] == [False, True, True, True, True]
    assert ["Document [3]" in prompt for prompt in prompts] == [False, False, False, True, True]
    assert "Document [1] " in prompts[0] and "(Title:" not in prompts[0]  # a context's passages have no titles
    read = [sc.chunk.position for sc in p.chunks_used]
    assert read == sorted(read) and len(read) == len(set(read)) and {3, 7} <= set(read)
    assert all(CONTEXT[sc.chunk.start:sc.chunk.start + len(sc.chunk.text)] == sc.chunk.text for sc in p.chunks_used)
    stages = [s.name for s in p.trace.stages]
    assert stages[0] == "retrieve" and stages[1:6] == ["step1", "step2", "step3", "step4", "step5"]
    assert p.trace.stage("step5").detail["follow_ups"] == 2 and not p.trace.stage("step5").detail["forced"]


def test_every_read_stays_within_its_budget_and_no_chunk_is_read_twice():
    llm = FakeLLM(chain(f"{FOLLOW_UP} Who won the 1995 rally?", f"{INTERMEDIATE} Edwin Marrack",
                        f"{FOLLOW_UP} Who won the 1995 rally in the valley?", f"{INTERMEDIATE} Edwin Marrack",
                        f"{FINAL} Lostwithiel"))
    p = stepwise(llm, budget=22, step_budget=11).run(QUESTION, CONTEXT)
    first = p.trace.stages[0]
    assert first.n_out == 2  # two ten-word chunks (ten tokens each) within 22 tokens
    added = [s.detail["documents_added"] for s in p.trace.stages if "documents_added" in s.detail]
    assert added == [1, 1] and len(p.chunks_used) == 4


def test_a_chain_that_never_ends_is_given_a_forced_final_answer():
    asks = iter(range(100))
    llm = FakeLLM(lambda prompt, i: (f"{INTERMEDIATE} something" if prompt.rstrip().split("\n")[-1].startswith(
        FOLLOW_UP) else (f"{FOLLOW_UP} Question number {next(asks)}?" if not prompt.rstrip().endswith(FINAL)
                         else "Lostwithiel")))
    p = stepwise(llm, iterations=2).run(QUESTION, CONTEXT)
    assert p.answer == "Lostwithiel"
    final = p.trace.stage("final")
    assert final.detail["forced"] and final.detail["follow_ups"] == 2


def test_the_answer_is_assessed_and_cited_in_the_context():
    llm = FakeLLM(chain(f"{FOLLOW_UP} Who won the 1995 rally?", f"{INTERMEDIATE} Edwin Marrack",
                        f"{FOLLOW_UP} Where was Edwin Marrack born?", f"{INTERMEDIATE} Lostwithiel",
                        f"{FINAL} Lostwithiel"))
    p = answer(QUESTION, context=CONTEXT, method="stepwise", strong=llm, budget=12, step_budget=12, chunk_words=10,
               worked_examples=False)
    assert p.trace.stage("confidence") is not None
    assert [c.quote for c in p.citations] == [PARAGRAPHS[7]]
    assert LocatedContext.of_text(CONTEXT).text == CONTEXT


def test_choices_and_a_budget_below_one_chunk_are_one_line():
    llm = FakeLLM(chain(f"{FINAL} x"))
    with pytest.raises(ConfigError, match="stepwise answers open questions"):
        stepwise(llm).run(QUESTION, CONTEXT, choices=["a", "b"])
    with pytest.raises(InputError, match="smaller than one chunk"):
        stepwise(llm, budget=5).run(QUESTION, CONTEXT)


def test_the_worked_examples_go_first_with_short_final_answers():
    llm = FakeLLM(chain(f"{FINAL} Lostwithiel"))
    stepwise(llm, worked_examples=True).run(QUESTION, CONTEXT)
    prompt = llm.calls[0][0]
    assert prompt.index("Who was born first, Ilse Brand or Marta Sobel?") < prompt.index(QUESTION)
    assert f"{FINAL} Marta Sobel" in prompt and f"{FOLLOW_UP} When was Marta Sobel born?" in prompt
