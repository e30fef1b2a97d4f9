"""How fast a model reads and writes on this machine: measured once per model file, then remembered.

A :class:`SpeedProfile` holds a model's prefill rate (prompt tokens per second at the start of
the window), its decode rate (one sequence), and what each extra sequence of a batch adds to a
decode step. Reading slows as the window fills (attention over more past tokens): the rate at
``n`` tokens already read is ``prefill_tps / (1 + n / slowdown_tokens)``. Two short probe reads
measure the start rate well but barely see the slowdown, so ``slowdown_tokens`` is never taken
below ``SLOWDOWN_FLOOR``: whole-document reads of 3.9k-11.5k tokens on this project's machine
(``benchmarks/answer_speed.py``) fit 4.8k tokens for the bundled 1.5B and 3.0k for the 0.5B, and
with 4k the profiles calibrated there predict those reads within 4% (1.5B) and 9-18% short (0.5B).

:func:`speed_of` calibrates a model on first use (a few seconds: two prompt reads of ~200 and ~1,000 tokens,
a greedy decode, a batched decode), and keeps the profile in the user cache dir under the
model's fingerprint with the machine it was measured on, so a changed model file or a profile copied
from another machine is measured again.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import UnreadableFile, read_json_file
from ragfunnel.errors import ConfigError
from ragfunnel.llm.base import LLM, streaming
from ragfunnel.types import SamplingParams

log = logging.getLogger(__name__)

SLOWDOWN_FLOOR = 4_000
CALIBRATION_VERSION = 4
_PROBE_WORDS = (120, 720)  # two prompt lengths: the rate at the start and how fast it falls
_DECODE_TOKENS = 24
_BATCH = 4
MAX_SPEED_FILE_BYTES = 64 << 10  # a saved speed is a few hundred bytes


@dataclass(frozen=True)
class SpeedProfile:
    """A model's measured speeds on this machine."""

    prefill_tps: float  # prompt tokens per second, at the start of the window
    decode_tps: float  # generated tokens per second, one sequence
    batch_step_cost: float = 1.0  # a decode step of k sequences costs 1 + batch_step_cost * (k - 1) single steps
    slowdown_tokens: float = SLOWDOWN_FLOOR  # reading at n tokens in runs at prefill_tps / (1 + n / this)

    def __post_init__(self) -> None:
        values = (self.prefill_tps, self.decode_tps, self.batch_step_cost, self.slowdown_tokens)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values) \
                or min(self.prefill_tps, self.decode_tps, self.slowdown_tokens) <= 0 or self.batch_step_cost < 0:
            raise ConfigError(f"speeds must be finite and positive, got {self}")

    def read_seconds(self, tokens: int, *, already: int = 0) -> float:
        """Seconds to read ``tokens`` new prompt tokens after ``already`` kept ones."""
        if tokens <= 0:
            return 0.0
        end = already + tokens
        return (tokens + (end * end - already * already) / (2 * self.slowdown_tokens)) / self.prefill_tps

    def write_seconds(self, tokens: int, *, sequences: int = 1) -> float:
        """Seconds to generate ``tokens`` steps of ``sequences`` sequences decoded together."""
        step = (1 + self.batch_step_cost * (sequences - 1)) / self.decode_tps
        return max(tokens, 0) * step


def _probe_text(words: int) -> str:
    """Plain English-like filler the model has never seen in this order (no prefix to reuse)."""
    vocab = ("river stone window garden letter morning winter copper harbour meadow lantern signal "
             "orchard bridge candle valley market season thread mirror").split()
    rng = random.Random(time.time_ns())
    return " ".join(rng.choice(vocab) for _ in range(words))


