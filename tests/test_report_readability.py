"""What a reader of a report needs to read it right: legends inside the saved images, one stated definition of
a right answer beside each table, and the cached rows that latencies leave out counted, in the report and in
`ragfunnel eval`'s summary alike (no model)."""

import html
import json

import pytest
from click.testing import CliRunner

from ragfunnel.cli.evaluate import _eval_table
from ragfunnel.eval.report import ACCURACY_DEFINITION, RIGHT_DEFINITION, summarise_run, write_report
from ragfunnel.eval.runner import EvalRow
from ragfunnel.journal import CONFIG_FILE, ROWS_FILE
from tests.helpers.runs import make_run


def row(i, method, seconds, *, cached=False, metrics=None, confidence=None):
    return EvalRow(example_id=str(i), method=method, metrics=metrics or {"f1": 1.0, "em": 1.0, "accuracy": 1.0},
                   question=f"q{i}", answer="a", references=["a"], confidence=confidence,
                   trace={"seconds": seconds, "input_tokens": 10,
                          "stages": [{"name": "generate", "seconds": seconds, "detail": {"cached": cached}}]})


def write_run(path, dataset, rows):
    path.mkdir()
    (path / CONFIG_FILE).write_text(json.dumps({"dataset": dataset, "method_options": {}}))
    (path / ROWS_FILE).write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    return path


