"""Resumable evaluation runs, with the scripted FakeLLM (no model)."""

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.eval.runner import gold_word_spans, run_eval, score
from ragfunnel.journal import ROWS_FILE
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.types import Document, Example

CONTEXT = " ".join(f"word{i}" for i in range(50)) + " The capital is Paris."


def examples(n):
    return [Example(id=f"e{i}", question=f"What is the capital {i}?", context=CONTEXT, answers=["Paris"])
            for i in range(n)]


def methods(reply="Paris"):
    llm = FakeLLM(lambda prompt, i: reply)
    return {"op": make_method("op", strong=llm, budget=100), "lc": make_method("lc", strong=llm)}


def test_score_by_task():
    pytest.importorskip("rouge_score", reason="needs the [eval] extra")
    qa = Example(id="1", question="q", answers=["the Eiffel Tower", "Eiffel"])
    assert score(qa, "Eiffel Tower") == {"f1": 1.0, "em": 1.0, "accuracy": 1.0}
    choice = Example(id="2", question="q", answers=["B"], choices=["x", "y"], task="choice")
    assert score(choice, "B") == {"accuracy": 1.0}
    summary = Example(id="3", question="q", answers=["a b c d"], task="summary")
    assert score(summary, "a b c d") == {"rouge_l": 1.0}


def test_metric_profiles_score_as_their_benchmarks_do():
    yes = Example(id="4", question="Is it?", answers=["no"])
    assert score(yes, "yes and no") == {"f1": 0.5, "em": 0.0, "accuracy": 1.0}  # ragfunnel: partial credit
    assert score(yes, "yes and no", "hotpotqa") == {"f1": 0.0, "em": 0.0}  # official: a yes/no must match
    trec = Example(id="5", question="What is a cat?", answers=["Animal"], task="longbench/trec",
                   meta={"dataset": "trec", "all_classes": ["Animal", "Definition of something"]})
    # LongBench keeps the first line only for trec, then gives 1/k for k classes named.
    assert score(trec, "Animal or Definition of something\nAnimal", "longbench") == {"longbench": 0.5}
    with pytest.raises(ConfigError, match="names no LongBench dataset"):
        score(yes, "no", "longbench")
    with pytest.raises(ConfigError, match="valid profiles: ragfunnel, longbench, hotpotqa"):
        score(yes, "no", "squad")


def test_a_run_with_a_profile_that_cannot_score_its_examples_stops_before_any_model(tmp_path):
    calls = []
    llm = FakeLLM(lambda prompt, i: calls.append(prompt) or "Paris")
    with pytest.raises(ConfigError, match="names no LongBench dataset"):
        run_eval(examples(2), {"lc": make_method("lc", strong=llm)}, tmp_path, config={}, progress=False,
                 metric_profile="longbench")
    assert not calls and not (tmp_path / ROWS_FILE).exists()


def test_a_run_from_before_profiles_were_recorded_resumes_with_the_default_only(tmp_path):
    run_eval(examples(1), methods(), tmp_path, config={"x": 1}, progress=False)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config.pop("metric_profile") == "ragfunnel"
    (tmp_path / "config.json").write_text(json.dumps(config))  # as an older ragfunnel wrote it
    assert run_eval(examples(2), methods(), tmp_path, config={"x": 1}, progress=False).written == 2
    with pytest.raises(ConfigError, match='metric_profile: "ragfunnel" there, "hotpotqa" now'):
        run_eval(examples(2), methods(), tmp_path, config={"x": 1}, progress=False, metric_profile="hotpotqa")


def test_rows_are_written_and_a_rerun_skips_them(tmp_path):
    first = run_eval(examples(3), methods(), tmp_path, config={"x": 1}, progress=False)
    assert first.written == 6 and all(r.metrics["em"] == 1.0 for r in first.rows)
    again = run_eval(examples(4), methods(), tmp_path, config={"x": 1}, progress=False)
    assert again.written == 2
    lines = (tmp_path / ROWS_FILE).read_text().splitlines()
    assert len(lines) == 8 and len({(json.loads(x)["example_id"], json.loads(x)["method"]) for x in lines}) == 8


