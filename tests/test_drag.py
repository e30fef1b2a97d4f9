"""DRAG and IterDRAG control flow, token accounting and demonstrations, with FakeLLM (no model)."""

import json
from collections import defaultdict

import pytest

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.llm import FakeLLM
from ragfunnel.methods.config import DragConfig, IterDragConfig
from ragfunnel.methods.demonstrations import Demonstration, SelfAskStep, load_demonstrations, save_demonstrations
from ragfunnel.methods.drag import DRAG
from ragfunnel.methods.iterdrag import IterDRAG
from ragfunnel.prompts.self_ask import FINAL, FINAL_GRAMMAR, INTERMEDIATE_GRAMMAR, STEP_GRAMMAR
from ragfunnel.scaling.demonstrations import generate_iterdrag_demonstrations, make_drag_demonstrations
from ragfunnel.types import Document, Example
from tests.helpers.corpora import corpus

QUESTION = "Where was the keeper of the Gull Rock light born?"
PORT_ELLIS_LINE = "(Title: Port Ellis) Port Ellis is the harbour town where Martha Quill was born."


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("drag") / "ix"
    build_index(corpus(), root, source="test")
    return CorpusIndex(root)


def scripted(*replies):
    """A FakeLLM that gives ``replies`` in order, one per call."""
    it = iter(replies)
    return FakeLLM(lambda prompt, i: next(it))


def words(text):
    return len(text.split())


# --- DRAG -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, m, tokens", [
    # "You answer questions from what you know." 7 + style 11 + "Question: Where was the keeper born?" 6
    # + "Answer:" 1
    (0, 0, 25),
    # intro "You answer questions with the help of ... relevant." 18 + style 11 + Port Ellis document line 16
    # + question 6 + "Answer:" 1
    (1, 0, 52),
    # intro 18 + "Worked examples come first. ..." 14; shot: Martha Quill document line 15, "Question: Who kept
    # the Gull Rock light?" 7, "Answer: Martha Quill" 3; "Now the question to answer, ..." 9 + style 11; test
    # document 16, question 6, "Answer:" 1
    (1, 1, 100),
])
def test_drag_prompt_tokens_hand_counted(index, k, m, tokens):
    demo = Demonstration("Who kept the Gull Rock light?", "Martha Quill")
    llm = scripted("Port Ellis")
    method = DRAG(DragConfig(documents=k, shots=m, demonstrations=[demo]), index=index, strong=llm)
    p = method.run("Where was the keeper born?")
    assert p.answer == "Port Ellis" and p.method == "drag"
    assert words(llm.calls[0][0]) == tokens
    assert p.trace.input_tokens == tokens == p.trace.stage("generate").detail["largest_prompt_tokens"]
    assert llm.grammars == [None]  # DRAG answers freely


def test_drag_orders_shots_then_reversed_test_documents_then_question(index):
    demo = Demonstration("What nests on the cliffs?", "Puffins and gannets")
    llm = scripted("Port Ellis")
    p = DRAG(DragConfig(documents=2, shots=1, demonstrations=[demo]), index=index, strong=llm).run(QUESTION)
    prompt = llm.calls[0][0]
    # the shot's documents were retrieved for its own question; the test's best document (b) is last
    positions = [prompt.index(s) for s in ("(Title: Seabirds)", "Question: What nests on the cliffs?",
                                           "Answer: Puffins and gannets", "(Title: Port Ellis)",
                                           "(Title: Martha Quill)", f"Question: {QUESTION}")]
    assert positions == sorted(positions)
    assert prompt.endswith(f"Question: {QUESTION}\nAnswer:")
    assert [sc.chunk.id for sc in p.chunks_used] == ["d", "b"]  # the order shown
    assert [sc.chunk.id for sc in p.ranking] == ["b", "d"]  # best first
    assert p.chunks_used[1].score > p.chunks_used[0].score > 0


