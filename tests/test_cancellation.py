"""A cancelled call stops inside the model: between batched draft steps, between slices of a long prompt,
between the tokens of one answer, and while a server is still answering; the model is left ready for the
next call, which answers as if nothing had been cancelled."""

from __future__ import annotations

import asyncio
import http.server
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import replace
from typing import Any

import pytest

from ragfunnel.llm import Cancellation, FakeLLM, cancelled_by, resolve
from ragfunnel.llm.llamacpp_state import PROMPT_SLICE
from ragfunnel.llm.openai import OpenAICompatibleLLM
from ragfunnel.serve.jobs import Cancelled, Job, JobQueue
from ragfunnel.types import SamplingParams
from tests.conftest import hotpot_context
from tests.fake_openai import Handler, send_json
from tests.helpers.network import free_port

COUNTING = "Count from 1 to 1000, numbers separated by spaces."
# top_k=1 makes the drafts deterministic and keeps the tiny model counting (long after a hang-up)
DRAFTS = SamplingParams(temperature=1.0, top_k=1, seed=5)  # four of them


def seconds_to_stop(call: Callable[[], Any], *, cancel_after: float) -> float:
    """Run ``call()`` under a cancellation cancelled from another thread after ``cancel_after`` seconds, as the
    server runs a job; the seconds from the cancel to ``call()`` raising Cancelled (it fails the test if it
    ends otherwise)."""
    token = Cancellation("the test's call")
    cancelled_at: list[float] = []

    def cancel() -> None:
        cancelled_at.append(time.monotonic())
        token.cancel("the test cancelled it")

    timer = threading.Timer(cancel_after, cancel)
    timer.start()
    try:
        with pytest.raises(Cancelled, match="the test cancelled it"), cancelled_by(token):
            call()
        return time.monotonic() - cancelled_at[0]
    finally:
        timer.cancel()


async def hang_up(jobs: JobQueue, work: Callable[[], Any], *, after: float) -> tuple[Job, float]:
    """Queue ``work`` and, ``after`` seconds into it, go away as a client does; then queue a next job.
    Returns the first job and the seconds from the hang-up to the next job starting."""
    running = threading.Event()

    def first(job: Job) -> Any:
        running.set()
        return work()

    job = jobs.submit(first, label="hung-up job")
    waiting = asyncio.ensure_future(jobs.result(job, deadline=600))
    await asyncio.to_thread(running.wait, 60)
    await asyncio.sleep(after)
    waiting.cancel()  # what the server sees when the client's connection closes
    with suppress(asyncio.CancelledError):
        await waiting
    hung_up = time.monotonic()
    following = jobs.submit(lambda job: time.monotonic(), label="next job")
    started = await asyncio.wrap_future(following.future)
    return job, started - hung_up


# -- the queue --------------------------------------------------------------------------------------


def test_a_job_whose_client_hangs_up_frees_the_worker_at_once():
    slow = FakeLLM(lambda prompt, i: time.sleep(0.05) or "draft")  # 400 samples: 20 s if nothing stops it
    jobs = JobQueue(capacity=2)
    try:
        job, seconds = asyncio.run(hang_up(jobs, lambda: slow.generate(["q"], n=400), after=0.3))
    finally:
        jobs.close()
    assert seconds < 2
    assert isinstance(job.future.exception(timeout=5), Cancelled)
    assert len(slow.generate(["q"], n=3)[0]) == 3  # the shared model carries nothing of the cancelled job


def test_a_token_given_to_a_call_ends_it_whatever_block_it_runs_in():
    slow = FakeLLM(lambda prompt, i: time.sleep(0.05) or "draft")
    token = Cancellation("this call")
    threading.Timer(0.2, token.cancel, args=("it took too long",)).start()
    with cancelled_by(Cancellation("the job")), pytest.raises(Cancelled, match="this call was cancelled: it took"):
        slow.generate(["q"], n=400, cancel=token)
    assert len(slow.calls) == 1


# -- an OpenAI-compatible server ----------------------------------------------------------------


