"""llama.cpp backend (llama-cpp-python) for local GGUF models — the offline default."""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from ragfunnel.errors import ConfigError, MissingExtra, ModelError
from ragfunnel.llm.base import BaseLLM, SamplingParams
from ragfunnel.types import Completion

log = logging.getLogger(__name__)

_TOO_LONG = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


def _trained_context(path: Path) -> int:
    """The context length a GGUF model was trained with, read from its metadata (vocab only, cheap)."""
    import llama_cpp
    from llama_cpp._utils import suppress_stdout_stderr

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with suppress_stdout_stderr(disable=False):
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ValueError("not a readable GGUF file")
    try:
        def meta(key: str) -> str:
            buf = ctypes.create_string_buffer(256)
            n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
            return buf.value.decode() if n >= 0 else ""

        return int(meta(f"{meta('general.architecture')}.context_length") or 0)
    finally:
        llama_cpp.llama_model_free(model)


class LlamaCppLLM(BaseLLM):
    """A GGUF model run in-process by llama.cpp, prompted through its own chat template.

    The model loads on first use. ``n`` samples of one prompt run one after another on
    the same ``Llama`` object: llama.cpp keeps the prompt's KV state and only the new
    tokens of each sample are decoded, so K samples cost one prefill.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        name: str | None = None,
        n_ctx: int = 32768,
        n_threads: int | None = None,
        n_batch: int = 512,
    ):
        super().__init__()
        self.model_path = Path(model_path)
        self.name = name or self.model_path.name
        self._n_ctx = n_ctx
        self._n_threads = n_threads or os.cpu_count() or 1
        self._n_batch = n_batch
        self._llama: Any = None
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}  # GBNF text -> compiled LlamaGrammar (parsing is not free)

    def warm_up(self) -> None:
        if self._llama is not None:
            return
        try:
            from llama_cpp import Llama
        except ImportError:
            raise MissingExtra("llama_cpp", "llamacpp") from None
        if not self.model_path.is_file():
            raise ModelError(f"model file {self.model_path} does not exist; check the path or run `ragfunnel models`")
        started = time.perf_counter()
        try:
            self._n_ctx = min(self._n_ctx, _trained_context(self.model_path) or self._n_ctx)
            llama = Llama(
                model_path=str(self.model_path),
                n_ctx=self._n_ctx,
                n_threads=self._n_threads,
                n_threads_batch=self._n_threads,
                n_batch=self._n_batch,
                verbose=False,
            )
        except (ValueError, RuntimeError) as e:
            raise ModelError(
                f"llama.cpp could not load {self.model_path} ({e}); the file is truncated or not GGUF — "
                "replace it (for bundled models: `ragfunnel models --prepare`)"
            ) from None
        self._llama = llama
        log.info("loaded %s in %.1fs (n_ctx=%d)", self.name, time.perf_counter() - started, self._n_ctx)

    def reset(self) -> None:
        """Forget the cached prompt (KV) state, so the next call pays its full prefill.

        Benchmarks call this between methods so that no method rides on another's cache.
        """
        if self._llama is not None:
            self._llama.reset()

    @property
    def context_window(self) -> int:
        self.warm_up()
        return self._n_ctx

    def _count_tokens(self, text: str) -> int:
        self.warm_up()
        return len(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def _grammar(self, text: str | None) -> Any:
        """The compiled form of GBNF ``text``, checked once per text.

        llama-cpp-python only parses a grammar when it builds the sampler, and there a parse
        error adds a null sampler to the chain; so parse it here first on the model's vocabulary.
        """
        if text is None:
            return None
        if text not in self._grammars:
            import llama_cpp

            sampler = llama_cpp.llama_sampler_init_grammar(self._llama._model.vocab, text.encode(), b"root")
            if not sampler:
                raise ConfigError(f"llama.cpp cannot parse the grammar {text[:80]!r}; fix the GBNF text "
                                  "(it needs a 'root' rule)")
            llama_cpp.llama_sampler_free(sampler)
            self._grammars[text] = llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[text]

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        self.warm_up()
        messages = [{"role": "user", "content": prompt}]
        grammar = self._grammar(params.grammar)
        outs = []
        with self._lock:  # one Llama object decodes one sequence at a time
            for i in range(n):
                started = time.perf_counter()
                try:
                    r = self._llama.create_chat_completion(
                        messages=messages,
                        max_tokens=params.max_tokens,
                        temperature=params.temperature,
                        top_p=params.top_p,
                        top_k=params.top_k,
                        min_p=0.0,  # llama-cpp-python defaults to 0.05; keep plain top-p/top-k sampling
                        stop=list(params.stop) or None,
                        seed=params.seed + i,  # distinct samples; same seed would repeat the draw
                        grammar=grammar,
                    )
                except ValueError as e:
                    m = _TOO_LONG.search(str(e))
                    if m:
                        raise ConfigError(
                            f"prompt of {m.group(1)} tokens does not fit {self.name}'s context window of "
                            f"{m.group(2)}; lower the context budget"
                        ) from None
                    raise
                choice, usage = r["choices"][0], r["usage"]
                outs.append(
                    Completion(
                        text=choice["message"]["content"] or "",
                        prompt_tokens=usage["prompt_tokens"],
                        completion_tokens=usage["completion_tokens"],
                        seconds=time.perf_counter() - started,
                        finish_reason=choice.get("finish_reason") or "stop",
                    )
                )
        return outs
