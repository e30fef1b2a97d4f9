"""Runs on Ray (`eval --ray`, `scale grid --ray`): a local cluster the tests start (`ray.init(num_cpus=2)`).

Pure-Python jobs test the pool's bookkeeping (rows streamed to the driver, a worker that dies retried,
bounded attempts); the bundled tiny model shows a Ray run gives the rows a one-process run gives, and
that killing a worker process from outside loses and duplicates nothing.
"""

import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.errors import BackendUnavailable, ConfigError
from ragfunnel.ray_cluster import RayOptions, check_address, ray_drain

TINY = "bundled:smollm2-135m"


@dataclass(frozen=True)
class Square:
    """A job with nothing to load: item -> (item, item**2, pid)."""

    die_on: int | None = None  # this item kills its worker process while a marker file is absent
    marker: str = ""
    always_die: bool = False

    def __call__(self, item):
        if item == self.die_on and (self.always_die or not os.path.exists(self.marker)):
            Path(self.marker).touch()
            os._exit(1)  # the worker process is gone mid-pair
        return (item, item * item, os.getpid())

    def failed(self, item, message):
        return (item, None, message)


def drain_rows(job, items, **options):
    rows = []
    ray_drain(items, job, rows.append, options=RayOptions(**options))
    return rows


def test_rows_come_back_to_the_driver_once_each(ray_cluster):
    rows = drain_rows(Square(), list(range(10)), actors=2)
    assert sorted(r[:2] for r in rows) == [(i, i * i) for i in range(10)]
    assert len({r[2] for r in rows}) == 2 and os.getpid() not in {r[2] for r in rows}  # two workers, not here


def test_a_worker_that_dies_mid_pair_has_the_pair_run_again_elsewhere(ray_cluster, tmp_path):
    rows = drain_rows(Square(die_on=3, marker=str(tmp_path / "died")), list(range(6)), actors=2)
    assert (tmp_path / "died").exists()  # it did die once
    assert sorted(r[:2] for r in rows) == [(i, i * i) for i in range(6)]  # nothing lost, nothing twice


def test_a_pair_whose_worker_keeps_dying_becomes_a_failed_row(ray_cluster, tmp_path):
    rows = drain_rows(Square(die_on=2, marker=str(tmp_path / "m"), always_die=True), list(range(4)), actors=2,
                      attempts=2)
    failed = [r for r in rows if r[1] is None]
    assert len(rows) == 4 and [r[0] for r in failed] == [2]
    assert "its Ray worker died 2 times" in failed[0][2] and "re-run to retry it" in failed[0][2]


def test_a_backend_error_raised_in_a_worker_stops_the_run_as_on_one_machine(ray_cluster):
    with pytest.raises(BackendUnavailable, match="server gone"):
        drain_rows(Unreachable(), [1, 2], actors=1)


@dataclass(frozen=True)
class Unreachable:
    def __call__(self, item):
        raise BackendUnavailable("server gone")

    def failed(self, item, message):
        return None


def test_an_unreachable_ray_address_is_one_line_in_seconds(tmp_path):
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:9 \(connection "
                                                 r"refused\); start it with `ray start --head`"):
        check_address("127.0.0.1:9")
    with pytest.raises(ConfigError, match="is not a Ray address"):
        check_address("nohost")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "1", "question": "Q?", "context": "Some text.", "answers": ["a"]}) + "\n")
    result = CliRunner().invoke(main, ["eval", str(data), "--out", str(tmp_path / "r"), "--ray", "ray://127.0.0.1:9"])
    assert result.exit_code == 1 and result.output.strip().splitlines() == [
        "error: cannot reach the Ray cluster at ray://127.0.0.1:9 (connection refused); start it with "
        "`ray start --head` on that machine, or fix the address (--ray)"]
    assert time.monotonic() - started < 10
    assert not (tmp_path / "r").exists()  # refused before the run directory was made


