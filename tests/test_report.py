"""Reports from real run directories (written with the FakeLLM; no model)."""

import json

import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.eval.report import budget_curves, summarise_run, write_report
from ragfunnel.eval.runner import run_eval
from ragfunnel.journal import ROWS_FILE
from ragfunnel.llm import FakeLLM
from ragfunnel.llm.registry import registered
from ragfunnel.methods import make_method
from ragfunnel.types import Example
from tests.helpers.runs import CONTEXT, make_run


def test_report_renders_tables_and_non_empty_plots(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    make_run(tmp_path / "b20", 20)
    make_run(tmp_path / "b60", 60)
    files = write_report([tmp_path / "b20", tmp_path / "b60"], tmp_path / "out")
    names = {f.name for f in files}
    assert {"report.md", "report.html", "quality_vs_latency.png", "quality_vs_budget.png", "answer_rank.png",
            "gold_rank.png"} <= names
    assert all(f.stat().st_size > 1000 for f in files if f.suffix == ".png")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| bridges | op | 60 | 3 | 0 |" in md and "| bridges | lc |" in md
    assert "| bridges | vanilla | 20 | 3 | 3 |" in md  # every row failed, and the table says so
    # The answer and its supporting passage sit in the last of four chunks (7 words), which BM25 ranks first:
    # answer chunk @1, @3, gold chunk @1, @3 and the final context's share of supporting passages.
    # Then the final context held the answer on every row, and no answer was wrong.
    assert md.splitlines()[6].endswith("| 1.00 | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 (3/3) | 0 | 0 | 0 |")
    # lc ranks nothing, and read the whole context, which holds the answer
    assert md.splitlines()[7].endswith("| - | - | - | - | - | 1.00 (3/3) | 0 | 0 | 0 |")
    page = (tmp_path / "out" / "report.html").read_text()
    # self-contained: the four plots, and the confidence's reliability and quality-vs-answered plots (the rows
    # carry confidences from the shipped calibration)
    assert "<table>" in page and page.count('src="data:image/png;base64,iVBORw0KGgo') == 6
    assert 'src="quality' not in page
    assert "<h2>Runs</h2>" in page and "&quot;budget&quot;: 60" in page  # what each run was, to run it again
    assert "## Runs" in md and '"dataset": "bridges.jsonl"' in md


def test_report_of_a_non_run_directory(tmp_path):
    with pytest.raises(InputError, match="not a run directory"):
        write_report([tmp_path], tmp_path)


def test_report_names_the_valid_metrics(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    make_run(tmp_path / "b20", 20)
    with pytest.raises(ConfigError, match="valid metrics: f1, em, accuracy, rouge_l"):
        write_report([tmp_path / "b20"], tmp_path / "out", metric="bleu")
    assert (tmp_path / "out" / "report.md").exists() is False
    files = write_report([tmp_path / "b20"], tmp_path / "out", metric="em")
    assert any(f.name == "quality_vs_latency.png" for f in files)
    assert not any(f.name == "quality_vs_budget.png" for f in files)  # one budget makes no curve


def test_a_report_during_a_run_does_not_cut_the_row_being_written(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    make_run(tmp_path / "b20", 20)
    rows = tmp_path / "b20" / ROWS_FILE
    with rows.open("a") as f:
        f.write('{"example_id": "3", "meth')  # the eval process is half-way through its next row
    before = rows.read_bytes()
    write_report([tmp_path / "b20"], tmp_path / "out")
    assert rows.read_bytes() == before
    assert "| bridges | op | 20 | 3 | 0 |" in (tmp_path / "out" / "report.md").read_text()


def test_budget_curves_average_the_questions_answered_at_every_budget(tmp_path):
    make_run(tmp_path / "b20", 20, n=3)
    make_run(tmp_path / "b60", 60, n=2)
    rows = tmp_path / "b20" / ROWS_FILE  # make op wrong on question 0 at budget 20: it is in both runs
    lines = rows.read_text().splitlines()
    assert '"example_id": "0", "method": "op"' in lines[0]
    lines[0] = lines[0].replace('"f1": 1.0', '"f1": 0.0')
    rows.write_text("\n".join(lines) + "\n")
    summaries = summarise_run(tmp_path / "b20") + summarise_run(tmp_path / "b60")
    curves = budget_curves(summaries, "f1")
    assert curves == {"op (bridges, n=2)": [(20, 0.5), (60, 1.0)]}  # lc has no budget; vanilla only failed


def test_each_methods_budget_is_what_eval_recorded_it_received(tmp_path):
    data = tmp_path / "bridges.jsonl"
    data.write_text(json.dumps({"id": "1", "question": "When did the bridge open?", "answers": ["1932"],
                                "context": CONTEXT}) + "\n")
    with registered("fake:report", FakeLLM(lambda prompt, i: "1932")):
        result = CliRunner().invoke(main, ["eval", str(data), "--methods", "op,lc", "--strong", "fake:report",
                                           "--budget", "50", "--chunk-words", "20", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["method_options"] == {"op": {"task": "qa", "strong": "fake:report", "budget": 50, "chunk_words": 20},
                                        "lc": {"task": "qa", "strong": "fake:report"}}
    assert {s.method: s.budget for s in summarise_run(tmp_path / "run")} == {"op": 50, "lc": None}


def test_a_run_that_recorded_no_method_options_has_no_budgets(tmp_path):
    llm = FakeLLM(lambda prompt, i: "1932")
    exs = [Example(id="1", question="When did the bridge open?", context=CONTEXT, answers=["1932"])]
    run_eval(exs, {"op": make_method("op", strong=llm, budget=20, chunk_words=20)}, tmp_path,
             config={"options": {"budget": 20}}, progress=False)  # as runs were recorded before
    assert [s.budget for s in summarise_run(tmp_path)] == [None]


def test_latency_counts_only_rows_whose_calls_ran(tmp_path):
    make_run(tmp_path / "run", 60)
    rows = [json.loads(x) for x in (tmp_path / "run" / ROWS_FILE).read_text().splitlines()]
    lc = [r for r in rows if r["method"] == "lc"]
    lc[0]["trace"]["seconds"] = 100.0  # ran
    for r in lc[1:]:  # answered from the call cache: a lookup's seconds
        r["trace"]["seconds"] = 0.01
        r["trace"]["stages"][0]["detail"]["cached"] = True
    (tmp_path / "run" / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (summary,) = [s for s in summarise_run(tmp_path / "run") if s.method == "lc"]
    assert (summary.cached, summary.seconds_mean) == (2, 100.0)
