"""What went wrong with each wrong answer: the failure kinds, hand-checked, in rows and in the report."""

import json

import pytest

from ragfunnel.errors import InputError
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.failures import (
    FAILURE_DEFINITIONS,
    FAILURE_KINDS,
    comparison_options,
    failure_kind,
    failure_of,
    hop_answers,
    matches,
    question_kind,
)
from ragfunnel.eval.report import FAILURE_NOTE, summarise_run, write_report
from ragfunnel.eval.runner import EvalRow, run_eval
from ragfunnel.journal import CONFIG_FILE, ROWS_FILE
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.types import Example

HOP = "Who was the first president of the association which published the Journal of Psychotherapy?"


@pytest.mark.parametrize(("question", "answer", "references", "hops", "kind"), [
    # Right (best token F1 over the references 0.5 or more): no failure.
    (HOP, "G. Stanley Hall", ["G. Stanley Hall"], ["American Psychological Association"], None),
    (HOP, "Stanley", ["G. Stanley Hall"], [], None),  # F1 2·(1·1/3)/(1+1/3) = 0.5
    # The first hop's answer: normalised equal, or F1 0.8 ("psychological association" of three words).
    (HOP, "the American Psychological Association", ["G. Stanley Hall"], ["American Psychological Association"],
     "earlier_hop"),
    (HOP, "Psychological Association", ["G. Stanley Hall"], ["American Psychological Association"], "earlier_hop"),
    # A hop sharing a word with the reference is still a hop: "Rutgers" has F1 0.67 with "Rutgers University",
    # which has F1 0.5 with the reference.
    ("What kind of university did Judith Viorst attend?", "Rutgers", ["land-grant university"],
     ["Judith Viorst", "Rutgers University"], "earlier_hop"),
    # F1 with the hop 2·(1/2·1/3)/(1/2+1/3) = 0.4: no match, and "American" is no word of the question.
    (HOP, "American Society", ["G. Stanley Hall"], ["American Psychological Association"], "other"),
    # Comparison: the answer is the option that is not the reference.
    ("Who was born first, Ben Smith or Jerry Lee?", "Ben Smith", ["Jerry Lee"], [], "wrong_option"),
    ("Which magazine was started first Arthur's Magazine or First for Women?", "Arthur's Magazine",
     ["First for Women"], [], "wrong_option"),
    ("Is Everest or K2 taller?", "K2", ["Everest"], [], "wrong_option"),
    # Options sharing a word: "Richard Wright" matches both (F1 1 and 0.5), the reference the second best.
    ("What author was more popular in the 70's, Richard Wright or Richard Bach?", "Richard Wright",
     ["Richard David Bach"], [], "wrong_option"),
    ("Which state was represented first - Oklahoma or Kansas?", "Oklahoma", ["Kansas"], [], "wrong_option"),
    ("Which came first the forming of The Dandy Warhols or the birth of Robert Young?", "The Dandy Warhols",
     ["Robert Young"], [], "wrong_option"),
    # An answer matching neither option better than the other says nothing about the pick: "Richard" alone.
    # (Against "Richard Bach" it is right, F1 0.67; against "Richard David Bach Jr." wrong, F1 0.4, and an echo.)
    ("What author was more popular in the 70's, Richard Wright or Richard Bach?", "Richard", ["Richard Bach"], [],
     None),
    ("What author was more popular in the 70's, Richard Wright or Richard Bach?", "Richard",
     ["Richard David Bach Jr."], [], "echo"),
    # "Lake Erie" for "Lake Michigan" shares "lake": F1 2·(1/2·1/2)/(1/2+1/2) = 0.5, right by the metric.
    ("Is Lake Michigan or Lake Erie larger?", "Lake Erie", ["Lake Michigan"], [], None),
    ("Between Iain Banks and Irwin Shaw, which writer had a more diverse career?", "Iain Banks", ["Irwin Shaw"],
     [], "wrong_option"),
    # Picking the right option in words the metric does not credit is no wrong pick: F1 of "lake michigan
    # county park" against "lake michigan" is 2·(1/2·1)/(1/2+1) = 0.67 as an option match, but the option
    # matches the reference; F1 against the reference is the same 0.67, so it is right.
    ("Is Lake Michigan or Lake Erie larger?", "Lake Michigan County Park", ["Lake Michigan"], [], None),
    # An earlier hop wins over an option it also is.
    ("Which film came out first, Alpha or Beta?", "Alpha", ["Beta"], ["Alpha"], "earlier_hop"),
    # Yes/no the wrong way, however long.
    ("Were Scott Derrickson and Ed Wood of the same nationality?", "No, they were not.", ["yes"], [], "wrong_yes_no"),
    ("Are Medici and Senet both board games?", "yes", ["no"], [], "wrong_yes_no"),
    # Yes as the reference says, but wordy (F1 2·(1/4·1)/(1/4+1) = 0.4): not the wrong way; it is other.
    ("Are Medici and Senet both board games?", "yes, both of them", ["yes"], [], "other"),
    # Echo: every content word of the answer is in the question (stop words aside).
    ("What is the capital of the country where Lyon is?", "Lyon", ["Paris"], [], "echo"),
    ("What river flows through the city of Lyon?", "the city of Lyon", ["Rhône"], [], "echo"),
    ("Who published Grace Krilanovich's first novel?", "Grace Krilanovich", ["Two Dollar Radio"], [], "echo"),
    # Wrong type.
    ("When was the country that produced Fist Power taken by the British?", "Kenya", ["1842"], [], "wrong_type"),
    ("The company was founded in what year?", "Acme Corp", ["1984"], [], "wrong_type"),
    ("How many stores are in Florida?", "several dozen outlets", ["35"], [], "other"),  # "dozen" is a number
    ("How many stores are in Florida?", "most of them", ["35"], [], "wrong_type"),
    ("How many times was he selected?", "two-time", ["three"], [], "other"),  # "two" in "two-time"
    ("Who directed the film?", "1986", ["Stephen King"], [], "wrong_type"),
    ("Where was the treaty signed?", "5 March 1990", ["Paris"], [], "wrong_type"),
    ("Where was the treaty signed?", "Route 66", ["Paris"], [], "other"),  # a place with a number in it
    ("Are Medici and Senet both board games?", "card games", ["no"], [], "wrong_type"),
    # An auxiliary-led question whose reference is not yes or no was not asking for yes or no.
    ("Is the Eiffel Tower in which city?", "Lyon", ["Paris"], [], "other"),
    # A when-question answered with a time that has no number is of the right type.
    ("When does monsoon season happen in Delhi?", "in the spring", ["summer"], [], "other"),
    # "When considering A and B, which ...": the opening "when" asks nothing.
    ("When considering Kelly and Bob, which state was represented?", "Ohio", ["Kansas"], [], "other"),
    # Edge cases: an empty answer and a decline state nothing, so they are other, even to a when-question.
    (HOP, "", ["G. Stanley Hall"], ["American Psychological Association"], "other"),
    ("When did it open?", "unanswerable", ["1998"], [], "other"),
    ("Were they of the same nationality?", "No information is given.", ["yes"], [], "other"),
    ("Who was born first, Ben Smith or Jerry Lee?", "N/A", ["Jerry Lee"], [], "other"),
    ("When did it open?", "Unknown", ["1998"], [], "other"),
    ("When was the album recorded?", "Unknown Pleasures", ["1979"], [], "wrong_type"),  # a name, not a decline
    # "unanswerable" as the reference, and the answer: right.
    ("When did it open?", "Unanswerable.", ["unanswerable"], [], None),
    # A Chinese question never gets wrong_type; an echo is still an echo.
    ("北京是哪个国家的首都?", "1949年", ["中国"], [], "other"),
    ("北京是哪个国家的首都?", "北京", ["中国"], [], "echo"),
    # No question word: the kind is not guessed.
    ("Name the year the company was founded.", "Acme", ["1984"], [], "other"),
])
def test_failure_kinds_hand_checked(question, answer, references, hops, kind):
    assert failure_kind(question, answer, references, hops) == kind


