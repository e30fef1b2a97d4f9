"""Post-ranking passages by a generator's attention (FunnelRAG's third stage).

FunnelRAG reads FiD's cross-attention from the first decoder token. Offline we use a bundled
decoder-only model loaded by transformers from its GGUF file: the passages and the question
go into one prompt, and the position that predicts the first answer token is the query.
For every layer and head we take that position's attention over each passage's tokens, keep
the ``rep_tokens`` highest weights (the passage's representative tokens; question and
instruction tokens never count) and average them; a passage's score is the mean over layers
and heads.

Only the query position's attention row is ever materialised: the forward pass runs with
SDPA, and a registered attention function recomputes that one row per layer from the layer's
query and keys (heads x tokens floats), so memory stays linear in the prompt length.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from ragfunnel.errors import InputError, MissingExtra

ATTENTION_NAME = "ragfunnel_last_row"
DEFAULT_REP_TOKENS = 4  # the paper's best setting in most cases


class PostRanker(Protocol):
    """Scores passages for a question; higher is better. A FiD/T5 scorer implements the same call."""

    def score(self, question: str, passages: list[str]) -> np.ndarray: ...


_capture = threading.local()


def require_torch():
    """torch and transformers, or an error naming the extra that installs them."""
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingExtra("torch and transformers", "attention") from None
    return torch, transformers


@lru_cache(maxsize=1)
def _register_attention() -> None:
    torch, transformers = require_torch()
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def attention_rows(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        out = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                     **kwargs)
        rows = getattr(_capture, "rows", None)
        if rows is not None:
            keys = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # grouped-query heads
            scale = scaling if scaling is not None else query.shape[-1] ** -0.5
            # The last position attends to every earlier one (causal), so it needs no mask.
            logits = query[:, :, -1:].float() @ keys.float().transpose(2, 3)
            rows.append(torch.softmax(logits * scale, dim=-1)[0, :, 0, :])  # heads x tokens
        return out

    transformers.AttentionInterface.register(ATTENTION_NAME, attention_rows)


class AttentionPostRanker:
    """Generator-attention passage scores from a GGUF (or Hugging Face) causal LM run by transformers."""

    def __init__(self, model: str | Path, *, gguf_file: str | None = None, rep_tokens: int = DEFAULT_REP_TOKENS,
                 threads: int = 2):
        torch, transformers = require_torch()
        _register_attention()
        torch.set_num_threads(threads)
        self.rep_tokens = rep_tokens
        local = Path(model).exists()  # a local directory never reaches for the network
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model), gguf_file=gguf_file,
                                                                    local_files_only=local)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(model), gguf_file=gguf_file, attn_implementation=ATTENTION_NAME, dtype=torch.float32,
            local_files_only=local)
        self.model.eval()

    @classmethod
    def from_gguf(cls, path: str | Path, **kwargs) -> AttentionPostRanker:
        path = Path(path)
        return cls(path.parent, gguf_file=path.name, **kwargs)

    def _segments(self, question: str, passages: list[str]) -> tuple[list[int], list[tuple[int, int]]]:
        """Prompt token ids and each passage's (start, end) token span inside them."""
        marker = "\u2402PASSAGES\u2402"
        user = (f"Read the passages, then answer the question in a few words.\n\n{marker}\n\n"
                f"Question: {question}")
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                  add_generation_prompt=True)
        head, tail = text.split(marker)
        ids = self.tokenizer.encode(head, add_special_tokens=False)
        spans = []
        for i, passage in enumerate(passages, start=1):
            ids += self.tokenizer.encode(f"[{i}] ", add_special_tokens=False)  # the label is not the passage's
            piece = self.tokenizer.encode(f"{passage.strip()}\n\n", add_special_tokens=False)
            spans.append((len(ids), len(ids) + len(piece)))
            ids += piece
        return ids + self.tokenizer.encode(tail, add_special_tokens=False), spans

    def score(self, question: str, passages: list[str]) -> np.ndarray:
        if not passages:
            raise InputError("no passages to post-rank; the earlier stages kept nothing")
        torch, _ = require_torch()
        ids, spans = self._segments(question, passages)
        _capture.rows = []
        try:
            with torch.inference_mode():
                self.model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1)
            layers = torch.stack(_capture.rows)  # layers x heads x tokens
        finally:
            _capture.rows = None
        scores = np.zeros(len(passages))
        for p, (start, end) in enumerate(spans):
            k = min(self.rep_tokens, end - start)
            # Representative tokens per layer and head, then the mean over them, the heads and the layers.
            scores[p] = float(layers[:, :, start:end].topk(k, dim=-1).values.mean())
        return scores


def load_post_ranker(spec: str, **kwargs) -> AttentionPostRanker:
    """``bundled:NAME`` or ``gguf:PATH`` (GGUF read by transformers), else a Hugging Face name or directory."""
    scheme, sep, rest = spec.partition(":")
    if sep and scheme == "bundled":
        from ragfunnel.llm import bundled

        return AttentionPostRanker.from_gguf(bundled.ensure(rest), **kwargs)
    if sep and scheme == "gguf":
        if not Path(rest).is_file():
            raise InputError(f"post-ranker model {rest} does not exist; pass a GGUF file path")
        return AttentionPostRanker.from_gguf(rest, **kwargs)
    return AttentionPostRanker(spec, **kwargs)
