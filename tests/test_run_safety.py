"""Long runs as a hostile user meets them: two writers, a server that dies, Ctrl-C, failures, resumes.

The subprocess tests run the real `ragfunnel eval` against ``tests/fake_openai.py``, a stand-in server
in its own process (it answers "Paris" after a set delay), so a test can kill it and start it again.
"""

from __future__ import annotations

import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragfunnel.errors import ModelError
from ragfunnel.eval.runner import load_eval, run_eval
from ragfunnel.journal import FAILED_FILE, ROWS_FILE
from ragfunnel.llm import FakeLLM
from ragfunnel.llm.openai import OpenAICompatibleLLM
from ragfunnel.methods import make_method
from ragfunnel.types import Example
from tests.fake_openai import send_json
from tests.helpers.cli import RAGFUNNEL
from tests.helpers.network import free_port

SERVER = Path(__file__).with_name("fake_openai.py")


def start_server(port: int, delay: float) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, str(SERVER), str(port), str(delay)], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    return server


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture
def dataset(tmp_path) -> Path:
    """Twelve questions for `ragfunnel eval --strong openai:...` (the subprocess needs the [openai] extra)."""
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is the capital {i}?", "answers": ["Paris"],
                                        "context": f"Note {i}. The capital is Paris."}) + "\n" for i in range(12)))
    return path


