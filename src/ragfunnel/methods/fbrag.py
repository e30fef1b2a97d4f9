"""FB-RAG (forward-backward RAG): a light model's drafts decide which chunks the strong model reads.

Stage I   recall: the shared ranking S(c; q) (BM25 and MiniLM, :func:`~ragfunnel.retrieve.ranking.question_scores`)
          keeps a large context C^I (``stage1_budget`` tokens).
Stage II  precision: the light model reads C^I in document order and samples K
          "Rationale: ... Answer: ..." drafts (decoded together, sharing the prompt's KV state).
          ``draft_from="warm"`` (default) drafts from the whole document instead when the light
          model already holds its state, or when reading it whole costs little more than C^I — and
          keeps that state for later questions (Stage I exists only to save the light model's
          reading). Every chunk of the *full* context is scored
          S_FB(c) = η_B·S(c; q) + η_F·max_k B(c; draft_k), B = BM25, each query max-normalised.
Stage III generation: the strong model answers from the top chunks within ``budget`` tokens,
          in document order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ragfunnel.confidence.signals import draft_signals
from ragfunnel.llm import resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import (
    WINDOW_MARGIN,
    Configured,
    as_prediction,
    check_budget,
    check_fits,
    generate_answer,
    join_chunks,
    prefix_detail,
    prepare,
    ranked,
    select_within_budget,
    total_tokens,
)
from ragfunnel.methods.config import FBConfig, draft_variant
from ragfunnel.prompts import build_prompt, parse_sample, prompt_prefix
from ragfunnel.retrieve.bm25 import BM25Index
from ragfunnel.retrieve.document_cache import BOUNDARY_TOKENS, tokens_past
from ragfunnel.retrieve.fusion import forward_backward_scores
from ragfunnel.retrieve.ranking import question_scores
from ragfunnel.types import Chunk, Prediction, Sample, SamplingParams, ScoredChunk, Stage, StageTrace, stage

log = logging.getLogger(__name__)

# In "warm" mode a cold document is read whole when that costs little more than Stage I's selection:
# the light model then holds it for every later question.
WHOLE_DOCUMENT_SLACK = 1.25


@dataclass
class Lookup:
    """What FB-RAG's forward lookup found: each chunk's question score, its fused score, the drafts, and
    the two stages' traces."""

    backward: np.ndarray
    fused: np.ndarray
    samples: list[Sample]
    stages: list[StageTrace]


