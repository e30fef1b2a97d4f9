"""FAISS over a corpus index's flat passage vectors: the index type follows the corpus size.

Exact numpy search (``ragfunnel.corpus.index.nearest``) reads every vector for every query: 63 ms at 1M
384-d MiniLM vectors on two cores (``benchmarks/results/flat_search_scale.json``), growing linearly. A
FAISS index reads a small part of them. Which one (``choose_kind``):

``flat``   up to 100k vectors: exact ``IndexFlatIP``. Exact search there costs ~6 ms a query, about what
           embedding the question costs (4 ms), so an approximate index would buy little and lose recall.
``hnsw``   up to 1M vectors: ``IndexHNSWFlat`` (M=32), the lowest latency at high recall. Its graph is
           walked at random, so it must sit in memory: ~1.8 GB at 1M × 384 (vectors plus 256 B of links
           each), acceptable there, too much beyond.
``ivf``    above 1M: ``IndexIVFFlat`` with nlist ≈ 4·√n lists and nprobe = nlist/8 of them (at least 8)
           read per query (~12% of the vectors, for recall@10 ≥ 0.95). Its lists are memory-mapped, so the
           RAM it needs is the page cache of the lists queries touch, not the whole index.
``ivfpq``  when the float32 vectors would fill over half the machine's memory: ``IndexIVFPQ`` keeps
           d/8 bytes per vector (32× less), and its candidates (``refine`` = 16 × k of them) are re-scored
           exactly from the memory-mapped ``flat.vectors.npy``, which wins back PQ's recall loss (0.94
           -> 0.98 recall@10 against 8 × k on the unit tests' clustered vectors).

Every type's parameters are recorded in the index manifest (``FaissConfig``). The file is opened with
``IO_FLAG_MMAP`` (IVF types: the inverted lists stay on disk) or ``IO_FLAG_MMAP_IFC`` (flat and HNSW:
the stored vectors stay on disk). Every search is re-scored exactly against the stored vectors, so
scores are the same cosine numbers exact search gives, and ties break by row as there.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragfunnel.errors import ConfigError, InputError, MissingExtra, option
from ragfunnel.retrieve.fusion import best_k

log = logging.getLogger(__name__)

KINDS = ("flat", "hnsw", "ivf", "ivfpq")
CHOICES = ("auto", *KINDS, "none")  # what `ragfunnel index --faiss` takes
PARAMS = {"flat": (), "hnsw": ("M", "ef_construction", "ef_search"), "ivf": ("nlist", "nprobe"),
          "ivfpq": ("nlist", "nprobe", "m", "nbits", "refine")}
FLAT_MAX = 100_000  # exact search up to here (~6 ms a query at 384-d)
HNSW_MAX = 1_000_000  # HNSW up to here (held in RAM: ~1.8 GB at 384-d), IVF above
MEMORY_SHARE = 0.5  # IVF-PQ once the float32 vectors would need more than this share of physical memory
TRAIN_POINTS_PER_LIST = 50  # k-means sample per IVF list (FAISS warns below 39)
PQ_TRAIN_POINTS = 39 * 256  # a PQ codebook of 2**8 centroids needs this many to train
ADD_BLOCK = 65_536  # vectors copied from the memory-mapped file into FAISS at a time


@dataclass(frozen=True)
class FaissConfig:
    """What the manifest records about an index's FAISS file: its type, parameters and FAISS version."""

    kind: str
    params: dict[str, int] = field(default_factory=dict)
    faiss_version: str = ""

    def __post_init__(self):
        """Refuse an unknown type, or parameters that are not exactly the type's positive integers (ValueError)."""
        if self.kind not in KINDS:
            raise ValueError(f"unknown FAISS index type {self.kind!r}; valid: {', '.join(KINDS)}")
        if not isinstance(self.params, dict) or set(self.params) != set(PARAMS[self.kind]):
            raise ValueError(f"FAISS {self.kind} takes the parameters {list(PARAMS[self.kind])}, got {self.params!r}")
        for name, value in self.params.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"FAISS parameter {name!r} is {value!r}, not a positive integer")
        if not isinstance(self.faiss_version, str):
            raise ValueError(f"'faiss_version' is {type(self.faiss_version).__name__}, not str")

    @classmethod
    def from_json(cls, data: object) -> FaissConfig:
        if not isinstance(data, dict) or set(data) != {"kind", "params", "faiss_version"}:
            raise ValueError(f"'faiss' is not {{\"kind\", \"params\", \"faiss_version\"}}: {data!r}"[:200])
        return cls(**data)

    def describe(self) -> str:
        """``hnsw (M=32, ef_construction=200, ef_search=128)``."""
        return self.kind + (f" ({', '.join(f'{k}={v}' for k, v in self.params.items())})" if self.params else "")


