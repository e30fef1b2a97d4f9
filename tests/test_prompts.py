import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.prompts import (
    TASKS,
    VARIANTS,
    build_prompt,
    clean_answer,
    is_unanswerable,
    parse_sample,
    prompt_prefix,
)


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_prompt_holds_context_question_and_cue(task, variant):
    choices = ["red", "blue"] if TASKS[task].kind == "choice" else None
    p = build_prompt(task, variant, question="Which colour?", context="The sky was blue.", choices=choices)
    assert "The sky was blue." in p and "Which colour?" in p
    # The answer cue ends the prompt; a few-shot set's input ends with its own ("Type:"), shown as written.
    t = TASKS[task]
    cue = {"rationale": "Rationale:", "queries": "Search:"}.get(variant, t.cue)
    assert p.endswith(cue or "Which colour?")
    # Only the unanswerable variant offers a way out, unless the task's answer style does (LongBench's qasper);
    # drafts follow the rationale format instead of the style.
    own = variant == "plain" and "unanswerable" in TASKS[task].style
    assert ("unanswerable" in p) == (variant == "unanswerable" or own)
    assert p.startswith(prompt_prefix(task, "The sky was blue."))  # every variant shares the document's prefix
    if choices:
        assert "A. red" in p and "B. blue" in p


def test_longbench_prompts_follow_its_layout_with_its_limits():
    p = build_prompt("longbench/qmsum", "plain", question="What was decided?", context="Ann: we ship.")
    assert p.index("Transcript:\nAnn: we ship.") < p.index("Query: What was decided?") < p.index("Answer:")
    assert [TASKS[f"longbench/{d}"].answer_tokens for d in ("hotpotqa", "multifieldqa_en", "qasper", "qmsum")] == [
        32, 64, 128, 512]
    assert TASKS["longbench/trec"].first_line and not TASKS["longbench/qmsum"].first_line


def test_few_shot_and_code_inputs_are_shown_as_written():
    p = build_prompt("longbench/samsum", "plain", question="Dialogue: Ann: hi\nBob: bye\nSummary: ",
                     context="Dialogue: Cy: yo\nSummary: Cy greets.")
    assert p.endswith("\nDialogue: Ann: hi\nBob: bye\nSummary:")  # its own label and cue, no "Answer:"
    code = build_prompt("longbench/repobench-p", "plain", question="    def f(self):\n        return 1",
                        context="import os")
    assert code.endswith("\n    def f(self):\n        return 1\nNext line of code:")  # indentation kept


def test_context_comes_before_the_question():
    p = build_prompt("qa", "plain", question="Q?", context="CTX")
    assert p.index("CTX") < p.index("Q?")


def test_unknown_task_lists_valid_ones():
    with pytest.raises(ConfigError, match="valid tasks: qa, multihop, summary, choice"):
        build_prompt("poem", "plain", question="q", context="c")


def test_choice_task_needs_options():
    with pytest.raises(ConfigError, match="choices"):
        build_prompt("choice", "plain", question="q", context="c")


def test_parse_well_formed_sample():
    s = parse_sample("Rationale: Paris is named in the second passage.\nAnswer: Paris")
    assert (s.rationale, s.answer) == ("Paris is named in the second passage.", "Paris")


def test_parse_sample_without_prefixes_keeps_text_as_rationale():
    s = parse_sample("The second passage says the capital is Paris and it has")
    assert s.answer == "" and s.rationale.startswith("The second passage")
    assert s.text.endswith("it has")


def test_parse_sample_with_cut_off_answer_and_markdown():
    s = parse_sample("**Rationale:** lots of reasoning\n**Answer:**")
    assert s.answer == "" and s.rationale.startswith("lots of reasoning")


def test_parse_uses_the_last_answer_marker():
    s = parse_sample("Rationale: the answer: maybe X. Answer: Y")
    assert s.answer == "Y"


def test_clean_answer():
    assert clean_answer("Answer: Paris\nbecause ...") == "Paris"
    assert clean_answer("  \n Paris ") == "Paris"
    assert clean_answer("") == ""
    assert clean_answer("Line one\nLine two", first_line=False) == "Line one\nLine two"


def test_unanswerable_detection():
    assert is_unanswerable("Unanswerable.") and not is_unanswerable("Paris")
