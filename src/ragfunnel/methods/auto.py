"""auto: answer with whichever of LC and FB-RAG this machine will finish first (OP-RAG under a deadline).

Before anything is generated, every candidate's latency is predicted from the tokens it would
feed each model — counted with the models' own tokenizers — and each model's measured speed
(:mod:`ragfunnel.llm.speed`): seconds to read the prompt (less whatever part of it the model
already holds from an earlier question about the same document) plus seconds to write the answer
(for FB-RAG's K drafts, decoded together). ``auto`` runs FB-RAG unless LC is predicted at least
twice as fast (``LC_MARGIN``: FB-RAG answered better in this project's measurements); with
``max_seconds``, a candidate predicted over the limit is out, OP-RAG is the fallback, and if
nothing fits the error names the fastest prediction. The trace's first stage, ``choose``, names
the choice, every candidate's predicted seconds and why.

One rule goes beyond "fastest now": a document asked about again and again should be read once.
A ledger remembers the seconds spent answering questions about each document (by its SHA-256);
once they reach what reading it whole with the strong model costs, ``auto`` reads it (LC) —
renting until the rent paid equals the price of buying, which never costs more than twice the
best choice made knowing how many questions will come — and every later question then costs LC
only the question.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, replace

from ragfunnel.errors import ConfigError
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.llm.speed import SpeedProfile, speed_of
from ragfunnel.methods.base import check_budget, join_chunks, prepare, total_tokens
from ragfunnel.methods.fbrag import FBRAG
from ragfunnel.methods.long_context import LongContext
from ragfunnel.methods.order_preserving import OrderPreservingRAG
from ragfunnel.prompts import answer_tokens, build_prompt, check_task, prompt_prefix
from ragfunnel.types import Prediction, StageTrace, Trace

log = logging.getLogger(__name__)

# LC must be predicted at least this much faster than FB-RAG to be chosen: on this project's runs
# FB-RAG answered better than LC with the bundled models (distractor setting, 50 questions: F1 0.580
# vs 0.529; 6,000 words, 10 questions: 0.300-0.333 vs 0.267), and LC answers the README's example
# question wrongly where FB-RAG and OP-RAG answer it right. A warm document still goes to LC
# (0.5-5 s against 20-45 s).
LC_MARGIN = 0.5
# Tokens a short answer or a draft usually runs to, for the prediction (the limits are upper bounds;
# measured drafts of the bundled 0.5B end after 20-55 tokens, answers after a few).
EXPECTED_ANSWER_TOKENS = 12
EXPECTED_DRAFT_TOKENS = 48


class DocumentLedger:
    """Seconds spent answering questions per document, in memory and (with the disk caches on) in
    ``documents.json`` in the user cache dir, so separate ``ask`` processes add up."""

    def __init__(self) -> None:
        self._spent: dict[str, float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _path(self):
        from ragfunnel.llm.bundled import cache_dir
        from ragfunnel.llm.registry import disk_caches_enabled

        return cache_dir() / "documents.json" if disk_caches_enabled() else None

    def _load(self) -> dict[str, float]:
        path = self._path()
        if path is None:
            return {}
        try:
            saved = json.loads(path.read_text())
            return {k: float(v) for k, v in saved.items()} if isinstance(saved, dict) else {}
        except (OSError, ValueError, TypeError):
            return {}

    def spent(self, text: str) -> float:
        key = self.key(text)
        with self._lock:
            return max(self._spent.get(key, 0.0), self._load().get(key, 0.0))

    def add(self, text: str, seconds: float) -> None:
        key = self.key(text)
        with self._lock:
            merged = self._load()
            total = max(self._spent.get(key, 0.0), merged.get(key, 0.0)) + seconds
            self._spent[key] = merged[key] = total
            path = self._path()
            if path is None:
                return
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
                partial.write_text(json.dumps(dict(list(merged.items())[-10_000:])))
                os.replace(partial, path)
            except OSError as e:
                log.warning("cannot record document use under %s (%s); auto counts this process only", path, e)


LEDGER = DocumentLedger()


@dataclass(frozen=True)
class Plan:
    """What ``auto`` chose for one input, before running it."""

    method: str
    predicted_seconds: dict[str, float]
    why: str


class Auto:
    """Chooses LC or FB-RAG per input by predicted latency; OP-RAG when ``max_seconds`` rules both out."""

    name = "auto"

    def __init__(
        self,
        *,
        light: str | LLM = DEFAULT_LIGHT,
        strong: str | LLM = DEFAULT_STRONG,
        task: str = "qa",
        budget: int = 1500,
        stage1_budget: int | None = None,
        chunk_words: int = 300,
        samples: int = 5,
        seed: int = 0,
        max_tokens: int | None = None,
        draft_from: str = "warm",
        fusion: str = "normalized",
        max_seconds: float | None = None,
    ):
        if max_seconds is not None and max_seconds <= 0:
            raise ConfigError(f"max_seconds must be positive, got {max_seconds}")
        self.task = check_task(task)
        self.light, self.strong = light, strong
        self.max_seconds = max_seconds
        self.max_tokens = max_tokens or answer_tokens(task)
        self.lc = LongContext(strong=strong, task=task, max_tokens=max_tokens)
        self.op = OrderPreservingRAG(strong=strong, task=task, budget=budget, chunk_words=chunk_words,
                                     max_tokens=max_tokens)
        self.fb = FBRAG(light=light, strong=strong, task=task, budget=budget, stage1_budget=stage1_budget,
                        chunk_words=chunk_words, samples=samples, seed=seed, max_tokens=max_tokens,
                        draft_from=draft_from, fusion=fusion)
        self.candidates = {"lc": self.lc, "fb": self.fb, "op": self.op}

    def plan(self, question: str, context: str, *, choices: list[str] | None = None,
             speeds: dict[str, SpeedProfile] | None = None) -> Plan:
        """Predict every candidate's seconds for this input and choose (``speeds``: model name -> profile)."""
        question, chunks = prepare(question, context, words=self.fb.chunk_words)
        light, strong = resolve(self.light), resolve(self.strong)
        check_budget(chunks, budget=self.fb.budget, llm=strong)

        def speed(llm: LLM) -> SpeedProfile:
            return (speeds or {}).get(llm.name) or speed_of(llm)

        def kept(llm: LLM, text: str) -> int:
            """Prompt tokens ``llm`` already holds for a document prefix (0 when it must read them)."""
            held = getattr(llm, "prefix_state", None)
            return llm.count_tokens(text) if held is not None and held(text) != "none" else 0

        def overhead(llm: LLM, variant: str) -> int:
            return llm.count_tokens(build_prompt(self.task, variant, question=question, context="", choices=choices))

        s_strong = speed(strong)
        answer = s_strong.write_seconds(min(self.max_tokens, EXPECTED_ANSWER_TOKENS))
        whole = total_tokens(chunks, strong)
        plain = overhead(strong, "plain")

        lc_prompt = strong.count_tokens(context) + plain
        lc_kept = kept(strong, prompt_prefix(self.task, context))
        predicted = {"lc": s_strong.read_seconds(lc_prompt - lc_kept, already=lc_kept) + answer}
        final = min(whole, self.fb.budget) + plain
        predicted["op"] = s_strong.read_seconds(final) + answer
        if whole <= self.fb.budget:
            predicted["fb"] = predicted["op"]  # FB-RAG answers a context within its budget directly
        else:
            s_light = speed(light)
            source = self.fb.draft_source(light, chunks, question=question, choices=choices)
            drafted = whole if source == "document" else min(whole, self.fb.stage1_budget)
            draft_prompt = drafted + overhead(light, self.fb.draft_variant)
            draft_kept = kept(light, prompt_prefix(self.task, join_chunks(chunks))) if source == "document" else 0
            draft_tokens = min(self.fb.sample_max_tokens, EXPECTED_DRAFT_TOKENS)
            predicted["fb"] = (s_light.read_seconds(draft_prompt - draft_kept, already=draft_kept)
                               + s_light.write_seconds(draft_tokens, sequences=self.fb.samples)
                               + predicted["op"])
        predicted = {k: round(v, 2) for k, v in predicted.items()}
        return self._choose(predicted, spent=LEDGER.spent(context), lc_warm=lc_kept > 0)

    def _choose(self, predicted: dict[str, float], *, spent: float = 0.0, lc_warm: bool = False) -> Plan:
        best = "lc" if predicted["lc"] <= LC_MARGIN * predicted["fb"] else "fb"
        if best == "lc":
            why = f"lc is predicted at least twice as fast as fb ({predicted['lc']:.1f}s vs {predicted['fb']:.1f}s)"
        else:
            why = (f"fb answers better where lc is not predicted at least twice as fast "
                   f"({predicted['fb']:.1f}s vs lc {predicted['lc']:.1f}s)")
        if best == "fb" and not lc_warm and spent >= predicted["lc"]:
            best, why = "lc", (f"questions about this document have cost {spent:.0f}s so far, more than reading it "
                               f"whole once ({predicted['lc']:.1f}s): reading it now makes later questions cheap")
        if self.max_seconds is None or predicted[best] <= self.max_seconds:
            return Plan(best, predicted, why)
        other = "fb" if best == "lc" else "lc"
        if predicted[other] <= self.max_seconds:
            return Plan(other, predicted, f"{best} is predicted over the {self.max_seconds:g}s limit "
                                          f"({predicted[best]:.1f}s); {other} fits ({predicted[other]:.1f}s)")
        if predicted["op"] <= self.max_seconds:
            return Plan("op", predicted, f"lc and fb are predicted over the {self.max_seconds:g}s limit "
                                         f"(fastest {min(predicted['lc'], predicted['fb']):.1f}s); "
                                         f"op fits ({predicted['op']:.1f}s)")
        fastest = min(predicted, key=lambda m: predicted[m])
        raise ConfigError(f"no method is predicted to answer within --max-seconds {self.max_seconds:g}; the "
                          f"fastest, {fastest}, is predicted at {predicted[fastest]:.1f}s: raise --max-seconds or "
                          "lower --budget")

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        started = time.perf_counter()
        plan = self.plan(question, context, choices=choices)
        choose = StageTrace(name="choose", seconds=time.perf_counter() - started,
                            detail={"chose": plan.method, "predicted_seconds": plan.predicted_seconds,
                                    "why": plan.why})
        p = self.candidates[plan.method].run(question, context, choices=choices)
        LEDGER.add(context, time.perf_counter() - started)
        return replace(p, method=f"auto:{plan.method}", trace=Trace([choose, *p.trace.stages]))