def client_gone(connection: socket.socket) -> bool:
    """Whether the client closed its end (a request is sent whole, so anything readable is the close)."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except ConnectionError:
        return True


@pytest.fixture
def slow_server() -> Iterator[tuple[str, list[float]]]:
    """tests/fake_openai.py's server, but a completion asking to be answered ``slowly`` takes 30 s unless the
    client hangs up first: the base URL and the times the server saw a client hang up."""
    hang_ups: list[float] = []

    class SlowToAnswer(Handler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer_at = time.monotonic() + (30 if "slowly" in json.dumps(body) else 0)
            while time.monotonic() < answer_at:
                if client_gone(self.connection):
                    hang_ups.append(time.monotonic())
                    return
                time.sleep(0.02)
            send_json(self, {"choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 1}})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowToAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", hang_ups
    server.shutdown()
    server.server_close()


def test_a_cancelled_server_request_is_closed_so_the_server_stops(slow_server):
    url, hang_ups = slow_server
    llm = OpenAICompatibleLLM(url, "m", timeout=60)
    seconds = seconds_to_stop(lambda: llm.generate(["Answer slowly: the capital of France?"]), cancel_after=0.5)
    assert seconds < 1
    deadline = time.monotonic() + 1
    while not hang_ups and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hang_ups, "the server did not see the request closed"
    assert llm.generate(["The capital of France?"])[0][0].text == "Paris"  # the client still works


def test_a_cancel_ends_the_wait_between_retries():
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{free_port()}/v1", "m", timeout=60)  # nothing listens there
    llm.backoff_seconds = 20
    assert seconds_to_stop(lambda: llm.generate(["q"]), cancel_after=0.3) < 0.5


# -- the llama.cpp backend, on the tiny bundled model ----------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> Any:
    llm = resolve("bundled:smollm2-135m")
    llm.warm_up()
    return llm


@pytest.mark.model
def test_batched_drafts_stop_between_decode_steps(tiny):
    def drafts(max_tokens: int) -> list[str]:
        return [c.text for c in tiny.generate([COUNTING], replace(DRAFTS, max_tokens=max_tokens), n=4)[0]]

    drafts(24)  # the context now holds the prompt, as it will when the drafts after the cancel start
    want = drafts(24)
    assert seconds_to_stop(lambda: drafts(4000), cancel_after=1) < 2
    assert drafts(24) == want


@pytest.mark.model
def test_a_long_prompt_stops_between_slices_and_its_read_is_resumed(tiny, hotpot_examples):
    context = "\n\n".join(hotpot_context(example) for example in hotpot_examples[:3])
    prompt = f"{' '.join(context.split()[:1800])}\n\nWhat is the first title above?"
    tokens = tiny.prompt_tokens(prompt)
    assert len(tokens) > 2000

    tiny.reset()
    want = tiny.generate([prompt], SamplingParams(max_tokens=12))[0][0]
    tiny.reset()
    assert seconds_to_stop(lambda: tiny.generate([prompt], SamplingParams(max_tokens=12)), cancel_after=1) < 2
    llama = tiny._llama
    held = llama.n_tokens
    assert 0 < held < len(tokens) and held % PROMPT_SLICE == 0  # stopped mid-read, between two slices
    assert list(llama.input_ids[:held]) == tokens[:held]
    got = tiny.generate([prompt], SamplingParams(max_tokens=12))[0][0]  # reads only the rest
    assert got.text == want.text and got.logprobs == pytest.approx(want.logprobs, abs=1e-3)


@pytest.mark.model
def test_one_answer_stops_between_tokens(tiny):
    def answer(max_tokens: int) -> str:
        return tiny.generate([COUNTING], SamplingParams(max_tokens=max_tokens))[0][0].text

    answer(24)
    want = answer(24)
    assert seconds_to_stop(lambda: answer(4000), cancel_after=1) < 2
    assert answer(24) == want


@pytest.mark.model
def test_a_hung_up_job_of_drafts_frees_the_worker(tiny):
    jobs = JobQueue(capacity=2, streaming=tiny)
    try:
        work = lambda: tiny.generate([COUNTING], replace(DRAFTS, max_tokens=4000), n=4)  # noqa: E731
        job, seconds = asyncio.run(hang_up(jobs, work, after=1))
    finally:
        jobs.close()
    assert seconds < 2
    assert isinstance(job.future.exception(timeout=5), Cancelled)
