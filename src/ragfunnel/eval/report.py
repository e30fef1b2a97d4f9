"""Reports over run directories: a table per dataset x method, and PNG plots.

``report.md`` and ``report.html`` hold the same tables (the HTML file with its plots inside it, so it
can be sent alone); ``quality_vs_latency.png`` plots each method's mean quality against its mean
latency, ``quality_vs_budget.png`` (when a method ran at several final budgets) the paper's "number
of chunks" curve over the questions answered at every budget, ``answer_rank.png`` (for short-answer
tasks) where each method's chunk scores put the first chunk holding the answer, and
``gold_rank.png`` (for datasets with supporting passages) where they put the first chunk
overlapping a supporting passage: BM25 against the question for ``op``/``vanilla``/``self-route``,
the fused draft scores for ``fb``/``fb-f``. Methods whose every row failed are left out of the plots.
Methods whose answers carry a confidence get a second table and two more plots (see
:mod:`ragfunnel.eval.confidence_report`).

The table also says why answers were wrong: its evidence recall at the budget is the share of the rows that
can tell (``EvalRow.evidence_read`` known) whose final context held the evidence, and the wrong answers
(judged as the confidence table judges them: :func:`~ragfunnel.confidence.measures.is_right`) split into
those whose evidence was never read and those that read it and still answered wrong. A second table names
what went wrong with each wrong answer (``EvalRow.failure``, :mod:`ragfunnel.eval.failures`): answered an
earlier hop, picked the other option, the wrong yes/no, echoed the question, an answer of the wrong type, other.

Each table states, in a line beneath it, what it counts as a right answer (:data:`RIGHT_DEFINITION`, the one
verdict of the whole report) and, for latencies, which rows they are over (:func:`timed_rows`; ``ragfunnel
eval`` prints its means by the same rule).
"""

from __future__ import annotations

import base64
import html
import json
import statistics
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ragfunnel import journal
from ragfunnel.confidence.measures import RIGHT_AT, VERDICT_METRICS, is_right
from ragfunnel.errors import ConfigError, InputError, MissingExtra
from ragfunnel.eval.confidence_report import (
    ConfidenceSummary,
    confidence_plots,
    confidence_table,
    save_figure,
    summarise_confidence,
)
from ragfunnel.eval.failures import FAILURE_DEFINITIONS, FAILURE_KINDS, MATCH_AT
from ragfunnel.eval.runner import EvalRow, load_eval
from ragfunnel.version import __version__

# The headline metric per task family, in order of preference.
HEADLINE = ("longbench", "f1", "rouge_l", "accuracy")
METRICS = ("f1", "em", "accuracy", "rouge_l", "longbench")
# Methods whose chunk ranking is BM25 against the question alone.
QUESTION_RANKED = ("op", "vanilla", "self-route")

# The one verdict of a report: the "wrong" columns, the confidence table's "share right" and `eval`'s "right".
RIGHT_DEFINITION = (f"Right: the first of a row's {', '.join(VERDICT_METRICS)} scores is {RIGHT_AT} or more (wrong "
                    "below it; a row with none of them, a summary, is neither)")
# The accuracy metric of short-answer tasks is another notion, so it is named beside the verdict.
ACCURACY_DEFINITION = ("accuracy is another measure: the share of answers that contain a reference answer "
                       "(normalised, however long the answer) or chose the right option")
# Which rows latencies are over (timed_rows), for the report's tables and `eval`'s means alike.
LATENCY_RULE = ("over the rows whose every LLM call ran: a row with a call answered from the call cache (a re-run, "
                "or a method repeating another's call) took only the lookup and is left out, unless every row of "
                "its method was")