@pytest.mark.parametrize("options, error, match", [
    ({"shots": 3}, ConfigError, r"shots 3 needs 3 demonstrations but only 1 were given .*lower shots to at most 1"),
    ({"shots": -1}, ConfigError, "shots must be between 0 and 1,000, got -1"),
    ({"documents": -2}, ConfigError, "documents must be between 0 and 1,000, got -2"),
    ({"task": "summary"}, ConfigError, "task 'summary' is not one of qa, multihop"),
    ({"task": "poem"}, ConfigError, "unknown task 'poem'"),
    ({"iterations": 0}, ConfigError, "iterations must be between 1 and 20, got 0"),
])
def test_bad_options_are_named(index, options, error, match):
    demos = [Demonstration("Who kept the Gull Rock light?", "Martha Quill")]
    with pytest.raises(error, match=match):
        IterDRAG(IterDragConfig(demonstrations=demos, **options), index=index, strong=scripted())
    if "iterations" not in options:
        with pytest.raises(error, match=match):
            DRAG(DragConfig(demonstrations=demos, **options), index=index, strong=scripted())


def test_an_empty_question_is_refused(index):
    with pytest.raises(InputError, match="question is empty"):
        DRAG(DragConfig(), index=index, strong=scripted()).run("  ")


# --- IterDRAG -------------------------------------------------------------------------------------------

def test_iterdrag_follow_ups_retrieve_and_merge_without_repeats(index):
    llm = scripted("Follow up: Who kept the Gull Rock light?", "Intermediate answer: Martha Quill",
                   "Follow up: Where was Martha Quill born?", "Intermediate answer: Port Ellis",
                   "So the final answer is: Port Ellis")
    p = IterDRAG(IterDragConfig(documents=1), index=index, strong=llm).run(QUESTION)
    assert p.answer == "Port Ellis" and p.method == "iterdrag"
    steps = p.trace.stages[1:]
    assert [s.name for s in p.trace.stages] == ["retrieve", "step1", "step2", "step3", "step4", "step5"]
    assert [s.detail["kind"] for s in steps] == ["follow_up", "intermediate", "follow_up", "intermediate", "final"]
    assert [s.detail.get("query") for s in steps[::2][:2]] == ["Who kept the Gull Rock light?",
                                                             "Where was Martha Quill born?"]
    # the first follow-up finds the document already in context; the second adds Port Ellis
    assert [steps[0].detail["documents_added"], steps[2].detail["documents_added"]] == [0, 1]
    assert [s.detail["context_documents"] for s in steps] == [1, 1, 1, 2, 2]
    # after a follow-up the grammar allows only its intermediate answer
    assert llm.grammars == [STEP_GRAMMAR, INTERMEDIATE_GRAMMAR, STEP_GRAMMAR, INTERMEDIATE_GRAMMAR, STEP_GRAMMAR]
    fourth = llm.calls[3][0]
    assert fourth.endswith("Follow up: Where was Martha Quill born?")
    assert fourth.index("(Title: Martha Quill)") < fourth.index(PORT_ELLIS_LINE) < fourth.index("Question:")
    assert PORT_ELLIS_LINE not in llm.calls[2][0]
    assert [sc.chunk.id for sc in p.chunks_used] == ["b", "d"]


def test_iterdrag_effective_context_is_every_call_hand_counted(index):
    llm = scripted("Follow up: Who kept the Gull Rock light?", "Intermediate answer: Martha Quill",
                   "Follow up: Where was Martha Quill born?", "Intermediate answer: Port Ellis",
                   "So the final answer is: Port Ellis")
    p = IterDRAG(IterDragConfig(documents=1), index=index, strong=llm).run(QUESTION)
    sizes = [words(prompt) for prompt, _ in llm.calls]
    # each call adds: the pending "Follow up: Who kept the Gull Rock light?" (8); its "Intermediate answer:
    # Martha Quill" (4); the Port Ellis document line (16) and "Follow up: Where was Martha Quill born?" (7);
    # "Intermediate answer: Port Ellis" (4)
    assert [b - a for a, b in zip(sizes[:-1], sizes[1:], strict=True)] == [8, 4, 23, 4]
    assert [s.input_tokens for s in p.trace.stages[1:]] == sizes
    assert p.trace.input_tokens == sum(sizes) == 5 * sizes[0] + 8 + 12 + 35 + 39
    last = p.trace.stages[-1].detail
    assert last["largest_prompt_tokens"] == sizes[-1] and last["follow_ups"] == 2 and last["forced"] is False


