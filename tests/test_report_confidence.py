"""The report's confidence table and plots, on fixed rows with hand-computed measures."""

import json

import pytest

from ragfunnel.eval.confidence_report import COVERAGE_PNG, RELIABILITY_PNG, summarise_confidence
from ragfunnel.eval.report import confidence_summaries, summarise_run, write_report
from ragfunnel.eval.runner import EvalRow
from ragfunnel.journal import CONFIG_FILE, FAILED_FILE, ROWS_FILE

# (confidence, F1) of FB-RAG's eight answers. Right (F1 >= 0.5) at 0.9, 0.8, 0.6, 0.3; wrong at 0.7, 0.4, 0.2, 0.1.
FB = [(0.9, 1.0), (0.8, 1.0), (0.7, 0.0), (0.6, 1.0), (0.4, 0.0), (0.3, 1.0), (0.2, 0.0), (0.1, 0.0)]
# AUROC: 0.9 and 0.8 beat all four wrong answers, 0.6 beats three, 0.3 two: 13 of 16 pairs.
FB_AUROC = 13 / 16
# ECE: every answer alone in its bin; gaps 0.1, 0.2, 0.7, 0.4, 0.4, 0.7, 0.2, 0.1 over 8 answers.
FB_ECE = 2.8 / 8


def row(i, method, confidence, metrics):
    return EvalRow(example_id=str(i), method=method, metrics=metrics, question=f"q{i}", answer="a",
                   references=["a"], trace={"seconds": 1.0, "input_tokens": 10, "stages": []},
                   confidence=confidence, signals={} if confidence is None else {"support": confidence})


def qa(f1):
    return {"f1": f1, "em": f1, "accuracy": f1}


def write_run(path, dataset, rows, failed=()):
    path.mkdir()
    (path / CONFIG_FILE).write_text(json.dumps({"dataset": dataset, "method_options": {}}))
    (path / ROWS_FILE).write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    (path / FAILED_FILE).write_text("".join(json.dumps(r.to_json()) + "\n" for r in failed))
    return path


@pytest.fixture
def runs(tmp_path):
    qa_rows = [row(i, "fb", c, qa(f1)) for i, (c, f1) in enumerate(FB)]
    qa_rows += [row(i, "op", c, qa(1.0)) for i, c in enumerate((0.5, 0.7))]  # every answer right
    qa_rows += [row(i, "lc", None, qa(1.0)) for i in range(3)]  # no confidence: not in the table
    failed = [EvalRow("8", "fb", {}, question="q8", error="the server is unreachable")]
    summaries = [row(i, "fb", c, {"rouge_l": q}) for i, (c, q) in enumerate(((0.2, 0.1), (0.6, 0.4), (0.9, 0.3)))]
    return (write_run(tmp_path / "qa_run", "qa.jsonl", qa_rows, failed),
            write_run(tmp_path / "sum_run", "gov_report.jsonl", summaries))


def test_confidence_measures_of_each_method(runs):
    summaries = [s for d in runs for s in summarise_run(d)]
    found = {(c.dataset, c.method): c for c in confidence_summaries(summaries, None)}
    assert set(found) == {("qa", "fb"), ("qa", "op"), ("gov_report", "fb")}
    fb = found["qa", "fb"]
    assert (fb.n, fb.judged, fb.metric, fb.share_right) == (8, 8, "f1", 0.5)  # the failed row counts nowhere
    assert fb.auroc == pytest.approx(FB_AUROC)
    assert fb.ece == pytest.approx(FB_ECE)
    assert (fb.quality_top_half, fb.quality_all) == (0.75, 0.5)  # F1 of the four most confident: 1, 1, 0, 1
    assert [b.n for b in fb.reliability] == [1] * 8
    assert fb.coverage[0] == (0.125, 1.0) and fb.coverage[2] == (0.375, 2 / 3)
    op = found["qa", "op"]
    assert op.auroc is None  # every answer right: nothing to separate
    assert op.ece == pytest.approx((0.5 + 0.3) / 2)
    gov = found["gov_report", "fb"]
    assert (gov.judged, gov.auroc, gov.ece, gov.share_right, gov.reliability) == (0, None, None, None, [])
    assert gov.metric == "rouge_l"
    assert gov.quality_top_half == pytest.approx((0.3 + 0.4) / 2)  # ceil(3 / 2) = 2 most confident
    assert gov.quality_all == pytest.approx(0.8 / 3)


def test_the_quality_metric_follows_the_reports_metric(runs):
    summaries = summarise_run(runs[0])
    (fb,) = [c for c in confidence_summaries(summaries, "em") if c.method == "fb"]
    assert fb.metric == "em" and fb.quality_top_half == 0.75


def test_no_rows_with_confidence_no_summary():
    assert summarise_confidence("qa", "lc", "f1", []) is None


def test_report_writes_the_confidence_table_and_plots(runs, tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    files = write_report(list(runs), tmp_path / "out")
    names = [f.name for f in files]
    assert RELIABILITY_PNG in names and COVERAGE_PNG in names
    for name in (RELIABILITY_PNG, COVERAGE_PNG):
        assert (tmp_path / "out" / name).read_bytes().startswith(b"\x89PNG")
        assert (tmp_path / "out" / name).stat().st_size > 5000
    md = (tmp_path / "out" / "report.md").read_text().splitlines()
    start = md.index("## Confidence: how well each method's confidence tells right answers from wrong")
    assert md[start + 2] == ("| dataset | method | n with confidence | judged | share right | AUROC | ECE | "
                             "quality metric | quality, 50% most confident | quality, all |")
    assert md[start + 4:start + 7] == [
        "| qa | fb | 8 | 8 | 0.50 | 0.812 | 0.350 | f1 | 0.750 | 0.500 |",
        "| qa | op | 2 | 2 | 1.00 | - | 0.400 | f1 | 1.000 | 1.000 |",
        "| gov_report | fb | 3 | 0 | - | - | - | rouge_l | 0.350 | 0.267 |",
    ]
    assert md[start + 7] == ""
    assert "| qa | fb | - | 9 | 1 |" in "\n".join(md)  # the main table is still there, failure counted
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<h2>Confidence: how well each method&#x27;s confidence tells right answers from wrong</h2>" in page
    assert "<td>0.812</td><td>0.350</td>" in page
    assert page.count('src="data:image/png;base64,iVBORw0KGgo') == len([n for n in names if n.endswith(".png")])


def test_a_report_without_confidences_has_no_confidence_parts(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", "qa.jsonl", [row(i, "lc", None, qa(float(i % 2))) for i in range(4)])
    files = write_report([run], tmp_path / "out")
    assert not {RELIABILITY_PNG, COVERAGE_PNG} & {f.name for f in files}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Confidence" not in md and "| qa | lc | - | 4 | 0 |" in md


def test_a_reliability_plot_needs_verdicts(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", "gov_report.jsonl",
                    [row(i, "fb", 0.1 * (i + 1), {"rouge_l": 0.2}) for i in range(3)])
    names = {f.name for f in write_report([run], tmp_path / "out")}
    assert COVERAGE_PNG in names and RELIABILITY_PNG not in names  # summaries are never right or wrong