def test_a_different_configuration_is_refused(tmp_path):
    run_eval(examples(1), methods(), tmp_path, config={"budget": 100}, progress=False)
    with pytest.raises(ConfigError, match=r"differs in: budget.*new directory \(out\)"):
        run_eval(examples(1), methods(), tmp_path, config={"budget": 200}, progress=False)


def test_a_torn_last_line_is_cut_off_and_redone(tmp_path):
    run_eval(examples(2), methods(), tmp_path, config={}, progress=False)
    rows = tmp_path / ROWS_FILE
    lines = rows.read_text().splitlines()
    rows.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:17])  # last row half-written
    result = run_eval(examples(2), methods(), tmp_path, config={}, progress=False)
    assert result.written == 1
    assert [json.loads(x) for x in rows.read_text().splitlines()] == [r.to_json() for r in result.rows]


def test_method_failures_become_counted_rows(tmp_path):
    bad = [Example(id="empty", question="q?", context="   ", answers=["x"])]
    (row,) = run_eval(bad, {"op": methods()["op"]}, tmp_path, config={}, progress=False).rows
    assert "empty" in row.error and row.metrics == {}


SCRIPT = textwrap.dedent("""
    import sys, time
    from ragfunnel.eval.runner import run_eval
    from ragfunnel.llm import FakeLLM
    from ragfunnel.methods import make_method
    from ragfunnel.types import Example

    def slow(prompt, i):
        time.sleep(0.02)
        return "Paris"

    llm = FakeLLM(slow)
    ms = {"op": make_method("op", strong=llm, budget=100), "lc": make_method("lc", strong=llm)}
    exs = [Example(id=f"e{i}", question="Capital?", context="The capital is Paris.", answers=["Paris"])
           for i in range(40)]
    run_eval(exs, ms, sys.argv[1], config={"k": 1}, progress=False)
""")


def test_resume_after_sigkill_yields_exactly_one_row_per_pair(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(run_dir)])
    rows = run_dir / ROWS_FILE
    deadline = time.time() + 60
    while time.time() < deadline and (not rows.exists() or rows.read_text().count("\n") < 15):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = rows.read_text().count("\n")
    assert 15 <= killed_at < 80
    subprocess.run([sys.executable, str(script), str(run_dir)], check=True)
    pairs = [(json.loads(x)["example_id"], json.loads(x)["method"]) for x in rows.read_text().splitlines()]
    assert len(pairs) == 80 and len(set(pairs)) == 80


def test_every_pair_starts_with_cold_prompt_caches(tmp_path):
    from ragfunnel.llm import Capabilities
    from ragfunnel.llm.registry import registered

    class Cached(FakeLLM):
        capabilities = Capabilities(reset=True)
        resets = 0

        def reset(self):
            Cached.resets += 1

    with registered("fake:cached", Cached(lambda prompt, i: "Paris")):
        run_eval(examples(2), methods(), tmp_path, config={}, progress=False)
    assert Cached.resets == 4  # 2 examples x 2 methods


def hotpot_like():
    """Three 10-word passages (title + 9 words); the second supports the answer."""
    docs = [Document(t, t, " ".join(f"{t.lower()}{i}" for i in range(9))) for t in ("Alpha", "Beta", "Gamma")]
    docs[1] = Document("Beta", "Beta", "the capital is Paris and nothing else is here")
    return Example(id="h", question="What is the capital?", answers=["Paris"], task="multihop",
                   context="\n\n".join(d.render() for d in docs), passages=docs,
                   meta={"supporting_titles": ["Beta"]})


def test_gold_spans_come_from_supporting_titles_or_gold_passages():
    ex = hotpot_like()
    assert gold_word_spans(ex) == [(10, 20)]
    by_position = Example(id="g", question="q", answers=["a"], context=ex.context, passages=ex.passages,
                          meta={"gold_passages": [0, 2]})
    assert gold_word_spans(by_position) == [(0, 10), (20, 30)]
    assert gold_word_spans(Example(id="n", question="q", answers=["a"], context="no passages")) is None
    edited = Example(id="e", question="q", answers=["a"], context=ex.context + " more", passages=ex.passages,
                     meta=ex.meta)
    assert gold_word_spans(edited) is None  # the context is not its passages joined: spans unknown