def start_eval(dataset: Path, out: Path, port: int, *extra: str) -> subprocess.Popen:
    # Ctrl-C as at a terminal: a suite started in the background (`pytest &`) hands its children SIGINT
    # ignored, which Python then keeps ignoring.
    return subprocess.Popen([RAGFUNNEL, "eval", str(dataset), "--methods", "lc", "--out", str(out),
                             "--strong", f"openai:http://127.0.0.1:{port}/v1#m", "--no-cache", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def rows_in(out: Path, name: str = ROWS_FILE) -> list[dict]:
    path = out / name
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for_rows(out: Path, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(rows_in(out)) < n:
        assert time.monotonic() < deadline, f"fewer than {n} rows after {timeout}s"
        time.sleep(0.05)


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(("INFO", "WARNING", "eval "))
            and "row/s" not in ln and "%|" not in ln]


def test_a_second_eval_on_the_same_out_fails_at_once_naming_the_first(dataset, tmp_path):
    port = free_port()
    server = start_server(port, 0.2)
    try:
        first = start_eval(dataset, tmp_path / "run", port)
        wait_for_rows(tmp_path / "run", 1)
        second = start_eval(dataset, tmp_path / "run", port)
        _, stderr = second.communicate(timeout=60)
        assert second.returncode == 1 and "Traceback" not in stderr
        assert error_lines(stderr) == [f"error: {tmp_path / 'run'} is being written by another ragfunnel "
                                              f"process (PID {first.pid}); wait for it to finish or stop it, or write "
                                              "to another directory (--out)"]
        assert first.wait(60) == 0
    finally:
        stop(server)
    ids = [r["example_id"] for r in rows_in(tmp_path / "run")]
    assert sorted(ids) == sorted(f"q{i}" for i in range(12))  # each pair exactly once


def test_a_server_down_from_the_start_stops_the_run_before_any_row(dataset, tmp_path):
    port = free_port()
    result = subprocess.run([RAGFUNNEL, "eval", str(dataset), "--methods", "lc", "--out", str(tmp_path / "run"),
                             "--strong", f"openai:http://127.0.0.1:{port}/v1#m", "--no-cache"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert error_lines(result.stderr) == [f"error: cannot reach http://127.0.0.1:{port}/v1: connection refused; "
                                          "start the server or fix the URL"]
    assert rows_in(tmp_path / "run") == [] and rows_in(tmp_path / "run", FAILED_FILE) == []


def test_a_server_that_accepts_but_never_answers_stops_the_run_within_the_timeout(dataset, tmp_path):
    with socket.socket() as hung:  # listens, so connections succeed, but never reads or replies
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        port = hung.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run([RAGFUNNEL, "eval", str(dataset), "--methods", "lc", "--out", str(tmp_path / "run"),
                                 "--strong", f"openai:http://127.0.0.1:{port}/v1#m", "--timeout", "2"],
                                capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    assert result.returncode == 1 and took < 15, (took, result.stderr)
    (line,) = error_lines(result.stderr)
    assert "accepted the connection but did not answer within 2s" in line
    assert rows_in(tmp_path / "run") == []


def test_a_server_killed_mid_run_then_restarted_loses_and_repeats_nothing(dataset, tmp_path):
    port = free_port()
    server = start_server(port, 0.1)
    run = start_eval(dataset, tmp_path / "run", port)
    wait_for_rows(tmp_path / "run", 3)
    stop(server)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stderr
    (line,) = error_lines(stderr)
    saved = len(rows_in(tmp_path / "run"))
    assert 3 <= saved < 12 and f"{saved} rows saved in {tmp_path / 'run'}; re-run to resume" in line
    assert rows_in(tmp_path / "run", FAILED_FILE) == []  # the server's outage is no pair's failure
    server = start_server(port, 0.0)
    try:
        again = start_eval(dataset, tmp_path / "run", port)
        assert again.wait(120) == 0, again.stderr.read()
    finally:
        stop(server)
    ids = [r["example_id"] for r in rows_in(tmp_path / "run")]
    assert sorted(ids) == sorted(f"q{i}" for i in range(12))


@pytest.mark.parametrize("stop_with, workers", [(signal.SIGINT, "1"), (signal.SIGINT, "2"), (signal.SIGTERM, "1")])
def test_ctrl_c_or_sigterm_stops_eval_promptly_keeping_every_finished_row(dataset, tmp_path, stop_with, workers):
    port = free_port()
    server = start_server(port, 1.0)
    try:
        run = start_eval(dataset, tmp_path / "run", port, "--workers", workers)
        wait_for_rows(tmp_path / "run", 2)
        sent = time.monotonic()
        run.send_signal(stop_with)
        _, stderr = run.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        stop(server)
    saved = len(rows_in(tmp_path / "run"))
    assert run.returncode == 130 and took < 3.0, (took, stderr)
    assert error_lines(stderr)[-1] == f"interrupted: {saved} rows saved in {tmp_path / 'run'}; re-run to resume"
    assert 2 <= saved < 12


def flaky_methods(fail_until: list[int]):
    """lc whose model fails (a ModelError: the pair's failure) on its first ``fail_until[0]`` calls."""
    calls = []

    def reply(prompt, i):
        calls.append(1)
        if len(calls) <= fail_until[0]:
            raise ModelError("the model crashed")
        return "Paris"

    return {"lc": make_method("lc", strong=FakeLLM(reply))}


def examples(n):
    return [Example(id=f"e{i}", question="Capital?", context="The capital is Paris.", answers=["Paris"])
            for i in range(n)]


def test_failed_pairs_are_kept_apart_and_retried_on_resume(tmp_path):
    first = run_eval(examples(3), flaky_methods([2]), tmp_path, config={}, progress=False)
    assert [r.error for r in first.rows].count("the model crashed") == 2
    assert len(rows_in(tmp_path)) == 1 and len(rows_in(tmp_path, FAILED_FILE)) == 2
    kept = run_eval(examples(3), flaky_methods([5]), tmp_path, config={}, progress=False, retry_failed=False)
    assert kept.written == 0  # --no-retry-failed leaves them failed
    again = run_eval(examples(3), flaky_methods([0]), tmp_path, config={}, progress=False)
    assert again.written == 2 and all(r.error is None for r in again.rows)
    assert sorted(r["example_id"] for r in rows_in(tmp_path)) == ["e0", "e1", "e2"]  # each once, failures apart
    assert sorted(r.key for r in load_eval(tmp_path).rows) == [("e0", "lc"), ("e1", "lc"), ("e2", "lc")]


def test_a_run_whose_pairs_all_failed_exits_non_zero(tmp_path):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "Capital?", "answers": ["Paris"], "context": "The capital is Paris."}))
    port = free_port()
    server = start_server(port, 0.0)
    try:
        result = subprocess.run([RAGFUNNEL, "eval", str(data), "--methods", "op", "--budget", "1",
                                 "--strong", f"openai:http://127.0.0.1:{port}/v1#m", "--no-cache",
                                 "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=60)
    finally:
        stop(server)
    assert result.returncode == 1
    assert error_lines(result.stderr)[-1].startswith("error: every pair failed (1, kept in ")
    assert "smaller than one chunk" in error_lines(result.stderr)[-1]


def stops_on_call(n: int):
    """A callable that raises KeyboardInterrupt (as Ctrl-C does) on its ``n``-th call, else returns None."""
    calls = []

    def call(*args):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt

    return call


def test_ctrl_c_in_a_grid_keeps_the_finished_answers(tmp_path):
    from ragfunnel.errors import Interrupted
    from ragfunnel.scaling.grid import run_grid
    from tests.helpers.runs import CONFIGS, FakeMethod
    from tests.helpers.runs import examples as grid_examples

    interrupt = stops_on_call(3)

    class Stoppable(FakeMethod):
        def run(self, question):
            interrupt()
            return super().run(question)

    with pytest.raises(Interrupted, match=rf"^interrupted: 2 rows saved in {tmp_path}; re-run to resume$"):
        run_grid(grid_examples(2), CONFIGS, Stoppable, tmp_path, config_meta={}, progress=False)
    assert len(rows_in(tmp_path)) == 2
    again = run_grid(grid_examples(2), CONFIGS, FakeMethod, tmp_path, config_meta={}, progress=False)
    assert again.written == 4 and len(rows_in(tmp_path)) == 6


def test_ctrl_c_while_making_demonstrations_keeps_the_finished_ones(tmp_path):
    from ragfunnel.errors import Interrupted
    from ragfunnel.methods.demonstrations import Demonstration, load_demonstrations
    from ragfunnel.scaling.demonstrations import extend_demonstrations

    interrupt = stops_on_call(3)

    def attempt(example):
        interrupt()
        return Demonstration(example.question, "Paris", id=example.id), "kept"

    out = tmp_path / "demos.jsonl"
    with pytest.raises(Interrupted, match=rf"^interrupted: 2 rows saved in {out}; re-run to resume$"):
        extend_demonstrations(examples(4), out, attempt, progress=False)
    assert [d.id for d in load_demonstrations(out)] == ["e0", "e1"]
    made = extend_demonstrations(examples(4), out, lambda e: (Demonstration(e.question, "Paris", id=e.id), "kept"),
                                 progress=False)
    assert [d.id for d in made] == ["e0", "e1", "e2", "e3"]


def test_two_writers_of_one_demonstrations_file_are_refused(tmp_path):
    from ragfunnel.errors import RunBusy
    from ragfunnel.methods.demonstrations import Demonstration
    from ragfunnel.scaling.demonstrations import extend_demonstrations

    out = tmp_path / "demos.jsonl"

    def attempt(example):  # a second process starts while the first is still at work
        with pytest.raises(RunBusy, match=rf"{out} is being written by another ragfunnel process \(PID \d+\)"):
            extend_demonstrations(examples(1), out, lambda e: (None, "unused"), progress=False)
        return Demonstration(example.question, "Paris", id=example.id), "kept"

    assert len(extend_demonstrations(examples(2), out, attempt, progress=False)) == 2


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A server that refuses one prompt (HTTP 400, as vLLM does for a prompt over its window) and
    answers every other."""

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "tokenize" in self.path:
            status, reply = 404, {}
        elif "TOO LONG" in json.dumps(body):
            status, reply = 400, {"error": "This model's maximum context length is 8192 tokens"}
        else:
            status, reply = 200, {"choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}]}
        send_json(self, reply, status)


def test_a_prompt_the_server_refuses_fails_its_pair_and_the_run_goes_on(tmp_path):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        lc = make_method("lc", strong=OpenAICompatibleLLM(url, "m"))
        exs = examples(3)
        exs[1] = Example(id="e1", question="Capital?", context="TOO LONG. The capital is Paris.", answers=["Paris"])
        result = run_eval(exs, {"lc": lc}, tmp_path, config={}, progress=False)
    finally:
        server.shutdown()
    assert sorted(r["example_id"] for r in rows_in(tmp_path)) == ["e0", "e2"]
    (failed,) = rows_in(tmp_path, FAILED_FILE)
    assert failed["example_id"] == "e1" and "HTTP 400" in failed["error"]
    assert "maximum context length" in failed["error"]
    assert len(result.rows) == 3


def test_a_missing_extra_mid_run_stops_it_saying_what_is_saved(tmp_path):
    from ragfunnel.errors import BackendUnavailable, MissingExtra

    def reply(prompt, i):
        if "second" in prompt:
            raise MissingExtra("llama_cpp", "llamacpp")
        return "Paris"

    exs = [Example(id=f"e{i}", question=f"Capital, {word}?", context="The capital is Paris.", answers=["Paris"])
           for i, word in enumerate(["first", "second"])]
    with pytest.raises(BackendUnavailable, match=r"pip install 'ragfunnel\[llamacpp\]' \(1 rows saved in .*; "
                                                 r"re-run to resume once it is back\)"):
        run_eval(exs, {"lc": make_method("lc", strong=FakeLLM(reply))}, tmp_path, config={}, progress=False)
    assert len(rows_in(tmp_path)) == 1


def test_a_report_on_a_mistyped_directory_creates_nothing(tmp_path):
    from click.testing import CliRunner

    from ragfunnel.cli.main import main

    result = CliRunner().invoke(main, ["report", str(tmp_path / "typo")])
    assert result.exit_code == 1 and "is not a run directory" in result.output
    assert not (tmp_path / "typo").exists()


def test_a_bad_top_level_option_is_one_line():
    result = subprocess.run([RAGFUNNEL, "--bogus"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: No such option '--bogus'. Did you mean '--verbose'? "
                                          "(see `ragfunnel --help`)"]
