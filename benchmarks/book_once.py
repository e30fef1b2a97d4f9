"""A book read once: the seconds of an answer outside the model's writing, first and second question, a fresh
process each, with the document cache and without it (the code before it), side by side in one run.

For each document, three arms answer the same two questions with ``ragfunnel ask QUESTION --context FILE --json``
(the default ``auto``, bundled models), each question in a fresh process as a user runs it:

- ``before``: ragfunnel at ``--before`` (default: the commit before the document cache), checked out into a
  temporary git worktree and run from its ``src`` with this virtualenv;
- ``no-cache``: this checkout with ``--no-cache`` (nothing kept on disk): what the cache must not change;
- ``cache``: this checkout, with an empty cache directory at the first question, so the first question pays
  for reading the document and the second finds it kept.

The arms alternate question by question. Each arm starts from a cache directory holding only what setup
leaves (speed profiles, the model files' SHA-256, the bundled models' assembled files); the ``before`` arm
starts from it again at every question, the cache arm keeps its directory (its document cache) from the first
question to the second. Python keeps its bytecode, as in a user's shell. Per ask: the wall
seconds of the process, each stage's seconds from the trace, and *outside generate*: the wall seconds less the
stages that write the answer (``generate``, ``reask``). The answers, the chunks read and the citations of
``cache`` and ``no-cache`` are compared question by question (``before`` answers with the citation rule and
checks of its day, so only its seconds are compared). The cache entry's size on disk is reported per document,
and the cache arm's wall seconds over the before arm's per question (on the README's short report: the cache must
cost a short document nothing).

    .venv/bin/python benchmarks/book_once.py --out benchmarks/results/book_once
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
BEFORE = "e9e3ddc"  # the last commit before the document cache (4c96a21)
WRITING = ("generate", "reask")
USER_CACHE = Path(os.environ.get("RAGFUNNEL_CACHE") or Path.home() / ".cache" / "ragfunnel")
KEPT_FROM_SETUP = ("speed", "sha256")
ASSEMBLED = "models"  # the bundled models' files setup assembles: linked, not copied (a gigabyte)
DOCUMENTS = {
    "moby-dick": (SHARED / "documents_real" / "epub" / "moby-dick.epub",
                  ("Which ship picked up Ishmael after the Pequod sank?",
                   "What is the name of the captain of the Pequod?")),
    "geotopo-117-pages": (SHARED / "documents_real" / "pdf" / "GeoTopo-komprimiert.pdf",
                          ("What is a topological space?", "What does the fundamental group of a circle equal?")),
    # The README's first command: a short document, which must be answered no slower than before.
    "short-report": (ROOT / "examples" / "kestrel_valley_water.txt",
                     ("Whose findings led the cooperative to lay a new main across the footbridge?",
                      "Which two directors were elected at the June general meeting?")),
}
LONGBENCH = SHARED / "longbench_minilongbench_dev"


def longest_longbench(folder: Path) -> tuple[Path, tuple[str, str]]:
    """The longest English LongBench dev document written to a text file, and two of its questions (or one
    asked twice in other words when it has one)."""
    best = None
    for name in ("qasper.jsonl", "multifieldqa_en.jsonl", "narrativeqa.jsonl", "qmsum.jsonl"):
        for line in (folder / name).read_text().splitlines():
            row = json.loads(line)
            if best is None or len(row["context"]) > len(best["context"]):
                best = row
    questions = [r["input"] for r in map(json.loads, (folder / f"{best['dataset']}.jsonl").read_text().splitlines())
                 if r["context"] == best["context"]]
    path = Path(tempfile.mkdtemp()) / f"longbench-{best['dataset']}-{best['_id'][:8]}.txt"
    path.write_text(best["context"])
    second = questions[1] if len(questions) > 1 else f"{questions[0]} Answer briefly."
    return path, (questions[0], second)


def fresh_cache(path: Path) -> Path:
    """An empty cache directory holding only what setup leaves in a user's: the models' speed profiles, their
    files' SHA-256 and the bundled models' assembled files (so no ask measures speeds, hashes a model file or
    assembles one: the SHA-256 records are kept by the file's resolved path, which the link keeps)."""
    if not path.exists():
        for kept in KEPT_FROM_SETUP:
            if (USER_CACHE / kept).is_dir():
                shutil.copytree(USER_CACHE / kept, path / kept)
        path.mkdir(parents=True, exist_ok=True)
        if (USER_CACHE / ASSEMBLED).is_dir():
            (path / ASSEMBLED).symlink_to(USER_CACHE / ASSEMBLED, target_is_directory=True)
    return path


def user_environment(python_path: Path) -> dict[str, str]:
    """This environment as a user's shell has it: Python keeps the modules' compiled bytecode (a sandbox may turn
    that off, and every process would then compile ragfunnel again)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(python_path)}


def compile_once(python_path: Path) -> None:
    """Import the command line once, untimed, so each arm's bytecode is written before any ask is timed."""
    subprocess.run([sys.executable, "-c", "import ragfunnel.cli.main"], env=user_environment(python_path),
                   check=True, cwd=ROOT)


def ask(python_path: Path, document: Path, question: str, cache: Path, *, no_cache: bool = False) -> dict:
    env = {**user_environment(python_path), "RAGFUNNEL_CACHE": str(fresh_cache(cache))}
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "ragfunnel", "ask", question, "--context", str(document), "--json",
                          *(["--no-cache"] if no_cache else [])], env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"ask failed (rc {run.returncode}): {run.stderr.strip()[-600:]}")
    p = json.loads(run.stdout)
    stages: dict[str, float] = {}
    for s in p["trace"]["stages"]:
        stages[s["name"]] = round(stages.get(s["name"], 0.0) + s["seconds"], 3)
    writing = sum(v for k, v in stages.items() if k in WRITING)
    return {"question": question, "wall": round(wall, 2), "stages": stages,
            "outside_generate": round(wall - writing, 2),
            "answer": p["answer"], "method": p["method"],
            "chunks": sorted(c["position"] for c in p.get("chunks_used", [])),
            "citations": [[c.get("file"), c.get("page"), c.get("quote")] for c in p.get("citations", [])]}