def test_rows_record_where_the_supporting_passage_ranks(tmp_path):
    llm = FakeLLM(lambda prompt, i: "Paris")
    # 8-word chunks: [0,8) [8,16) [16,24) [24,30); the supporting passage is words 10-20.
    op = make_method("op", strong=llm, budget=12, chunk_words=8)
    (row,) = run_eval([hotpot_like()], {"op": op}, tmp_path, config={}, progress=False).rows
    assert row.ranking[0] == 1 and sorted(row.ranking) == [0, 1, 2, 3]  # BM25 on "capital": Beta's chunk
    assert row.gold_rank == 1
    assert [c["position"] for c in row.chunks_used] == [1] and row.gold_recall == 1.0
    (lc_row,) = run_eval([hotpot_like()], {"lc": make_method("lc", strong=llm)}, tmp_path / "lc", config={},
                         progress=False).rows
    assert lc_row.gold_recall is None and "gold_rank" not in lc_row.to_json()  # long context ranks nothing


def test_with_several_workers_a_finished_row_is_written_while_a_slow_one_runs(tmp_path):
    gate = threading.Event()

    def reply(prompt, i):
        if "slow" in prompt:
            gate.wait(10)
        return "Paris"

    llm = FakeLLM(reply)
    exs = [Example(id=q, question=f"What is the {q} capital?", context=CONTEXT, answers=["Paris"])
           for q in ("slow", "fast1", "fast2")]
    run = threading.Thread(target=run_eval, args=(exs, {"lc": make_method("lc", strong=llm)}, tmp_path),
                           kwargs={"config": {}, "workers": 2, "progress": False})
    run.start()
    rows = tmp_path / ROWS_FILE
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not rows.exists() or len(rows.read_text().splitlines()) < 2):
        time.sleep(0.02)
    written = [json.loads(x)["example_id"] for x in rows.read_text().splitlines()]
    gate.set()
    run.join(10)
    assert sorted(written) == ["fast1", "fast2"]  # on disk while the first pair still runs
    assert sorted(json.loads(x)["example_id"] for x in rows.read_text().splitlines()) == ["fast1", "fast2", "slow"]


def test_a_refused_configuration_names_each_differing_option_with_both_values(tmp_path):
    run_eval(examples(1), methods(), tmp_path, config={"options": {"budget": 100, "seed": 0}}, progress=False)
    with pytest.raises(ConfigError, match=r"differs in: options\.budget: 100 there, 200 now; "
                                          r"options\.seed: 0 there, unset now\)"):
        run_eval(examples(1), methods(), tmp_path, config={"options": {"budget": 200}}, progress=False)


def test_rows_carry_the_question_text(tmp_path):
    result = run_eval(examples(1), methods(), tmp_path, config={}, progress=False)
    assert {r.question for r in result.rows} == {"What is the capital 0?"}
    assert json.loads((tmp_path / ROWS_FILE).read_text().splitlines()[0])["question"] == "What is the capital 0?"


def test_every_longbench_dataset_reads_and_scores_its_own_reference_as_full_marks(tmp_path):
    pytest.importorskip("jieba", reason="needs the [eval] extra")
    from ragfunnel.eval.datasets import load_dataset
    from ragfunnel.eval.official_metrics import LONGBENCH_METRICS

    special = {"passage_retrieval_en": "Paragraph 3", "passage_retrieval_zh": "段落3", "passage_count": "4",
               "lcc": "    return x", "repobench-p": "        self.x = x"}
    rows = [{"_id": name, "dataset": name, "context": "some text", "input": "" if name in ("lcc", "passage_count")
             else "the input", "answers": [special.get(name, "a reference answer")],
             "all_classes": ["a reference answer", "another class"]} for name in LONGBENCH_METRICS]
    for name, row in zip(LONGBENCH_METRICS, rows, strict=True):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(row, ensure_ascii=False) + "\n")
        (e,) = load_dataset(path).examples
        assert e.task == f"longbench/{name}" and e.question.strip()
        got = score(e, e.answers[0], "longbench")["longbench"]
        assert got == pytest.approx(1.0, abs=1e-6), name  # ROUGE's F carries a 1e-8 in its denominator
