"""auto: answer with the cheapest promising method, and spend more only where the answer looks unsure.

Before anything is generated, every candidate's latency is predicted from the tokens it would
feed each model — counted with the models' own tokenizers — and each model's measured speed
(:mod:`ragfunnel.llm.speed`): seconds to read the prompt (less whatever part of it the model
already holds from an earlier question about the same document) plus seconds to write the answer
(for FB-RAG's K drafts, decoded together).

``auto`` then climbs a ladder of *rungs*. The first is OP-RAG, the cheapest method that was not
worse than FB-RAG or LC on this project's measurements with the bundled models (33 held-out
multi-hop documents: OP 34.8, FB-RAG 28.3 with the 0.5B drafting, LC 24.5 on 13 of them; see
``benchmarks/RESULTS.md``, "Confidence and auto's ladder"), or LC where the strong
model already holds the document and reading the question alone is faster. Every answer carries a
calibrated confidence (:mod:`ragfunnel.confidence`); while it is below the calibration's
``supported_at`` (where ``CLIMBS[prefer]``) the next rung runs (FB-RAG, then LC), provided it reads
chunks no earlier rung read and its predicted seconds still fit ``max_seconds``, and the most confident
answer is kept. A calibration whose confidence has not
earned it (:meth:`~ragfunnel.confidence.calibration.CalibrationFile.earned`) never escalates. The
trace's first stage, ``choose``, records the plan; ``escalate`` records every rung with its
confidence and seconds, and why the climb stopped.

The answer kept is then checked against its question (:mod:`ragfunnel.methods.reask`): one that cannot
fit it (a country for *when*, the question's own words) is asked for once more over the same passages,
with what is wanted said; ``escalate``'s ``reask`` records the failed check, the new answer and whether it
was kept. ``reask=False`` turns that off.

One rule goes beyond "cheapest now": a document asked about again and again should be read once.
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
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import UnreadableFile, read_json_file
from ragfunnel.confidence import current_calibration
from ragfunnel.errors import ConfigError, RagfunnelError, option
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.llm.speed import SpeedProfile, speed_of
from ragfunnel.methods.base import (
    WINDOW_MARGIN,
    Configured,
    check_budget,
    check_question,
    join_chunks,
    prepare,
    total_tokens,
)
from ragfunnel.methods.config import AnswerConfig, AutoConfig, FBConfig, RetrievalConfig
from ragfunnel.methods.fbrag import FBRAG
from ragfunnel.methods.long_context import LongContext
from ragfunnel.methods.order_preserving import OrderPreservingRAG
from ragfunnel.methods.reask import reask
from ragfunnel.prompts import build_prompt, prompt_prefix
from ragfunnel.retrieve.document_cache import document_chunks, text_tokens
from ragfunnel.text import check_context
from ragfunnel.types import Prediction, Stage, StageTrace, Trace, stage, stage_detail

log = logging.getLogger(__name__)

# Whether ``auto`` climbs at each ``prefer``: past its first rung, while the answer is unsupported (its
# confidence under the calibration's ``supported_at``), to rungs that read chunks no earlier rung read. Set by
# measurement (benchmarks/escalation.py, RESULTS.md): with the bundled models FB-RAG, climbed to from an
# unsupported OP-RAG answer, did not raise quality on the held-out questions within 1.5x OP-RAG's seconds,
# so balanced does not climb; quality does.
CLIMBS: dict[str, bool] = {"speed": False, "balanced": False, "quality": True}
# Tokens a short answer or a draft usually runs to, for the prediction (the limits are upper bounds;
# measured drafts of the bundled 0.5B end after 20-55 tokens, answers after a few).
EXPECTED_ANSWER_TOKENS = 12
EXPECTED_DRAFT_TOKENS = 48
LEDGER_MAX_BYTES = 4 << 20  # 10,000 documents of ~90 bytes each, the most it keeps


class DocumentLedger:
    """Seconds spent answering questions per document, in memory and (with the disk caches on) in
    ``documents.json`` in the user cache dir, so separate ``ask`` processes add up."""

    def __init__(self) -> None:
        self._spent: dict[str, float] = {}
        self._lock = threading.Lock()
        self._damage_reported = False

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _path(self):
        from ragfunnel.llm.cache_paths import cache_dir
        from ragfunnel.llm.registry import disk_caches_enabled

        return cache_dir() / "documents.json" if disk_caches_enabled() else None

    def _load(self) -> dict[str, float]:
        path = self._path()
        if path is None:
            return {}
        try:
            saved = read_json_file(path, max_bytes=LEDGER_MAX_BYTES, what="document ledger")
            return {str(k): float(v) for k, v in saved.items()}
        except FileNotFoundError:
            return {}
        except UnreadableFile as e:  # not a regular file, too big, not JSON, nested past reason
            return self._dropped(path, e.problem)
        except (ValueError, TypeError, AttributeError) as e:  # JSON, but not an object of seconds
            return self._dropped(path, f"not an object of seconds: {e}")

    def _dropped(self, path: Path, problem: str) -> dict[str, float]:
        """Nothing from a damaged ledger, with one warning per process however often it is read before the
        next :meth:`add` writes a fresh one over it."""
        if not self._damage_reported:
            self._damage_reported = True
            log.warning("the document ledger %s is unusable (%s); auto starts it afresh", path, problem)
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
                write_atomic(path, json.dumps(dict(list(merged.items())[-10_000:])))
            except OSError as e:
                log.warning("cannot record document use under %s (%s); auto counts this process only", path, e)


LEDGER = DocumentLedger()


@dataclass(frozen=True)
class Plan:
    """What ``auto`` chose for one input, before running it: the first rung and the ones it may climb to."""

    method: str
    predicted_seconds: dict[str, float]
    why: str
    ladder: tuple[str, ...] = ()  # rungs after ``method``, climbed while the answer is unsure


class Auto(Configured[AutoConfig]):
    """OP-RAG (or a warm document's LC) first; FB-RAG, then LC, only while the answer's confidence is low."""

    name = "auto"
    config_type = AutoConfig

    def __init__(self, config: AutoConfig | None = None, light: str | LLM = DEFAULT_LIGHT,
                 strong: str | LLM = DEFAULT_STRONG):
        super().__init__(config, light, strong)
        c = self.config
        self.lc = LongContext(c.narrowed(AnswerConfig), strong=strong)
        self.op = OrderPreservingRAG(c.narrowed(RetrievalConfig), strong=strong)
        self.fb = FBRAG(c.narrowed(FBConfig), light=light, strong=strong)
        self.candidates = {"lc": self.lc, "fb": self.fb, "op": self.op}

    def plan(self, question: str, context: str, *, choices: list[str] | None = None,
             speeds: dict[str, SpeedProfile] | None = None) -> Plan:
        """Predict every candidate's seconds for this input and choose (``speeds``: model name -> profile)."""
        # prepare()'s steps, keeping the checked text: the whole-text count must find the chunks' entry.
        question, checked = check_question(question), check_context(context)
        chunks = document_chunks(checked, words=self.config.chunk_words)
        light, strong = resolve(self.light), resolve(self.strong)
        check_budget(chunks, budget=self.fb.config.budget, llm=strong)

        def speed(llm: LLM) -> SpeedProfile:
            return (speeds or {}).get(llm.name) or speed_of(llm)

        def kept(llm: LLM, text: str) -> int:
            """Prompt tokens ``llm`` already holds for a document prefix (0 when it must read them)."""
            return llm.count_tokens(text) if llm.prefix_state(text) != "none" else 0

        def overhead(llm: LLM, variant: str) -> int:
            return llm.count_tokens(build_prompt(self.config.task, variant, question=question, context="",
                                                 choices=choices))

        s_strong = speed(strong)
        answer = s_strong.write_seconds(min(self.config.max_tokens, EXPECTED_ANSWER_TOKENS))
        whole = total_tokens(chunks, strong)
        plain = overhead(strong, "plain")

        lc_tokens = text_tokens(checked, strong, words=self.config.chunk_words, exact_up_to=strong.context_window)
        lc_prompt = lc_tokens + plain
        # A text longer than the window was never kept whole: asking would tokenise all of it again.
        lc_kept = kept(strong, prompt_prefix(self.config.task, context)) if lc_tokens <= strong.context_window else 0
        predicted = {"lc": s_strong.read_seconds(lc_prompt - lc_kept, already=lc_kept) + answer}
        final = min(whole, self.fb.config.budget) + plain
        predicted["op"] = s_strong.read_seconds(final) + answer
        if whole <= self.fb.config.budget:
            predicted["fb"] = predicted["op"]  # FB-RAG answers a context within its budget directly
        else:
            s_light = speed(light)
            source = self.fb.draft_source(light, chunks, question=question, choices=choices)
            drafted = whole if source == "document" else min(whole, self.fb.config.stage1_budget)
            draft_prompt = drafted + overhead(light, self.fb.draft_variant)
            document = prompt_prefix(self.config.task, join_chunks(chunks))
            draft_kept = kept(light, document) if source == "document" else 0
            draft_tokens = min(self.fb.config.sample_max_tokens, EXPECTED_DRAFT_TOKENS)
            predicted["fb"] = (s_light.read_seconds(draft_prompt - draft_kept, already=draft_kept)
                               + s_light.write_seconds(draft_tokens, sequences=self.config.samples)
                               + predicted["op"])
        predicted = {k: round(v, 2) for k, v in predicted.items()}
        plan = self._choose(predicted, spent=LEDGER.spent(checked), lc_warm=lc_kept > 0)
        # Rungs that cannot add anything: FB-RAG over a context within its budget answers as OP-RAG
        # does, and LC over a text beyond the window would read it cut.
        useless = {"fb"} if whole <= self.fb.config.budget else set()
        if lc_prompt + self.config.max_tokens + WINDOW_MARGIN > strong.context_window:
            useless.add("lc")
        return replace(plan, ladder=tuple(r for r in plan.ladder if r not in useless))

    def _choose(self, predicted: dict[str, float], *, spent: float = 0.0, lc_warm: bool = False) -> Plan:
        """The first rung and the ladder above it, from the predicted seconds (and the document's ledger)."""
        if lc_warm and predicted["lc"] <= predicted["op"]:
            first, why = "lc", (f"the strong model holds this document: lc answers the question alone "
                                f"({predicted['lc']:.1f}s, op {predicted['op']:.1f}s)")
        elif spent >= predicted["lc"]:
            first, why = "lc", (f"questions about this document have cost {spent:.0f}s so far, more than reading it "
                                f"whole once ({predicted['lc']:.1f}s): reading it now makes later questions cheap")
        else:
            first, why = "op", (f"op is the cheapest method not worse on the measured documents "
                                f"({predicted['op']:.1f}s; fb {predicted['fb']:.1f}s, lc {predicted['lc']:.1f}s)")
        if self.config.max_seconds is not None and predicted[first] > self.config.max_seconds:
            if predicted["op"] <= self.config.max_seconds:
                first, why = "op", (f"{first} is predicted over the {self.config.max_seconds:g}s limit "
                                    f"({predicted[first]:.1f}s); op fits ({predicted['op']:.1f}s)")
            else:
                fastest = min(predicted, key=lambda m: predicted[m])
                raise ConfigError(f"no method is predicted to answer within {option('max_seconds')} "
                                  f"{self.config.max_seconds:g}; the fastest, {fastest}, is predicted at "
                                  f"{predicted[fastest]:.1f}s: raise {option('max_seconds')} or lower "
                                  f"{option('budget')}")
        rungs = {"speed": (), "balanced": ("op", "fb"), "quality": ("op", "fb", "lc")}[self.config.prefer]
        rungs = rungs if CLIMBS[self.config.prefer] else ()
        ladder = tuple(r for r in rungs if r != first)
        return Plan(first, predicted, why, ladder)

    def _climb(self, plan: Plan, confidence: float | None, method: str, elapsed: float) -> str | None:
        """Why the climb stops before the next rung (None: climb)."""
        if not CLIMBS[self.config.prefer]:
            return f"prefer={self.config.prefer} never climbs"
        threshold = current_calibration().supported_at
        if confidence is None:
            return "the answer has no confidence to judge it by"
        if confidence >= threshold:
            return f"confidence {confidence:.2f} reaches {threshold:.2f}: the answer is supported"
        if not current_calibration().earned(method):
            return f"the calibration has not shown {method}'s confidence to tell right from wrong"
        nxt = plan.ladder[0]
        if self.config.max_seconds is not None and elapsed + plan.predicted_seconds[nxt] > self.config.max_seconds:
            return (f"{nxt} is predicted at {plan.predicted_seconds[nxt]:.1f}s, past the "
                    f"{self.config.max_seconds:g}s limit after {elapsed:.1f}s")
        return None

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        started = time.perf_counter()
        with stage(Stage.CHOOSE) as choose:
            plan = self.plan(question, context, choices=choices)
            choose.detail.update({"chose": plan.method, "predicted_seconds": plan.predicted_seconds, "why": plan.why,
                                  "prefer": self.config.prefer, "ladder": list(plan.ladder)})
        stages, rungs, best, chosen = [choose], [], None, plan.method
        read: set[int] = set()  # chunk positions some rung has read
        everything = set(range(len(prepare(question, context, words=self.config.chunk_words)[1])))  # what LC reads
        todo, stopped = [plan.method, *plan.ladder], "no rung left"
        while todo:
            name = todo.pop(0)
            began = time.perf_counter()
            try:
                with stage_detail(rung=name):
                    p, ran = self._rung(name, question, context, choices=choices, read=read, everything=everything)
            except RagfunnelError as e:
                if best is None:
                    raise
                rungs.append({"method": name, "failed": str(e), "seconds": round(time.perf_counter() - began, 3)})
                stopped = f"{name} failed ({e}); the answer already made is kept"
                break
            stages += ran
            record = {"method": name, "seconds": round(time.perf_counter() - began, 3)}
            if p is None:
                rungs.append({**record, "skipped": "it would read no chunk the rungs before it did not"})
            else:
                positions = everything if name == "lc" else {sc.chunk.position for sc in p.chunks_used}
                added = sorted(positions - read)
                read |= positions
                rungs.append({**record, "answer": p.answer, "confidence": p.confidence, "added_chunks": added})
                if best is None or (p.confidence or 0.0) > (best.confidence or 0.0):
                    best, chosen = p, name
            if todo:
                why = self._climb(replace(plan, ladder=tuple(todo)), best.confidence, chosen,
                                  time.perf_counter() - started)
                if why is not None:
                    stopped = why
                    break
        escalated = {"rungs": rungs, "answered_by": chosen, "stopped": stopped}
        if self.config.reask:
            reread = reask(best, question=check_question(question), task=self.config.task, llm=resolve(self.strong),
                           max_tokens=self.config.max_tokens, choices=choices)
            best, stages = reread.prediction, stages + reread.stages
            escalated |= {"reask": reread.record} if reread.record else {}
        LEDGER.add(check_context(context), time.perf_counter() - started)
        with stage(Stage.ESCALATE, n_in=len(rungs), detail=escalated) as escalate:
            escalate.n_out = 1
        stages.append(escalate)
        return replace(best, method=f"auto:{chosen}", trace=Trace(stages))

    def _rung(self, name: str, question: str, context: str, *, choices: list[str] | None,
              read: set[int], everything: set[int]) -> tuple[Prediction | None, list[StageTrace]]:
        """One rung's prediction and stages, or None (with the stages it ran) when it would read no chunk that
        an earlier rung did not: any rung once every chunk was read (LC went first), FB-RAG when its drafts
        chose none new (its strong model then never answers)."""
        if read and read >= everything:  # every chunk was read already
            return None, []
        if name != "fb" or not read:
            p = self.candidates[name].run(question, context, choices=choices)
            return p, p.trace.stages
        question, chunks = prepare(question, context, words=self.config.chunk_words)
        light, strong = self.fb.checked(question, chunks)
        final, lookup = self.fb.select(question, chunks, light=light, strong=strong, choices=choices,
                                       context_tokens=total_tokens(chunks, strong))
        if {sc.chunk.position for sc in final} <= read:
            return None, lookup.stages
        p = self.fb.answer_from(question, chunks, final, lookup, strong=strong, choices=choices)
        return p, p.trace.stages