def import_faiss():
    """The ``faiss`` module, or MissingExtra naming ``pip install 'ragfunnel[faiss]'``."""
    try:
        import faiss
    except ImportError:
        raise MissingExtra("faiss", "faiss") from None
    return faiss


def faiss_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def choose_kind(n: int, dim: int, *, memory_bytes: int | None) -> str:
    """The index type for ``n`` vectors of ``dim`` float32s on a machine with ``memory_bytes`` of RAM."""
    if n <= FLAT_MAX:
        return "flat"
    if memory_bytes is not None and n * dim * 4 > MEMORY_SHARE * memory_bytes:
        return "ivfpq"
    return "hnsw" if n <= HNSW_MAX else "ivf"


def default_params(kind: str, n: int, dim: int) -> dict[str, int]:
    """The parameters of a ``kind`` index over ``n`` vectors of ``dim`` dimensions (see the module notes)."""
    if kind == "flat":
        return {}
    if kind == "hnsw":
        # M=32 links per node, efConstruction 200, efSearch 128. At 1M clustered vectors
        # (benchmarks/flat_search_scale.py) efConstruction 64 built 4x faster but its graph capped recall@10
        # at 0.92-0.97 for efSearch 128-1024; 200 gives 1.000 at efSearch 128 (0.026x exact's latency).
        return {"M": 32, "ef_construction": 200, "ef_search": 128}
    # FAISS's guidance: nlist between 4·√n and 16·√n, each list trained from at least 39 vectors.
    nlist = max(1, min(round(4 * math.sqrt(n)), n // 39))
    # Read 1/8 of the lists, but at least 8 (small corpora have few lists, each a large share of the vectors):
    # at 1M clustered vectors 1/32 found 0.878 of the exact top 10, 1/16 0.914, 1/8 0.952
    # (benchmarks/flat_search_scale.py).
    params = {"nlist": nlist, "nprobe": min(nlist, max(8, math.ceil(nlist / 8)))}
    if kind == "ivfpq":
        # m sub-quantizers of 8 bits each: d/8 bytes per vector (48 at 384-d), m must divide d.
        m = max(m for m in range(1, max(1, dim // 8) + 1) if dim % m == 0)
        params |= {"m": m, "nbits": 8, "refine": 16}
    return params


def build(vectors: np.ndarray, path: str | Path, kind: str, *, params: dict[str, int] | None = None,
          seed: int = 0) -> FaissConfig:
    """Write a FAISS index of ``kind`` over ``vectors`` (unit float32 rows, memory-mapped is fine) to ``path``.

    ``kind`` is one of ``KINDS`` or ``"auto"`` (``choose_kind``); ``params`` override ``default_params``.
    IVF types are trained on a seeded sample of rows, so a rebuild gives the same index.
    """
    from tqdm.auto import tqdm

    faiss = import_faiss()
    n, dim = vectors.shape
    if kind == "auto":
        kind = choose_kind(n, dim, memory_bytes=physical_memory())
    if kind not in KINDS:
        raise ConfigError(f"unknown FAISS index type {kind!r}; valid: {', '.join(CHOICES)}")
    params = {**default_params(kind, n, dim), **(params or {})}
    config = FaissConfig(kind, params, faiss.__version__)  # refuses unknown or bad parameters
    if kind == "ivfpq" and n < PQ_TRAIN_POINTS:
        raise ConfigError(f"an ivfpq index needs at least {PQ_TRAIN_POINTS} passages to train its codebooks, "
                          f"this corpus has {n}; use {option('faiss')}=auto (or flat, hnsw, ivf)")
    if kind == "ivfpq" and dim % params["m"]:
        raise ConfigError(f"ivfpq's m={params['m']} does not divide the vectors' {dim} dimensions")
    index = _new_index(faiss, kind, dim, params)
    if not index.is_trained:
        sample = np.random.default_rng(seed).choice(n, size=min(n, max(TRAIN_POINTS_PER_LIST * params["nlist"],
                                                                        PQ_TRAIN_POINTS)), replace=False)
        log.info("training FAISS %s on %d of %d vectors", kind, len(sample), n)
        index.train(np.ascontiguousarray(vectors[np.sort(sample)], dtype=np.float32))
    with tqdm(total=n, desc=f"FAISS {kind}", unit="vector", disable=None) as bar:
        for start in range(0, n, ADD_BLOCK):
            block = np.ascontiguousarray(vectors[start:start + ADD_BLOCK], dtype=np.float32)
            index.add(block)
            bar.update(len(block))
    faiss.write_index(index, str(path))
    return config


def _new_index(faiss, kind: str, dim: int, params: dict[str, int]):
    ip = faiss.METRIC_INNER_PRODUCT  # unit vectors: inner product is cosine
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params["M"], ip)
        index.hnsw.efConstruction = params["ef_construction"]
        return index
    quantizer = faiss.IndexFlatIP(dim)
    if kind == "ivf":
        index = faiss.IndexIVFFlat(quantizer, dim, params["nlist"], ip)
    else:
        index = faiss.IndexIVFPQ(quantizer, dim, params["nlist"], params["m"], params["nbits"], ip)
    index.cp.spherical = True  # centroids of unit vectors, compared by inner product
    index.cp.seed = 1234
    return index


class FaissIndex:
    """A FAISS file opened for search, memory-mapped where FAISS allows."""

    def __init__(self, path: str | Path, config: FaissConfig, *, rows: int, dim: int):
        faiss = import_faiss()
        self.path, self.config = Path(path), config
        # IVF types: the inverted lists stay on disk. Flat and HNSW: their stored vectors stay on disk
        # (IO_FLAG_MMAP_IFC, FAISS >= 1.10; older versions read the file into memory).
        flags = faiss.IO_FLAG_MMAP if config.kind.startswith("ivf") else getattr(faiss, "IO_FLAG_MMAP_IFC", 0)
        built_by = f"written by FAISS {config.faiss_version}" if config.faiss_version else "written by another FAISS"
        try:
            self._index = faiss.read_index(str(self.path), flags)
        except RuntimeError as e:
            # FAISS says "Error in <function> at <file>:<line>: Error: <what failed>"; the last part is the news.
            reason = " ".join(str(e).split("Error: ")[-1].split())[:160] or "unreadable"
            raise InputError(f"{self.path} cannot be read by FAISS {faiss.__version__} ({built_by}: {reason})"
                             ) from None
        expected = {"flat": "IndexFlat", "hnsw": "IndexHNSW", "ivf": "IndexIVFFlat", "ivfpq": "IndexIVFPQ"}
        if not type(self._index).__name__.startswith(expected[config.kind]):
            raise InputError(f"{self.path} holds a FAISS {type(self._index).__name__}, where the manifest says "
                             f"{config.kind}")
        if (self._index.ntotal, self._index.d) != (rows, dim):
            raise InputError(f"{self.path} holds {self._index.ntotal} vectors of {self._index.d} dimensions where the "
                             f"manifest implies {rows} of {dim}")
        if config.kind == "hnsw":
            self._index.hnsw.efSearch = config.params["ef_search"]
        elif config.kind.startswith("ivf"):
            self._index.nprobe = config.params["nprobe"]

    def search(self, query: np.ndarray, k: int, *, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosine scores) of the ``k`` rows nearest a unit ``query``, best first: FAISS's candidates
        re-scored exactly against ``vectors`` (the index's stored rows), ties by row as exact search breaks them."""
        rows = self.candidates(query, k)
        best, scores = best_k(np.asarray(vectors[rows] @ query, dtype=np.float64), k)
        return rows[best], scores

    def candidates(self, query: np.ndarray, k: int) -> np.ndarray:
        """Rows (ascending, unique) among which FAISS finds the ``k`` nearest of a unit ``query``: k of them,
        or ``refine`` × k for IVF-PQ, whose approximate scores ``search`` replaces by exact ones."""
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        wanted = min(k * self.config.params.get("refine", 1), self._index.ntotal)
        _, rows = self._index.search(np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1), wanted)
        return np.unique(rows[0][rows[0] >= 0]).astype(np.int64)  # -1: fewer found than asked
