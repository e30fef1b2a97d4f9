"""Every method's options, declared once.

A method's configuration is a frozen dataclass whose fields carry their type, bounds, unit, help, and whether a
remote client may set them (``operator_only``: a model, a file or a URL, which only whoever runs ragfunnel
chooses). Configurations compose, each adding what its methods need:

- :class:`AnswerConfig`: every method that writes an answer (``lc``);
- :class:`RetrievalConfig`: a budget of chunks ranked by the question (``op``, ``vanilla``, ``self-route``);
- :class:`DraftingConfig`: a light model's drafts (FB-RAG's forward lookup), then :class:`FBConfig` and
  :class:`AutoConfig`;
- the corpus methods' :class:`FunnelConfig`, :class:`CorpusFBConfig`, :class:`DragConfig`, :class:`IterDragConfig`.

The fields are declared with :mod:`ragfunnel.declared`: building a configuration validates it, and an error names
the field (:func:`ragfunnel.errors.option`). The front ends are generated from the fields: the command line's
options (``ragfunnel.cli.common``), the request options of ``serve``, the OpenAI endpoint and MCP
(``ragfunnel.serve.options``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ragfunnel.declared import Config, default_changed, setting
from ragfunnel.errors import ConfigError, option
from ragfunnel.llm import DEFAULT_LIGHT
from ragfunnel.prompts import answer_tokens, check_task, task_kind
from ragfunnel.retrieve.attention import PostRanker
from ragfunnel.retrieve.fusion import Fusion
from ragfunnel.retrieve.rerank import DEFAULT_PRE_RANKER, PreRanker
from ragfunnel.text.chunking import CHUNK_WORDS

# Far above any useful K (default 5); stops a typo such as 100000000 from running for ever.
MAX_SAMPLES = 64
MAX_TOKENS = 4096  # per generated answer or draft; far above any task's own answer length
STEP_TOKENS = 64  # an IterDRAG step writes one short line: a follow-up question or an intermediate answer
OPEN_TASKS = ("qa", "multihop")  # DRAG and IterDRAG answer open questions
DraftFrom = Literal["warm", "selection", "document"]
Prefer = Literal["speed", "balanced", "quality"]
# FB-RAG's Stage I keeps at least twice what Stage III reads, and never less than this many tokens.
STAGE1_FLOOR = 3000
# Extra tokens a draft gets on top of its answer, for its rationale. 64 (the paper's) cut the rationale
# of 43 of 160 drafts of the 1.5B and 34 of the 0.5B before their "Answer:" line on 33 held-out documents.
RATIONALE_TOKENS = 128
# A draft's answer only has to name what the chunks are scored by: long-answer tasks (summaries, 512
# tokens in LongBench) draft at most this many answer tokens.
DRAFT_ANSWER_TOKENS = 128


# The computed defaults (Config.resolved): each rule's docstring is how --help and the schemas say the default.
def task_answer_tokens(c: AnswerConfig) -> int:
    """the task's"""
    return answer_tokens(c.task)


def stage1_tokens(c: DraftingConfig) -> int:
    """max(3000, twice the budget)"""
    return max(STAGE1_FLOOR, 2 * c.budget)


def draft_variant(task: str) -> Literal["plain", "rationale"]:
    """How FB-RAG's drafts are written for ``task``: a summary is descriptive already, so its drafts are plain
    answers (as the paper does for QMSum), with no room kept for a rationale."""
    return "plain" if task_kind(task) == "summary" else "rationale"


def draft_tokens(c: DraftingConfig) -> int:
    """the answer's (at most 128) + 128 of rationale"""
    reasoning = RATIONALE_TOKENS if draft_variant(c.task) == "rationale" else 0
    return min(c.max_tokens, DRAFT_ANSWER_TOKENS) + reasoning  # max_tokens is resolved first


@dataclass(frozen=True)
class AnswerConfig(Config):
    """What every method that writes an answer takes."""

    task: str = setting("qa", "Prompt family and answer length (qa, multihop, summary, choice, longbench/DATASET).",
                        front_end=False)
    max_tokens: int | None = setting(None, "Tokens the answer may run to.", ge=1, le=MAX_TOKENS, unit="tokens",
                                     computed=task_answer_tokens)

    def check(self) -> None:
        check_task(self.task)


