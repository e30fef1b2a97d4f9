"""Dataset and corpus loaders: hand-made rows for the formats and errors, the shared files when present."""

import json
import os
import sys

import pytest

from ragfunnel.bounded import RefusedPath, UnreadableFile
from ragfunnel.corpus import load_corpus
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.eval import datasets
from ragfunnel.eval.datasets import MAX_DATASET_BYTES, MAX_DATASET_LINE_BYTES, detect_format, load_dataset
from ragfunnel.prompts import TASKS
from tests.conftest import SHARED


def write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_hotpotqa_list_and_dict_forms_agree(tmp_path):
    listed = {"_id": "q1", "question": "Who?", "answer": "Ann",
              "context": [["T1", ["Ann was ", "here."]], ["T2", ["Bob."]]],
              "supporting_facts": [["T1", 0]]}
    as_dict = {**listed, "context": {"title": ["T1", "T2"], "sentences": [["Ann was ", "here."], ["Bob."]]},
               "supporting_facts": {"title": ["T1"], "sent_id": [0]}}
    a = load_dataset(write_jsonl(tmp_path / "a.jsonl", [listed]), format="hotpotqa").examples[0]
    b = load_dataset(write_jsonl(tmp_path / "b.jsonl", [as_dict]), format="hotpotqa").examples[0]
    assert a.context == b.context == "T1\nAnn was here.\n\nT2\nBob."
    assert a.meta["supporting_titles"] == b.meta["supporting_titles"] == ["T1"]
    assert a.answers == ["Ann"] and a.task == "multihop"


def test_generic_jsonl_and_auto_detection(tmp_path):
    rows = [{"id": "a", "question": "Q1?", "answers": ["x", "y"], "context": "text"},
            {"question": "Q2?", "answer": "z"}]
    loaded = load_dataset(write_jsonl(tmp_path / "mine.jsonl", rows))
    assert [e.id for e in loaded.examples] == ["a", "2"]
    assert loaded.examples[1].answers == ["z"] and loaded.examples[1].context is None


@pytest.mark.parametrize("record, fmt", [
    ({"paragraphs": [], "question": "q", "answer": "a"}, "musique"),
    ({"input": "q", "context": "c", "answers": ["a"]}, "longbench"),
    ({"input": "q", "context": "c", "answer": ["a"], "options": []}, "infbench"),
    ({"question": "q", "answer": "a", "context": [["t", ["s"]]], "supporting_facts": []}, "hotpotqa"),
    ({"question": "q", "answer": ["a", "b"]}, "nq-open"),
    ({"question": "q", "answers": ["a"]}, "jsonl"),
])
def test_detect_format(record, fmt):
    assert detect_format(record) == fmt


def test_malformed_rows_are_reported_with_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"question": "ok?", "answers": ["y"]},
        "{not json",
        {"answers": ["no question"]},
        {"question": "no answers"},
        {"question": "ok again?", "answers": ["y"]},
    ])
    with pytest.raises(InputError, match=r"d.jsonl:2: not valid JSON.*set on_error to skip"):
        load_dataset(path)
    loaded = load_dataset(path, on_error="skip")
    assert len(loaded.examples) == 2
    assert [(e.line, e.message.split(" ")[0]) for e in loaded.errors] == [(2, "not"), (3, "missing"), (4, "missing")]


@pytest.mark.parametrize("fmt, record, says", [
    ("musique", {"question": "q", "answer": "a", "paragraphs": ["oops"]}, "'paragraphs' must be a list of"),
    ("hotpotqa", {"question": "q", "answer": "a", "context": [["T", [1, 2]]]}, "lists of sentence strings"),
    ("hotpotqa", {"question": 5, "answer": "a", "context": [["T", ["s"]]]}, "'question' must be a string, got int"),
    ("longbench", {"input": "q", "context": ["x"], "answers": ["a"]}, "'context' must be a string, got list"),
    ("jsonl", {"question": ["q"], "answers": ["a"]}, "'question' must be a string, got list"),
    ("nq-open", {"question": "q", "answer": [{"a": 1}]}, "answers must be strings or numbers, got dict"),
    ("musique", {"question": "q", "answer": "a", "paragraphs": [{"title": 3, "paragraph_text": None}]},
     "not a musique row"),
])
def test_rows_of_the_wrong_shape_are_reported_not_crashed_on(tmp_path, fmt, record, says):
    path = write_jsonl(tmp_path / "d.jsonl", [record])
    loaded = load_dataset(path, format=fmt, on_error="skip")
    assert not loaded.examples and [e.line for e in loaded.errors] == [1]
    assert says in loaded.errors[0].message
    with pytest.raises(InputError, match="d.jsonl:1: .*set on_error to skip"):
        load_dataset(path, format=fmt)