@pytest.fixture
def saved_figures(monkeypatch):
    """Each figure saved, as (file name, [legend extents], canvas as saved), all in the figure's pixels."""
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    from matplotlib import rcParams
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend
    from matplotlib.transforms import Bbox

    save, found = Figure.savefig, []

    def recording(fig, fname, **kwargs):
        renderer = fig.canvas.get_renderer()
        fig.draw(renderer)  # as savefig draws it, after any layout
        legends = {id(x): x for x in [*fig.legends, *(c for ax in fig.axes for c in ax.get_children())]
                   if isinstance(x, Legend)}
        if kwargs.get("bbox_inches") == "tight":
            inches = fig.get_tightbbox(renderer).padded(kwargs.get("pad_inches", rcParams["savefig.pad_inches"]))
            canvas = Bbox.from_extents(*(v * fig.dpi for v in inches.extents))
        else:
            canvas = Bbox.from_bounds(0, 0, fig.bbox.width, fig.bbox.height)
        found.append((str(fname).rsplit("/", 1)[-1], [x.get_window_extent(renderer) for x in legends.values()],
                      canvas))
        return save(fig, fname, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    return found


def assert_legends_inside(found):
    for name, legends, canvas in found:
        assert legends, f"{name} has no legend"
        for extent in legends:
            inside = (extent.x0 >= canvas.x0 - 0.5 and extent.y0 >= canvas.y0 - 0.5
                      and extent.x1 <= canvas.x1 + 0.5 and extent.y1 <= canvas.y1 + 0.5)
            assert inside, f"{name}: a legend at {extent.extents} leaves the saved canvas {canvas.extents}"


def test_every_report_plot_keeps_its_legends_in_the_saved_image(tmp_path, saved_figures):
    make_run(tmp_path / "b20", 20)
    make_run(tmp_path / "b60", 60)
    # A second dataset adds the marker legend beside the method legend; long names make both wide.
    other = write_run(tmp_path / "other", "a_dataset_with_a_rather_long_name.jsonl",
                      [row(i, "a-method-with-a-long-name", 2.0 + i, confidence=0.2 * (i + 1),
                           metrics={"f1": float(i % 2), "em": 0.0, "accuracy": 1.0}) for i in range(4)])
    files = write_report([tmp_path / "b20", tmp_path / "b60", other], tmp_path / "out")
    pngs = {f.name for f in files if f.suffix == ".png"}
    assert {"quality_vs_latency.png", "quality_vs_budget.png", "answer_rank.png", "gold_rank.png",
            "confidence_reliability.png", "quality_vs_answered.png"} <= pngs
    assert {name for name, _, _ in saved_figures} == pngs
    (latency,) = [legends for name, legends, _ in saved_figures if name == "quality_vs_latency.png"]
    assert len(latency) == 2  # methods and datasets
    assert_legends_inside(saved_figures)


def test_the_scaling_plots_keep_their_legends_in_the_saved_image(tmp_path, saved_figures):
    from ragfunnel.cli.scale import scale
    from ragfunnel.scaling.summary_files import write_summary
    from tests.helpers import grid_rows, runs

    grid = grid_rows.write_run(tmp_path / "grid", [r for c, f, t in grid_rows.TABLE
                                                  for r in grid_rows.rows(c, f, t)])
    write_summary(grid, [4000, 1000], "f1")
    run = runs.write_run(tmp_path / "run", runs.DRAG_GRID)
    result = CliRunner().invoke(scale, ["fit", str(run), "--metric", "f1", "--out", str(tmp_path / "fit.json")])
    assert result.exit_code == 0, result.output
    assert {name for name, _, _ in saved_figures} == {"quality_vs_context.png", "fit_predicted_vs_actual.png"}
    assert_legends_inside(saved_figures)


def test_each_table_states_the_one_definition_of_right_it_counts(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    # Long answers that hold the reference: accuracy (contains it) 1 on one row, F1 below 0.5 on all three,
    # so accuracy is 0.333 while no answer is right.
    rows = [row(i, "fb", 1.0, confidence=0.5, metrics={"f1": 0.2, "em": 0.0, "accuracy": float(i == 0)})
            for i in range(3)]
    write_report([write_run(tmp_path / "run", "qa.jsonl", rows)], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert "| qa | fb | - | 3 | 0 | 0 | 0.333 | 0.000 | 0.200 |" in md[6]
    assert md[8] == f"{RIGHT_DEFINITION} (counted by the wrong columns); {ACCURACY_DEFINITION}."
    assert md[6].endswith("| - | 3 | - | - |")  # three wrong
    start = md.index("## Confidence: how well each method's confidence tells right answers from wrong")
    assert md[start + 4].startswith("| qa | fb | 3 | 3 | 0.00 |")  # share right
    assert md[start + 6] == (f"{RIGHT_DEFINITION} (counted by the judged and share right columns); "
                             f"{ACCURACY_DEFINITION}.")
    assert RIGHT_DEFINITION.startswith("Right: the first of a row's f1, longbench, accuracy scores is 0.5 or more")
    page = (tmp_path / "out" / "report.html").read_text()
    # The main table, the wrong answers' failure kinds and the confidence table each state it.
    assert page.count(f"<p>{html.escape(RIGHT_DEFINITION)} (counted by ") == 3
    printed = _eval_table(rows, ["fb"]).splitlines()
    assert "accuracy 0.333  em 0.000  f1 0.200  right 0/3  mean 1.0s" in printed[0]
    assert printed[1] == f"{RIGHT_DEFINITION} (counted by right); {ACCURACY_DEFINITION}."


def test_a_report_of_summaries_names_no_accuracy_in_its_verdict(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", "gov_report.jsonl", [row(i, "lc", 1.0, metrics={"rouge_l": 0.3})
                                                            for i in range(2)])
    write_report([run], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert md[8] == f"{RIGHT_DEFINITION} (counted by the wrong columns)."


# fb-f: two rows ran (10 s, 20 s), two answered from the call cache (lookups of 0.01 s); op: every row cached.
CACHED_RUN = ([row(0, "fb-f", 10.0), row(1, "fb-f", 20.0), row(2, "fb-f", 0.01, cached=True),
               row(3, "fb-f", 0.01, cached=True)]
              + [row(i, "op", 0.02, cached=True) for i in range(2)])


def test_the_report_says_how_many_cached_rows_its_seconds_leave_out(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", "qa.jsonl", CACHED_RUN)
    fb, op = summarise_run(run)
    assert (fb.cached, fb.timed, fb.left_out, fb.seconds_mean) == (2, 2, 2, 15.0)
    assert fb.stage_seconds["generate"][0] == 15.0  # stages over the same rows
    assert (op.cached, op.timed, op.left_out, op.seconds_mean) == (2, 2, 0, 0.02)
    write_report([run], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert md[4].startswith("| dataset | method | budget | n | failed | cached, left out of s | accuracy | em | f1 | "
                            "mean s |")
    assert md[6].startswith("| qa | fb-f | - | 4 | 0 | 2 | 1.000 | 1.000 | 1.000 | 15.0 |")
    assert md[7].startswith("| qa | op | - | 2 | 0 | all 2, kept: seconds of lookups | 1.000 | 1.000 | 1.000 | 0.0 |")
    assert md[11].startswith("Seconds (mean, p50, p90 and stages) are over the rows whose every LLM call ran: a row "
                             "with a call answered from the call cache")
    assert "unless every row of its method was; the cached column says how many it left out." in md[11]
    assert "<td>all 2, kept: seconds of lookups</td>" in (tmp_path / "out" / "report.html").read_text()


def test_eval_prints_the_reports_seconds_and_says_what_it_left_out():
    failed = EvalRow("4", "fb-f", {}, question="q4", error="the server is unreachable")
    printed = _eval_table([*CACHED_RUN, failed], ["fb-f", "op"]).splitlines()
    assert printed[0].startswith("fb-f        n=5    failed=1")
    assert printed[0].endswith("right 4/4  mean 15.0s (2 cached rows left out)")
    assert printed[1].endswith("right 2/2  mean 0.0s (all 2 rows cached: lookups)")
    assert printed[3] == ("Mean seconds are over the rows whose every LLM call ran: a row with a call answered from "
                          "the call cache (a re-run, or a method repeating another's call) took only the lookup and "
                          "is left out, unless every row of its method was.")
