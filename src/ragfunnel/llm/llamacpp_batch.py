"""Batches decoded on a llama.cpp context: K samples of one prompt together, and an answer's
log-probabilities read back.

K samples of one prompt share the prompt's KV cells: the prompt is read once into sequence 0 and
copied to sequences 1..K-1, and every step decodes one token of each live sequence in one
``llama_decode``, instead of K decodes one after another. Every function takes llama-cpp-python's
``Llama`` and leaves sequence 0 holding the prompt (and, after :func:`answer_logprobs`, the answer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ragfunnel.errors import ModelError, option
from ragfunnel.llm.llamacpp_state import drop_from, mark_held, read_tokens
from ragfunnel.types import Completion, SamplingParams

log = logging.getLogger(__name__)

MAX_PARALLEL = 8  # sequences one context decodes together (drafts beyond this go in further rounds)
# Tokens of a greedy answer whose log-probabilities are read back (short answers fit; a summary's first
# sentence is enough to judge how sure the model was, and re-reading all of it would cost seconds).
LOGPROB_TOKENS = 32


def _sampler(params: SamplingParams, seed: int) -> Any:
    import llama_cpp

    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if params.top_k > 0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain


def sample_together(llama: Any, tokens: list[int], params: SamplingParams, n: int, *, first: int,
                    name: str, check: Callable[[], None]) -> list[Completion]:
    """``n`` samples of one prompt decoded as one batch of sequences sharing the prompt's KV cells.

    Sample ``i`` uses seed ``params.seed + first + i``. The extra sequences are dropped at the end,
    so the context again holds the prompt alone. ``name`` names the model in errors. ``check`` is
    called between prompt slices and before each decode step; what it raises ends the call, and the
    context is left holding the prompt (or the part of it read so far), as at a normal end.
    """
    import llama_cpp

    ctx, vocab = llama.ctx, llama_cpp.llama_model_get_vocab(llama.model)
    memory = llama_cpp.llama_get_memory(ctx)
    started = time.perf_counter()
    read_tokens(llama, tokens, check=check)
    read_seconds = time.perf_counter() - started
    n_prompt = len(tokens)
    for seq in range(1, n):
        llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
    samplers = [_sampler(params, params.seed + first + i) for i in range(n)]
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
            check()
            batch.n_tokens = len(live)
            for row, seq in enumerate(live):
                batch.token[row] = out[seq][-1]
                batch.pos[row] = n_prompt + len(out[seq]) - 1
                batch.n_seq_id[row] = 1
                batch.seq_id[row][0] = seq
                batch.logits[row] = True
                logits_at[seq] = row
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise ModelError(f"llama.cpp failed to decode a batch of {len(live)} samples on {name}; "
                                 f"lower {option('samples')}")
    finally:
        llama_cpp.llama_batch_free(batch)
        for sampler in samplers:
            llama_cpp.llama_sampler_free(sampler)
        for seq in range(1, n):
            llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
        llama_cpp.llama_memory_seq_rm(memory, 0, n_prompt, -1)
        mark_held(llama, n_prompt)
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


def answer_logprobs(llama: Any, prompt: list[int], text: str, *, n_ctx: int, name: str) -> tuple[float, ...]:
    """The log-probability of each of the first :data:`LOGPROB_TOKENS` tokens of ``text`` after ``prompt``.

    llama.cpp keeps logits for the last position only (keeping them all would cost n_ctx x vocab
    floats), so the answer is decoded once more from the prompt's last token, one batch with logits
    at every row: a few dozen tokens, a fraction of a second. Afterwards the context holds prompt
    and answer, so a judge question that follows them reads only itself.
    """
    import llama_cpp
    import numpy as np

    answer = llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)[:LOGPROB_TOKENS]
    n_prompt = len(prompt)
    if not answer or n_prompt + len(answer) > n_ctx:
        return ()
    ctx, n_vocab = llama.ctx, llama.n_vocab()
    feed = [prompt[-1], *answer]
    drop_from(llama, n_prompt - 1)
    mark_held(llama, n_prompt - 1)
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
            log.warning("llama.cpp could not read back the answer's log-probabilities on %s", name)
            return ()
        out = []
        for row, token in enumerate(answer):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, row), shape=(n_vocab,))
            top = float(logits.max())
            out.append(float(logits[token]) - top - float(np.log(np.exp(logits - top).sum())))
    finally:
        llama_cpp.llama_batch_free(batch)
    held = [*prompt, *answer]
    mark_held(llama, len(held), tokens=held)
    return tuple(out)