def always_asks(prompt, i):
    """A model that never answers the main question: a follow-up, its answer, another follow-up..."""
    last = prompt.splitlines()[-1]
    if last == FINAL:
        return "Gull Rock"
    if last.startswith("Follow up:"):
        return "Intermediate answer: somewhere"
    return f"Follow up: Where is Gull Rock, question {prompt.count('Intermediate answer: somewhere') + 1}?"


def test_iterdrag_forces_the_final_answer_after_n_follow_ups(index):
    llm = FakeLLM(always_asks)
    p = IterDRAG(IterDragConfig(documents=1, iterations=2), index=index, strong=llm).run(QUESTION)
    assert p.answer == "Gull Rock"
    assert [s.name for s in p.trace.stages] == ["retrieve", "step1", "step2", "step3", "step4", "final"]
    assert llm.grammars[-1] == FINAL_GRAMMAR and llm.calls[-1][0].endswith(f"Intermediate answer: somewhere\n{FINAL}")
    last = p.trace.stages[-1].detail
    assert last["forced"] is True and last["follow_ups"] == 2
    assert last["largest_prompt_tokens"] == max(words(prompt) for prompt, _ in llm.calls)


@pytest.mark.parametrize("second", ["Follow up: And where is that?", ""])
def test_iterdrag_a_reply_that_breaks_the_chain_forces_the_final_answer(index, second):
    llm = scripted("Follow up: Who kept the Gull Rock light?", second, "So the final answer is: Port Ellis")
    p = IterDRAG(IterDragConfig(documents=1), index=index, strong=llm).run(QUESTION)
    assert p.answer == "Port Ellis"
    assert [s.name for s in p.trace.stages] == ["retrieve", "step1", "step2", "final"]
    assert p.trace.stage("step2").detail["broke_chain"] is True
    # the unanswered follow-up is not shown to the forced call, but its documents stay
    assert llm.calls[-1][0].endswith(f"Question: {QUESTION}\n{FINAL}")
    assert p.trace.stages[-1].detail["forced"] is True


def test_iterdrag_a_repeated_follow_up_forces_the_final_answer(index):
    llm = scripted("Follow up: Who kept the Gull Rock light?", "Intermediate answer: Martha Quill",
                   "Follow up: who kept the Gull Rock light", "So the final answer is: Port Ellis")
    p = IterDRAG(IterDragConfig(documents=1), index=index, strong=llm).run(QUESTION)
    assert [s.name for s in p.trace.stages] == ["retrieve", "step1", "step2", "step3", "final"]
    assert p.trace.stage("step3").detail["broke_chain"] is True and "query" not in p.trace.stage("step3").detail
    assert p.trace.stages[-1].detail["follow_ups"] == 1


def test_iterdrag_a_direct_final_answer_takes_one_call(index):
    llm = scripted("**So the final answer is:** Port Ellis\nBecause...")
    p = IterDRAG(IterDragConfig(documents=2), index=index, strong=llm).run(QUESTION)
    assert p.answer == "Port Ellis" and len(llm.calls) == 1
    assert p.trace.stages[-1].detail["forced"] is False and p.trace.stages[-1].detail["follow_ups"] == 0


def test_iterdrag_without_grammar_support_parses_bare_replies(index):
    # what a backend that ignores the grammar might return: no prefixes at all
    llm = scripted("Who kept the Gull Rock light?", "Martha Quill", "Port Ellis")
    p = IterDRAG(IterDragConfig(documents=1), index=index, strong=llm).run(QUESTION)
    assert p.answer == "Port Ellis"
    assert [s.detail["kind"] for s in p.trace.stages[1:]] == ["follow_up", "intermediate", "final"]
    assert [s.detail["prefixed"] for s in p.trace.stages[1:]] == [False, False, False]