def test_the_runs_own_verdict_decides_right_from_wrong():
    # F1 0.5 is right by default, but a run whose metric said wrong (say LongBench's score) gets a kind.
    assert failure_kind(HOP, "Stanley", ["G. Stanley Hall"], []) is None
    assert failure_kind(HOP, "Stanley", ["G. Stanley Hall"], [], right=False) == "other"
    assert failure_kind(HOP, "Lyon", ["Paris"], [], right=True) is None
    # A hop equal to a reference is the answer, not an earlier hop (a HotpotQA bridge title equal to it).
    assert failure_kind(HOP, "Stanley Hall", ["G. Stanley Hall"], ["G. Stanley Hall"], right=False) == "other"
    ex = Example(id="1", question=HOP, answers=["G. Stanley Hall"], meta={"hop_answers": ["APA"]})
    assert failure_of(ex, "APA", {"f1": 0.0, "em": 0.0}) == "earlier_hop"
    assert failure_of(ex, "APA", {"f1": 0.7}) is None
    assert failure_of(ex, "APA", {"rouge_l": 0.1}) is None  # a summary is neither right nor wrong
    assert failure_of(ex, "APA", {"longbench": 0.2}) == "earlier_hop"


def test_matches_is_normalised_equality_or_f1_of_a_half():
    assert matches("The Beatles!", "beatles")
    assert matches("Rutgers", "Rutgers University")  # 2·(1·1/2)/(1+1/2) = 0.67
    assert matches("New York Yankees fans", "New York")  # 2·(1/2·1)/(1/2+1) = 0.67
    assert not matches("York", "New York Yankees fans")  # 2·(1·1/4)/(1+1/4) = 0.4
    assert not matches("", "")