def test_longbench_classes_are_kept_for_scoring_not_shown_as_options(tmp_path):
    # trec has 50 classes: LongBench scores against them, it never lists them in the prompt.
    row = {"_id": "x", "input": "What is a cat?", "context": "examples", "answers": ["Definition of something"],
           "all_classes": ["Definition of something", "Animal"], "dataset": "trec"}
    (e,) = load_dataset(write_jsonl(tmp_path / "lb.jsonl", [row])).examples
    assert e.task == "longbench/trec" and e.choices is None
    assert e.meta["all_classes"] == ["Definition of something", "Animal"]


def test_longbench_qa_rows_keep_their_context_and_every_answer(tmp_path):
    row = {"_id": "y", "input": "Who wrote it?", "context": "Passage 1:\nAnn wrote it.", "answers": ["Ann", "Ann B."],
           "all_classes": None, "dataset": "hotpotqa", "length": 4}
    (e,) = load_dataset(write_jsonl(tmp_path / "lb.jsonl", [row])).examples
    assert (e.id, e.task, e.choices, e.answers) == ("y", "longbench/hotpotqa", None, ["Ann", "Ann B."])
    assert e.context == "Passage 1:\nAnn wrote it."
    assert e.meta == {"dataset": "hotpotqa", "length": 4, "all_classes": None}


@pytest.mark.parametrize("dataset, task, kind, limit", [
    ("qmsum", "longbench/qmsum", "summary", 512),
    ("narrativeqa", "longbench/narrativeqa", "qa", 128),
    ("qasper_e", "longbench/qasper", "qa", 128),  # LongBench-E names
    ("multifieldqa_en", "longbench/multifieldqa_en", "qa", 64),
    ("musique", "longbench/musique", "qa", 32),
    ("my_own_set", "qa", "qa", 32),  # a dataset LongBench does not know: the generic task
    (None, "qa", "qa", 32),
])
def test_longbench_dataset_picks_task_kind_and_answer_limit(tmp_path, dataset, task, kind, limit):
    row = {"input": "q?", "context": "text", "answers": ["a"], "dataset": dataset}
    (e,) = load_dataset(write_jsonl(tmp_path / "lb.jsonl", [row]), format="longbench").examples
    assert (e.task, TASKS[e.task].kind, TASKS[e.task].answer_tokens) == (task, kind, limit)


def test_longbench_rows_without_a_question_get_their_tasks_request(tmp_path):
    rows = [{"_id": "r", "input": "", "context": "A report.", "answers": ["A summary."], "dataset": "gov_report"},
            {"_id": "s", "input": "", "context": "text", "answers": ["a"], "dataset": "qasper"}]
    loaded = load_dataset(write_jsonl(tmp_path / "lb.jsonl", rows), on_error="skip")
    assert [(e.id, e.question, e.task) for e in loaded.examples] == [("r", "Summarise the report.",
                                                                      "longbench/gov_report")]
    assert "missing 'input'" in loaded.errors[0].message


def test_infbench_rows_qa_and_multiple_choice(tmp_path):
    rows = [{"id": 0, "context": "A long book.", "input": "Who is Ann?", "answer": ["a sailor", "the sailor"],
             "options": []},
            {"id": 1, "context": "A long book.", "input": "Where does Ann go?", "answer": ["Lisbon"],
             "options": ["Paris", "Lisbon", "Rome", "Oslo"]},
            {"id": 2, "context": "A long book.", "input": "When?", "answer": ["Monday"],
             "options": ["Paris", "Lisbon"]}]
    loaded = load_dataset(write_jsonl(tmp_path / "longbook_qa_eng.jsonl", rows), on_error="skip")
    qa, mc = loaded.examples
    assert (qa.id, qa.task, qa.choices, qa.answers) == ("0", "infbench/en.qa", None, ["a sailor", "the sailor"])
    assert (mc.id, mc.task, mc.choices, mc.answers) == ("1", "infbench/en.mc", ["Paris", "Lisbon", "Rome", "Oslo"],
                                                        ["Lisbon"])
    assert TASKS[qa.task].answer_tokens == TASKS[mc.task].answer_tokens == 64  # as the FB-RAG paper set them
    assert [e.line for e in loaded.errors] == [3] and "not one of the row's options" in loaded.errors[0].message


@pytest.mark.parametrize("content, match", [("", "is empty"), ("   \n", "is empty")])
def test_empty_file(tmp_path, content, match):
    path = tmp_path / "e.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=match):
        load_dataset(path)


