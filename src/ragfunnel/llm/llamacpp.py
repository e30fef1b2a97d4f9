"""llama.cpp backend (llama-cpp-python) for local GGUF models — the offline default.

Three things make repeated questions cheap here:

- **K samples of one prompt decode together**: the prompt is read once into sequence 0, its KV
  cells are shared with sequences 1..K-1, and every step decodes one token of each live sequence
  in one batch (llama.cpp's batch API), instead of K decodes one after another.
- **Document prefixes are read once** (:meth:`LlamaCppLLM.keep_prefix`): the KV state after a
  question-independent prompt prefix (instructions and document) is kept in memory and on disk,
  keyed by the model file's SHA-256 and the exact prefix tokens, and restored for the next
  question instead of reading the document again.
- A prompt that starts where the last one did reuses the common prefix (llama-cpp-python's own
  longest-prefix match).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragfunnel.errors import ConfigError, MissingExtra, ModelError
from ragfunnel.llm.base import BaseLLM, cpu_threads
from ragfunnel.llm.prefix_store import DiskPrefixStore, MemoryPrefixStore, PrefixState, prefix_key
from ragfunnel.types import Completion, SamplingParams

log = logging.getLogger(__name__)

MAX_PARALLEL = 8  # sequences one context decodes together (drafts beyond this go in further rounds)
# Tokens of a greedy answer whose log-probabilities are read back (short answers fit; a summary's first
# sentence is enough to judge how sure the model was, and re-reading all of it would cost seconds).
LOGPROB_TOKENS = 32
_YES, _NO = ("Yes", "yes", "YES", " Yes"), ("No", "no", "NO", " No")
_SPLIT = "\ue000"  # a private-use character marking where a prompt prefix ends inside the chat template
_construct_lock = threading.Lock()


@contextmanager
def _context_params(**fields: Any) -> Iterator[None]:
    """Build ``Llama`` objects with these llama.cpp context parameters.

    llama-cpp-python does not expose ``n_seq_max`` or ``kv_unified`` (needed for several sequences
    sharing one prompt's KV cells), so its default-parameter factory is wrapped while one is built.
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


def check_gguf_file(path: Path) -> None:
    """One clear ModelError for a path llama.cpp could not load anyway: missing, a directory, not GGUF.

    Cheap (reads four bytes), so the registry runs it when a ``gguf:`` spec is resolved, long before
    the first call imports llama.cpp.
    """
    if path.is_dir():
        raise ModelError(f"model file {path} is a directory; give the path of the .gguf file inside it")
    if path.exists() and not path.is_file():  # a pipe or a device would block or never end
        raise ModelError(f"model file {path} is not a regular file (a pipe, socket or device); give a .gguf file")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise ModelError(f"model file {path} does not exist; check the path or run `ragfunnel models`") from None
    except OSError as e:
        raise ModelError(f"cannot read model file {path} ({e.strerror or e}); check its permissions") from None
    if magic != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); give a .gguf model file "
                         "(convert other formats with llama.cpp's convert_hf_to_gguf.py)")