@pytest.mark.parametrize(("question", "kind", "options"), [
    ("Who was born first, Ben Smith or Jerry Lee?", "who", ("Ben Smith", "Jerry Lee")),
    ("Which film came out first, The Lord of the Rings or Star Wars?", "open", ("The Lord of the Rings", "Star Wars")),
    ("Which band was formed first The Exies or Circus Diablo ?", "open", ("Exies", "Circus Diablo")),
    ("Is Lake Michigan or Lake Erie larger?", "choice", ("Lake Michigan", "Lake Erie")),
    ("Are cats or dogs more popular?", "choice", ("cats", "dogs more popular")),
    # An "or" in a longer statement offers no choice.
    ("Who was in charge of the country where Ann or Bob lived?", "who", None),
    ("Who directed the film that was shot in or around Leland in 1986", "who", None),
    ("Were Scott Derrickson and Ed Wood of the same nationality?", "yes_no", None),
    ("The director has an OBE. Does the director Puneet Sira also have one?", "yes_no", None),  # the asking sentence
    ("In what year was the man born?", "when", None),
    ("The soundtrack was produced by a man born in what year?", "when", None),  # "what year" wherever it stands
    ("David Jones plays another sport that was started when?", "when", None),  # ends in its wh-word
    ("The state has how many congressional districts?", "how_many", None),
    ("Thumb Wrestling Federation is on a network founded by who?", "who", None),
    ("Where are Gila monsters found?", "where", None),
    ("What is the native language of Gandhi?", "open", None),
    ("Scott Howell has worked with the mayor of what city?", None, None),  # its kind is not guessed
    ("北京是哪个国家的首都?", None, None),
    ("", None, None),
])
def test_question_kinds_and_options(question, kind, options):
    assert question_kind(question) == kind
    assert comparison_options(question) == options


def test_hop_answers_come_from_the_decomposition_else_the_supporting_titles():
    assert hop_answers(Example(id="1", question=HOP, meta={"hop_answers": ["APA"], "supporting_titles": ["T"]})) \
        == ["APA"]
    bridge = Example(id="2", question="Who founded the magazine?", answers=["Ann"],
                     meta={"supporting_titles": ["Arthur's Magazine", "Ann"], "type": "bridge"})
    assert hop_answers(bridge) == ["Arthur's Magazine", "Ann"]  # failure_kind drops the one equal to the answer
    # Titles lose their disambiguation, and those the question names itself are where it starts, not hops.
    named = Example(id="5", question="What did the writer Lucy Saunders wrote about write about?",
                    meta={"supporting_titles": ["Lucy Saunders", "Michael Jackson (writer)"], "type": "bridge"})
    assert hop_answers(named) == ["Michael Jackson"]
    assert failure_kind(bridge.question, "Ann", ["Ann"], hop_answers(bridge)) is None
    # A comparison's supporting titles are its options, not hops.
    comparison = Example(id="3", question="Which came first, Alpha or Beta?", answers=["Beta"],
                         meta={"supporting_titles": ["Alpha", "Beta"], "type": "comparison"})
    assert hop_answers(comparison) == []
    assert failure_of(comparison, "Alpha", {"f1": 0.0}) == "wrong_option"
    assert hop_answers(Example(id="4", question="Who?")) == []