@dataclass(frozen=True)
class MethodSummary:
    dataset: str
    method: str
    budget: int | None
    n: int
    failures: int
    metrics: dict[str, float]
    # Seconds are over the rows timed_rows picks: those whose every LLM call ran, all rows when every one
    # had a call served from the cache.
    cached: int  # rows with a call served from the cache
    timed: int  # rows the seconds are over
    seconds_mean: float
    seconds_p50: float
    seconds_p90: float
    stage_seconds: dict[str, tuple[float, float, float]]  # stage -> (mean, p50, p90)
    input_tokens: float
    # Rank of the first answer-bearing chunk per row that ranked chunks (None: no chunk holds it).
    answer_ranks: list[int | None]
    # The same for the first chunk overlapping a supporting passage, per row that knows them.
    gold_ranks: list[int | None]
    gold_recall: float | None  # mean share of supporting passages the final context touched
    example_metrics: dict[str, dict[str, float]]  # example id -> its metrics, for rows that did not fail
    # Whether the final context held the evidence, per row that did not fail and can tell (EvalRow.evidence_read).
    evidence: list[bool] = field(default_factory=list)
    # Wrong answers (is_right False) by whether their evidence was read; a wrong answer whose row cannot
    # tell is in neither.
    wrong: int = 0
    wrong_unread: int = 0
    wrong_read: int = 0
    # Wrong answers by failure kind (EvalRow.failure), every kind present; those of rows written before the
    # kind was recorded are counted apart.
    wrong_kinds: dict[str, int] = field(default_factory=dict)
    wrong_unclassified: int = 0
    # (confidence, metrics) of each row that did not fail and carries a confidence.
    confident_rows: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    @property
    def left_out(self) -> int:
        """Rows left out of the seconds: the cached ones, unless every row was cached."""
        return self.n - self.failures - self.timed

    @property
    def evidence_recall(self) -> float | None:
        """Evidence recall at the budget: the share of rows that can tell whose final context held the evidence."""
        return sum(self.evidence) / len(self.evidence) if self.evidence else None

    def answer_at(self, k: int) -> float | None:
        """Share of ranked rows whose answer-bearing chunk is in the top ``k``."""
        return _share_at(self.answer_ranks, k)

    def gold_at(self, k: int) -> float | None:
        """Share of rows with supporting passages whose first gold chunk is in the top ``k``."""
        return _share_at(self.gold_ranks, k)

    def headline(self, metric: str | None = None) -> tuple[str, float]:
        """(name, mean) of ``metric``, or of the task's first available headline metric."""
        key = metric if metric in self.metrics else next((k for k in HEADLINE if k in self.metrics), None)
        return (key, self.metrics[key]) if key else ("-", 0.0)


def _share_at(ranks: list[int | None], k: int) -> float | None:
    if not ranks:
        return None
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def summarise_run(run_dir: Path) -> list[MethodSummary]:
    run = load_eval(run_dir)  # read only: a report over a live run must not touch its files
    config, rows = run.config, run.rows
    dataset = Path(str(config.get("dataset", run_dir.name))).stem
    if config.get("context_words"):
        dataset += f" @{config['context_words']}w"  # long contexts built from a corpus
    # The options each method ran with, as `ragfunnel eval` records them: only a method given a budget belongs
    # on the budget curve (a run written before they were recorded has none).
    received = config.get("method_options")
    out = []
    for method in dict.fromkeys(r.method for r in rows):
        options = received.get(method) if isinstance(received, dict) else None
        budget = options.get("budget") if isinstance(options, dict) else None
        mine = [r for r in rows if r.method == method]
        ok = [r for r in mine if r.error is None]
        wrong = [r for r in ok if is_right(r.metrics) is False]
        timed = timed_rows(ok)
        secs = [r.seconds for r in timed]
        names = sorted({k for r in ok for k in r.metrics})
        stages: dict[str, list[float]] = {}
        for r in timed:
            for s in r.trace["stages"]:
                stages.setdefault(s["name"], []).append(s["seconds"])
        out.append(MethodSummary(
            dataset=dataset, method=method, budget=budget, n=len(mine), failures=len(mine) - len(ok),
            metrics={k: statistics.fmean(r.metrics.get(k, 0.0) for r in ok) for k in names},
            cached=sum(served_from_cache(r) for r in ok), timed=len(timed),
            seconds_mean=statistics.fmean(secs) if secs else 0.0,
            seconds_p50=_quantile(secs, 0.5), seconds_p90=_quantile(secs, 0.9),
            stage_seconds={k: (statistics.fmean(v), _quantile(v, 0.5), _quantile(v, 0.9)) for k, v in stages.items()},
            input_tokens=statistics.fmean(r.trace["input_tokens"] for r in ok) if ok else 0.0,
            answer_ranks=[r.answer_rank for r in ok if r.n_chunks],
            gold_ranks=[r.gold_rank for r in ok if r.gold_recall is not None],
            gold_recall=statistics.fmean(gold) if (gold := [r.gold_recall for r in ok if r.gold_recall is not None])
            else None,
            example_metrics={r.example_id: r.metrics for r in ok},
            evidence=[r.evidence_read for r in ok if r.evidence_read is not None],
            wrong=len(wrong),
            wrong_unread=sum(r.evidence_read is False for r in wrong),
            wrong_read=sum(r.evidence_read is True for r in wrong),
            wrong_kinds={kind: sum(r.failure == kind for r in wrong) for kind in FAILURE_KINDS},
            wrong_unclassified=sum(r.failure is None for r in wrong),
            confident_rows=[(r.confidence, r.metrics) for r in ok if r.confidence is not None],
        ))
    return out