def test_ray_options_without_the_extra_or_with_threads_say_what_to_do(tmp_path, monkeypatch):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "1", "question": "Q?", "context": "Some text.", "answers": ["a"]}) + "\n")
    out = ["--out", str(tmp_path / "r")]
    both = CliRunner().invoke(main, ["eval", str(data), *out, "--workers", "2", "--ray", "local"])
    assert both.exit_code == 1 and "pass one of them" in both.output
    for option, value in (("--ray-actors", "2"), ("--ray-cpus", "2"), ("--ray-gpus", "1")):
        alone = CliRunner().invoke(main, ["eval", str(data), *out, option, value])
        assert alone.exit_code == 1 and f"{option} sizes a Ray run; pass --ray too" in alone.output
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the [ray] extra were not installed
    for command in (["eval", str(data), *out], ["scale", "grid", str(data), "--index", "ix", *out]):
        result = CliRunner().invoke(main, [*command, "--ray"])
        assert result.exit_code == 1 and result.output.strip().splitlines() == [
            "error: the optional dependency 'ray' is not installed; install it with: pip install 'ragfunnel[ray]'"]


def hotpot_examples(n):
    from tests.conftest import HOTPOT

    if not HOTPOT.exists():
        pytest.skip("shared data absent")
    from ragfunnel.eval.datasets import load_dataset

    return load_dataset(HOTPOT, limit=n).examples


def comparable(row):
    """What a row says about the answer, not how long it took."""
    return (row.answer, row.metrics, row.ranking, row.chunks_used, row.samples, row.error)


@pytest.mark.model
def test_eval_on_ray_gives_the_rows_of_a_one_process_run(ray_cluster, tmp_path):
    from ragfunnel.eval.runner import run_eval
    from ragfunnel.methods import make_method

    examples = hotpot_examples(3)
    methods = {name: make_method(name, strong=TINY, budget=400, chunk_words=100, task="multihop")
               for name in ("op", "vanilla")}
    config = {"dataset": "hotpotqa", "strong": TINY}
    here = run_eval(examples, methods, tmp_path / "one", config=config, progress=False)
    there = run_eval(examples, methods, tmp_path / "ray", config=config, ray=RayOptions(actors=2), progress=False)
    assert there.written == 6
    assert {r.key: comparable(r) for r in there.rows} == {r.key: comparable(r) for r in here.rows}
    assert all(r.error is None and r.answer for r in there.rows)