def entry_megabytes(cache: Path) -> float:
    return round(sum(f.stat().st_size for f in (cache / "documents").rglob("*") if f.is_file()) / 1e6, 2)


def one_document(document: Path, questions: tuple[str, str], before_src: Path, work: Path) -> dict:
    arms = {"before": before_src, "no-cache": ROOT / "src", "cache": ROOT / "src"}
    caches = {arm: work / f"{document.stem}-{arm}" for arm in arms}
    rows: dict[str, list[dict]] = {arm: [] for arm in arms}
    for i, question in enumerate(questions):
        for arm in (arms if i % 2 == 0 else list(arms)[::-1]):
            if arm != "cache":  # nothing of the first question's is kept for the second
                shutil.rmtree(caches[arm], ignore_errors=True)
            rows[arm].append(ask(arms[arm], document, question, caches[arm], no_cache=arm == "no-cache"))
            print(document.name, arm, i + 1, {k: rows[arm][-1][k] for k in ("wall", "outside_generate", "answer")},
                  flush=True)
    same = [all(rows["no-cache"][i][k] == rows["cache"][i][k] for k in ("answer", "chunks", "citations"))
            for i in range(len(questions))]
    first, second = rows["cache"]
    today = rows["before"][0]["outside_generate"]
    return {"document": document.name, "rows": rows, "identical": same,
            "cache_entry_mb": entry_megabytes(caches["cache"]),
            "first_question_outside_generate_ratio": round(first["outside_generate"] / today, 3),
            "second_question_outside_generate_seconds": second["outside_generate"],
            "wall_cache_over_before": [round(c["wall"] / b["wall"], 3) for c, b in zip(rows["cache"], rows["before"],
                                                                                      strict=True)],
            "before_outside_generate_seconds": [r["outside_generate"] for r in rows["before"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with")
    parser.add_argument("--documents", default="moby-dick,geotopo-117-pages,longbench-longest,short-report",
                        help="comma-separated, of moby-dick, geotopo-117-pages, longbench-longest, short-report")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/book_once"))
    args = parser.parse_args()
    if not SHARED.exists():
        parser.error(f"shared data not found at {SHARED}")
    wanted = [d.strip() for d in args.documents.split(",") if d.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tree = work / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for src in (tree / "src", ROOT / "src"):
                compile_once(src)
            results = []
            for name in wanted:
                if name == "longbench-longest":
                    path, questions = longest_longbench(LONGBENCH)
                else:
                    path, questions = DOCUMENTS[name]
                results.append(one_document(path, questions, tree / "src", work))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
            shutil.rmtree(tree, ignore_errors=True)
    out = {"date": str(date.today()), "cpus": os.cpu_count(), "before": args.before, "documents": results,
           "targets": {"first_question_outside_generate_ratio_at_most": 0.25,
                       "second_question_outside_generate_seconds_at_most": 2.0}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "book_once.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps([{k: v for k, v in r.items() if k != "rows"} for r in results], indent=2))


if __name__ == "__main__":
    main()