def test_iterdrag_shots_show_their_chains_and_documents_for_their_own_queries(index):
    demo = Demonstration("What nests where the lighthouse stands?", "Puffins",
                         steps=(SelfAskStep("Where does the lighthouse stand?", "Gull Rock"),
                                SelfAskStep("What nests on the cliffs?", "Puffins")))
    llm = scripted("So the final answer is: Port Ellis")
    IterDRAG(IterDragConfig(documents=1, shots=1, demonstrations=[demo]), index=index, strong=llm).run(QUESTION)
    prompt = llm.calls[0][0]
    shot, test = prompt.split("Reason one line at a time.")
    # one document per retrieval: the demo question's, then each follow-up's (Seabirds), best last
    assert "(Title: Gull Rock)" in shot and "(Title: Seabirds)" in shot
    assert shot.index("(Title: Seabirds)") < shot.index("Question: What nests where")
    assert "Follow up: Where does the lighthouse stand?\nIntermediate answer: Gull Rock" in shot
    assert shot.rstrip().endswith(f"{FINAL} Puffins")
    assert "(Title: Martha Quill)" in test and "Seabirds" not in test


# --- demonstrations -------------------------------------------------------------------------------------

ELSEWHERE = Document("x", "Elsewhere", "A document from another corpus about the Gull Rock light.")


def test_stored_documents_are_used_up_to_k_and_retrieved_beyond(index, tmp_path):
    demo = Demonstration("Who kept the Gull Rock light?", "Martha Quill", (ELSEWHERE,), id="q1")
    path = tmp_path / "demos.jsonl"
    save_demonstrations([demo], path)
    assert load_demonstrations(path) == [demo]
    llm = scripted("Port Ellis", "Port Ellis")
    DRAG(DragConfig(documents=1, shots=1, demonstrations=path), index=index, strong=llm).run(QUESTION)
    assert "(Title: Elsewhere)" in llm.calls[0][0]
    llm = scripted("Port Ellis")
    DRAG(DragConfig(documents=2, shots=1, demonstrations=path), index=index, strong=llm).run(QUESTION)
    shot = llm.calls[0][0].split("Now the question")[0]
    assert "(Title: Elsewhere)" not in shot and "(Title: Martha Quill)" in shot and "(Title: Gull Rock)" in shot


def test_demonstration_file_round_trip_with_steps(tmp_path):
    demo = Demonstration("Q?", "A", (ELSEWHERE,), (SelfAskStep("F?", "I", (corpus()[0],)),), id="e1")
    save_demonstrations([demo, Demonstration("Q2?", "B")], tmp_path / "d.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert rows[0]["steps"] == [{"follow_up": "F?", "answer": "I",
                                 "documents": [{"id": "a", "title": "Gull Rock", "text": corpus()[0].text}]}]
    assert load_demonstrations(tmp_path / "d.jsonl") == [demo, Demonstration("Q2?", "B")]


@pytest.mark.parametrize("text, match", [
    ('{"question": "Q?", "answer": "A"}\nnot json\n', r"d.jsonl:2 is not a JSON demonstration"),
    (b'{"question": "Q?", "answer": "\xff"}\n', r"d.jsonl:1 is not UTF-8 text.*save it as UTF-8"),
    ('{"question": "Qu\u00e9?", "answer": "A"}\n'.encode("latin-1"), r"d.jsonl:1 is not UTF-8 text"),
    ('{"answer": "A"}\n', r"d.jsonl:1: 'question' must be a non-empty string"),
    ('{"question": "Q?", "answer": ""}\n', r"d.jsonl:1: 'answer' must be a non-empty string"),
    ('{"question": "Q?", "answer": "A", "documents": [{"id": "1"}]}\n',
     r"d.jsonl:1: document 1 of the question: 'text' must be a non-empty string"),
    ('{"question": "Q?", "answer": "A", "steps": [{"follow_up": "F?"}]}\n',
     r"d.jsonl:1: step 1: 'answer' must be a non-empty string"),
    ('[1, 2]\n', r"d.jsonl:1 is a JSON list, not a demonstration object"),
    ("\n\n", "holds no demonstrations"),
])
def test_bad_demonstration_files_are_named_with_their_line(tmp_path, text, match):
    path = tmp_path / "d.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InputError, match=match):
        load_demonstrations(tmp_path / "d.jsonl")


