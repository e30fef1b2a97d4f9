"""Embedders by spec: what turns passages, documents and queries into unit vectors for dense retrieval.

``bundled:minilm``     the bundled all-MiniLM-L6-v2 (int8 ONNX; ``ragfunnel.retrieve.embed``), the default
``hf:NAME_OR_DIR``     a transformers encoder by Hugging Face name (from the local cache, never downloaded)
                       or directory; a bare directory works too. Mean pooling over real tokens and L2
                       normalisation, as sentence-transformers does for MiniLM, e5 and gte alike
``openai:URL#MODEL``   an OpenAI-compatible embeddings server (vLLM, TEI, Ollama ...): POST ``URL/embeddings``

An index records its embedder's spec, identity and dimension (:class:`EmbedderInfo`) so that queries
are encoded by the model its vectors came from; :class:`RecordedEmbedder` is that embedder, checked. A file
never chooses where queries and ``OPENAI_API_KEY`` go: an index whose embedder is a server is used only
when whoever runs ragfunnel named that same server (``remote_embedder``).
Models load on the first ``encode``, so resolving a spec only parses it and finds the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from ragfunnel.errors import BackendUnavailable, ConfigError, MissingExtra, ModelError, option

DEFAULT_EMBEDDER = "bundled:minilm"
EMBEDDERS = ("bundled:minilm (the default), hf:NAME_OR_DIR (a Hugging Face encoder in the local cache, or its "
             "directory), a model directory, or openai:URL#MODEL (an OpenAI-compatible embeddings server)")
SERVER_BATCH = 64  # texts per embeddings request
CONNECT_SECONDS, ANSWER_SECONDS = 5.0, 120.0
ATTEMPTS, RETRY_STATUS = 3, {429, 500, 502, 503, 504}  # per request, for a server that is busy or restarting


class Embedder(Protocol):
    """Texts to unit vectors: ``encode(texts) -> float32 (n, dim)``; ``spec`` and ``identity`` name the model."""

    spec: str
    identity: str  # what the vectors depend on: the weights' SHA-256, or the server and model

    @property
    def dim(self) -> int: ...

    def encode(self, texts: list[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class EmbedderInfo:
    """What an index's manifest records of the embedder its vectors come from."""

    spec: str
    identity: str
    dim: int

    def __post_init__(self):
        """Refuse fields of the wrong type (ValueError, which the manifest reader reports as corruption)."""
        if not (isinstance(self.spec, str) and isinstance(self.identity, str)):
            raise ValueError(f"the embedder's 'spec' and 'identity' are not strings: {self!r}"[:200])
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"the embedder's 'dim' is {self.dim!r}, not a positive integer")

    @classmethod
    def from_json(cls, data: object) -> EmbedderInfo:
        if not isinstance(data, dict) or set(data) != {"spec", "identity", "dim"}:
            raise ValueError(f"'embedder' is not {{\"spec\", \"identity\", \"dim\"}}: {data!r}"[:200])
        return cls(**data)


def is_remote(spec: str) -> bool:
    """Whether ``spec`` names an embedder reached over the network (queries and the API key go there)."""
    return spec.startswith("openai:")


def _same_server(recorded: str, trusted: str | None) -> bool:
    """Whether the operator's ``trusted`` spec names the server and model an index ``recorded`` (trailing
    slashes of the URL aside, as :class:`OpenAIEmbedder` writes its spec without them)."""
    def canonical(spec: str) -> str:
        url, _, model = spec.partition("#")
        return f"{url.rstrip('/')}#{model}"

    return trusted is not None and canonical(recorded) == canonical(trusted)


def check_trusted(info: EmbedderInfo | None, trusted: str | None, *, where: str) -> None:
    """Refuse an index (``where``) whose recorded embedder is a server other than the ``trusted`` one the
    operator named: an index made elsewhere would otherwise send each query, and ``OPENAI_API_KEY``, wherever
    its manifest says."""
    if info is None or not is_remote(info.spec) or _same_server(info.spec, trusted):
        return
    shown = repr(info.spec[:200])
    raise ConfigError(f"{where} names the embeddings server {shown}, which would receive every query and "
                      f"OPENAI_API_KEY; an index never chooses where those go: if you trust that server, pass "
                      f"{option('remote_embedder')} {shown}")