def test_a_sparse_dataset_file_stops_at_the_line_limit(tmp_path):
    path = tmp_path / "d.jsonl"
    path.touch()
    os.truncate(path, MAX_DATASET_LINE_BYTES + (1 << 20))  # NULs without a newline, taking no disk
    with pytest.raises(UnreadableFile) as error:
        load_dataset(path)
    assert str(error.value) == (f"dataset file {path} is over {MAX_DATASET_LINE_BYTES:,} bytes on line 1; pass a "
                                "JSON Lines dataset: one question a line, each under "
                                f"{MAX_DATASET_LINE_BYTES >> 20} MiB")


def test_a_json_list_is_not_held_to_the_line_limit_but_to_its_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_DATASET_LINE_BYTES", 100)
    rows = [{"id": str(i), "question": f"question {i}?", "answer": "a"} for i in range(20)]
    (tmp_path / "d.json").write_text("  \n" + json.dumps(rows))  # one line, past 100 bytes
    assert len(load_dataset(tmp_path / "d.json").examples) == 20
    write_jsonl(tmp_path / "d.jsonl", rows[:1] + [{**rows[1], "question": "long " * 30}])
    with pytest.raises(UnreadableFile, match=r"d.jsonl is over 100 bytes on line 2"):
        load_dataset(tmp_path / "d.jsonl")
    monkeypatch.setattr(datasets, "MAX_DATASET_BYTES", 1000)  # so a regression reads a kilobyte, not gigabytes
    path = tmp_path / "sparse.json"
    path.write_text("[")
    os.truncate(path, 1001)
    with pytest.raises(RefusedPath, match=r"sparse.json is 1,001 bytes, over the limit of 1,000; pass a JSON list "
                                          f"of at most {MAX_DATASET_BYTES >> 30} GiB"):
        load_dataset(path)


def test_an_id_of_5000_digits_is_a_row_error(tmp_path):
    digits, said = "1" * 5000, f"'id' has over {sys.get_int_max_str_digits():,} digits, more than Python reads"
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "1", "question": "a?", "answer": "x"},
                                              f'{{"id": {digits}, "question": "b?", "answer": "y"}}'])
    loaded = load_dataset(path, on_error="skip")
    assert [e.id for e in loaded.examples] == ["1"]
    assert [(e.line, e.message.startswith(said)) for e in loaded.errors] == [(2, True)]
    with pytest.raises(InputError, match=f"d.jsonl:2: {said} as a number; write it as a string; fix the row"):
        load_dataset(path)
    (tmp_path / "d.json").write_text(f'[{{"id": {digits}, "question": "b?", "answer": "y"}}]')
    with pytest.raises(InputError, match=r"d.json: a number has over .* digits, more than Python reads"):
        load_dataset(tmp_path / "d.json")


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_dataset(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match="valid formats: auto, hotpotqa, musique"):
        load_dataset(tmp_path / "nope.jsonl", format="squad")


def test_duplicate_ids_are_row_errors(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "1", "question": "a", "answer": "x"},
                                              {"id": "1", "question": "b", "answer": "y"}])
    assert "duplicate id" in load_dataset(path, on_error="skip").errors[0].message


SHARED_SETS = [
    ("hotpotqa_train_hipporag/hotpotqa_train.json", "hotpotqa", 100),
    ("hotpotqa_train_amor/hotpotqa_train100_amor.jsonl", "hotpotqa", 100),
    ("musique_train_hipporag/musique_train.json", "musique", 100),
    ("nq_open_efficientqa/NQ-open.efficientqa.dev.1.1.jsonl", "nq-open", 1800),
    ("flashrag_toy/nq_test_toy.jsonl", "jsonl", 17),
]


@pytest.mark.parametrize("relpath, fmt, n", SHARED_SETS)
def test_shared_question_sets_load_whole(relpath, fmt, n):
    path = SHARED / relpath
    if not path.exists():
        pytest.skip(f"{path} not present")
    loaded = load_dataset(path)
    assert len(loaded.examples) == n and not loaded.errors
    e = loaded.examples[0]
    assert e.question and e.answers
    if fmt in ("hotpotqa", "musique"):
        assert e.context and set(e.meta["supporting_titles"]) <= set(e.meta["titles"])
        assert all(t in e.context for t in e.meta["supporting_titles"])


@pytest.mark.parametrize("relpath, n", [
    ("hotpotqa_train_hipporag/hotpotqa_train_corpus.json", 994),
    ("musique_train_hipporag/musique_train_corpus.json", 1890),
    ("2wikimqa_corpus_hipporag/2wikimultihopqa_corpus.json", 6119),
    ("flashrag_toy/wiki_sample_corpus.jsonl", 1000),
])
def test_shared_corpora_load(relpath, n):
    path = SHARED / relpath
    if not path.exists():
        pytest.skip(f"{path} not present")
    docs = load_corpus(path)
    assert len(docs) == n and all(d.text for d in docs[:50]) and docs[0].title
