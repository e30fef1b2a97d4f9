"""FB-RAG on LongBench: LC, OP-RAG, FB-RAG (F and FB) and auto, scored exactly as LongBench scores.

Every LongBench-format JSONL file given is one dataset (its rows' ``dataset`` field picks the
prompt, the answer limit and the metric: ``ragfunnel eval --format longbench --metric-profile
longbench`` does the same). Default: the real documents in
``../shared/data/longbench_minilongbench_dev`` (qasper, multifieldqa_en, narrativeqa up to 36k
words, qmsum). Examples are taken round-robin over the files, ``--step`` per file at a time, so a
run stopped early still covers every dataset; each file is its own resumable run directory.

Methods (chunks of 300 words as in the paper, final context 1.5k tokens, K=5 drafts):

``lc``      the whole document (cut in the middle beyond the 1.5B model's 32k window)
``op``      OP-RAG, 1.5k
``fb``      FB-RAG (η_B = η_F = 0.5), Stage I 3k -> 1.5k (ragfunnel's defaults)
``fb-f``    FB-RAG forward only (the paper's Ours-F), 3k -> 1.5k
``auto``    ragfunnel's default: LC or FB by predicted latency (run first on each document)
``fb-raw``  FB with the paper's Eq. 5 as written (raw BM25 scores, no per-query normalisation)
``fb-6k``   FB with the paper's Stage I of 6k -> 1.5k

Each file's run directory records the methods it ran; a dataset may run a subset (narrativeqa
without LC: a 30k-token prefill takes longer than 15 minutes per book on two cores). With the call
cache on (the default), methods that repeat an earlier method's LLM call (lc or fb
repeat what auto ran; fb-f's and fb-raw's drafts are fb's) are served from it, and a method may find
the document already read (kept state): the table's seconds are means over the rows where every
call ran and read the document anew ("cold"), with their count. The paper's numbers
(Llama-3.1-70B answering, 8B drafting; FB-RAG Table 1) are printed beside for reference.

    .venv/bin/python benchmarks/longbench.py --out benchmarks/results/longbench
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from datetime import date
from pathlib import Path

from ragfunnel import __version__
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.official_metrics import longbench_metric
from ragfunnel.eval.report import write_report
from ragfunnel.eval.runner import EvalRow, load_eval, run_eval
from ragfunnel.journal import VERSION_KEY
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.llm.fingerprint import sha256_of_file
from ragfunnel.llm.registry import model_identity
from ragfunnel.methods import make_method, options_of
from ragfunnel.text.chunking import count_words
from ragfunnel.types import Example

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "longbench_minilongbench_dev"
# Cheapest first: LC over a narrativeqa book (18k-36k words, cut to the 32k-token window) takes ~12 minutes here.
FILES = ["qasper.jsonl", "multifieldqa_en.jsonl", "qmsum.jsonl", "narrativeqa.jsonl"]
BASE = {"chunk_words": 300, "budget": 1500, "samples": 5}
# In the order each document runs them: auto first, so it chooses as a user's first question would, before
# any other method has read the document (LC keeps what it read, on disk, for later questions).
METHODS = {
    "auto": ("auto", {"stage1_budget": 3000}),
    "lc": ("lc", {}),
    "op": ("op", {}),
    "fb": ("fb", {"stage1_budget": 3000}),
    "fb-f": ("fb-f", {"stage1_budget": 3000}),
    "fb-raw": ("fb", {"stage1_budget": 3000, "fusion": "raw"}),
    "fb-6k": ("fb", {"stage1_budget": 6000}),
}
WARM = ("disk", "memory", "resident")  # where a kept document state came from, when it was not read anew
COLUMNS = ["narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique", "qmsum"]
SHORT = {"narrativeqa": "Narr", "qasper": "Qasp", "multifieldqa_en": "Mult", "hotpotqa": "Hotp",
         "2wikimqa": "2Wiki", "musique": "Musi", "qmsum": "QMSum"}
# FB-RAG paper, Table 1 (Llama3.1-70B-Instruct answers; Ours-* draft with Llama3.1-8B-Instruct).
PAPER = {
    "LC (70B)": [33.42, 50.96, 55.63, 64.4, 67.18, 48.68, 24.68],
    "OP 1.5k": [23.89, 49.31, 54.8, 61.11, 59.06, 37.94, 24.26],
    "Ours-FB 6k->1.5k": [30.29, 51.38, 56.22, 68.76, 63.27, 50.92, 24.68],
    "Ours-F 6k->1.5k": [28.62, 51.29, 55.53, 66.99, 65.1, 52.93, 25.07],
    "OP 3k": [26.62, 50.71, 56.78, 66.28, 64.8, 45.91, 25.11],
    "Ours-FB 6k->3k": [33.22, 50.99, 55.99, 66.29, 67.42, 53.13, 24.56],
    "Ours-F 6k->3k": [32.41, 51.05, 56.12, 66.79, 67.95, 53.7, 24.17],
}


def build_methods(task: str, names: list[str]) -> tuple[dict, dict]:
    methods, received = {}, {}
    for name in names:
        kind, extra = METHODS[name]
        options = {"task": task, **{k: v for k, v in (BASE | extra).items() if k in options_of(kind)}}
        methods[name], received[name] = make_method(kind, **options), {"method": kind, **options}
    return methods, received


def run_file(path: Path, names: list[str], out: Path, examples: list) -> None:
    """Run ``names`` on ``examples`` of ``path`` (a resume: finished pairs are skipped)."""
    task = examples[0].task
    methods, received = build_methods(task, names)
    config = {"dataset": str(path.resolve()), "dataset_sha256": sha256_of_file(path), "format": "longbench",
              "task": task, "metric_profile": "longbench", "method_options": received, VERSION_KEY: __version__,
              "models": {spec: model_identity(spec) for spec in (DEFAULT_LIGHT, DEFAULT_STRONG)}}
    run_eval(examples, methods, out / path.stem, config=config, metric_profile="longbench")


def dataset_of(run_dir: Path) -> str:
    return load_eval(run_dir).config["task"].removeprefix("longbench/")


def cold(row: EvalRow) -> bool:
    """Whether every LLM call of the row ran (none from the call cache) over a document read anew."""
    details = [stage.get("detail", {}) for stage in row.trace["stages"]]
    return not any(d.get("cached") or d.get("prefix_from") in WARM for d in details)


def table(run_dirs: list[Path]) -> tuple[str, dict]:
    """Paper-style table, each dataset over the examples all its methods finished (paired), the paper's rows beside.

    Avg is over the datasets every method ran on (the paper's over the same ones), so rows compare.
    """
    rows: dict[str, dict[str, list[EvalRow]]] = {}
    for d in run_dirs:
        run = load_eval(d)
        ran = list(run.config["method_options"])
        done = [r for r in run.rows if r.error is None]
        ids = set.intersection(*({r.example_id for r in done if r.method == m} for m in ran))
        rows[dataset_of(d)] = {m: sorted((r for r in done if r.method == m and r.example_id in ids),
                                         key=lambda r: r.example_id) for m in ran}
    columns = COLUMNS + sorted(set(rows) - set(COLUMNS))
    names = [m for m in METHODS if any(m in by for by in rows.values())]
    common = [c for c in columns if c in rows and all(rows[c].get(m) for m in names)]
    head = f"Avg ({', '.join(SHORT.get(c, c) for c in common)})"
    lines = [f"| method | {head} | " + " | ".join(SHORT.get(c, c) for c in columns) + " | cold mean s | "
             "evidence read |", "|---" * (len(columns) + 4) + "|"]
    results: dict = {}
    for m in names:
        scores = {c: 100 * statistics.fmean(r.metrics["longbench"] for r in rows[c][m])
                  for c in columns if rows.get(c, {}).get(m)}
        n = {c: len(rows[c][m]) for c in scores}
        seconds = [r.seconds for c in scores for r in rows[c][m] if cold(r)]
        recall = evidence_recall([r for c in scores for r in rows[c][m]])
        avg = statistics.fmean(scores[c] for c in common) if common else None
        cells = [f"{scores[c]:.2f} (n={n[c]})" if c in scores else "–" for c in columns]
        secs = f"{statistics.fmean(seconds):.1f} (n={len(seconds)})" if seconds else "– (all reused)"
        lines.append(f"| ragfunnel {m} | {_number(avg)} | " + " | ".join(cells) + f" | {secs} | {_recall(recall)} |")
        results[m] = {"scores": scores, "n": n, "average_over": common, "average": avg,
                      "cold_seconds_mean": statistics.fmean(seconds) if seconds else None, "cold_rows": len(seconds),
                      "evidence_recall": recall}
    for label, values in PAPER.items():
        paper = dict(zip(COLUMNS, values, strict=True))
        avg = statistics.fmean(paper[c] for c in common) if common and set(common) <= set(paper) else None
        lines.append(f"| paper {label} | {_number(avg)} | "
                     + " | ".join(_number(paper.get(c)) for c in columns) + " | | |")
    return "\n".join(lines), results


def evidence_recall(rows: list[EvalRow]) -> dict | None:
    """Of the rows that can tell (``EvalRow.evidence_read`` known: the document holds a reference answer word
    for word), the share whose final context held it. None when no row can tell (rows of an older ragfunnel)."""
    known = [r.evidence_read for r in rows if r.evidence_read is not None]
    if not known:
        return None
    return {"read": sum(known), "of": len(known), "share": sum(known) / len(known)}


def _recall(recall: dict | None) -> str:
    return "–" if recall is None else f"{recall['read']}/{recall['of']} ({100 * recall['share']:.0f}%)"


# The switches measured against today's defaults, and the comparisons the paper's Table 1 makes.
PAIRS = [("fb-raw", "fb"), ("fb-6k", "fb"), ("fb-f", "fb"), ("fb", "op"), ("lc", "op"), ("auto", "lc")]


def paired(run_dirs: list[Path]) -> tuple[str, dict]:
    """Per-example differences (×100) of each pair over every example both ran, with wins/ties/losses."""
    scores: dict[str, dict[tuple[str, str], float]] = {}
    for d in run_dirs:
        for r in load_eval(d).rows:
            if r.error is None:
                scores.setdefault(r.method, {})[(d.name, r.example_id)] = 100 * r.metrics["longbench"]
    lines = ["| comparison | examples | mean difference | wins / ties / losses |", "|---|---|---|---|"]
    out = {}
    for a, b in PAIRS:
        both = sorted(set(scores.get(a, {})) & set(scores.get(b, {})))
        if not both:
            continue
        diffs = [scores[a][k] - scores[b][k] for k in both]
        wins, losses = sum(x > 1e-9 for x in diffs), sum(x < -1e-9 for x in diffs)
        out[f"{a} - {b}"] = {"n": len(both), "mean": statistics.fmean(diffs), "wins": wins,
                             "ties": len(both) - wins - losses, "losses": losses}
        lines.append(f"| {a} − {b} | {len(both)} | {statistics.fmean(diffs):+.2f} | "
                     f"{wins} / {len(both) - wins - losses} / {losses} |")
    return "\n".join(lines), out


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, help="LongBench-format JSONL files [default: the shared set]")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated: " + ", ".join(METHODS))
    parser.add_argument("--per-dataset", type=int, default=None, help="at most N examples per file")
    parser.add_argument("--step", type=int, default=1, help="examples per file per round")
    parser.add_argument("--max-words", type=int, default=None,
                        help="leave out documents longer than this (LC over 24k words takes ~20 minutes here)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/longbench"))
    args = parser.parse_args()
    files = args.files or [DATA / f for f in FILES]
    if missing := [f for f in files if not f.exists()]:
        parser.error(f"{missing[0]} not found (the default set lives in {DATA})")
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    if unknown := [m for m in names if m not in METHODS]:
        parser.error(f"unknown method {unknown[0]}; valid: {', '.join(METHODS)}")
    def short_enough(e: Example) -> bool:
        return args.max_words is None or count_words(e.context or "") <= args.max_words

    data = {f: [e for e in load_dataset(f, format="longbench").examples if short_enough(e)][: args.per_dataset]
            for f in files}
    for upto in range(args.step, max(map(len, data.values())) + args.step, args.step):
        for f, examples in data.items():  # round-robin, so a run stopped early still covers every file
            if upto - args.step < len(examples):
                run_file(f, names, args.out, examples[:upto])
    # The table and report cover every file run into --out so far, not only this invocation's.
    run_dirs = sorted((d for d in args.out.iterdir() if (d / "rows.jsonl").exists()), key=lambda d: d.name)
    write_report(run_dirs, args.out / "report", metric="longbench")
    text, results = table(run_dirs)
    pairs_text, pairs = paired(run_dirs)
    summary = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {platform.python_version()}",
               "ragfunnel": __version__, "settings": {**BASE, "methods": METHODS},
               "metrics": {d: longbench_metric(d) for d in map(dataset_of, run_dirs)},
               "results": results, "paired": pairs, "paper_table1": PAPER}
    (args.out / "longbench.json").write_text(json.dumps(summary, indent=2))
    print(text + "\n\n" + pairs_text)


if __name__ == "__main__":
    main()
