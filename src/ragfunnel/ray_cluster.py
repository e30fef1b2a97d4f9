"""Run a journal's pairs on a Ray cluster: ``eval --ray`` and ``scale grid --ray``.

The driver (the process the user started) stays the only writer of the run directory: workers
are Ray actors that each answer one pair at a time and send the finished row back, and the driver
records it exactly as :func:`ragfunnel.journal.drain` does on one machine, so locking, resume and
crash safety do not change. An actor loads its models once (the model registry keeps them for the
process) and reserves ``cpus`` CPUs, which are also its llama.cpp threads, and ``gpus`` GPUs.

A worker lost mid-pair (killed, out of memory, its node gone) is replaced, and its pair goes back
to the queue for the next free worker, up to ``attempts`` runs in all; after that the pair is stored
as a failed row, which a resume retries. A pair's own error (a bad prompt, a refused budget) is its
row's error as on one machine; a backend that cannot be reached stops the run.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ragfunnel.errors import BackendUnavailable, ConfigError, MissingExtra, option

R = TypeVar("R")

CONNECT_SECONDS = 5.0  # a head node that does not accept a connection in this long is reported unreachable
FORWARDED_VARIABLES = ("OPENAI_API_KEY", "RAGFUNNEL_CACHE")


class PairJob(Protocol[R]):
    """What runs one pair: picklable, so Ray can send it to every worker once."""

    def __call__(self, item: Any) -> R: ...

    def failed(self, item: Any, message: str) -> R:
        """The failed row stored for ``item`` when no worker could finish it."""
        ...


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide to run. ``address``: None joins the cluster Ray finds (``RAY_ADDRESS``, or one
    started on this machine with ``ray start``) and else starts a local one; ``local`` always starts a
    local one; ``HOST:PORT`` or ``ray://HOST:PORT`` names a head node. ``actors``: None is as many as the
    cluster's CPUs allow at ``cpus`` each."""

    address: str | None = None
    actors: int | None = None
    cpus: int = 1
    gpus: float = 0.0
    attempts: int = 3

    def __post_init__(self) -> None:
        if self.cpus < 1 or self.gpus < 0 or self.attempts < 1 or (self.actors is not None and self.actors < 1):
            raise ConfigError(f"Ray options out of range ({self}): actors, cpus and attempts are at least 1, "
                              "gpus at least 0")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtra("ray", "ray") from None
    return ray


def check_address(address: str | None) -> None:
    """Fail in seconds, in one line, if a named head node does not accept connections (``ray.init``
    itself would wait about a minute before giving up)."""
    if address in (None, "auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{option('ray')}: {address} is not a Ray address; write HOST:PORT (the head node's port, "
                          "6379 by default), ray://HOST:PORT (Ray Client, 10001), auto or local")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e)).lower()
        raise BackendUnavailable(f"cannot reach the Ray cluster at {address} ({why}); start it with "
                                 f"`ray start --head` on that machine, or fix the address ({option('ray')})") from None


