"""Give a prediction its confidence: read the signals, ask the answering model's judgement, calibrate."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path

from ragfunnel.confidence.answer_check import check_answer
from ragfunnel.confidence.calibration import ENV_VAR, CalibrationFile, check_fingerprints, load_calibration
from ragfunnel.confidence.signals import (
    agreement,
    draft_signals,
    form_signals,
    logprob_signals,
    rank_signals,
    support_signals,
)
from ragfunnel.llm.base import LLM
from ragfunnel.prompts import TASKS, chosen_option, clean_answer, task_kind
from ragfunnel.types import Completion, Prediction, SamplingParams, Stage, Trace, stage

log = logging.getLogger(__name__)

# Answers sampled again from the answering model's prompt (temperature 1, top-p 0.9, top-k 50), decoded
# together from the prompt it already holds: their agreement with the answer is ``sample_agreement``.
CONSISTENCY_SAMPLES = 4
CONSISTENCY_TOKENS = 32  # a short answer's limit; a longer one is compared on its first words
# Asked of the answering model one turn after its answer; its P("Yes") is the ``judge_yes`` signal.
JUDGE_CHECK = ("Read the text and the question once more. Is the answer you just gave correct? "
               "Reply with one word: Yes or No.")

_calibration: ContextVar[CalibrationFile | None] = ContextVar("calibration", default=None)
_measure_every: ContextVar[bool] = ContextVar("measure_every_signal", default=False)
_loaded: dict[str, CalibrationFile] = {}
_checked: set[tuple[int, str]] = set()  # (calibration, answering model) pairs already compared


@contextmanager
def using_calibration(path: str | Path | None) -> Iterator[None]:
    """Calibrate the answers given inside the block with the file at ``path`` (None: the default, which
    is ``RAGFUNNEL_CALIBRATION`` or the file shipped in the package)."""
    token = _calibration.set(None if path is None else load_calibration(path))
    try:
        yield
    finally:
        _calibration.reset(token)


@contextmanager
def measuring_every_signal() -> Iterator[None]:
    """Read every signal inside the block, the costly ones too (eval runs, so rows can be calibrated on);
    elsewhere a costly signal is read only where the calibration in use weighs it."""
    token = _measure_every.set(True)
    try:
        yield
    finally:
        _measure_every.reset(token)


def _wanted(calibration: CalibrationFile, method: str, signal: str) -> bool:
    if _measure_every.get():
        return True
    model = calibration.model_for(method)
    return model is not None and signal in calibration.models[model].features


def current_calibration() -> CalibrationFile:
    chosen = _calibration.get()
    if chosen is not None:
        return chosen
    key = os.environ.get(ENV_VAR, "")
    if key not in _loaded:
        _loaded[key] = load_calibration()
    return _loaded[key]


def judge(llm: LLM, prompt: str, answer: str) -> float | None:
    """``llm``'s P("Yes") that ``answer`` to ``prompt`` is right, through the call cache when it has one
    (a cached answer leaves the model without the prompt's state, so the judgement is kept too); None where
    the model cannot judge."""
    if not llm.capabilities.yes_probability:
        return None
    cache = llm.call_cache
    key = json.dumps(["yes_probability", JUDGE_CHECK, prompt, answer], ensure_ascii=False)
    params = SamplingParams(max_tokens=1)
    if cache is not None:
        hit = cache.get(llm.fingerprint, key, params, 1)
        if hit is not None:
            try:
                return float(hit[0].text)
            except ValueError:
                pass
    started = time.perf_counter()
    p = llm.yes_probability(prompt, answer, JUDGE_CHECK)
    if p is not None and math.isfinite(p) and cache is not None:
        cache.put(llm.fingerprint, key, params, 1, [Completion(repr(float(p)), 0, 1, time.perf_counter() - started)],
                  name=llm.name)
    return p


def resampled(llm: LLM, prompt: str, *, task: str, choices: list[str] | None = None) -> list[str]:
    """:data:`CONSISTENCY_SAMPLES` answers sampled from ``prompt``, cleaned as answers are (a choice's
    option text where the reply names one)."""
    max_tokens = min(TASKS[task].answer_tokens, CONSISTENCY_TOKENS)
    outs = llm.generate([prompt], SamplingParams(max_tokens=max_tokens, temperature=1.0, top_p=0.9, top_k=50, seed=1),
                        n=CONSISTENCY_SAMPLES)[0]
    answers = [clean_answer(c.text) for c in outs]
    return [chosen_option(a, choices) or a for a in answers] if choices else answers


def assess(prediction: Prediction, *, llm: LLM | None, task: str, question: str,
           choices: list[str] | None = None, light_answer: str | None = None, read_costly: bool = True,
           hop_answers: Sequence[str] = ()) -> Prediction:
    """``prediction`` with its signals, its confidence (None for summaries, and where no calibration
    covers it) and a ``confidence`` stage in its trace that records what that cost.

    ``hop_answers``: the intermediate answers of the step-wise chain that wrote the answer, in order, when one
    did (the ``answer_check`` signal fails an answer that stopped at an earlier one); the stage's ``check``
    names the check the answer failed (:func:`~ragfunnel.confidence.answer_check.check_answer`), None when
    it failed none or was not checked."""
    answer = prediction.answer
    if task_kind(task) == "summary" or not answer.strip():
        return prediction
    with stage(Stage.CONFIDENCE) as trace:
        calibration = current_calibration()
        completion = prediction.completion
        signals = logprob_signals(completion.logprobs if completion is not None else ())
        if task_kind(task) != "choice":
            signals |= support_signals(answer, [sc.chunk.text for sc in prediction.chunks_used],
                                       [sc.score for sc in prediction.chunks_used])
            signals |= rank_signals(answer, [sc.chunk.text for sc in prediction.ranking])
        signals |= draft_signals(prediction.samples, answer)
        signals |= form_signals(question, answer)
        # A multiple-choice answer is one of the given options, whose form the choices set, not the question.
        check = None
        if task_kind(task) != "choice":
            check = check_answer(question, answer, hop_answers)
            signals["answer_check"] = float(check is None)
        if light_answer is not None:
            signals["light_agreement"] = agreement(answer, light_answer)
        costly = read_costly and llm is not None and bool(prediction.prompt)
        if costly and llm.capabilities.reuses_prompt and _wanted(calibration, prediction.method, "sample_agreement"):
            again = resampled(llm, prediction.prompt, task=task, choices=choices)
            signals["sample_agreement"] = sum(agreement(answer, a) for a in again) / len(again)
        if costly and completion is not None and _wanted(calibration, prediction.method, "judge_yes"):
            p = judge(llm, prediction.prompt, completion.text)
            if p is not None:
                signals["judge_yes"] = p
        if llm is not None and calibration.models and (id(calibration), llm.fingerprint) not in _checked:
            _checked.add((id(calibration), llm.fingerprint))
            check_fingerprints(calibration, {"strong": llm.fingerprint})  # one warning if fitted on other weights
        confidence = calibration.confidence(prediction.method, signals)
        trace.n_in, trace.n_out = len(signals), 1
        trace.detail.update({"confidence": None if confidence is None else round(confidence, 4),
                             "signals": {k: round(v, 4) for k, v in signals.items()},
                             "supported": calibration.supported(confidence),
                             "check": check,
                             "calibration": calibration.fitted_on or "none"})
    return replace(prediction, confidence=confidence, signals=signals, supported=calibration.supported(confidence),
                   trace=Trace([*prediction.trace.stages, trace]))