def calibrate(llm: LLM) -> SpeedProfile:
    """Measure ``llm``'s prefill, decode and batched-decode speed (a few seconds; no call cache, and the
    probe text streams nowhere, whatever sink the caller set)."""
    saved_cache, llm.call_cache = llm.call_cache, None
    try:
        with streaming(llm, None):
            llm.generate([f"Say: {_probe_text(8)}"], SamplingParams(max_tokens=2))  # first-call set-up is not speed
            reads = []
            for words in _PROBE_WORDS:
                prompt = (f"Here are some words: {_probe_text(words)}\n\n"
                          "Now count from 1 to 200, numbers separated by spaces.")
                reads.append(llm.generate([prompt], SamplingParams(max_tokens=1))[0][0])
            started = time.perf_counter()
            one = llm.generate([prompt], SamplingParams(max_tokens=_DECODE_TOKENS))[0][0]
            one_seconds = time.perf_counter() - started
            started = time.perf_counter()
            drafting = SamplingParams(max_tokens=_DECODE_TOKENS, temperature=1.0, top_p=0.9, top_k=50)
            many = llm.generate([prompt], drafting, n=_BATCH)[0]
            many_seconds = time.perf_counter() - started
    finally:
        llm.call_cache = saved_cache
    prefill, slowdown = _fit_reading([(r.prompt_tokens, max(r.seconds, 1e-6)) for r in reads])
    decode = max(one.completion_tokens, 1) / max(one_seconds, 1e-6)
    steps = max(max(c.completion_tokens for c in many), 1)
    step_ratio = (many_seconds / steps) / (1 / decode)
    profile = SpeedProfile(prefill_tps=round(prefill, 2), decode_tps=round(decode, 2),
                           batch_step_cost=round(max(step_ratio - 1, 0.0) / (_BATCH - 1), 4),
                           slowdown_tokens=round(slowdown))
    log.info("calibrated %s: read %.0f tokens/s, write %.1f tokens/s, each extra batched sequence +%.0f%%",
             llm.name, profile.prefill_tps, profile.decode_tps, 100 * profile.batch_step_cost)
    return profile


def _fit_reading(reads: list[tuple[int, float]]) -> tuple[float, float]:
    """Start rate and slowdown from two (tokens, seconds) reads, with t(n) = (n + n^2 / 2c) / r.

    c is kept within [SLOWDOWN_FLOOR, 50k]; a noisy pair that implies no slowdown gives the floor.
    """
    (n1, t1), (n2, t2) = reads
    x = (t1 * n2 - t2 * n1) / (t2 * n1 * n1 - t1 * n2 * n2)  # x = 1 / 2c
    c = 1 / (2 * x) if x > 0 else SLOWDOWN_FLOOR
    c = min(max(c, SLOWDOWN_FLOOR), 50_000)
    return (n2 + n2 * n2 / (2 * c)) / t2, c


def _profile_path(llm: LLM) -> Path:
    from ragfunnel.llm.cache_paths import cache_dir

    fingerprint = llm.fingerprint.replace("/", "_").replace(":", "_")[:120]
    return cache_dir() / "speed" / f"{fingerprint}.json"


_measured: dict[str, SpeedProfile] = {}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_of(fingerprint: str) -> dict[str, object]:
    """What a saved speed must have been measured on to be trusted: this machine (its name, processor
    and core count), this calibration and the model file with ``fingerprint``."""
    return {"host": platform.node(), "cpu": _cpu_model(), "arch": platform.machine(), "cpus": os.cpu_count(),
            "version": CALIBRATION_VERSION, "model": fingerprint}


def _saved_profile(path: Path, machine: dict[str, object], name: str) -> SpeedProfile | None:
    """The profile saved at ``path`` if it was measured on ``machine``; None when there is none to trust.
    A damaged file costs one warning; the profile measured next replaces it."""
    try:
        saved = read_json_file(path, max_bytes=MAX_SPEED_FILE_BYTES, what="saved speed")
        if saved.get("machine") == machine:
            return SpeedProfile(**saved["profile"])
        log.info("%s's saved speed was measured on another machine or model file; measuring it again", name)
        return None
    except FileNotFoundError:
        return None  # first use: measure
    except UnreadableFile as e:  # not a regular file, too big, not JSON, nested past reason
        problem = e.problem
    except (TypeError, KeyError, AttributeError, ConfigError) as e:  # JSON, but not a saved speed
        problem = str(e)
    log.warning("%s's saved speed in %s is unusable (%s); measuring it again", name, path, problem)
    return None


def speed_of(llm: LLM) -> SpeedProfile:
    """``llm``'s profile: remembered for its fingerprint on this machine, else calibrated now and saved."""
    fingerprint = llm.fingerprint
    if fingerprint in _measured:
        return _measured[fingerprint]
    path = _profile_path(llm)
    machine = machine_of(fingerprint)
    profile = _saved_profile(path, machine, llm.name)
    if profile is None:
        log.info("measuring %s's speed on this machine (once per model file)", llm.name)
        profile = calibrate(llm)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps({"machine": machine, "profile": asdict(profile)}))
        except OSError as e:
            log.warning("cannot save %s's speed under %s (%s); it will be measured again next time",
                        llm.name, path.parent, e)
    _measured[fingerprint] = profile
    return profile