def test_every_kind_is_defined_once_for_the_report():
    assert set(FAILURE_DEFINITIONS) == set(FAILURE_KINDS)
    assert all(text in FAILURE_NOTE for text in FAILURE_DEFINITIONS.values())


MUSIQUE_ROW = {"id": "2hop__1", "question": HOP, "answer": "G. Stanley Hall", "answer_aliases": ["Stanley Hall"],
               "paragraphs": [{"title": "APA", "paragraph_text": "The APA publishes the journal.",
                               "is_supporting": True}],
               "question_decomposition": [
                   {"id": 1, "question": "Who publishes the journal?", "answer": "American Psychological Association"},
                   {"id": 2, "question": "Who was the first president of #1?", "answer": "G. Stanley Hall"}]}


def test_musique_keeps_every_sub_answer_but_the_last(tmp_path):
    path = tmp_path / "musique.json"
    three = MUSIQUE_ROW | {"id": "3hop__2", "question_decomposition": [
        {"answer": "Hank Snow"}, {"answer": " "}, {"answer": "Tennessee"}, {"answer": "35"}]}
    bare = {k: v for k, v in MUSIQUE_ROW.items() if k != "question_decomposition"} | {"id": "2hop__3"}
    path.write_text(json.dumps([MUSIQUE_ROW, three, bare]))
    first, second, third = load_dataset(path).examples
    assert first.meta["hop_answers"] == ["American Psychological Association"]
    assert second.meta["hop_answers"] == ["Hank Snow", "Tennessee"]  # a blank sub-answer is dropped
    assert "hop_answers" not in third.meta  # its supporting titles stand in
    path.write_text(json.dumps([MUSIQUE_ROW | {"question_decomposition": "first APA, then Hall"}]))
    with pytest.raises(InputError, match="'question_decomposition' must be a list of"):
        load_dataset(path)