def served_from_cache(row: EvalRow) -> bool:
    """Whether one of the row's LLM calls was answered from the call cache (its seconds are then a lookup's)."""
    return any(stage.get("detail", {}).get("cached") for stage in row.trace.get("stages", ()))


def timed_rows(rows: list[EvalRow]) -> list[EvalRow]:
    """The rows latencies are over: those whose every LLM call ran; all of them when every one was cached."""
    return [r for r in rows if not served_from_cache(r)] or rows


def right_note(metric_sets: Iterable[Collection[str]], counted_by: str) -> str:
    """The one-line definition of a right answer, for a table whose ``counted_by`` columns count it; it names
    the accuracy metric as another notion when the rows it covers score one."""
    sets = list(metric_sets)
    accuracy = any("accuracy" in names and "f1" in names for names in sets)
    return f"{RIGHT_DEFINITION} (counted by {counted_by})" + (f"; {ACCURACY_DEFINITION}." if accuracy else ".")


def right_rule(metric_sets: Iterable[Collection[str]]) -> str:
    """The verdict in short for the metrics the rows have, as a plot's label: ``f1 ≥ 0.5``."""
    deciding = {next((m for m in VERDICT_METRICS if m in names), None) for names in metric_sets}
    used = [m for m in VERDICT_METRICS if m in deciding] or list(VERDICT_METRICS)
    return ", else ".join(used) + f" ≥ {RIGHT_AT}"


def latency_cell(cached: int, left_out: int) -> str:
    """How many cached rows the seconds leave out, or that every row was cached and the seconds are lookups'."""
    return f"all {cached}, kept: seconds of lookups" if cached and not left_out else str(left_out)


def _table(summaries: list[MethodSummary]) -> tuple[list[str], list[list[str]]]:
    metric_names = sorted({k for s in summaries for k in s.metrics})
    header = ["dataset", "method", "budget", "n", "failed", "cached, left out of s", *metric_names,
              "mean s", "p50 s", "p90 s", "stages (mean / p50 / p90 s)", "LLM input tokens", "answer chunk @1", "@3",
              "gold chunk @1", "@3", "gold recall", "evidence read", "wrong", "wrong, evidence not read",
              "wrong, evidence read"]
    body = [[s.dataset, s.method, str(s.budget or "-"), str(s.n), str(s.failures), latency_cell(s.cached, s.left_out),
             *(f"{s.metrics[m]:.3f}" if m in s.metrics else "-" for m in metric_names),
             f"{s.seconds_mean:.1f}", f"{s.seconds_p50:.1f}", f"{s.seconds_p90:.1f}",
             "; ".join(f"{k} {m:.1f} / {p50:.1f} / {p90:.1f}" for k, (m, p50, p90) in s.stage_seconds.items()),
             f"{s.input_tokens:.0f}",
             *(_share(s.answer_at(k)) for k in (1, 3)), *(_share(s.gold_at(k)) for k in (1, 3)),
             _share(s.gold_recall) + _partial(len(s.gold_ranks), s.n - s.failures),
             *_evidence_cells(s)]
            for s in summaries]
    return header, body