@dataclass(frozen=True)
class RetrievalConfig(AnswerConfig):
    """A method that reads the chunks the question ranks best, within a budget."""

    budget: int = setting(1500, "Tokens of context the answering model reads.", ge=1, le=1_000_000, unit="tokens")
    chunk_words: int = setting(CHUNK_WORDS, "Words per chunk.", ge=1, le=100_000, unit="words")


@dataclass(frozen=True)
class DraftingConfig(RetrievalConfig):
    """A light model drafts K answers whose words re-score the chunks (FB-RAG's forward lookup)."""

    stage1_budget: int | None = setting(None, "FB-RAG Stage I: tokens the light model reads.", ge=1, le=1_000_000,
                                        unit="tokens", computed=stage1_tokens)
    samples: int = setting(5, "FB-RAG: drafts K.", ge=1, le=MAX_SAMPLES)
    seed: int = setting(0, "FB-RAG: the drafts' sampling seed.", ge=0, le=2**31 - 1)
    draft_from: DraftFrom = setting(
        "warm", "What FB-RAG's drafts read: Stage I's selection, the whole document, or (warm) the whole document "
                "when the light model already holds it or it costs about the selection's read.")
    fusion: Fusion = setting(
        "normalized", "How FB-RAG mixes question and draft scores: normalized (each query's BM25 scores divided by "
                      "their maximum first) or raw (the paper's Eq. 5 as written).")
    temperature: float = setting(1.0, "FB-RAG: the drafts' sampling temperature.", ge=0, le=5)
    top_p: float = setting(0.9, "FB-RAG: the drafts' nucleus sampling mass.", gt=0, le=1)
    top_k: int = setting(50, "FB-RAG: the drafts sample from this many likeliest tokens (0: all).", ge=0,
                         le=100_000)
    sample_max_tokens: int | None = setting(None, "FB-RAG: tokens a draft may run to.", ge=1, le=MAX_TOKENS,
                                            unit="tokens", computed=draft_tokens)
    agreement_weighted: bool = setting(True, "FB-RAG: scale the drafts' weight by how far their answers agree.")

    def check(self) -> None:
        super().check()
        if self.stage1_budget is not None and self.stage1_budget < self.budget:
            raise ConfigError(f"{option('stage1_budget')} {self.stage1_budget} is smaller than {option('budget')} "
                              f"{self.budget}; Stage I should keep more context than Stage III reads")


@dataclass(frozen=True)
class FBConfig(DraftingConfig):
    """FB-RAG: the chunks' scores fuse the question's (η_B) and the drafts' (η_F)."""

    eta_forward: float = setting(0.5, "FB-RAG: weight of the drafts' scores.", ge=0, le=1e6,
                                 default_text="0.5 for fb, 1 for fb-f")
    eta_backward: float = setting(0.5, "FB-RAG: weight of the question's scores.", ge=0, le=1e6,
                                  default_text="0.5 for fb, 0 for fb-f")

    def check(self) -> None:
        super().check()
        if self.eta_forward + self.eta_backward == 0:
            raise ConfigError(f"{option('eta_forward')} and {option('eta_backward')} cannot both be 0")


@dataclass(frozen=True)
class ForwardOnlyConfig(FBConfig):
    """FB-RAG's "F": the drafts' scores alone."""

    eta_forward: float = default_changed(FBConfig, "eta_forward", 1.0)
    eta_backward: float = default_changed(FBConfig, "eta_backward", 0.0)


@dataclass(frozen=True)
class AutoConfig(DraftingConfig):
    """``auto``: OP-RAG first, and FB-RAG's and LC's options for the rungs it may climb to."""

    max_seconds: float | None = setting(None, "auto: run no method predicted to take longer (falls back to op; an "
                                              "error if nothing fits).", gt=0, le=1e6, unit="seconds",
                                        metavar="SECONDS", default_text="no limit")
    prefer: Prefer = setting(
        "balanced", "auto: how far to climb past op while the answer is unsupported: speed and balanced (never), "
                    "quality (to fb, then lc).")
    reask: bool = setting(True, "auto: when the answer cannot fit its question (no date for 'when', only the "
                                "question's own words, neither option of 'A or B?'), ask once more over the same "
                                "passages, saying what is wanted.")