def test_a_users_jsonl_may_give_hop_answers(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [{"id": "a", "question": HOP, "answers": ["G. Stanley Hall"], "hop_answers": ["APA"]},
            {"id": "b", "question": HOP, "answers": ["G. Stanley Hall"], "meta": {"hop_answers": ["APA"], "x": 1}},
            {"id": "c", "question": HOP, "answers": ["G. Stanley Hall"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b, c = load_dataset(path).examples
    assert a.meta == {"hop_answers": ["APA"]} and b.meta == {"hop_answers": ["APA"], "x": 1} and c.meta == {}
    path.write_text(json.dumps({"question": HOP, "answers": ["x"], "hop_answers": "APA"}) + "\n")
    with pytest.raises(InputError, match="'hop_answers' must be a list of strings"):
        load_dataset(path)


def answering(text):
    return make_method("lc", strong=FakeLLM(lambda prompt, i: text))


def test_rows_carry_their_failure_and_supported_flag(tmp_path):
    ex = Example(id="1", question=HOP, context="The APA publishes the journal; Hall led it.",
                 answers=["G. Stanley Hall"], meta={"hop_answers": ["American Psychological Association"]})
    (wrong,) = run_eval([ex], {"lc": answering("American Psychological Association")}, tmp_path / "wrong",
                        config={}, progress=False).rows
    (right,) = run_eval([ex], {"lc": answering("G. Stanley Hall")}, tmp_path / "right", config={},
                        progress=False).rows
    assert (wrong.failure, right.failure) == ("earlier_hop", None)
    stored = json.loads((tmp_path / "wrong" / ROWS_FILE).read_text())
    assert stored["failure"] == "earlier_hop" and "supported" in stored
    assert wrong.supported is stored["supported"] and wrong.supported in (True, False, None)
    assert EvalRow.from_json(stored) == wrong


def test_older_rows_without_the_fields_still_load_and_resume(tmp_path):
    ex = Example(id="1", question=HOP, context="The APA publishes the journal.", answers=["G. Stanley Hall"])
    run_eval([ex], {"lc": answering("APA")}, tmp_path, config={}, progress=False)
    stored = json.loads((tmp_path / ROWS_FILE).read_text())
    for key in ("failure", "supported"):
        del stored[key]  # as an older ragfunnel wrote it
    (tmp_path / ROWS_FILE).write_text(json.dumps(stored) + "\n")
    assert (EvalRow.from_json(stored).failure, EvalRow.from_json(stored).supported) == (None, None)
    second = Example(id="2", question=HOP, context="The APA publishes the journal.", answers=["G. Stanley Hall"])
    result = run_eval([ex, second], {"lc": answering("APA")}, tmp_path, config={}, progress=False)
    assert result.written == 1 and [r.failure for r in result.rows] == [None, "other"]


@pytest.mark.parametrize(("field", "value", "says"), [
    ("failure", "wrong_hop", "'failure' must be null or one of earlier_hop, wrong_option"),
    ("supported", "yes", "'supported' must be true, false or null"),
])
def test_a_row_with_a_bad_value_is_refused(tmp_path, field, value, says):
    ex = Example(id="1", question=HOP, context="The APA publishes the journal.", answers=["G. Stanley Hall"])
    (row,) = run_eval([ex], {"lc": answering("APA")}, tmp_path, config={}, progress=False).rows
    with pytest.raises(InputError, match=says):
        EvalRow.from_json(row.to_json() | {field: value})


def stored_row(i, answer, f1, failure, *, written_before=False):
    row = EvalRow(example_id=str(i), method="op", metrics={"f1": f1}, question=HOP, answer=answer,
                  references=["G. Stanley Hall"], failure=failure,
                  trace={"seconds": 1.0, "input_tokens": 10, "stages": [{"name": "generate", "seconds": 1.0}]})
    stored = row.to_json()
    if written_before:
        del stored["failure"]
    return stored


def test_the_report_counts_each_kind_of_wrong_answer(tmp_path):
    # One right; four wrong: two earlier hops, one echo, one from an older row that recorded no kind.
    run = tmp_path / "run"
    run.mkdir()
    (run / CONFIG_FILE).write_text(json.dumps({"dataset": "musique.json"}))
    rows = [stored_row(0, "G. Stanley Hall", 1.0, None), stored_row(1, "APA", 0.0, "earlier_hop"),
            stored_row(2, "APA", 0.0, "earlier_hop"), stored_row(3, "the journal", 0.0, "echo"),
            stored_row(4, "Lyon", 0.0, None, written_before=True)]
    (run / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (s,) = summarise_run(run)
    assert s.wrong == 4 and s.wrong_unclassified == 1
    assert s.wrong_kinds == {"earlier_hop": 2, "wrong_option": 0, "wrong_yes_no": 0, "echo": 1, "wrong_type": 0,
                             "other": 0}
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    write_report([run], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text().splitlines()
    start = md.index("## Wrong answers: what went wrong")
    assert md[start + 2] == ("| dataset | method | budget | wrong | earlier hop | wrong option | wrong yes/no | echo "
                             "| wrong type | other | not classified |")
    assert md[start + 4] == "| musique | op | - | 4 | 2 | 0 | 0 | 1 | 0 | 0 | 1 |"
    assert md[start + 6].startswith("Right: the first of a row's f1")
    assert "(counted by the wrong column)" in md[start + 6]
    assert md[start + 8] == FAILURE_NOTE
    assert "earlier hop: matches an intermediate answer of the question" in FAILURE_NOTE


def test_a_report_without_wrong_answers_has_no_failure_table(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / CONFIG_FILE).write_text(json.dumps({"dataset": "musique.json"}))
    (run / ROWS_FILE).write_text(json.dumps(stored_row(0, "G. Stanley Hall", 1.0, None)) + "\n")
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    write_report([run], tmp_path / "out")
    assert "## Wrong answers: what went wrong" not in (tmp_path / "out" / "report.md").read_text()