_FAILURE_HEADERS = {"earlier_hop": "earlier hop", "wrong_option": "wrong option", "wrong_yes_no": "wrong yes/no",
                    "echo": "echo", "wrong_type": "wrong type", "other": "other"}

EVIDENCE_NOTE = ("Evidence read (evidence recall at the budget): the share of the rows that can tell whose final "
                 "context held a chunk with a reference answer (normalised) or touched every supporting passage; a "
                 "row cannot tell when the task has no short answer, or no reference answer stands in the document "
                 "word for word and its supporting passages are unknown. Wrong answers of rows that cannot tell are "
                 "in neither split.")


FAILURE_NOTE = ("What went wrong, checked in this order (the first that fits names the answer; \"matches\": equal "
                f"once normalised, or token F1 {MATCH_AT} or more): "
                + "; ".join(f"{_FAILURE_HEADERS[kind]}: {text}" for kind, text in FAILURE_DEFINITIONS.items())
                + "; not classified: rows written before ragfunnel recorded the kind.")


def _failure_table(summaries: list[MethodSummary]) -> tuple[list[str], list[list[str]]]:
    """Wrong answers per (dataset, method, budget), counted by failure kind."""
    header = ["dataset", "method", "budget", "wrong", *(_FAILURE_HEADERS[k] for k in FAILURE_KINDS), "not classified"]
    body = [[s.dataset, s.method, str(s.budget or "-"), str(s.wrong),
             *(str(s.wrong_kinds.get(k, 0)) for k in FAILURE_KINDS), str(s.wrong_unclassified)] for s in summaries]
    return header, body


def _table_notes(summaries: list[MethodSummary]) -> list[str]:
    """What the table counts as right, which rows its seconds are over, and what its evidence columns mean."""
    return [right_note((s.metrics for s in summaries), "the wrong columns"),
            f"Seconds (mean, p50, p90 and stages) are {LATENCY_RULE}; the cached column says how many it left out.",
            EVIDENCE_NOTE]


def _evidence_cells(s: MethodSummary) -> list[str]:
    """Evidence recall (with its counts) and the wrong answers split by it; '-' for runs that recorded no evidence."""
    if not s.evidence:
        return ["-", str(s.wrong), "-", "-"]
    recall = f"{_share(s.evidence_recall)} ({sum(s.evidence)}/{len(s.evidence)})"
    return [recall, str(s.wrong), str(s.wrong_unread), str(s.wrong_read)]


def confidence_summaries(summaries: list[MethodSummary], metric: str | None) -> list[ConfidenceSummary]:
    """The confidence measures of each (dataset, method, budget) whose rows carry a confidence."""
    found = [summarise_confidence(s.dataset, s.method if s.budget is None else f"{s.method} @{s.budget}",
                                  s.headline(metric)[0], s.confident_rows) for s in summaries]
    return [c for c in found if c is not None]


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _partial(n: int, of: int) -> str:
    """Say over how many rows the gold columns are, when only some rows know their supporting passages."""
    return f" (n={n})" if 0 < n < of else ""