@dataclass(frozen=True)
class FunnelRetrievalConfig(AnswerConfig):
    """The first stages of FunnelRAG's funnel over a corpus index: clusters, then documents."""

    top_clusters: int | None = setting(None, "funnel: clusters BM25 keeps (stage 1).", ge=1, le=10_000,
                                       default_text="5% of them, 4..80")
    top_documents: int = setting(8, "funnel: documents the pre-ranker keeps (stage 2).", ge=1, le=1_000,
                                 default_text="8 for funnel, 20 for fb over an index")
    pre_ranker: str | PreRanker = setting(
        DEFAULT_PRE_RANKER, "funnel: the documents' scorer (stage 2): minilm (the bundled bi-encoder), "
                            "llm:MODEL-SPEC (yes/no), or a cross-encoder directory (`ragfunnel funnel distill`) or "
                            "Hugging Face name.", operator_only=True, metavar="SPEC")


@dataclass(frozen=True)
class FunnelConfig(FunnelRetrievalConfig):
    """FunnelRAG: clusters, documents, then the post-ranker's attention over passages."""

    top_passages: int = setting(4, "funnel: passages the post-ranker keeps.", ge=1, le=1_000)
    post_ranker: str | PostRanker = setting(
        DEFAULT_LIGHT, "funnel: the model whose attention ranks passages (stage 3): bundled:NAME, gguf:PATH, or a "
                       "Hugging Face name or directory.", operator_only=True, metavar="SPEC")


@dataclass(frozen=True)
class CorpusFBConfig(DraftingConfig, FunnelRetrievalConfig):
    """FB-RAG over a corpus index: the funnel's top documents are its context, and its citations."""

    top_documents: int = default_changed(FunnelRetrievalConfig, "top_documents", 20)


@dataclass(frozen=True)
class DragConfig(AnswerConfig):
    """DRAG: demonstrations and retrieved documents in one long prompt."""

    task: str = default_changed(AnswerConfig, "task", "multihop")
    documents: int = setting(5, "drag/iterdrag: documents k per retrieval.", ge=0, le=1_000)
    shots: int = setting(0, "drag/iterdrag: demonstrations m, from the demonstrations file.", ge=0, le=1_000)
    demonstrations: str | Path | tuple = setting((), "drag/iterdrag: demonstrations file (`ragfunnel scale demos`).",
                                                 operator_only=True, metavar="FILE")

    def check(self) -> None:
        super().check()
        if self.task not in OPEN_TASKS:
            raise ConfigError(f"DRAG and IterDRAG answer open questions; {option('task')} {self.task!r} is not one "
                              f"of {', '.join(OPEN_TASKS)}")


@dataclass(frozen=True)
class IterDragConfig(DragConfig):
    """IterDRAG: self-ask steps, each retrieving for its sub-question."""

    max_tokens: int | None = default_changed(AnswerConfig, "max_tokens", STEP_TOKENS)
    iterations: int = setting(5, "iterdrag, stepwise: most follow-up steps n.", ge=1, le=20,
                              default_text="5 for iterdrag, 3 for stepwise")


@dataclass(frozen=True)
class StepwiseConfig(RetrievalConfig):
    """Stepwise reading of one long context: self-ask, the question and each follow-up reading the chunks it
    ranks best (``budget`` tokens for the question, ``step_budget`` more for each follow-up)."""

    budget: int = default_changed(RetrievalConfig, "budget", 1000)
    max_tokens: int | None = default_changed(AnswerConfig, "max_tokens", STEP_TOKENS)
    step_budget: int = setting(500, "stepwise: tokens of context each follow-up adds.", ge=1, le=1_000_000,
                               unit="tokens")
    iterations: int = default_changed(IterDragConfig, "iterations", 3)
    worked_examples: bool = setting(True, "stepwise: show three short worked examples (a bridge question, a "
                                          "comparison, a one-step question) before the question.")