def test_a_missing_demonstrations_file_is_named(index, tmp_path):
    with pytest.raises(InputError, match="none.jsonl does not exist"):
        DRAG(DragConfig(demonstrations=tmp_path / "none.jsonl"), index=index, strong=scripted())


def test_make_drag_demonstrations_retrieves_for_each_question(index):
    examples = [Example("e1", "Who kept the Gull Rock light?", answers=["Martha Quill"]),
                Example("e2", "What nests on the cliffs?", answers=["", "puffins"])]
    demos = make_drag_demonstrations(examples, index, 2)
    assert [(d.id, d.answer) for d in demos] == [("e1", "Martha Quill"), ("e2", "puffins")]
    assert [x.id for x in demos[0].documents] == ["b", "a"] and [x.id for x in demos[1].documents] == ["c"]
    with pytest.raises(InputError, match="example 'e3' has no answer"):
        make_drag_demonstrations([Example("e3", "Why?")], index, 2)


def by_question(script):
    """A FakeLLM answering each training question from its own list of replies, in order."""
    seen = defaultdict(int)

    def reply(prompt, i):
        question = [line for line in prompt.splitlines() if line.startswith("Question: ")][-1][10:]
        seen[question] += 1
        return script[question][seen[question] - 1]

    return FakeLLM(reply)


TRAINING = [
    Example("good", QUESTION, answers=["Port Ellis"]),
    Example("direct", "Who kept the Gull Rock light?", answers=["Martha Quill"]),
    Example("wrong", "What nests on the cliffs?", answers=["puffins"]),
]
SCRIPT = {
    QUESTION: ["Follow up: Who kept the Gull Rock light?", "Intermediate answer: Martha Quill",
               "So the final answer is: She was born in Port Ellis."],
    "Who kept the Gull Rock light?": ["So the final answer is: Martha Quill"],
    "What nests on the cliffs?": ["Follow up: Which cliffs?", "Intermediate answer: Gull Rock",
                                  "So the final answer is: gulls"],
}


def test_generated_demonstrations_keep_right_chains_with_follow_ups(index, tmp_path):
    out = tmp_path / "iter.jsonl"
    demos = generate_iterdrag_demonstrations(TRAINING, index, by_question(SCRIPT), 1, 3, out=out, progress=False)
    (demo,) = demos
    assert (demo.id, demo.question, demo.answer) == ("good", QUESTION, "Port Ellis")  # the reference it contained
    assert demo.steps == (SelfAskStep("Who kept the Gull Rock light?", "Martha Quill", (corpus()[1],)),)
    assert [d.id for d in demo.documents] == ["b"]
    assert load_demonstrations(out) == demos
    log = [json.loads(line) for line in (tmp_path / "iter.jsonl.log.jsonl").read_text().splitlines()]
    assert [(r["id"], r["kept"], r["why"]) for r in log] == [
        ("good", True, "kept"), ("direct", False, "no follow-up"), ("wrong", False, "wrong final answer 'gulls'")]


def test_generating_demonstrations_resumes_without_repeating(index, tmp_path):
    out = tmp_path / "iter.jsonl"
    first = generate_iterdrag_demonstrations(TRAINING[:2], index, by_question(SCRIPT), 1, 3, out=out, progress=False)
    with out.open("a") as f:
        f.write('{"id": "torn", "quest')  # a run killed mid-write
    llm = by_question(SCRIPT)
    again = generate_iterdrag_demonstrations(TRAINING, index, llm, 1, 3, out=out, progress=False)
    assert again == first and len(llm.calls) == 3  # only "wrong" ran: follow-up, answer, final
    assert load_demonstrations(out) == first