def budget_curves(summaries: list[MethodSummary], metric: str | None) -> dict[str, list[tuple[int, float]]]:
    """Quality per final budget for each (dataset, method) that ran at two budgets or more.

    Every point of a curve averages the same questions, those answered at every one of its budgets,
    so a run with a different ``--limit`` does not tilt it; the label says how many.
    """
    curves = {}
    for (dataset, method) in dict.fromkeys((s.dataset, s.method) for s in summaries):
        runs = [s for s in summaries if (s.dataset, s.method) == (dataset, method) and s.budget]
        if len({s.budget for s in runs}) < 2:
            continue
        common = set.intersection(*(set(s.example_metrics) for s in runs))
        key = runs[0].headline(metric)[0]
        if common:
            curves[f"{method} ({dataset}, n={len(common)})"] = sorted(
                (s.budget, statistics.fmean(s.example_metrics[e].get(key, 0.0) for e in common)) for s in runs)
    return curves


def _plots(summaries: list[MethodSummary], out_dir: Path, metric: str | None) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("matplotlib", "eval") from None
    made = []
    summaries = [s for s in summaries if s.n > s.failures]  # a method that only failed has nothing to plot
    if any(s.cached < s.n - s.failures for s in summaries):
        made.append(_quality_vs_latency(plt, summaries, out_dir / "quality_vs_latency.png", metric))

    curves = budget_curves(summaries, metric)
    if curves:
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, points in curves.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        ax.set_xlabel("final context budget (tokens)")
        ax.set_ylabel("quality")
        ax.set_title("Quality vs context budget")
        ax.legend(fontsize=8)
        save_figure(plt, fig, out_dir / "quality_vs_budget.png")
        made.append("quality_vs_budget.png")

    made += _rank_plot(plt, summaries, out_dir / "answer_rank.png", lambda s: s.answer_ranks,
                       what="the first chunk holding the answer")
    made += _rank_plot(plt, summaries, out_dir / "gold_rank.png", lambda s: s.gold_ranks,
                       what="the first chunk overlapping a supporting passage")
    confident = [s for s in summaries if s.confident_rows]
    made += confidence_plots(plt, confidence_summaries(summaries, metric), out_dir,
                             right=right_rule(m for s in confident for _, m in s.confident_rows))
    return made


def _quality_vs_latency(plt, summaries: list[MethodSummary], path: Path, metric: str | None) -> str:
    """One point per (dataset, method): colour names the method, marker the dataset; legends beside the axes."""
    from matplotlib.lines import Line2D

    served = [s for s in summaries if s.cached == s.n - s.failures]  # no row that paid for its calls
    summaries = [s for s in summaries if s not in served]
    methods = list(dict.fromkeys(s.method for s in summaries))
    datasets = list(dict.fromkeys(s.dataset for s in summaries))
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    markers = {d: "osD^v<>Px*"[i % 10] for i, d in enumerate(datasets)}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for s in summaries:
        ax.scatter(s.seconds_mean, s.headline(metric)[1], color=colours[s.method], marker=markers[s.dataset])
    # Figure legends beside the axes: a legend added to the axes with add_artist is clipped to them, so the
    # saved image, fitted around what is drawn, would cut it.
    fig.legend([Line2D([], [], color=colours[m], marker="o", linestyle="") for m in methods], methods,
               title="method", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), bbox_transform=ax.transAxes)
    if len(datasets) > 1:
        fig.legend([Line2D([], [], color="grey", marker=markers[d], linestyle="") for d in datasets], datasets,
                   title="dataset", fontsize=8, loc="lower left", bbox_to_anchor=(1.01, 0.0),
                   bbox_transform=ax.transAxes)
    left_out = sorted({s.method for s in served})
    ax.set_xlabel("mean latency per answer, rows whose every call ran (s)"
                  + (f"\nleft out, every row answered from the call cache: {', '.join(left_out)}" if left_out else ""))
    ax.set_ylabel("quality (" + "/".join(sorted({s.headline(metric)[0] for s in summaries})) + ")")
    ax.set_title("Quality vs latency")
    save_figure(plt, fig, path)
    return path.name


