"""The first `ragfunnel ask` after setup: seconds from starting the command to its first model call.

Each round starts `ragfunnel ask` in a fresh process on examples/kestrel_valley_water.txt (default method,
bundled models, `--no-cache` so the question really reaches a model) and stops it at its first model call,
recording two moments from the process start: the call begins (everything before it is overhead: imports,
reading the file, `auto`'s plan) and the strong model's weights are loaded (the first thing that call does).
Two settings alternate, side by side in one run:

- ``after-setup``: the speed files `scripts/setup.sh` writes (`ragfunnel models --measure-speeds`, run
  once at the start of this benchmark and timed) are in place;
- ``speeds-unmeasured``: the speed files point at an empty folder, as before setup measured them, so the
  first ask measures both models' speeds itself.

    .venv/bin/python benchmarks/first_ask.py --out benchmarks/results/first_ask
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENT = ROOT / "examples" / "kestrel_valley_water.txt"
QUESTION = "Whose findings led the cooperative to lay a new main across the footbridge?"
SETTINGS = ("after-setup", "speeds-unmeasured")

# Runs in the child: hooks the first model call, then runs the command line as a user would.
CHILD = r"""
import json, os, sys, time
from pathlib import Path

from ragfunnel.llm import llamacpp, speed

started, out = float(os.environ["FIRST_ASK_T0"]), Path(os.environ["FIRST_ASK_OUT"])
if os.environ.get("FIRST_ASK_SPEEDS"):
    folder = Path(os.environ["FIRST_ASK_SPEEDS"])
    speed._profile_path = lambda llm: folder / f"{llm.name.replace(':', '_')}.json"
measuring = []
calibrate = speed.calibrate

def timed_calibrate(llm):
    measuring.append(llm.name)
    try:
        return calibrate(llm)
    finally:
        measuring.pop()

speed.calibrate = timed_calibrate
complete = llamacpp.LlamaCppLLM._complete

def first_call(self, prompt, params, n):
    if measuring:  # a speed probe, not the question's call
        return complete(self, prompt, params, n)
    called = time.time()
    self.warm_up()
    out.write_text(json.dumps({"before_first_call": called - started, "weights_loaded": time.time() - started,
                               "model": self.name}))
    os._exit(0)

llamacpp.LlamaCppLLM._complete = first_call
import runpy
sys.argv = ["ragfunnel", *sys.argv[1:]]
runpy.run_module("ragfunnel", run_name="__main__", alter_sys=True)  # as `python -m ragfunnel ask ...`
"""


def one_ask(setting: str, empty_speeds: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "first_call.json"
        env = {**os.environ, "FIRST_ASK_OUT": str(out)}
        if setting == "speeds-unmeasured":
            for f in empty_speeds.glob("*.json"):
                f.unlink()
            env["FIRST_ASK_SPEEDS"] = str(empty_speeds)
        env["FIRST_ASK_T0"] = repr(time.time())
        run = subprocess.run([sys.executable, "-c", CHILD, "ask", QUESTION, "--context", str(DOCUMENT), "--no-cache"],
                             env=env, capture_output=True, text=True, cwd=ROOT)
        if not out.exists():
            raise SystemExit(f"ask ended (rc {run.returncode}) before a model call: {run.stderr.strip()[-400:]}")
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in json.loads(out.read_text()).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="asks per setting, alternating")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/first_ask"))
    args = parser.parse_args()
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "ragfunnel"), "models", "--measure-speeds"], check=True, cwd=ROOT)
    setup_seconds = time.perf_counter() - started
    runs: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    with tempfile.TemporaryDirectory() as empty:
        for i in range(args.rounds):
            for setting in SETTINGS if i % 2 == 0 else SETTINGS[::-1]:
                runs[setting].append(one_ask(setting, Path(empty)))
                print(setting, runs[setting][-1], flush=True)
    medians = {s: {k: round(statistics.median(r[k] for r in rows), 3) for k in ("before_first_call", "weights_loaded")}
               for s, rows in runs.items()}
    result = {"date": str(date.today()), "cpus": os.cpu_count(), "question": QUESTION, "document": DOCUMENT.name,
              "setup_measure_speeds_seconds": round(setup_seconds, 1), "rounds": args.rounds, "runs": runs,
              "medians": medians,
              "target_before_first_call_seconds": 2.0,
              "target_met": medians["after-setup"]["before_first_call"] <= 2.0}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_ask.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("setup_measure_speeds_seconds", "medians", "target_met")}, indent=2))


if __name__ == "__main__":
    main()
