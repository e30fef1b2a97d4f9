"""What running `eval` on Ray costs: the quality benchmark's long setting, plain runner vs Ray workers.

The same pairs run three times, each into its own run directory under ``--out``, with the on-disk
caches off so every call runs its model:

``plain``   ``run_eval`` in this process, one pair at a time (llama.cpp on every core);
``ray-1``   one Ray worker reserving every core (so it runs the models with the plain runner's threads);
``ray-2``   two Ray workers, each reserving half the cores.

Ray is started here (``ray.init(num_cpus=<cores>)``) before the Ray runs; its start is timed apart.
Each run's wall time covers the whole ``run_eval`` call: for Ray that includes starting the workers and
loading the models in them, as a user pays it. Reported per run: pairs per second, per worker, and
seconds per pair as a ratio to the plain runner (the issue's target: at most 1.1x with one worker), plus
whether every row's answer equals the plain run's (greedy decoding: they should).

    .venv/bin/python benchmarks/ray_eval.py                       # 6 questions x op,fb
    .venv/bin/python benchmarks/ray_eval.py --examples 3 --methods op
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from quality import CORPUS, QUESTIONS, SETTINGS
from ragfunnel.corpus import load_corpus
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.long_context import lengthen
from ragfunnel.eval.runner import EvalRow, run_eval
from ragfunnel.llm.registry import set_disk_caches
from ragfunnel.methods import make_method, options_of
from ragfunnel.ray_cluster import RayOptions

HERE = Path(__file__).resolve().parent


def setting_examples(n: int):
    setting = SETTINGS["long"]
    pool = load_corpus(CORPUS)
    return [lengthen(e, pool, target_words=setting["context_words"]) for e in load_dataset(QUESTIONS, limit=n).examples]


def methods_for(names: list[str]) -> dict:
    options = SETTINGS["long"]["options"]
    return {m: make_method(m, task="multihop", **{k: v for k, v in options.items() if k in options_of(m)})
            for m in names}


def timed_run(examples, methods, out: Path, ray: RayOptions | None) -> tuple[float, list[EvalRow]]:
    shutil.rmtree(out, ignore_errors=True)  # a fresh run each time: nothing resumed, nothing cached
    started = time.perf_counter()
    result = run_eval(examples, methods, out, config={"benchmark": "ray_eval", "setting": "long"}, ray=ray)
    return time.perf_counter() - started, result.rows


def summary(name: str, workers: int, wall: float, rows: list[EvalRow], plain: dict | None,
            plain_rows: list[EvalRow] | None) -> dict:
    entry = {"run": name, "workers": workers, "pairs": len(rows), "wall_seconds": round(wall, 1),
             "pairs_per_second": round(len(rows) / wall, 4),
             "pairs_per_second_per_worker": round(len(rows) / wall / workers, 4),
             "seconds_per_pair": round(wall / len(rows), 2),
             "mean_row_seconds": round(statistics.fmean(r.seconds for r in rows), 2),
             "failed": sum(r.error is not None for r in rows),
             "f1": {m: round(statistics.fmean(r.metrics.get("f1", 0.0) for r in rows if r.method == m), 4)
                    for m in sorted({r.method for r in rows})}}
    if plain is not None and plain_rows is not None:
        theirs = {r.key: r.answer for r in plain_rows}
        entry["seconds_per_pair_vs_plain"] = round(entry["seconds_per_pair"] / plain["seconds_per_pair"], 3)
        entry["same_answers_as_plain"] = sum(theirs.get(r.key) == r.answer for r in rows)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=6, help="questions (first N of the HotpotQA file)")
    parser.add_argument("--methods", default="op,fb", help="comma-separated methods")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "ray_eval", help="run directories")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "ray_eval.json")
    args = parser.parse_args()
    if not QUESTIONS.exists():
        parser.error(f"shared data not found at {QUESTIONS.parent}")
    import ray

    set_disk_caches(False)
    cores = os.cpu_count() or 1
    examples, methods = setting_examples(args.examples), methods_for(args.methods.split(","))
    wall, plain_rows = timed_run(examples, methods, args.out / "plain", None)
    plain = summary("plain", 1, wall, plain_rows, None, None)
    runs = [plain]
    print(json.dumps(plain), flush=True)
    started = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    ray_start = time.perf_counter() - started
    try:
        for workers in (1, 2):
            options = RayOptions(actors=workers, cpus=max(1, cores // workers))
            wall, rows = timed_run(examples, methods, args.out / f"ray-{workers}", options)
            runs.append(summary(f"ray-{workers}", workers, wall, rows, plain, plain_rows)
                        | {"cpus_per_worker": options.cpus})
            print(json.dumps(runs[-1]), flush=True)
    finally:
        ray.shutdown()
    result = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.machine(), "cores": cores,
              "ray": ray.__version__, "setting": "long", "examples": args.examples, "methods": list(methods),
              "ray_start_seconds": round(ray_start, 2), "runs": runs,
              "command": f"benchmarks/ray_eval.py --examples {args.examples} --methods {args.methods}"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{'run':<7} {'workers':>7} {'wall s':>8} {'s/pair':>7} {'vs plain':>8} {'pairs/s/worker':>14} same")
    for r in runs:
        print(f"{r['run']:<7} {r['workers']:>7} {r['wall_seconds']:>8} {r['seconds_per_pair']:>7} "
              f"{r.get('seconds_per_pair_vs_plain', 1.0):>8} {r['pairs_per_second_per_worker']:>14} "
              f"{r.get('same_answers_as_plain', r['pairs'])}/{r['pairs']}")
    print(f"Ray started in {ray_start:.1f} s (not in the walls); written {args.json}")


if __name__ == "__main__":
    main()