def _rank_plot(plt, summaries: list[MethodSummary], path: Path, ranks_of, *, what: str) -> list[str]:
    """Cumulative share of questions whose chunk of interest is at or above each rank, one line per ranking."""
    # One line per ranking: op, vanilla and self-route all rank chunks by BM25 on the question.
    lines: dict[tuple[str, str], list[int | None]] = {}
    for s in summaries:
        if ranks_of(s):
            source = "BM25(question)" if s.method in QUESTION_RANKED else s.method
            lines.setdefault((s.dataset, source), ranks_of(s))
    if not lines:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    deepest = max((r for ranks in lines.values() for r in ranks if r is not None), default=1)
    ks = list(range(1, deepest + 1))
    for (dataset, source), ranks in lines.items():
        ax.step(ks, [_share_at(ranks, k) for k in ks], where="post", marker=".",
                label=f"{source} ({dataset}, n={len(ranks)})")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel(f"rank of {what}")
    ax.set_ylabel("share of questions at or above this rank")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Where each method's scores rank {what}", fontsize=9)
    ax.legend(fontsize=8)
    save_figure(plt, fig, path)
    return [path.name]


def write_report(run_dirs: list[Path], out_dir: Path, *, metric: str | None = None) -> list[Path]:
    """Summarise ``run_dirs`` into ``out_dir``; returns the files written.

    ``metric`` is the quality axis of the plots (default: F1, ROUGE-L or accuracy, by task).
    """
    if metric is not None and metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")
    summaries = [s for d in run_dirs for s in summarise_run(Path(d))]
    if not summaries:
        raise InputError("the run directories hold no rows yet; run `ragfunnel eval` first")
    out_dir = journal.out_dir(Path(out_dir))
    tables = [("", *_table(summaries), _table_notes(summaries))]
    if any(s.wrong for s in summaries):
        tables.append(("Wrong answers: what went wrong", *_failure_table(summaries),
                       [right_note((s.metrics for s in summaries), "the wrong column"), FAILURE_NOTE]))
    if confident := confidence_summaries(summaries, metric):
        judged = (m for s in summaries for _, m in s.confident_rows)
        tables.append(("Confidence: how well each method's confidence tells right answers from wrong",
                       *confidence_table(confident), [right_note(judged, "the judged and share right columns")]))
    images = _plots(summaries, out_dir, metric)
    made_by = f"Written by ragfunnel {__version__}; each run's configuration (below) names the version that ran it."
    md = ["# ragfunnel report", "", made_by]
    for title, header, body, notes in tables:
        md += [""] + ([f"## {title}", ""] if title else [])
        md += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        md += ["| " + " | ".join(row) + " |" for row in body]
        md += [line for note in notes for line in ("", note)]
    md += [""] + [f"![{name}]({name})" for name in images]
    # What each run was — dataset and its SHA-256, models and theirs, every option — so the report alone
    # says how to run it again.
    runs = {str(d): json.dumps(load_eval(Path(d)).config, indent=2, sort_keys=True) for d in run_dirs}
    md += ["", "## Runs", ""] + [line for d, config in runs.items() for line in (f"`{d}`:", "```json", config, "```")]
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    page = (
        "<!doctype html><meta charset=utf-8><title>ragfunnel report</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style>"
        f"<h1>ragfunnel report</h1><p>{html.escape(made_by)}</p>"
        + "".join((f"<h2>{html.escape(title)}</h2>" if title else "") + _html_table(header, body)
                  + "".join(f"<p>{html.escape(note)}</p>" for note in notes) for title, header, body, notes in tables)
        + "".join(f'<p><img src="{_inline_png(out_dir / name)}" alt="{name}"></p>' for name in images)
        + "<h2>Runs</h2>" + "".join(f"<details open><summary>{html.escape(d)}</summary><pre>{html.escape(config)}"
                                    "</pre></details>" for d, config in runs.items())
    )
    (out_dir / "report.html").write_text(page)
    return [out_dir / "report.md", out_dir / "report.html", *(out_dir / n for n in images)]


def _html_table(header: list[str], body: list[list[str]]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>" + cells + "</table>"


def _inline_png(path: Path) -> str:
    """The PNG as a data URL, so report.html is one self-contained file that can be sent alone."""
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
