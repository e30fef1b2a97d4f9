import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.prompts import TASKS, VARIANTS, build_prompt, clean_answer, is_unanswerable, parse_sample


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_prompt_holds_context_question_and_cue(task, variant):
    choices = ["red", "blue"] if task == "choice" else None
    p = build_prompt(task, variant, question="Which colour?", context="The sky was blue.", choices=choices)
    assert "The sky was blue." in p and "Which colour?" in p
    assert p.endswith("Rationale:" if variant == "rationale" else "Answer:")
    assert ("unanswerable" in p) == (variant == "unanswerable")
    if choices:
        assert "A. red" in p and "B. blue" in p


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
