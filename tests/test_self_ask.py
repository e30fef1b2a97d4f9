"""Self-ask prompts, the step parser and the step grammars (no model; the grammar check loads a vocabulary)."""

import http.server
import threading

import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.llm import FakeLLM
from ragfunnel.llm.openai import OpenAICompatibleLLM
from ragfunnel.prompts.self_ask import (
    FINAL,
    FINAL_GRAMMAR,
    FOLLOW_UP,
    INTERMEDIATE,
    INTERMEDIATE_GRAMMAR,
    MAX_DOCUMENT_WORDS,
    STEP_GRAMMAR,
    FollowUp,
    Shot,
    Step,
    display_order,
    drag_prompt,
    iterdrag_prompt,
    parse_final,
    parse_step,
    render_documents,
)
from ragfunnel.types import Document, SamplingParams
from tests.helpers.network import _Flaky

A = Document("a", "Gull Rock", "The lighthouse on Gull Rock was built of granite.")
B = Document("b", "Martha Quill", "Martha Quill kept the Gull Rock light for thirty years.")
C = Document("c", "Port Ellis", "Port Ellis is the harbour town where Martha Quill was born.")


@pytest.mark.parametrize("reply, step", [
    # well formed
    ("Follow up: Who kept the Gull Rock light?", Step("follow_up", "Who kept the Gull Rock light?", True)),
    ("Intermediate answer: Martha Quill", Step("intermediate", "Martha Quill", True)),
    ("So the final answer is: Port Ellis", Step("final", "Port Ellis", True)),
    ("So the final answer is: Port Ellis\n", Step("final", "Port Ellis", True)),
    # markdown, case, hyphens, other wordings of the final prefix
    ("**Follow up:** Who kept the light?", Step("follow_up", "Who kept the light?", True)),
    ("*Follow-up*: Who kept the light?", Step("follow_up", "Who kept the light?", True)),
    ("intermediate ANSWER: **Martha Quill**", Step("intermediate", "Martha Quill", True)),
    ("The final answer is: Port Ellis", Step("final", "Port Ellis", True)),
    ("So the final answer is Port Ellis.", Step("final", "Port Ellis.", True)),
    # extra lines around the step
    ("Sure, here is the next line.\nFollow up: Who kept the light?\n", Step("follow_up", "Who kept the light?", True)),
    ("Intermediate answer:\n\nMartha Quill\nShe kept it for thirty years.", Step("intermediate", "Martha Quill", True)),
    # several steps in one reply: the first complete one
    ("Follow up: Who kept the light?\nIntermediate answer: Martha Quill\nSo the final answer is: Port Ellis",
     Step("follow_up", "Who kept the light?", True)),
    ("Follow up: Who kept it? Intermediate answer: Martha", Step("follow_up", "Who kept it?", True)),
    ("Follow up:\nIntermediate answer: Martha Quill", Step("intermediate", "Martha Quill", True)),
    # truncated: inside the text, inside the prefix, right after it
    ("Follow up: Who kept the Gull Ro", Step("follow_up", "Who kept the Gull Ro", True)),
    ("So the final ans", Step("final", "", True)),
    ("Intermediate", Step("intermediate", "", True)),
    ("Follow up:", Step("follow_up", "", True)),
    # bare text, read by the chain's state (not after a follow-up)
    ("Who kept the Gull Rock light?", Step("follow_up", "Who kept the Gull Rock light?", False)),
    ("Port Ellis", Step("final", "Port Ellis", False)),
    ("Answer: Port Ellis", Step("final", "Port Ellis", False)),
    ("In", Step("final", "In", False)),  # too short to be a cut-off prefix
    ("", Step("final", "", False)),
])
def test_parse_step(reply, step):
    assert parse_step(reply) == step


