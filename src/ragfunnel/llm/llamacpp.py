"""llama.cpp backend (llama-cpp-python) for local GGUF models — the offline default.

The backend is one ``generate`` over llama.cpp; what makes repeated questions cheap lives beside it:

- K samples of one prompt decode together, sharing the prompt's KV cells
  (:mod:`ragfunnel.llm.llamacpp_batch`).
- Document prefixes are read once and their KV state kept in memory and on disk
  (:mod:`ragfunnel.llm.llamacpp_state`).
- A prompt that starts where the last one did reuses the common prefix.
- Prompts are counted from the vocabulary alone until a call needs the weights (:mod:`ragfunnel.llm.gguf`).

A call looks at its cancellation (:class:`~ragfunnel.llm.base.Cancellation`) between slices of the
prompt it reads and between the tokens it writes, so a cancelled call ends within a second or so and
leaves the context holding what it read. llama-cpp-python's public API is used throughout, but for two
things it has no call for, each kept in one function: :func:`_context_params` and
:func:`ragfunnel.llm.llamacpp_state.mark_held`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragfunnel.errors import ConfigError, MissingExtra, ModelError
from ragfunnel.llm.base import BaseLLM, Capabilities, cpu_threads, text_sink
from ragfunnel.llm.gguf import GGUFVocab, token_count
from ragfunnel.llm.llamacpp_batch import MAX_PARALLEL, answer_logprobs, sample_together
from ragfunnel.llm.llamacpp_state import KeptPrefixes, mark_held, read_tokens
from ragfunnel.llm.prefix_store import DiskPrefixStore, MemoryPrefixStore
from ragfunnel.types import Completion, SamplingParams

log = logging.getLogger(__name__)

_YES, _NO = ("Yes", "yes", "YES", " Yes"), ("No", "no", "NO", " No")
_SPLIT = "\ue000"  # a private-use character marking where a prompt prefix ends inside the chat template
_construct_lock = threading.Lock()


@contextmanager
def _context_params(**fields: Any) -> Iterator[None]:
    """Build ``Llama`` objects with these llama.cpp context parameters.

    llama-cpp-python's ``Llama`` takes no ``n_seq_max`` or ``kv_unified`` (it sets them only for
    embedding models), and K drafts decoded together need several sequences sharing one prompt's KV
    cells; nor can a context be made for a loaded ``Llama`` through its public API. So the
    default-parameter factory it builds its context from is wrapped while one is built, under a lock
    (the factory is module state).
    """
    import llama_cpp.llama_cpp as low

    original = low.llama_context_default_params

    def params() -> Any:
        p = original()
        for name, value in fields.items():
            setattr(p, name, value)
        return p

    with _construct_lock:
        low.llama_context_default_params = params
        try:
            yield
        finally:
            low.llama_context_default_params = original


class LlamaCppLLM(BaseLLM):
    """A GGUF model run in-process by llama.cpp, prompted through its own chat template.

    The model loads on first use. ``n`` samples of one prompt decode together as one batch of
    sequences sharing the prompt's KV cells (greedy or grammar-constrained calls decode one after
    another, reusing the prompt). ``disk_prefixes`` is where :meth:`keep_prefix` keeps document
    states between processes (None: memory only). One-sample calls stream their text to the call's sink.
    """

    capabilities = Capabilities(prefix_state=True, reuses_prompt=True, yes_probability=True, streams_text=True,
                                warm_up=True, reset=True)

    def __init__(
        self,
        model_path: str | Path,
        *,
        name: str | None = None,
        sha256: str | None = None,
        n_ctx: int = 32768,
        n_threads: int | None = None,
        n_batch: int = 512,
        disk_prefixes: DiskPrefixStore | None = None,
        memory_prefix_bytes: int | None = None,
    ):
        super().__init__()
        self.model_path = Path(model_path)
        self.name = name or self.model_path.name
        self._sha256 = sha256  # known for bundled models (verified on assembly); hashed on demand otherwise
        self._n_ctx = n_ctx
        self._n_threads = n_threads or cpu_threads()
        self._n_batch = n_batch
        self._llama: Any = None
        self._vocab: GGUFVocab | None = None  # the vocabulary alone, until the weights load
        self._template: Any = None  # the model's chat template (None: prompts go in as plain text)
        self._lock = threading.RLock()
        self._grammars: dict[str, Any] = {}  # GBNF text -> compiled LlamaGrammar (parsing is not free)
        self.disk_prefixes = disk_prefixes
        self.memory_prefixes = MemoryPrefixStore(**({"max_bytes": memory_prefix_bytes}
                                                    if memory_prefix_bytes is not None else {}))

    def warm_up(self) -> None:
        """Load the weights and make the context now (the first call that needs them would)."""
        if self._llama is not None:
            return
        vocab = self._tokenizer()  # names a wrong path or a missing llama.cpp; gives the trained context
        from llama_cpp import Llama

        started = time.perf_counter()
        try:
            with _context_params(n_seq_max=MAX_PARALLEL, kv_unified=True):
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
        with self._lock:  # the chat template stays the vocabulary's: the same metadata as the loaded model's
            self._llama, self._vocab = llama, None
        vocab.close()
        log.info("loaded %s in %.1fs (n_ctx=%d)", self.name, time.perf_counter() - started, self._n_ctx)

    def _tokenizer(self) -> Any:
        """What tokenizes prompts: the loaded model, or its vocabulary alone until a call needs the weights."""
        with self._lock:
            if self._llama is not None:
                return self._llama
            if self._vocab is None:
                self._vocab = GGUFVocab(self.model_path)
                self._template = self._vocab.template
                if self._template is None:
                    log.warning("%s has no chat template; prompts go in as plain text", self.name)
                self._n_ctx = min(self._n_ctx, self._vocab.trained_context or self._n_ctx)
            return self._vocab

    def reset(self) -> None:
        """Forget every prompt state this model holds in memory, so the next call reads its prompt in full.

        Benchmarks call this between methods so that no method rides on another's cache; the disk
        store is left alone (pass ``disk_prefixes=None`` to measure cold reads).
        """
        with self._lock:
            if self._llama is not None:
                self._llama.reset()
            self.memory_prefixes.clear()

    @property
    def fingerprint(self) -> str:
        """The SHA-256 of the GGUF file."""
        if self._sha256 is None:
            from ragfunnel.llm.fingerprint import file_sha256

            if not self.model_path.is_file():
                raise ModelError(f"model file {self.model_path} does not exist; check the path")
            self._sha256 = file_sha256(self.model_path)
        return self._sha256

    @property
    def context_window(self) -> int:
        self._tokenizer()
        return self._n_ctx

    def _count_tokens(self, text: str) -> int:
        return self._count_tokens_many([text])[0]

    def _count_tokens_many(self, texts: list[str]) -> list[int]:
        """Each text counted by llama.cpp without its tokens copied out (:func:`~ragfunnel.llm.gguf.token_count`):
        the tokenizer is fetched once for all of them, and nothing is allocated per text."""
        tokenizer = self._tokenizer()
        if isinstance(tokenizer, GGUFVocab):
            return [tokenizer.count_tokens(t.encode("utf-8")) for t in texts]
        model = tokenizer._model  # llama-cpp-python's Llama keeps the LlamaModel it tokenizes with there
        return [token_count(model, t.encode("utf-8")) for t in texts]

    @property
    def tokenizer_identity(self) -> str:
        """llama.cpp's version and the GGUF file's SHA-256: the file carries the vocabulary, the library the
        tokenizer that reads it."""
        try:
            import llama_cpp
        except ImportError:
            raise MissingExtra("llama_cpp", "llamacpp") from None
        return f"llama.cpp {llama_cpp.__version__}:{self.fingerprint}"

    # -- prompts as the model reads them --------------------------------------------------------

    def _render(self, prompt: str) -> str:
        if self._template is None:
            return prompt
        return self._template(messages=[{"role": "user", "content": prompt}]).prompt

    def prompt_tokens(self, prompt: str) -> list[int]:
        """The tokens the model reads for user message ``prompt`` (chat template included)."""
        tokenizer = self._tokenizer()
        return tokenizer.tokenize(self._render(prompt).encode("utf-8"), add_bos=self._template is None, special=True)

    def prefix_tokens(self, prefix: str) -> list[int]:
        """The tokens of a user message's first part ``prefix``, as they start every prompt beginning with it."""
        tokenizer = self._tokenizer()
        rendered = self._render(prefix + _SPLIT)
        head = rendered[: rendered.index(_SPLIT)]
        return tokenizer.tokenize(head.encode("utf-8"), add_bos=self._template is None, special=True)

    # -- read once, ask many ----------------------------------------------------------------------

    def _kept(self) -> KeptPrefixes:
        return KeptPrefixes(self.memory_prefixes, self.disk_prefixes, fingerprint=self.fingerprint, name=self.name)

    def prefix_state(self, prefix: str) -> str:
        """Where the KV state after ``prefix`` would come from now: resident, memory, disk or none."""
        with self._lock:
            return self._kept().where(self._llama, self.prefix_tokens(prefix))

    def keep_prefix(self, prefix: str) -> dict[str, Any]:
        """Make the KV state after ``prefix`` current, reading it only if no store holds it.

        Call it before :meth:`generate` with a prompt that starts with ``prefix``; that call then
        reads only what follows. Returns where the state came from, its tokens and the seconds spent.
        """
        self.warm_up()
        started = time.perf_counter()
        with self._lock:
            tokens = self.prefix_tokens(prefix)
            source = self._kept().restore(self._llama, tokens, n_ctx=self._n_ctx, check=self._stop_if_cancelled)
        return {"prefix_from": source, "prefix_tokens": len(tokens),
                "prefix_seconds": round(time.perf_counter() - started, 3)}

    # -- generation ---------------------------------------------------------------------------------

    def _grammar(self, text: str | None) -> Any:
        """The compiled form of GBNF ``text``, checked once per text.

        llama-cpp-python only parses a grammar when it builds the sampler, and there a parse
        error adds a null sampler to the chain; so parse it here first on the model's vocabulary.
        """
        if text is None:
            return None
        if text not in self._grammars:
            import llama_cpp

            vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
            sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), b"root")
            if not sampler:
                raise ConfigError(f"llama.cpp cannot parse the grammar {text[:80]!r}; fix the GBNF text "
                                  "(it needs a 'root' rule)")
            llama_cpp.llama_sampler_free(sampler)
            self._grammars[text] = llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[text]

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        self.warm_up()
        tokens = self.prompt_tokens(prompt)
        if len(tokens) + params.max_tokens > self._n_ctx:
            raise ConfigError(f"prompt of {len(tokens)} tokens does not fit {self.name}'s context window of "
                              f"{self._n_ctx} with {params.max_tokens} tokens to generate; lower the context budget")
        with self._lock:  # one context decodes one call at a time
            prefix_seconds = 0.0
            if params.keep_prefix:
                self.last_prefix = self.keep_prefix(prompt[: params.keep_prefix])
                prefix_seconds = self.last_prefix["prefix_seconds"]
            if n > 1 and params.temperature > 0 and params.grammar is None:
                outs = []
                for first in range(0, n, MAX_PARALLEL):
                    outs += sample_together(self._llama, tokens, params, min(MAX_PARALLEL, n - first), first=first,
                                            name=self.name, check=self._stop_if_cancelled)
            else:
                outs = [self._sample_one(tokens, params, i) for i in range(n)]
        # The document's read (or restore) is part of the first sample's time, like any prompt read.
        return [replace(outs[0], seconds=outs[0].seconds + prefix_seconds), *outs[1:]]

    def _sample_one(self, tokens: list[int], params: SamplingParams, index: int) -> Completion:
        started = time.perf_counter()
        # Read the prompt here, in slices a cancellation can end between: the completion then finds it
        # held with fresh logits and starts writing at once (create_completion would read it in one go).
        read_tokens(self._llama, tokens, check=self._stop_if_cancelled)
        options = dict(
            prompt=tokens,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            min_p=0.0,  # llama-cpp-python defaults to 0.05; keep plain top-p/top-k sampling
            stop=list(params.stop) or None,
            seed=params.seed + index,  # distinct samples; the same seed would repeat the draw
            grammar=self._grammar(params.grammar),
            stopping_criteria=self._cancellable_writing(),
        )
        sink = text_sink(self)
        if sink is None:
            r = self._llama.create_completion(**options)
            choice, usage = r["choices"][0], r["usage"]
            text, finish = choice["text"] or "", choice.get("finish_reason") or "stop"
            n_out = usage["completion_tokens"]
        else:
            pieces, finish = [], "stop"
            for chunk in self._llama.create_completion(**options, stream=True):
                choice = chunk["choices"][0]
                if choice["text"]:
                    pieces.append(choice["text"])
                    sink(choice["text"])
                finish = choice.get("finish_reason") or finish
            text = "".join(pieces)
            n_out = len(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)) if text else 0
        greedy = params.temperature == 0 and params.grammar is None
        logprobs = ()
        if greedy and text.strip():
            logprobs = answer_logprobs(self._llama, tokens, text, n_ctx=self._n_ctx, name=self.name)
        return Completion(text=text, prompt_tokens=len(tokens), completion_tokens=n_out,
                          seconds=time.perf_counter() - started, finish_reason=finish, logprobs=logprobs)

    def _cancellable_writing(self) -> Any:
        """llama-cpp-python's hook called after each written token, used to let the call's cancellation end
        the completion there (it never stops one itself). The context is then left holding what was read."""
        from llama_cpp import StoppingCriteriaList

        def after_each_token(input_ids: Any, logits: Any) -> bool:
            self._stop_if_cancelled()
            return False

        return StoppingCriteriaList([after_each_token])

    def yes_probability(self, prompt: str, answer: str, check: str) -> float | None:
        """P("Yes") against P("No") as the first word of the model's reply to ``check``, asked after it
        answered ``prompt`` with ``answer`` (one turn of conversation further). The model usually still
        holds prompt and answer, so this reads only the check's few dozen tokens."""
        self.warm_up()
        import llama_cpp
        import numpy as np

        if self._template is None:
            text = f"{prompt}{answer}\n\n{check}\n"
            tokens = self._llama.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        else:
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer},
                        {"role": "user", "content": check}]
            tokens = self._llama.tokenize(self._template(messages=messages).prompt.encode("utf-8"),
                                          add_bos=False, special=True)
        if len(tokens) + 1 > self._n_ctx:
            return None
        with self._lock:
            read_tokens(self._llama, tokens, check=self._stop_if_cancelled)
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._llama.ctx, -1),
                                           shape=(self._llama.n_vocab(),)).astype(np.float64)
            mark_held(self._llama, self._llama.n_tokens)

        def first_tokens(words: tuple[str, ...]) -> list[int]:
            ids = {self._llama.tokenize(w.encode(), add_bos=False, special=False)[0] for w in words}
            return sorted(ids)

        top = logits.max()
        yes = float(np.exp(logits[first_tokens(_YES)] - top).sum())
        no = float(np.exp(logits[first_tokens(_NO)] - top).sum())
        return yes / (yes + no) if yes + no > 0 else None