def worker_pids() -> set[int]:
    """Processes Ray titled after the pair worker class (``ray::PairWorker...``)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(b"ray::PairWorker"):
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


@pytest.mark.model
def test_killing_a_worker_mid_run_loses_and_duplicates_nothing(ray_cluster, tmp_path):
    from ragfunnel.eval.runner import run_eval
    from ragfunnel.methods import make_method

    examples = hotpot_examples(5)
    methods = {"op": make_method("op", strong=TINY, budget=400, chunk_words=100, task="multihop")}
    run_dir = tmp_path / "run"
    killed: list[int] = []

    def kill_one_after_the_first_row():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            rows = run_dir / "rows.jsonl"
            pids = worker_pids()
            if rows.exists() and rows.read_text().count("\n") >= 1 and len(pids) == 2:
                victim = min(pids)
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_after_the_first_row)
    killer.start()
    result = run_eval(examples, methods, run_dir, config={"x": 1}, ray=RayOptions(actors=2), progress=False)
    killer.join()
    assert killed, "no worker was killed: the run ended first"
    rows = [json.loads(x) for x in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert sorted(r["example_id"] for r in rows) == sorted(e.id for e in examples)  # each once
    assert all(r.error is None for r in result.rows) and not (run_dir / "failed.jsonl").read_text().strip()


@pytest.mark.model
def test_scale_grid_on_ray_gives_the_rows_of_a_one_process_run(ray_cluster, tmp_path):
    from tests.helpers.runs import grid_inputs

    dataset, demos = grid_inputs(tmp_path)
    args = ["scale", "grid", str(dataset), "--index", str(tmp_path / "ix"), "--budgets", "2k", "--strategies",
            "zero-shot,rag", "--documents", "0,1", "--shots", "0", "--model", TINY, "--no-cache"]
    for out, extra in (("one", []), ("ray", ["--ray"])):
        result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / out), *extra])
        assert result.exit_code == 0, result.output

    def answers(out):
        rows = [json.loads(x) for x in (tmp_path / out / "rows.jsonl").read_text().splitlines()]
        return {(r["example_id"], r["strategy"], r["documents"]): (r["answer"], r["metrics"]) for r in rows}

    assert len(answers("ray")) == 6 and answers("ray") == answers("one")


@pytest.mark.model
def test_sigterm_stops_a_ray_run_saying_what_is_saved_and_a_resume_finishes_it(tmp_path):
    import subprocess

    pytest.importorskip("ray", reason="needs the [ray] extra")
    from tests.helpers.cli import RAGFUNNEL

    examples = hotpot_examples(4)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": e.id, "question": e.question, "context": e.context,
                                        "answers": list(e.answers)}) + "\n" for e in examples))
    command = [RAGFUNNEL, "eval", str(data), "--methods", "op", "--strong", TINY, "--budget", "400", "--chunk-words",
               "100", "--no-cache", "--out", str(tmp_path / "run"), "--ray", "local"]
    rows = tmp_path / "run" / "rows.jsonl"
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None and not (rows.exists() and rows.read_text()):
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)  # Ray's own crash handler would exit at once with code 1
    _, err = process.communicate(timeout=120)
    saved = len(rows.read_text().splitlines())
    assert process.returncode == 130 and f"interrupted: {saved} rows saved in" in err, err
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert sorted(json.loads(x)["example_id"] for x in rows.read_text().splitlines()) == sorted(e.id for e in examples)


def test_the_pool_holds_only_workers_the_cluster_can_place(ray_cluster, caplog):
    from ragfunnel.ray_cluster import pool_size

    assert pool_size(ray_cluster, RayOptions()) == 2 and pool_size(ray_cluster, RayOptions(cpus=2)) == 1
    assert pool_size(ray_cluster, RayOptions(actors=5)) == 2  # a third would wait forever, holding its pair
    assert "5 Ray workers asked for (ray_actors), but only 2 of 1 CPUs each fit the cluster" in caplog.text
    with pytest.raises(ConfigError, match="no Ray node has 4 CPUs free for a worker .*lower ray_cpus/ray_gpus"):
        pool_size(ray_cluster, RayOptions(cpus=4))
    with pytest.raises(ConfigError, match="no Ray node has 1 CPUs and 1 GPUs free"):
        pool_size(ray_cluster, RayOptions(gpus=1))


def test_a_missing_extra_survives_the_trip_back_from_a_worker():
    import pickle

    from ragfunnel.errors import MissingExtra

    error = pickle.loads(pickle.dumps(MissingExtra("llama_cpp", "llamacpp")))
    assert isinstance(error, MissingExtra) and "pip install 'ragfunnel[llamacpp]'" in str(error)


@dataclass(frozen=True)
class SlowThenUnreachable:
    """Item 0 fails at once; the others finish meanwhile."""

    def __call__(self, item):
        if item == 0:
            time.sleep(5)  # the others are done by then, even with the machine busy (1.5 s was not, under -n 3)
            raise BackendUnavailable("server gone")
        return item

    def failed(self, item, message):
        return None


def test_rows_finished_elsewhere_are_kept_when_a_pair_stops_the_run(ray_cluster):
    rows = []
    with pytest.raises(BackendUnavailable, match="server gone"):
        ray_drain([0, 1, 2, 3], SlowThenUnreachable(), rows.append, options=RayOptions(actors=2))
    assert 0 not in rows and len(rows) >= 2  # at least the pairs the other worker finished meanwhile