@contextmanager
def connected(address: str | None) -> Iterator[Any]:
    """The ``ray`` module, joined to a cluster for the block. A cluster this process was already joined
    to (a test's ``ray.init``) is used as it is and left running; one joined here is left afterwards."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    check_address(address)
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    handlers = _signal_handlers()
    # Workers on other nodes do not inherit this process's environment: send what they need to reach servers.
    env = {name: os.environ[name] for name in FORWARDED_VARIABLES if name in os.environ}
    quiet |= {"runtime_env": {"env_vars": env}} if env else {}
    try:
        if address in (None, "local"):
            ray.init(address=address, include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, TimeoutError, RuntimeError) as e:
        lines = str(e).strip().splitlines() or [type(e).__name__]
        raise BackendUnavailable(f"could not join the Ray cluster at {address or 'auto'} ({lines[0]}); "
                                 f"check `ray status` there, or fix the address ({option('ray')})") from None
    finally:
        # Ray's core installs a crash handler for SIGTERM that exits at once; ours stops the run the way
        # Ctrl-C does, saying how many rows are saved.
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    try:
        yield ray
    finally:
        ray.shutdown()


def pool_size(ray: Any, options: RayOptions) -> int:
    """How many workers to start: ``options.actors``, or as many as the cluster's CPUs hold at ``options.cpus``
    each; never more than fit at once (a worker that cannot be placed would hold its pair forever)."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    fits = sum(int(n.get("CPU", 0) // options.cpus) if not options.gpus else
               min(int(n.get("CPU", 0) // options.cpus), int(n.get("GPU", 0) // options.gpus)) for n in nodes)
    if fits < 1:
        largest = max((n.get("CPU", 0) for n in nodes), default=0)
        gpus = f" and {options.gpus:g} GPUs" if options.gpus else ""
        raise ConfigError(f"no Ray node has {options.cpus} CPUs{gpus} free for a worker (the largest has "
                          f"{largest:g} CPUs); lower {option('ray_cpus')}/{option('ray_gpus')} or add nodes")
    if options.actors is not None and options.actors > fits:
        logging.getLogger(__name__).warning("%d Ray workers asked for (ray_actors), but only %d of %d CPUs each fit "
                                            "the cluster; starting %d", options.actors, fits, options.cpus, fits)
    return min(options.actors or fits, fits)


def _signal_handlers() -> dict[int, Any]:
    """This process's Python handlers for SIGINT and SIGTERM (none outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)
            if signal.getsignal(signum) is not None}


class PairWorker:
    """A Ray actor: the process-wide settings of the driver, then one pair per call."""

    def __init__(self, job: PairJob, settings: dict[str, Any]):
        from ragfunnel.llm.registry import apply_process_settings

        apply_process_settings(settings)
        self._job = job

    def run(self, item: Any) -> Any:
        return self._job(item)


def ray_drain(todo: Sequence[Any], job: PairJob[R], record: Callable[[R], None], *, options: RayOptions,
              on_row: Callable[[R], None] = lambda row: None) -> None:
    """Run ``job`` on every item on Ray actors, recording each row in this process as it comes back."""
    if not todo:
        return
    from ragfunnel.llm.registry import process_settings

    with connected(options.address) as ray:
        from ray.exceptions import NodeDiedError, OutOfMemoryError, RayActorError, RayTaskError, WorkerCrashedError

        lost_worker = (RayActorError, WorkerCrashedError, OutOfMemoryError, NodeDiedError)
        actor_class = ray.remote(num_cpus=options.cpus, num_gpus=options.gpus, max_restarts=0)(PairWorker)
        shared_job = ray.put(job)
        settings = process_settings() | {"threads": options.cpus}
        size = min(pool_size(ray, options), len(todo))
        idle = [actor_class.remote(shared_job, settings) for _ in range(size)]
        queue: deque[tuple[Any, int]] = deque((item, 1) for item in todo)
        running: dict[Any, tuple[Any, Any, int]] = {}  # object ref -> (actor, item, attempt)
        replaced = 0

        def finish(row: R) -> None:
            record(row)
            on_row(row)

        try:
            while queue or running:
                while queue and idle:
                    actor, (item, attempt) = idle.pop(), queue.popleft()
                    running[actor.run.remote(item)] = (actor, item, attempt)
                ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                for ref in ready:
                    actor, item, attempt = running.pop(ref)
                    try:
                        row = ray.get(ref)
                    except RayTaskError as e:  # the pair's job raised what it lets escape on one machine too
                        _keep_finished(ray, running, finish)
                        raise e.cause if isinstance(e.cause, BaseException) else e from None
                    except lost_worker as e:
                        reason = _first_line(e)
                        if getattr(e, "actor_init_failed", False):
                            raise BackendUnavailable(f"a Ray worker could not start ({reason}); install ragfunnel "
                                                     "with the same extras on every node") from None
                        replaced += 1
                        if replaced > options.attempts * size:
                            raise BackendUnavailable(f"Ray workers keep dying ({replaced} lost; last: {reason}); "
                                                     "check the nodes' memory and `ray status`") from None
                        logging.getLogger(__name__).warning("a Ray worker died mid-pair (%s), run %d of at most %d",
                                                            reason, attempt, options.attempts)
                        ray.kill(actor, no_restart=True)
                        if len(idle) + len(running) < min(size, pool_size(ray, options)):  # its node may be gone
                            idle.insert(0, actor_class.remote(shared_job, settings))  # live workers go first
                        elif not idle and not running:
                            raise BackendUnavailable(f"no Ray worker is left ({reason}); check `ray status`, "
                                                     "then re-run to resume") from None
                        if attempt < options.attempts:
                            queue.append((item, attempt + 1))
                            continue
                        row = job.failed(item, f"its Ray worker died {attempt} times (last: {reason}); "
                                               "re-run to retry it")
                    else:
                        idle.append(actor)
                    finish(row)
        finally:
            for actor in idle + [actor for actor, _, _ in running.values()]:
                ray.kill(actor, no_restart=True)


def _keep_finished(ray: Any, running: dict[Any, tuple[Any, Any, int]], finish: Callable[[Any], None]) -> None:
    """Record the rows other workers have already finished, before a run stops on an error."""
    if not running:
        return
    done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
    for ref in done:
        try:
            row = ray.get(ref)
        except Exception:  # noqa: BLE001 - the run is stopping on another error; this pair runs again on resume
            continue
        running.pop(ref)
        finish(row)


def _first_line(error: BaseException) -> str:
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return lines[0] if lines else type(error).__name__