def test_bare_text_right_after_a_follow_up_is_its_intermediate_answer():
    assert parse_step("Martha Quill", after_follow_up=True) == Step("intermediate", "Martha Quill", False)
    assert parse_step("Was it Martha?", after_follow_up=True).kind == "intermediate"
    # a prefixed reply keeps its own kind whatever the state
    assert parse_step("So the final answer is: X", after_follow_up=True) == Step("final", "X", True)


@pytest.mark.parametrize("junk", ["\x00\x01", "::::", "** **", "Follow up: \n\n  \n", "🙂" * 50, "a" * 10_000,
                                  "Follow up Follow up Intermediate", "\n".join(["Final answer:"] * 5)])
def test_parse_step_never_raises(junk):
    step = parse_step(junk)
    assert step.kind in ("follow_up", "intermediate", "final") and isinstance(step.text, str)


def test_parse_final_strips_an_echoed_prefix():
    assert parse_final("So the final answer is: Port Ellis") == "Port Ellis"
    assert parse_final("Port Ellis\nbecause she was born there") == "Port Ellis"
    assert parse_final("**Answer:** Port Ellis") == "Port Ellis"
    assert parse_final("Intermediate answer: The American Psychological Association") == ("The American "
                                                                                          "Psychological Association")


def test_display_order_reverses_each_retrieval_appends_later_ones_and_drops_repeats():
    # question retrieval best-first [A, B]; a follow-up brings [B, C]: B is already shown
    assert display_order([[A, B]]) == [B, A]
    assert display_order([[A, B], [B, C]]) == [B, A, C]
    assert display_order([[A], [C, B]]) == [A, B, C]
    assert display_order([]) == []


def test_render_documents_numbers_titles_and_truncates():
    assert render_documents([B, A]).splitlines() == [
        "Document [1] (Title: Martha Quill) Martha Quill kept the Gull Rock light for thirty years.",
        "Document [2] (Title: Gull Rock) The lighthouse on Gull Rock was built of granite.",
    ]
    long = Document("l", "Long", "word\n" * (MAX_DOCUMENT_WORDS + 10))
    line = render_documents([long])
    assert "\n" not in line and len(line.split()) == 4 + MAX_DOCUMENT_WORDS  # "Document [1] (Title: Long)" + words


def test_drag_prompt_puts_shots_then_test_documents_then_question():
    shot = Shot("Who built the light?", "masons", (A,))
    prompt = drag_prompt("Where was the keeper born?", [B, C], [shot], style="Be short.")
    order = [prompt.index(s) for s in ("Worked examples", "(Title: Gull Rock)", "Question: Who built the light?",
                                       "Answer: masons", "Be short.", "(Title: Martha Quill)", "(Title: Port Ellis)",
                                       "Question: Where was the keeper born?")]
    assert order == sorted(order)
    assert prompt.endswith("Question: Where was the keeper born?\nAnswer:")
    assert "Document [1] (Title: Martha Quill)" in prompt and "Document [2] (Title: Port Ellis)" in prompt


def test_drag_prompt_without_documents_or_shots_is_plain_qa():
    prompt = drag_prompt("Who kept the light?", [], [], style="Be short.")
    assert prompt == "You answer questions from what you know.\n\nBe short.\n\nQuestion: Who kept the light?\nAnswer:"
    many_shot = drag_prompt("Who kept the light?", [], [Shot("Who built it?", "masons")], style="Be short.")
    assert "document" not in many_shot.lower()
    assert many_shot.index("Question: Who built it?\nAnswer: masons") < many_shot.index("Now the question to answer.")