class LlamaCppLLM(BaseLLM):
    """A GGUF model run in-process by llama.cpp, prompted through its own chat template.

    The model loads on first use. ``n`` samples of one prompt decode together as one batch of
    sequences sharing the prompt's KV cells (greedy or grammar-constrained calls decode one after
    another, reusing the prompt). ``disk_prefixes`` is where :meth:`keep_prefix` keeps document
    states between processes (None: memory only).
    """

    reuses_prompt = True

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
        self._template: Any = None  # the model's chat template (None: prompts go in as plain text)
        self._lock = threading.RLock()
        self._grammars: dict[str, Any] = {}  # GBNF text -> compiled LlamaGrammar (parsing is not free)
        self.disk_prefixes = disk_prefixes
        self.last_prefix: dict[str, Any] = {}  # what the last keep_prefix did (read by callers for traces)
        # Receives the text of single-sample calls as it is generated (``ask`` on a terminal shows it).
        self.on_text: Callable[[str], None] | None = None
        self.memory_prefixes = MemoryPrefixStore(**({"max_bytes": memory_prefix_bytes}
                                                    if memory_prefix_bytes is not None else {}))

    def warm_up(self) -> None:
        if self._llama is not None:
            return
        check_gguf_file(self.model_path)  # a wrong path is named even where llama.cpp is not installed
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise MissingExtra("llama_cpp", "llamacpp") from None
        started = time.perf_counter()
        try:
            self._n_ctx = min(self._n_ctx, _trained_context(self.model_path) or self._n_ctx)
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
        template = llama.metadata.get("tokenizer.chat_template")
        if template:
            model = llama._model
            eos, bos = model.token_eos(), model.token_bos()
            self._template = Jinja2ChatFormatter(
                template=template,
                eos_token=model.token_get_text(eos) if eos != -1 else "",
                bos_token=model.token_get_text(bos) if bos != -1 else "",
            )
        else:
            log.warning("%s has no chat template; prompts go in as plain text", self.name)
        self._llama = llama
        log.info("loaded %s in %.1fs (n_ctx=%d)", self.name, time.perf_counter() - started, self._n_ctx)

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
        self.warm_up()
        return self._n_ctx

    def _count_tokens(self, text: str) -> int:
        self.warm_up()
        return len(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    # -- prompts as the model reads them --------------------------------------------------------

    def _render(self, prompt: str) -> str:
        if self._template is None:
            return prompt
        return self._template(messages=[{"role": "user", "content": prompt}]).prompt

    def prompt_tokens(self, prompt: str) -> list[int]:
        """The tokens the model reads for user message ``prompt`` (chat template included)."""
        self.warm_up()
        return self._llama.tokenize(self._render(prompt).encode("utf-8"), add_bos=self._template is None,
                                    special=True)

    def prefix_tokens(self, prefix: str) -> list[int]:
        """The tokens of a user message's first part ``prefix``, as they start every prompt beginning with it."""
        self.warm_up()
        rendered = self._render(prefix + _SPLIT)
        head = rendered[: rendered.index(_SPLIT)]
        return self._llama.tokenize(head.encode("utf-8"), add_bos=self._template is None, special=True)

    # -- read once, ask many ----------------------------------------------------------------------

    def _resident(self, tokens: list[int]) -> bool:
        llama = self._llama
        n = len(tokens)
        return llama.n_tokens >= n and list(llama.input_ids[:n]) == tokens

    def prefix_state(self, prefix: str) -> str:
        """Where the KV state after ``prefix`` would come from now: resident, memory, disk or none."""
        with self._lock:
            tokens = self.prefix_tokens(prefix)
            if self._resident(tokens):
                return "resident"
            key = prefix_key(self.fingerprint, tokens)
            if self.memory_prefixes.get(key) is not None:
                return "memory"
            if self.disk_prefixes is not None and self.disk_prefixes.contains(key):
                return "disk"
            return "none"

    def keep_prefix(self, prefix: str) -> dict[str, Any]:
        """Make the KV state after ``prefix`` current, reading it only if no store holds it.

        Call it before :meth:`generate` with a prompt that starts with ``prefix``; that call then
        reads only what follows. Returns where the state came from, its tokens and the seconds spent.
        """
        started = time.perf_counter()
        with self._lock:
            tokens = self.prefix_tokens(prefix)
            source = self._restore(tokens)
        return {"prefix_from": source, "prefix_tokens": len(tokens),
                "prefix_seconds": round(time.perf_counter() - started, 3)}

    def _restore(self, tokens: list[int]) -> str:
        if self._resident(tokens):
            return "resident"
        if len(tokens) + 1 > self._n_ctx:
            return "too long"  # the call itself will name the problem
        key = prefix_key(self.fingerprint, tokens)
        state = self.memory_prefixes.get(key)
        source = "memory"
        if state is None and self.disk_prefixes is not None:
            state = self.disk_prefixes.get(key, self.fingerprint)
            source = "disk"
        if state is not None and tuple(tokens) == state.tokens and self._load_state(state):
            if source == "disk":
                self.memory_prefixes.put(key, state)
            return source
        self._read(tokens, keep=0)
        state = PrefixState(tuple(tokens), self._save_state())
        self.memory_prefixes.put(key, state)
        if self.disk_prefixes is not None:
            self.disk_prefixes.put(key, self.fingerprint, state)
        return "read"

    def _save_state(self) -> bytes:
        import llama_cpp

        ctx = self._llama._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
        return bytes(buf)[:written]

    def _load_state(self, state: PrefixState) -> bool:
        import llama_cpp

        llama = self._llama
        llama.reset()
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llama._ctx.ctx), -1, -1, -1)
        buf = (ctypes.c_uint8 * len(state.data)).from_buffer_copy(state.data)
        if llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, buf, len(state.data), 0) != len(state.data):
            log.warning("llama.cpp refused a stored document state for %s; reading the document again", self.name)
            return False
        n = len(state.tokens)
        llama.input_ids[:n] = state.tokens
        llama.n_tokens = n
        llama._requires_eval = True  # the restored state has no logits: the next call re-reads one token
        return True

    def _read(self, tokens: list[int], *, keep: int | None = None) -> None:
        """Make sequence 0 hold ``tokens`` with fresh logits for the last one, reusing the common prefix."""
        llama = self._llama
        common = 0
        if keep is None:
            limit = min(llama.n_tokens, len(tokens) - 1)
            while common < limit and llama.input_ids[common] == tokens[common]:
                common += 1
        else:
            common = keep
        llama._ctx.kv_cache_seq_rm(0, common, -1)
        llama.n_tokens = common
        llama.eval(tokens[common:])

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

            sampler = llama_cpp.llama_sampler_init_grammar(self._llama._model.vocab, text.encode(), b"root")
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
                    outs += self._sample_together(tokens, params, min(MAX_PARALLEL, n - first), first)
            else:
                outs = [self._sample_one(tokens, params, i) for i in range(n)]
        # The document's read (or restore) is part of the first sample's time, like any prompt read.
        return [replace(outs[0], seconds=outs[0].seconds + prefix_seconds), *outs[1:]]

    def _sample_one(self, tokens: list[int], params: SamplingParams, index: int) -> Completion:
        started = time.perf_counter()
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
        )
        if self.on_text is None:
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
                    self.on_text(choice["text"])
                finish = choice.get("finish_reason") or finish
            text = "".join(pieces)
            n_out = len(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)) if text else 0
        greedy = params.temperature == 0 and params.grammar is None
        logprobs = self._answer_logprobs(tokens, text) if greedy and text.strip() else ()
        return Completion(text=text, prompt_tokens=len(tokens), completion_tokens=n_out,
                          seconds=time.perf_counter() - started, finish_reason=finish, logprobs=logprobs)

    def _answer_logprobs(self, prompt: list[int], text: str) -> tuple[float, ...]:
        """The log-probability of each of the first :data:`LOGPROB_TOKENS` tokens of ``text`` after ``prompt``.

        llama.cpp keeps logits for the last position only (keeping them all would cost n_ctx x vocab
        floats), so the answer is decoded once more from the prompt's last token, one batch with logits
        at every row: a few dozen tokens, a fraction of a second. Afterwards the context holds prompt
        and answer, so a judge question that follows them reads only itself (:meth:`yes_probability`).
        """
        import llama_cpp
        import numpy as np

        llama = self._llama
        answer = llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)[:LOGPROB_TOKENS]
        n_prompt = len(prompt)
        if not answer or n_prompt + len(answer) > self._n_ctx:
            return ()
        ctx = llama._ctx.ctx
        feed = [prompt[-1], *answer]
        llama._ctx.kv_cache_seq_rm(0, n_prompt - 1, -1)
        llama._requires_eval = True
        batch = llama_cpp.llama_batch_init(len(feed), 0, 1)
        try:
            batch.n_tokens = len(feed)
            for row, token in enumerate(feed):
                batch.token[row] = token
                batch.pos[row] = n_prompt - 1 + row
                batch.n_seq_id[row] = 1
                batch.seq_id[row][0] = 0
                batch.logits[row] = True
            if llama_cpp.llama_decode(ctx, batch) != 0:
                llama.n_tokens = n_prompt - 1
                log.warning("llama.cpp could not read back the answer's log-probabilities on %s", self.name)
                return ()
            out = []
            for row, token in enumerate(answer):
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, row), shape=(llama._n_vocab,))
                top = float(logits.max())
                out.append(float(logits[token]) - top - float(np.log(np.exp(logits - top).sum())))
        finally:
            llama_cpp.llama_batch_free(batch)
        held = [*prompt, *answer]
        llama.input_ids[: len(held)] = held
        llama.n_tokens = len(held)
        return tuple(out)

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
            self._read(tokens)
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._llama._ctx.ctx, -1),
                                           shape=(self._llama._n_vocab,)).astype(np.float64)
            self._llama._requires_eval = True

        def first_tokens(words: tuple[str, ...]) -> list[int]:
            ids = {self._llama.tokenize(w.encode(), add_bos=False, special=False)[0] for w in words}
            return sorted(ids)

        top = logits.max()
        yes = float(np.exp(logits[first_tokens(_YES)] - top).sum())
        no = float(np.exp(logits[first_tokens(_NO)] - top).sum())
        return yes / (yes + no) if yes + no > 0 else None

    def _sampler(self, params: SamplingParams, seed: int) -> Any:
        import llama_cpp

        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if params.top_k > 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def _sample_together(self, tokens: list[int], params: SamplingParams, n: int, first: int) -> list[Completion]:
        """``n`` samples of one prompt decoded as one batch of sequences sharing the prompt's KV cells.

        Sample ``i`` uses seed ``params.seed + first + i``. Every step decodes one token of each live
        sequence in a single ``llama_decode``; the extra sequences are dropped at the end, so the
        context again holds the prompt alone.
        """
        import llama_cpp

        llama = self._llama
        ctx, vocab = llama._ctx.ctx, llama._model.vocab
        memory = llama_cpp.llama_get_memory(ctx)
        started = time.perf_counter()
        self._read(tokens)
        read_seconds = time.perf_counter() - started
        n_prompt = len(tokens)
        for seq in range(1, n):
            llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
        samplers = [self._sampler(params, params.seed + first + i) for i in range(n)]
        batch = llama_cpp.llama_batch_init(n, 0, 1)
        out: list[list[int]] = [[] for _ in range(n)]
        texts = [""] * n
        finish = ["length"] * n
        logits_at = [-1] * n  # each sequence's row of logits in the last decode
        live = list(range(n))
        try:
            while live:
                stepping = []
                for seq in live:
                    token = llama_cpp.llama_sampler_sample(samplers[seq], ctx, logits_at[seq])
                    if llama_cpp.llama_vocab_is_eog(vocab, token):
                        finish[seq] = "stop"
                        continue
                    out[seq].append(token)
                    if params.stop:  # only stop strings need the text while decoding
                        texts[seq] = llama.detokenize(out[seq]).decode("utf-8", errors="ignore")
                        if any(s in texts[seq] for s in params.stop):
                            finish[seq] = "stop"
                            continue
                    if len(out[seq]) < params.max_tokens:
                        stepping.append(seq)
                live = stepping
                if not live:
                    break
                batch.n_tokens = len(live)
                for row, seq in enumerate(live):
                    batch.token[row] = out[seq][-1]
                    batch.pos[row] = n_prompt + len(out[seq]) - 1
                    batch.n_seq_id[row] = 1
                    batch.seq_id[row][0] = seq
                    batch.logits[row] = True
                    logits_at[seq] = row
                if llama_cpp.llama_decode(ctx, batch) != 0:
                    raise ModelError(f"llama.cpp failed to decode a batch of {len(live)} samples on {self.name}; "
                                     "lower --samples")
        finally:
            llama_cpp.llama_batch_free(batch)
            for sampler in samplers:
                llama_cpp.llama_sampler_free(sampler)
            for seq in range(1, n):
                llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
            llama_cpp.llama_memory_seq_rm(memory, 0, n_prompt, -1)
            llama.n_tokens = n_prompt
            llama._requires_eval = True
        seconds = time.perf_counter() - started
        outs = []
        for seq in range(n):
            text = texts[seq] if params.stop else llama.detokenize(out[seq]).decode("utf-8", errors="ignore")
            for s in params.stop:
                text = text.split(s, 1)[0]
            # The shared prompt read is charged to the first sample, as sequential sampling would.
            share = read_seconds if seq == 0 else 0.0
            outs.append(Completion(text=text, prompt_tokens=n_prompt, completion_tokens=len(out[seq]),
                                   seconds=share + (seconds - read_seconds) / n, finish_reason=finish[seq]))
        return outs
