"""Seconds from a client's hang-up to the service's worker starting the next job, for each kind of model work.

The service's own :class:`~ragfunnel.serve.jobs.JobQueue` runs each case as `ragfunnel serve` does; the
client waiting for it goes away ``--after`` seconds in (its wait is cancelled, as when a connection drops),
and a trivial next job is queued at once. The figure is how long that next job waited: the time the running
model took to notice. Cases, on the bundled models:

``drafts``  the light model writing K=5 samples together (FB-RAG's drafts), up to 4,000 tokens each
``single``  the strong model writing one answer of up to 4,000 tokens
``lc``      the `lc` method reading ~6k tokens of HotpotQA passages (a long prompt read)
``fb``      the `fb` method (BM25, then drafts, then the answer)

Target: the worker is free within 2 s in every case.

    .venv/bin/python benchmarks/cancellation.py --out benchmarks/results/cancellation
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from contextlib import suppress
from datetime import date
from pathlib import Path

from ragfunnel import __version__
from ragfunnel.api import answer_located
from ragfunnel.documents import LocatedContext
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve, set_disk_caches
from ragfunnel.methods import make_method
from ragfunnel.serve.jobs import JobQueue
from ragfunnel.types import SamplingParams, on_stage

HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_train_hipporag" / "hotpotqa_train.json"
COUNT = "Count from 1 to 1000, numbers separated by spaces."
TARGET_SECONDS = 2.0


def passages(words: int) -> str:
    examples = json.loads(HOTPOT.read_text())[:12]
    text = " ".join(f"{title}. {''.join(sents)}" for e in examples for title, sents in e["context"])
    return " ".join(text.split()[:words])


def cases(light, strong) -> dict:
    def method(name: str, words: int, **options):
        located = LocatedContext.of_text(passages(words), name="passages")
        chosen = make_method(name, **options)
        return lambda job: answer_located(chosen, "Which of the titles above comes first?", located)

    return {
        "drafts": lambda job: light.generate([COUNT], SamplingParams(temperature=1.0, top_k=1, max_tokens=4000), n=5),
        "single": lambda job: strong.generate([COUNT], SamplingParams(max_tokens=4000)),
        "lc": method("lc", 4500, strong=strong),
        "fb": method("fb", 2500, light=light, strong=strong),
    }


async def hang_up(jobs: JobQueue, work, label: str, after: float) -> dict:
    stages: list[str] = []

    def run(job):
        with on_stage(job.on_stage):
            return work(job)

    started = time.monotonic()
    job = jobs.submit(run, label=label, on_stage=lambda s: stages.append(s.name))
    waiting = asyncio.ensure_future(jobs.result(job, deadline=900))
    await asyncio.sleep(after)
    waiting.cancel()  # the client is gone
    with suppress(asyncio.CancelledError, Exception):
        await waiting
    gone = time.monotonic()
    began = await asyncio.wrap_future(jobs.submit(lambda job: time.monotonic(), label="next").future)
    ended = job.future.exception(timeout=60)
    return {"hung_up_at": round(gone - started, 2), "stages_done": stages, "worker_free_after": round(began - gone, 3),
            "job_ended_in": type(ended).__name__ if ended else "a result"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--light", default=DEFAULT_LIGHT)
    parser.add_argument("--strong", default=DEFAULT_STRONG)
    parser.add_argument("--after", type=float, default=4.0, help="seconds into the job the client hangs up")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="drafts,single,lc,fb")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cancellation"))
    args = parser.parse_args()
    set_disk_caches(False)  # every case must really run its model
    light, strong = resolve(args.light), resolve(args.strong)
    light.warm_up()
    strong.warm_up()
    jobs = JobQueue(capacity=4, streaming=strong)
    work = cases(light, strong)
    runs: dict[str, list[dict]] = {name: [] for name in args.cases.split(",")}
    try:
        for _ in range(args.rounds):
            for name in runs:
                runs[name].append(asyncio.run(hang_up(jobs, work[name], name, args.after)))
                print(name, runs[name][-1], flush=True)
    finally:
        jobs.close()
    summary = {name: {"median_seconds": statistics.median(r["worker_free_after"] for r in rounds),
                      "max_seconds": max(r["worker_free_after"] for r in rounds),
                      "met": max(r["worker_free_after"] for r in rounds) <= TARGET_SECONDS, "rounds": rounds}
               for name, rounds in runs.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cancellation.json").write_text(json.dumps(
        {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {platform.python_version()}",
         "ragfunnel": __version__, "light": args.light, "strong": args.strong, "hang_up_after": args.after,
         "target_seconds": TARGET_SECONDS, "cases": summary}, indent=2))
    for name, s in summary.items():
        print(f"{name:7s} worker free after {s['median_seconds']:.2f} s (median), {s['max_seconds']:.2f} s (max)"
              f" {'met' if s['met'] else 'MISSED'}")


if __name__ == "__main__":
    main()