@lru_cache(maxsize=8)
def resolve_embedder(spec: str, *, threads: int = 2) -> Embedder:
    """The embedder ``spec`` names (one per process and thread count); ConfigError listing the forms if
    it names none, ModelError if a model's files are missing. ``threads``: CPU threads of a local model."""
    from ragfunnel.retrieve.embed import bundled_embedder

    kind, _, rest = spec.partition(":")
    if spec == DEFAULT_EMBEDDER:
        return bundled_embedder(threads)
    if kind == "hf" and rest:
        return HFEmbedder(rest, threads=threads)
    if kind == "openai" and "," in rest.partition("#")[0]:
        raise ConfigError(f"embedder {spec!r} lists several servers; an embedder spec takes one: "
                          "openai:URL#MODEL")
    if kind == "openai" and rest.startswith(("http://", "https://")) and "#" in rest:
        url, _, model = rest.partition("#")
        if model and url.rstrip("/").partition("://")[2]:
            return OpenAIEmbedder(url, model)
    if kind not in ("bundled", "hf", "openai") and Path(spec).expanduser().is_dir():
        return HFEmbedder(spec, threads=threads)
    raise ConfigError(f"unknown embedder {spec!r}; pass {EMBEDDERS}")


class HFEmbedder:
    """A transformers encoder on CPU, read from local files only; its identity hashes its weight files."""

    def __init__(self, name_or_dir: str, *, threads: int = 2):
        from ragfunnel.retrieve.attention import model_directory

        self.directory = model_directory(name_or_dir, role="embedder", expected=EMBEDDERS)
        given = Path(name_or_dir).expanduser()
        self.spec = f"hf:{given.resolve() if given.exists() else name_or_dir}"
        self.identity = _weights_sha256(self.directory)
        self.threads = threads
        self._model = self._tokenizer = None
        self._max_tokens = 0

    def warm_up(self) -> None:
        """Load the tokenizer and model (once); truncate where sentence-transformers would, else at the
        model's position limit."""
        if self._model is not None:
            return
        from ragfunnel.retrieve.attention import model_load_errors, quiet_transformers, require_torch

        torch, transformers = require_torch()
        torch.set_num_threads(self.threads)
        with model_load_errors(f"embedder {self.directory}", EMBEDDERS), quiet_transformers():
            self._tokenizer = transformers.AutoTokenizer.from_pretrained(str(self.directory), local_files_only=True)
            self._model = transformers.AutoModel.from_pretrained(str(self.directory), local_files_only=True).eval()
        try:
            self._max_tokens = int(json.loads((self.directory / "sentence_bert_config.json").read_text())
                                   ["max_seq_length"])
        except (OSError, ValueError, KeyError, TypeError):
            self._max_tokens = min(self._tokenizer.model_max_length,
                                   getattr(self._model.config, "max_position_embeddings", 512))

    @property
    def dim(self) -> int:
        self.warm_up()
        return int(self._model.config.hidden_size)

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        from ragfunnel.retrieve.attention import require_torch

        torch, _ = require_torch()
        self.warm_up()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding, same results
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                tokens = self._tokenizer([texts[i] for i in batch], padding=True, truncation=True,
                                         max_length=self._max_tokens, return_tensors="pt")
                hidden = self._model(**tokens).last_hidden_state
                mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                out[batch] = torch.nn.functional.normalize(pooled, dim=1).float().numpy()
        return out


