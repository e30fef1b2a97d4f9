"""Sizing grid configurations before any of them runs: the tokens of each one's first call.

The methods' own prompt code builds the prompts and the real model's tokenizer counts them, so the
sizes hold for what the grid will send; nothing is generated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError, RagfunnelError
from ragfunnel.llm.base import LLM, BaseLLM
from ragfunnel.methods import CorpusMethod, make_method
from ragfunnel.methods.demonstrations import Demonstration, load_demonstrations
from ragfunnel.scaling.grid import Answerer, Config
from ragfunnel.types import Completion, SamplingParams

log = logging.getLogger(__name__)


def method_for(config: Config, *, index: CorpusIndex | str | Path, strong: str | LLM,
               demonstrations: Sequence[Demonstration] | str | Path, task: str = "multihop") -> CorpusMethod:
    """The method that answers under ``config``: zero-shot and RAG are DRAG with m = 0 (and k = 0)."""
    options: dict[str, Any] = {"iterations": config.iterations} if config.method == "iterdrag" else {}
    return make_method(config.method, index=index, strong=strong, documents=config.documents, shots=config.shots,
                       demonstrations=demonstrations, task=task, **options)


def open_index(path: str, remote_embedder: str | None = None) -> CorpusIndex:
    """The index at ``path``, opened once per process while it is unchanged (its checksums are verified
    on opening; a rebuild rewrites its manifest, and is opened afresh); ``remote_embedder``: see
    :class:`CorpusIndex`."""
    return _open_index(path, (Path(path) / "manifest.json").stat().st_mtime_ns, remote_embedder)


@lru_cache(maxsize=4)
def _open_index(path: str, manifest_mtime: int, remote_embedder: str | None) -> CorpusIndex:
    return CorpusIndex(path, remote_embedder=remote_embedder)


@dataclass(frozen=True)
class GridMethods:
    """``config -> method`` from names rather than loaded objects, so it pickles: each Ray worker opens
    the index and loads the model itself, once per process. The index must be at ``index_dir`` on every
    node (shared storage, or a copy at the same path)."""

    index_dir: str
    strong: str
    demonstrations: tuple[Demonstration, ...]
    task: str
    remote_embedder: str | None = None  # the embeddings server trusted with the index's queries

    @classmethod
    def open(cls, index_dir: str | Path, strong: str, demonstrations: str | Path | None, task: str, *,
             remote_embedder: str | None = None) -> GridMethods:
        """The grid's methods over the index at ``index_dir``, opened here so that a bad index stops the run
        before any configuration is built, and the ``demonstrations`` file (None: no demonstrations) read
        once here rather than by each configuration's method."""
        path = str(Path(index_dir).resolve())
        open_index(path, remote_embedder)
        demos = () if demonstrations is None else tuple(load_demonstrations(demonstrations))
        return cls(path, strong, demos, task, remote_embedder)

    def __call__(self, config: Config) -> CorpusMethod:
        return self.build(config, self.strong)

    def build(self, config: Config, answering: str | LLM) -> CorpusMethod:
        """The method of ``config`` answering with ``answering``: a model spec, or a model already loaded
        (such as the stand-in :func:`first_call_sizes` passes)."""
        return method_for(config, index=open_index(self.index_dir, self.remote_embedder), strong=answering,
                          demonstrations=list(self.demonstrations), task=self.task)


class FirstCallProbe(BaseLLM):
    """Stands in for the model while sizing configurations: counts each prompt with the real model's
    tokenizer and replies with a final answer at once, so the method's own prompt code measures its
    first (for DRAG, only) call without generating anything."""

    def __init__(self, llm: LLM):
        super().__init__()
        self.name = f"probe:{llm.name}"
        self._llm = llm
        self.prompt_tokens: list[int] = []

    @property
    def context_window(self) -> int:
        return self._llm.context_window

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        tokens = self._llm.count_tokens(prompt)
        self.prompt_tokens.append(tokens)
        # The self-ask final-answer line: IterDRAG stops there, DRAG takes any reply.
        return [Completion("So the final answer is: unknown", tokens, 1, 0.0)] * n

    def _count_tokens(self, text: str) -> int:
        return self._llm.count_tokens(text)

    @property
    def tokenizer_identity(self) -> str | None:
        """The real model's: this one counts with its tokenizer."""
        return self._llm.tokenizer_identity


def first_call_sizes(configs: Sequence[Config], questions: Sequence[str], limit: int,
                     build: Callable[[Config, LLM], Answerer], llm: LLM) -> dict[Config, int]:
    """Tokens of each configuration's first call (the largest over ``questions``). A configuration the
    method refuses is left out with a warning. Past ``limit`` tokens, configurations with at least as
    many documents and demonstrations are not built: their prompts are no shorter."""
    sizes: dict[Config, int] = {}
    over: list[Config] = []
    refused: list[str] = []
    for config in configs:
        smaller = next((o for o in over if o.method == config.method and o.documents <= config.documents
                        and o.shots <= config.shots), None)
        if smaller is not None:  # already over the limit with fewer documents and demonstrations
            sizes[config] = sizes[smaller]
            continue
        probe = FirstCallProbe(llm)
        firsts = []
        try:
            method = build(config, probe)
            for q in questions:
                calls_before = len(probe.prompt_tokens)
                method.run(q)
                firsts.extend(probe.prompt_tokens[calls_before:calls_before + 1])
        except RagfunnelError as e:
            refused.append(f"{config.label}: {e}")
            continue
        sizes[config] = max(firsts, default=0)
        if sizes[config] > limit:
            over.append(config)
    if refused:
        log.warning("%d configuration(s) cannot run and are left out; first: %s", len(refused), refused[0])
    if not sizes:
        raise ConfigError(f"no configuration can run: {refused[0]}")
    return sizes
