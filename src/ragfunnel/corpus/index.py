"""Opening a corpus index for search: the manifest and every file it lists checked first
(``ragfunnel.corpus.index_manifest`` says what the files are), then documents, clusters, BM25 and vectors read
from the directory (``CorpusIndex``), and exact nearest-vector search (``nearest``).

Indexes are built by ``ragfunnel.corpus.index_build``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from ragfunnel.corpus.index_manifest import (
    DOCUMENT_VECTORS,
    FAISS_FILE,
    Manifest,
    file_sha256,
    read_manifest,
    rebuild_fix,
)
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.retrieve.bm25 import BM25Index
from ragfunnel.retrieve.embedders import RecordedEmbedder
from ragfunnel.retrieve.faiss_search import FaissIndex, faiss_installed
from ragfunnel.retrieve.fusion import best_k
from ragfunnel.types import Document

log = logging.getLogger(__name__)


class CorpusIndex:
    """An index directory opened for search; every file is checked against the manifest first.

    ``remote_embedder``: the ``openai:URL#MODEL`` embeddings server the caller trusts with queries and
    ``OPENAI_API_KEY``; an index whose manifest names a server is refused unless it is that one.
    """

    def __init__(self, root: str | Path, *, verify: bool = True, remote_embedder: str | None = None):
        self.root = Path(root)
        self.manifest = m = read_manifest(self.root)
        # What made the passage and document vectors, loaded on first use: queries must be encoded by it too.
        # Made first, so an index naming a server not trusted is refused before any file is hashed.
        self.embedder = RecordedEmbedder(m.embedder, where=str(self.root), fix=rebuild_fix(self.root, m),
                                         trusted=remote_embedder)
        if verify:
            _verify(self.root, m)
        # Every count the manifest states is checked against the rows actually there (header reads only).
        self._offsets = self._array("documents.offsets.npy", m.documents + 1)
        self._members = self._array("clusters.members.npy", m.documents)
        self._cluster_offsets = self._array("clusters.offsets.npy", m.clusters + 1)
        self.cluster_bm25 = self._bm25("clusters.bm25", m.clusters)
        self.document_bm25 = self._bm25("documents.bm25", m.documents)
        dim = self.embedder.dim  # as recorded (indexes of the bundled MiniLM record none: its 384)
        if m.passages:
            self._spans = self._array("flat.spans.npy", m.passages)
            self._vectors = self._array("flat.vectors.npy", m.passages, dim=dim)
        # Every document's embedding by self.embedder, row i for document(i); None if not built.
        self.document_vectors = self._array(DOCUMENT_VECTORS, m.documents, dim=dim) if m.document_vectors else None
        self._faiss: FaissIndex | None = None  # opened on the first flat search that uses it
        self._faiss_unavailable = False  # the index has one, but the [faiss] extra is not installed
        # The FAISS file is opened on first use: which file it was now, so one swapped in since is not mixed in.
        self._faiss_file = _identity(self.root / FAISS_FILE) if m.faiss else None
        self._documents = (self.root / "documents.jsonl").open("rb")

    def _array(self, name: str, rows: int, *, dim: int | None = None) -> np.ndarray:
        """``name`` memory-mapped, refused unless it holds the ``rows`` rows (of ``dim`` columns) the manifest
        implies."""
        path = self.root / name
        try:
            array = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise InputError(f"{path} is not a readable numpy array ({e}); {rebuild_fix(self.root, self.manifest)}"
                             ) from None
        if array.shape[:1] != (rows,):
            raise InputError(f"{path} has {array.shape[0] if array.ndim else 0} rows where the manifest implies "
                             f"{rows}; {rebuild_fix(self.root, self.manifest)}")
        if dim is not None and array.shape[1:] != (dim,):
            raise InputError(f"{path} holds vectors of shape {array.shape[1:]} where the manifest's embedder gives "
                             f"{dim}-d ones; {rebuild_fix(self.root, self.manifest)}")
        return array

    def _bm25(self, name: str, rows: int) -> BM25Index:
        index = BM25Index.load(self.root / name)
        if len(index) != rows:
            raise InputError(f"{self.root / name} scores {len(index)} texts where the manifest implies {rows}; "
                             f"{rebuild_fix(self.root, self.manifest)}")
        return index

    def __len__(self) -> int:
        return self.manifest.documents

    @property
    def n_clusters(self) -> int:
        return self.manifest.clusters

    def document(self, i: int) -> Document:
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        self._documents.seek(start)
        r = json.loads(self._documents.read(end - start))
        return Document(r["id"], r["title"], r["text"], tuple(r["links"]), position=i)

    def cluster(self, c: int) -> list[int]:
        """Document indices of cluster ``c``."""
        return [int(i) for i in self._members[int(self._cluster_offsets[c]):int(self._cluster_offsets[c + 1])]]

    def search_documents(self, question: str, k: int) -> list[tuple[Document, float]]:
        """The ``k`` documents BM25 scores highest for ``question``, best first, with their scores.

        Documents sharing no term with the question score 0 and are left out (they were not
        retrieved by anything), so fewer than ``k`` may come back.
        """
        if k < 0:
            raise ConfigError(f"the number of documents to retrieve must be >= 0, got {k}")
        if not question.strip():
            raise InputError("the search query is empty; pass a question")
        if k == 0:
            return []
        best, scores = self.document_bm25.top_k(question, k)
        return [(self.document(int(i)), float(s)) for i, s in zip(best, scores, strict=True) if s > 0]

    def passage(self, p: int) -> tuple[Document, str]:
        """The document flat passage ``p`` comes from, and the passage's text."""
        doc, start, end = (int(x) for x in self._spans[p])
        d = self.document(doc)
        return d, d.text[start:end]

    def flat_search(self, question: str, k: int, *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Flat baseline: (passage indices, cosine scores) of the ``k`` passages nearest the question
        (``nearest_passages``: through FAISS when the index has it, unless ``exact``)."""
        if not self.manifest.passages:
            raise ConfigError(f"{self.root} was built without flat passages; rebuild it with "
                              "`ragfunnel index CORPUS --out DIR --flat --force`")
        (query,) = self.embedder.encode([question])
        return self.nearest_passages(query, k, exact=exact)

    @property
    def flat_search_kind(self) -> str:
        """How ``flat_search`` searches: ``exact`` (numpy over every vector) or ``faiss KIND``."""
        return "exact" if self.manifest.faiss is None or not faiss_installed() else f"faiss {self.manifest.faiss.kind}"

    def nearest_passages(self, query: np.ndarray, k: int, *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(passage indices, cosine scores) of the ``k`` passages nearest a unit ``query`` vector, best first.

        Through the index's FAISS file when it has one (and ``exact`` is not asked): FAISS picks the
        candidates, which are re-scored exactly from the stored vectors, so scores and tie order are those
        of exact search. Without one, or without the ``[faiss]`` extra, exact numpy search over every vector.
        """
        faiss_index = None if exact else self._faiss_index()
        if faiss_index is None:
            return nearest(self._vectors, query, k)
        return faiss_index.search(query, k, vectors=self._vectors)

    def _faiss_index(self) -> FaissIndex | None:
        """The index's FAISS file, opened on first use; None without one or without the extra (said once)."""
        config = self.manifest.faiss
        if self._faiss is None and config is not None and not self._faiss_unavailable:
            if not faiss_installed():
                self._faiss_unavailable = True
                log.warning("%s has a FAISS index but FAISS is not installed, so every vector is searched; "
                            "install it with: pip install 'ragfunnel[faiss]'", self.root)
                return None
            if _identity(self.root / FAISS_FILE) != self._faiss_file:
                raise InputError(f"{self.root} was rebuilt or updated since it was opened; open it again (restart "
                                 "the server that holds it)")
            try:
                self._faiss = FaissIndex(self.root / FAISS_FILE, config, rows=self.manifest.passages,
                                         dim=self._vectors.shape[1])
            except InputError as e:
                raise InputError(f"{e}; {rebuild_fix(self.root, self.manifest)}") from None
        return self._faiss

    def close(self) -> None:
        self._faiss = None
        self._documents.close()


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None when it is missing: a file replaced by another has another."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def nearest(vectors: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact search: (row indices, cosine scores) of the ``k`` unit vectors nearest a unit ``query``."""
    return best_k(np.asarray(vectors @ query, dtype=np.float64), k)


def _verify(root: Path, manifest: Manifest) -> None:
    inside = root.resolve()
    for name, want in manifest.files.items():
        path = root / name
        if not path.resolve().is_relative_to(inside):  # a symlink planted in the index
            raise InputError(f"{path} leads outside the index directory; {rebuild_fix(root, manifest)}")
        if not path.is_file():
            raise InputError(f"{path} is missing from the index; {rebuild_fix(root, manifest)}")
        if path.stat().st_size != want["bytes"] or file_sha256(path) != want["sha256"]:
            raise InputError(f"{path} is corrupted (its checksum does not match the manifest); "
                             f"{rebuild_fix(root, manifest)}")