def _weights_sha256(directory: Path) -> str:
    """One SHA-256 over the model's weight files (each hashed once per version of the file, then remembered)."""
    from ragfunnel.llm.fingerprint import file_sha256

    weights = sorted(p for p in directory.iterdir()
                     if p.is_file() and (p.suffix == ".safetensors" or p.name.startswith("pytorch_model")))
    listing = {p.name: file_sha256(p) for p in weights}
    return "sha256:" + hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint; ``OPENAI_API_KEY`` is sent if set. Rows are
    L2-normalised here, since not every server normalises."""

    backoff_seconds = 1.0  # before the second attempt; doubled before each later one

    def __init__(self, url: str, model: str):
        self.url, self.model = url.rstrip("/"), model
        self.spec = self.identity = f"openai:{self.url}#{model}"
        self._dim: int | None = None
        self._client = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.encode(["dimension"])
        return self._dim

    def encode(self, texts: list[str]) -> np.ndarray:
        rows = [self._request(texts[start:start + SERVER_BATCH]) for start in range(0, len(texts), SERVER_BATCH)]
        vectors = np.concatenate(rows) if rows else np.zeros((0, self._dim or 0), dtype=np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            import httpx
        except ImportError:
            raise MissingExtra("httpx", "openai") from None
        if self._client is None:
            key = os.environ.get("OPENAI_API_KEY")
            self._client = httpx.Client(headers={"Authorization": f"Bearer {key}"} if key else {},
                                        timeout=httpx.Timeout(ANSWER_SECONDS, connect=CONNECT_SECONDS))
        url = f"{self.url}/embeddings"
        for attempt in range(1, ATTEMPTS + 1):  # a busy or restarting server is asked again, after a pause
            try:
                r = self._client.post(url, json={"model": self.model, "input": texts})
            except httpx.TimeoutException:
                problem = f"no answer from {url} within {ANSWER_SECONDS:g}s; check the server"
            except httpx.HTTPError as e:
                reason = "connection refused" if "refused" in str(e).lower() else str(e)
                problem = f"cannot reach {url}: {reason}; start the server or fix the URL"
            else:
                if r.status_code not in RETRY_STATUS:
                    break
                problem = f"{url} kept answering HTTP {r.status_code}; check the server's load and logs"
            if attempt == ATTEMPTS:
                raise BackendUnavailable(f"{problem} ({ATTEMPTS} attempts)")
            time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
        if r.status_code >= 400:
            body = " ".join(r.text[:200].split())
            raise BackendUnavailable(f"{url} refused the request (HTTP {r.status_code}: {body}); check the model "
                                     f"name {self.model!r}, the API key, and that each text fits the model's input")
        return self._vectors(r, url, len(texts))

    def _vectors(self, r, url: str, n: int) -> np.ndarray:
        """The reply's embeddings in input order, or a ModelError saying what is wrong with it."""
        try:
            data = sorted(r.json()["data"], key=lambda item: item.get("index", 0))
            vectors = np.array([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ModelError(f"{url} did not answer with OpenAI embeddings ({{\"data\": [{{\"embedding\": [...]}}]}})"
                             ) from None
        if vectors.ndim != 2 or len(vectors) != n or (self._dim is not None and vectors.shape[1] != self._dim):
            raise ModelError(f"{url} answered {vectors.shape} embeddings for {n} texts of dimension {self._dim}")
        self._dim = vectors.shape[1]
        return vectors


class RecordedEmbedder:
    """The embedder an index's vectors came from (``info``; None: the bundled MiniLM), resolved on the first
    ``encode`` and checked against the identity recorded. Failures are one line naming the spec and ``fix``.
    A server is refused unless it is the ``trusted`` one (:func:`check_trusted`)."""

    def __init__(self, info: EmbedderInfo | None, *, where: str, fix: str, trusted: str | None = None):
        from ragfunnel.retrieve.embed import MiniLMEmbedder

        check_trusted(info, trusted, where=where)
        self.spec = info.spec if info else DEFAULT_EMBEDDER
        self.identity = info.identity if info else MiniLMEmbedder.identity
        self.dim = info.dim if info else MiniLMEmbedder.dim
        self._where, self._fix = where, fix
        self._embedder: Embedder | None = None

    def encode(self, texts: list[str]) -> np.ndarray:
        embedder = self._loaded()
        try:
            vectors = embedder.encode(texts)
        except (ModelError, BackendUnavailable) as e:
            raise self._failed(e) from None
        if vectors.shape[1:] != (self.dim,):
            raise ModelError(f"the embedder {self.spec} now gives {vectors.shape[1]}-d vectors where {self._where} "
                             f"holds {self.dim}-d ones; {self._fix}")
        return vectors

    def _loaded(self) -> Embedder:
        if self._embedder is None:
            try:
                embedder = resolve_embedder(self.spec)
            except (ConfigError, ModelError, BackendUnavailable) as e:
                raise self._failed(e) from None
            if embedder.identity != self.identity:
                raise ModelError(f"{self._where} was built with another version of the embedder {self.spec} (its "
                                 f"weights have changed since); {self._fix}")
            self._embedder = embedder
        return self._embedder

    def _failed(self, error: Exception) -> Exception:
        kind = BackendUnavailable if isinstance(error, BackendUnavailable) else ModelError
        return kind(f"{self._where} was built with the embedder {self.spec}, which fails here ({error}); make it "
                    f"available again, or {self._fix}")