def test_iterdrag_prompt_shows_chains_and_ends_where_the_next_step_goes():
    shot = Shot("Where was the keeper born?", "Port Ellis", (B, C),
                (FollowUp("Who kept the light?", "Martha Quill"), FollowUp("Where was she born?", "Port Ellis")))
    done = [FollowUp("Who built the light?", "masons")]
    prompt = iterdrag_prompt("What was the light built of?", [A], [shot], done)
    lines = prompt.splitlines()
    shot_chain = lines.index("Question: Where was the keeper born?")
    assert lines[shot_chain + 1:shot_chain + 6] == [
        f"{FOLLOW_UP} Who kept the light?", f"{INTERMEDIATE} Martha Quill",
        f"{FOLLOW_UP} Where was she born?", f"{INTERMEDIATE} Port Ellis", f"{FINAL} Port Ellis"]
    assert lines[-3:] == ["Question: What was the light built of?", f"{FOLLOW_UP} Who built the light?",
                          f"{INTERMEDIATE} masons"]
    pending = iterdrag_prompt("What was the light built of?", [A], [], done, pending="Of granite?")
    assert pending.endswith(f"{INTERMEDIATE} masons\n{FOLLOW_UP} Of granite?")
    assert "Worked examples" not in pending
    forced = iterdrag_prompt("What was the light built of?", [A], [], done, force_final=True)
    assert forced.endswith(f"{INTERMEDIATE} masons\n{FINAL}")


def test_grammars_allow_the_prefixes_the_chain_allows():
    assert f'"{FOLLOW_UP} "' in STEP_GRAMMAR and f'"{FINAL} "' in STEP_GRAMMAR and INTERMEDIATE not in STEP_GRAMMAR
    assert f'"{INTERMEDIATE} "' in INTERMEDIATE_GRAMMAR and FOLLOW_UP not in INTERMEDIATE_GRAMMAR
    assert FINAL not in FINAL_GRAMMAR and FOLLOW_UP not in FINAL_GRAMMAR  # the prompt already ends with it


@pytest.fixture(scope="module")
def vocab():
    """A llama.cpp vocabulary to compile grammars against (the tiny bundled model's, loaded vocab-only)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from llama_cpp._utils import suppress_stdout_stderr

    from ragfunnel.llm import bundled

    status = bundled.status("smollm2-135m")
    if not status.ready:
        pytest.skip(f"bundled:smollm2-135m is not ready ({status.note})")
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with suppress_stdout_stderr(disable=False):
        model = llama_cpp.llama_model_load_from_file(status.path.encode(), params)
    yield llama_cpp, llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)


@pytest.mark.parametrize("grammar", [STEP_GRAMMAR, INTERMEDIATE_GRAMMAR, FINAL_GRAMMAR])
def test_grammars_compile_in_llama_cpp(vocab, grammar):
    llama_cpp, v = vocab
    sampler = llama_cpp.llama_sampler_init_grammar(v, grammar.encode(), b"root")
    assert sampler, f"llama.cpp rejected {grammar!r}"
    llama_cpp.llama_sampler_free(sampler)
    broken = llama_cpp.llama_sampler_init_grammar(v, grammar.replace("root ::=", "root ::= (").encode(), b"root")
    assert not broken  # the check above can fail


def test_fake_llm_records_the_grammar_and_an_empty_grammar_is_refused():
    llm = FakeLLM(lambda prompt, i: "Follow up: Who?")
    llm.generate(["a"], SamplingParams(grammar=STEP_GRAMMAR))
    llm.generate(["b"])
    assert llm.grammars == [STEP_GRAMMAR, None] and llm.calls == [("a", 1), ("b", 1)]
    with pytest.raises(ConfigError, match="grammar is empty"):
        llm.generate(["c"], SamplingParams(grammar=" "))


@pytest.fixture
def openai_server():
    _Flaky.seen, _Flaky.fail_first = [], 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_openai_backend_sends_the_grammar_only_when_given(openai_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    llm = OpenAICompatibleLLM(openai_server, "m")
    llm.generate(["hi"], SamplingParams(grammar=INTERMEDIATE_GRAMMAR))
    llm.generate(["hi"])
    with_grammar, without = _Flaky.seen
    assert with_grammar["grammar"] == INTERMEDIATE_GRAMMAR
    assert without == {k: v for k, v in with_grammar.items() if k != "grammar"}  # otherwise unchanged