class FBRAG(Configured[FBConfig]):
    """FB-RAG. ``eta_forward=1, eta_backward=0`` is the paper's "F"; 0.5/0.5 is "FB"."""

    config_type = FBConfig

    @property
    def name(self) -> str:
        """fb, or fb-f where the question's scores weigh nothing (the paper's "F")."""
        return "fb-f" if self.config.eta_backward == 0 else "fb"

    @property
    def draft_variant(self) -> str:
        return draft_variant(self.config.task)

    def document_fits(self, light: LLM, chunks: list, *, question: str, choices: list[str] | None) -> bool:
        """Whether the light model's window holds a draft prompt over the whole document. The chunks' kept
        counts answer for a document far past the window (a book) without tokenising it whole again."""
        if tokens_past(chunks, light, light.context_window, slack=BOUNDARY_TOKENS):
            return False
        need = (light.count_tokens(build_prompt(self.config.task, self.draft_variant, question=question,
                                                context=join_chunks(chunks),
                                                choices=choices))
                + self.config.sample_max_tokens + WINDOW_MARGIN)
        return need <= light.context_window

    def draft_source(self, light: LLM, chunks: list, *, question: str, choices: list[str] | None) -> str:
        """``document`` or ``selection``: what Stage II reads under ``draft_from``."""
        if self.config.draft_from == "selection" or not self.document_fits(light, chunks, question=question,
                                                                    choices=choices):
            return "selection"
        if self.config.draft_from == "document":
            return "document"
        if not light.capabilities.prefix_state:
            return "selection"  # nothing to keep: the selection is the cheaper read
        if light.prefix_state(prompt_prefix(self.config.task, join_chunks(chunks))) != "none":
            return "document"
        small = total_tokens(chunks, light) <= WHOLE_DOCUMENT_SLACK * self.config.stage1_budget
        return "document" if small else "selection"

    def forward_weights(self, samples: list[Sample]) -> tuple[float, float, float | None]:
        """η_F and η_B for these drafts, and the drafts' agreement (None when not weighed by it).

        With ``agreement_weighted``, η_F is scaled by how far the drafts' answers agree (mean pairwise
        token F1) and the rest moves to η_B: drafts that contradict each other fall back toward the
        question's own scores; drafts that agree steer as the paper's do. With fewer than two answers
        there is nothing to agree on, and the drafts' text steers as in the paper.
        """
        agree = draft_signals(samples, "").get("draft_agreement")
        forward, backward = self.config.eta_forward, self.config.eta_backward
        if not self.config.agreement_weighted or self.draft_variant != "rationale" or agree is None:
            return forward, backward, None
        return forward * agree, backward + forward * (1 - agree), round(agree, 4)

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        question, chunks = prepare(question, context, words=self.config.chunk_words)
        light, strong = self.checked(question, chunks)
        whole = total_tokens(chunks, strong)
        if whole <= self.config.budget:
            note = {"skipped": f"the whole context ({whole} tokens) fits the final budget ({self.config.budget}); "
                               "no retrieval or forward lookup needed"}
            with stage(Stage.RECALL, n_in=len(chunks), detail=note) as skip:
                skip.n_out = len(chunks)
            with stage(Stage.FB_ANSWER, n_in=len(chunks)) as s:
                gen = generate_answer(s, strong, task=self.config.task, variant="plain", question=question,
                                      chunks=chunks, choices=choices, max_tokens=self.config.max_tokens)
            return as_prediction(self.name, gen, [ScoredChunk(c, 1.0) for c in chunks], [skip, gen.stage])
        final, lookup = self.select(question, chunks, light=light, strong=strong, choices=choices,
                                    context_tokens=whole)
        return self.answer_from(question, chunks, final, lookup, strong=strong, choices=choices)

    def checked(self, question: str, chunks: list[Chunk]) -> tuple[LLM, LLM]:
        """The light and strong models, once both budgets are known to fit their windows and the final
        budget to hold a chunk: before any model generates."""
        light, strong = resolve(self.light), resolve(self.strong)
        c = self.config
        check_fits(strong, budget=c.budget, task=c.task, question=question, max_tokens=c.max_tokens)
        check_fits(light, budget=c.stage1_budget, task=c.task, question=question, max_tokens=c.sample_max_tokens)
        check_budget(chunks, budget=self.config.budget, llm=strong)
        return light, strong

    def select(self, question: str, chunks: list[Chunk], *, light: LLM, strong: LLM,
               choices: list[str] | None = None, context_tokens: int | None = None) -> tuple[list[ScoredChunk], Lookup]:
        """Stages I and II, and the chunks Stage III reads: the best by the fused scores within ``budget``
        tokens of ``strong``, in document order."""
        lookup = self.forward_lookup(question, chunks, light=light, choices=choices, context_tokens=context_tokens)
        log.info("stage II done in %.1fs; %s answers", lookup.stages[-1].seconds, strong.name)
        final = select_within_budget(chunks, lookup.fused, budget=self.config.budget, llm=strong,
                                     tiebreak=lookup.backward)
        return final, lookup

    def answer_from(self, question: str, chunks: list[Chunk], final: list[ScoredChunk], lookup: Lookup, *,
                    strong: LLM, choices: list[str] | None = None) -> Prediction:
        """Stage III: the strong model answers from the precise context, in document order."""
        with stage(Stage.FB_ANSWER, n_in=len(final), detail={"budget": self.config.budget}) as s:
            gen = generate_answer(s, strong, task=self.config.task, variant="plain", question=question,
                                  chunks=[sc.chunk for sc in final], choices=choices, max_tokens=self.config.max_tokens)
        return as_prediction(self.name, gen, final, [*lookup.stages, gen.stage], samples=lookup.samples,
                             ranking=ranked(chunks, lookup.fused, tiebreak=lookup.backward))

    def forward_lookup(self, question: str, chunks: list[Chunk], *, light: LLM, choices: list[str] | None = None,
                       context_tokens: int | None = None) -> Lookup:
        """Stages I and II: the shared ranking keeps ``stage1_budget`` tokens of ``chunks`` by the question; the
        light model drafts K answers from them (or from the whole document, see ``draft_from``); every chunk is scored
        again against the drafts and fused with its question score."""
        # Stage I: recall-focused retrieval with the question alone.
        with stage(Stage.RECALL, n_in=len(chunks),
                   detail={"budget": self.config.stage1_budget, "context_tokens": context_tokens}) as stage1:
            index = BM25Index([c.text for c in chunks])
            backward = question_scores(question, chunks)
            recall = select_within_budget(chunks, backward, budget=self.config.stage1_budget, llm=light)
            stage1.n_out = len(recall)

        # Stage II: forward lookup. Drafts from the light model re-score every chunk of the full context.
        log.info("stage I kept %d of %d chunks; %s drafts %d samples", len(recall), len(chunks), light.name,
                 self.config.samples)
        with stage(Stage.FORWARD) as stage2:
            fused, samples = self._drafted(stage2, question, chunks, recall, backward, index, light=light,
                                           choices=choices)
        return Lookup(backward, fused, samples, [stage1, stage2])

    def _drafted(self, trace: StageTrace, question: str, chunks: list[Chunk], recall: list[ScoredChunk],
                 backward: np.ndarray, index: BM25Index, *, light: LLM,
                 choices: list[str] | None) -> tuple[np.ndarray, list[Sample]]:
        """Stage II, recorded on the open ``trace``: the light model's drafts, and every chunk's score fused
        from theirs and the question's."""
        source = self.draft_source(light, chunks, question=question, choices=choices)
        read = chunks if source == "document" else [sc.chunk for sc in recall]
        context = join_chunks(read)
        prompt = build_prompt(self.config.task, self.draft_variant, question=question, context=context, choices=choices)
        keep = len(prompt_prefix(self.config.task, context)) if source == "document" else 0
        drafting = SamplingParams(max_tokens=self.config.sample_max_tokens, temperature=self.config.temperature,
                                  top_p=self.config.top_p, top_k=self.config.top_k, seed=self.config.seed,
                                  keep_prefix=keep)
        drafts = light.generate([prompt], drafting, n=self.config.samples)[0]
        samples = [parse_sample(d.text) for d in drafts]
        forward = index.score([f"{s.rationale} {s.answer}" for s in samples])
        eta_forward, eta_backward, agree = self.forward_weights(samples)
        fused = forward_backward_scores(backward, forward, eta_backward=eta_backward,
                                        eta_forward=eta_forward, fusion=self.config.fusion)
        signal = "drafts"
        if not fused.any():  # drafts share no term with the context: fall back to the question
            fused, signal = backward, "question (drafts matched no chunk)"
        trace.llm_seconds = sum(d.seconds for d in drafts)
        trace.input_tokens = sum(d.prompt_tokens for d in drafts[:1])  # one prefill serves all K drafts
        trace.output_tokens = sum(d.completion_tokens for d in drafts)
        trace.n_in, trace.n_out = len(read), len(samples)
        trace.detail.update({"model": light.name, "weights": light.fingerprint, "samples": self.config.samples,
                             "eta_forward": round(eta_forward, 4), "eta_backward": round(eta_backward, 4),
                             "draft_agreement": agree, "fusion": self.config.fusion,
                             "scored_by": signal, "drafted_from": source,
                             "without_answer": sum(1 for s in samples if not s.answer),
                             "cached": all(d.cached for d in drafts),
                             **prefix_detail(light, drafts[0], keep)})
        return fused, samples
