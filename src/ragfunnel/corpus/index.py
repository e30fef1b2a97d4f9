"""A persistent corpus index: documents, their clusters (Algorithm 1), BM25 over clusters and documents.

An index directory holds plain files only, every one listed with its size and SHA-256 in
``manifest.json`` and checked when the index is opened (the manifest carries the SHA-256 of its
own fields too, and its counts must match the arrays it describes):

``documents.jsonl``          one ``{id, title, text, links}`` object per line, in corpus order
``documents.offsets.npy``    byte offset of each line (N+1 values), for reading one document
``clusters.members.npy``     document indices of every cluster, concatenated
``clusters.offsets.npy``     where each cluster starts in ``clusters.members.npy`` (M+1 values)
``clusters.bm25/``           BM25 over the clusters' texts (bm25s arrays and JSON)
``documents.bm25/``          BM25 over each document's title and text (DRAG/IterDRAG retrieval)
``flat.spans.npy``           with ``flat``: (document, first char, end char) of every passage of
                             ``passage_words`` words, the flat-retrieval baseline's units
``flat.vectors.npy``         with ``flat``: their embeddings (float32, unit length) by the index's embedder:
                             the manifest's ``embedder`` (``ragfunnel.retrieve.embedders``), or the
                             bundled MiniLM when it has none
``flat.faiss``               with ``faiss``: a FAISS index over them, its type and parameters in the
                             manifest's ``faiss`` (``ragfunnel.retrieve.faiss_search``); exact numpy
                             search over ``flat.vectors.npy`` stays the reference, and the search
                             used without the ``[faiss]`` extra
``documents.vectors.npy``    with ``embed_documents``: every document's embedding by the same embedder
                             (float32, unit length), which the bi-encoder pre-ranker reads instead of encoding

Building writes into ``DIR.partial`` and renames it into place, so a crash never leaves a
half-written index behind. A directory that already holds an index is rebuilt only when asked.
With ``ray``, the vectors are embedded on a Ray cluster (``ragfunnel.corpus.ray_embedding``) into the
same files, so the manifest is the same as a one-process build's but for float rounding in the vectors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragfunnel.corpus.clustering import approx_tokens, cluster_documents
from ragfunnel.corpus.graph import relation_graph
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.retrieve.bm25 import BM25Index, TokenIds, index_token_ids, tokenize_ids
from ragfunnel.retrieve.embedders import DEFAULT_EMBEDDER, EmbedderInfo, RecordedEmbedder, resolve_embedder
from ragfunnel.retrieve.faiss_search import CHOICES as FAISS_CHOICES
from ragfunnel.retrieve.faiss_search import FaissConfig, FaissIndex, faiss_installed, import_faiss
from ragfunnel.retrieve.fusion import best_k
from ragfunnel.text import word_windows
from ragfunnel.types import Document

if TYPE_CHECKING:
    from ragfunnel.ray_cluster import RayOptions

log = logging.getLogger(__name__)

FORMAT, VERSION = "ragfunnel-corpus-index", 2  # v2: documents.bm25/
MANIFEST = "manifest.json"
DOCUMENT_VECTORS = "documents.vectors.npy"
DEFAULT_CLUSTER_TOKENS = 4000
_BM25_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "params.index.json",
               "vocab.index.json")  # what bm25s writes for our Lucene BM25, all of which it reads back
# Files every index holds; ``flat`` adds FLAT_FILES, ``embed_documents`` adds DOCUMENT_VECTORS.
REQUIRED_FILES = ("documents.jsonl", "documents.offsets.npy", "clusters.members.npy", "clusters.offsets.npy",
                  *(f"{bm25}/{name}" for bm25 in ("clusters.bm25", "documents.bm25") for name in _BM25_FILES))
FLAT_FILES = ("flat.spans.npy", "flat.vectors.npy")
FAISS_FILE = "flat.faiss"  # with a FAISS index over flat.vectors.npy (manifest.faiss)
_JSON_TYPES = {"str": str, "int": int, "float": (int, float)}  # a field's annotation -> the Python types JSON gives


@dataclass(frozen=True)
class Manifest:
    format: str
    version: int
    source: str  # what the index was built from (a corpus path, or a name)
    content_sha256: str  # of the documents' ids, titles, texts and links
    max_cluster_tokens: int
    documents: int
    clusters: int
    graph: str  # "links" or "title mentions"
    edges: int
    links_outside: int  # links to titles that are not in the corpus (dropped)
    oversize_documents: int  # documents larger than max_cluster_tokens (each its own cluster)
    passages: int  # flat-retrieval passages (0 when the index was built without them)
    passage_words: int
    build_seconds: float
    files: dict[str, dict[str, int | str]]
    # The FAISS index over the flat vectors (FAISS_FILE), or None. Left out of the checksum when None, so
    # manifests written before it existed still match theirs.
    faiss: FaissConfig | None = None
    # The embedder of the flat and document vectors when it is not the bundled MiniLM, else None (left out of the
    # checksum, as ``faiss`` is, so indexes from before it existed still match theirs).
    embedder: EmbedderInfo | None = None
    # SHA-256 of every other field (canonical JSON), computed here; a manifest edited by hand no longer matches it.
    manifest_sha256: str = field(init=False)

    def __post_init__(self):
        """Refuse fields of the wrong JSON type or sign (ValueError), then compute ``manifest_sha256``."""
        for f in (f for f in fields(self) if f.init):  # all but manifest_sha256, computed from them last
            value = getattr(self, f.name)
            if f.type in _JSON_TYPES and (isinstance(value, bool) or not isinstance(value, _JSON_TYPES[f.type])):
                raise ValueError(f"'{f.name}' is {type(value).__name__}, not {f.type}")
            if isinstance(value, int) and value < 0:
                raise ValueError(f"'{f.name}' is negative")
        if not isinstance(self.files, dict):
            raise ValueError(f"'files' is {type(self.files).__name__}, not an object of file names")
        for name, entry in self.files.items():
            if not _inside_index(name):
                raise ValueError(f"the file name {name!r} is not a relative path inside the index directory")
            if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                    and not isinstance(entry["bytes"], bool) and isinstance(entry.get("sha256"), str)):
                raise ValueError(f"the entry of {name!r} is not {{\"bytes\": int, \"sha256\": str}}")
        needed = [*REQUIRED_FILES, *(FLAT_FILES if self.passages else ())]
        if self.faiss is not None:
            if not isinstance(self.faiss, FaissConfig):
                raise ValueError(f"'faiss' is {type(self.faiss).__name__}, not a FAISS index description")
            if not self.passages:
                raise ValueError("'faiss' describes an index over flat passages, but 'passages' is 0")
            needed.append(FAISS_FILE)
        if self.embedder is not None:
            if not isinstance(self.embedder, EmbedderInfo):
                raise ValueError(f"'embedder' is {type(self.embedder).__name__}, not an embedder description")
            if not (self.passages or DOCUMENT_VECTORS in self.files):
                raise ValueError("'embedder' made the index's vectors, but it holds neither passages nor "
                                 "document vectors")
        if missing := [name for name in needed if name not in self.files]:
            raise ValueError(f"'files' does not list {missing[0]}")
        object.__setattr__(self, "manifest_sha256", self.fields_sha256())

    def fields_sha256(self) -> str:
        """SHA-256 of the canonical JSON (sorted keys, no spaces) of every field but ``manifest_sha256``."""
        fields_ = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        for name in ("faiss", "embedder"):
            if fields_[name] is None:
                del fields_[name]
            else:
                fields_[name] = asdict(fields_[name])
        return hashlib.sha256(json.dumps(fields_, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def to_json(self) -> dict:
        """The manifest as written to ``manifest.json`` (no ``faiss`` key when the index has no FAISS file, no
        ``embedder`` key when the bundled MiniLM made its vectors)."""
        data = asdict(self)
        for name in ("faiss", "embedder"):
            if data[name] is None:
                del data[name]
        return data

    @property
    def document_vectors(self) -> bool:
        """Whether the index stores every document's vector (built with ``embed_documents``)."""
        return DOCUMENT_VECTORS in self.files

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        """A manifest as written (ValueError naming the first bad field); the ``document_vectors`` flag of
        earlier v2 indexes is read from ``files``, and ``manifest_sha256`` is recomputed, not taken."""
        given = {k: v for k, v in data.items() if k not in ("document_vectors", "manifest_sha256")}
        names = {f.name for f in fields(cls) if f.init}
        if unexpected := sorted(set(given) - names):
            raise ValueError(f"unexpected fields: {', '.join(map(repr, unexpected))}")
        if missing := sorted(names - set(given) - {"faiss", "embedder"}):
            raise ValueError(f"missing fields: {', '.join(missing)}")
        if given.get("faiss") is not None:
            given["faiss"] = FaissConfig.from_json(given["faiss"])
        if given.get("embedder") is not None:
            given["embedder"] = EmbedderInfo.from_json(given["embedder"])
        return cls(**given)


def _inside_index(name: str) -> bool:
    """Whether a file name from a manifest stays inside the index directory (relative, no ``..``)."""
    path = Path(name)
    return name.isprintable() and bool(path.parts) and not path.is_absolute() and ".." not in path.parts


def check_documents(docs: list[Document]) -> None:
    """Refuse a corpus the index cannot represent faithfully, naming the first offender."""
    if not docs:
        raise InputError("the corpus holds no documents; pass a corpus with at least one document")
    seen: set[str] = set()
    for number, d in enumerate(docs, start=1):
        if d.id in seen:
            raise InputError(f"document {number} repeats the id {d.id!r}; give every document a unique id")
        seen.add(d.id)
        if not d.text.strip():
            raise InputError(f"document {number} ({d.id!r}) has empty text; remove it or give it text")


def content_sha256(docs: list[Document]) -> str:
    digest = hashlib.sha256()
    for d in docs:
        fields = [f.encode() for f in (d.id, d.title, d.text, *d.links)]
        # A header of the fields' byte lengths (so also their count) makes the stream unambiguous:
        # no two different corpora hash the same bytes. Cheaper than one json.dumps per document.
        digest.update(" ".join(str(len(f)) for f in fields).encode() + b"\n" + b"".join(fields))
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _listing(root: Path) -> dict[str, dict[str, int | str]]:
    return {str(p.relative_to(root)): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != MANIFEST}


def build_index(
    docs: list[Document],
    out: str | Path,
    *,
    source: str,
    max_cluster_tokens: int = DEFAULT_CLUSTER_TOKENS,
    flat: bool = False,
    passage_words: int = 100,
    embed_documents: bool = False,
    faiss: str | None = None,
    embedder: str = DEFAULT_EMBEDDER,
    ray: RayOptions | None = None,
    force: bool = False,
) -> Manifest:
    """Cluster ``docs`` and write an index to ``out``; an up-to-date index there is kept as is.

    ``faiss`` (with ``flat``): a FAISS index over the passage vectors, ``auto`` (its type by corpus size,
    ``faiss_search.choose_kind``), ``flat``, ``hnsw``, ``ivf``, ``ivfpq``, or ``none``. Left unset, it is
    ``auto`` when the ``[faiss]`` extra is installed and ``none`` otherwise; set, it needs the extra.
    ``embedder`` (a spec, ``ragfunnel.retrieve.embedders``) embeds the passages and documents, on the
    Ray cluster ``ray`` describes when given.
    """
    out = Path(out)
    if max_cluster_tokens < 1:
        raise ConfigError(f"max_cluster_tokens must be at least 1, got {max_cluster_tokens}")
    if faiss is not None and faiss not in FAISS_CHOICES:
        raise ConfigError(f"unknown FAISS index type {faiss!r}; valid: {', '.join(FAISS_CHOICES)}")
    if faiss not in (None, "none") and not flat:
        raise ConfigError(f"--faiss {faiss} indexes the flat passages' vectors; pass --flat too")
    if faiss not in (None, "none"):
        import_faiss()  # a missing extra stops here, before any work
    if not (flat or embed_documents) and (embedder != DEFAULT_EMBEDDER or ray is not None):
        option = f"--embedder {embedder}" if embedder != DEFAULT_EMBEDDER else "--ray"
        raise ConfigError(f"{option} embeds flat passages and documents; pass --flat (or --embed-documents) too")
    # Resolved now: a bad spec or missing model stops before any work; its identity goes in the manifest.
    chosen = resolve_embedder(embedder) if embedder != DEFAULT_EMBEDDER else None
    digest = content_sha256(docs)
    if (out / MANIFEST).exists() and not force:
        try:
            old = _read_manifest(out)
        except InputError:
            old = None  # damaged, or from another ragfunnel: rebuilt only when asked
        if old is not None and _faiss_matches(old, faiss) and (
                old.content_sha256, old.max_cluster_tokens, old.passage_words, old.document_vectors,
                old.embedder and (old.embedder.spec, old.embedder.identity)) == (
                digest, max_cluster_tokens, passage_words if flat else 0, embed_documents,
                chosen and (chosen.spec, chosen.identity)):
            log.info("%s is up to date with %s", out, source)
            return old
        raise ConfigError(f"{out} holds an index of another corpus or configuration, or a damaged one; pass --force "
                          "to rebuild it or choose another --out")
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).exists():
        raise ConfigError(f"{out} is not empty and holds no index; choose an empty or new --out directory")
    check_documents(docs)

    started = time.perf_counter()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _write_documents(docs, tmp)
    log.info("building the relation graph of %d documents", len(docs))
    graph = relation_graph(docs)
    titles = {d.title for d in docs}
    sizes = [approx_tokens(d) for d in docs]
    log.info("clustering (%d edges, at most %d tokens per cluster)", graph.number_of_edges(), max_cluster_tokens)
    clusters = cluster_documents(graph, sizes, max_size=max_cluster_tokens)
    members = np.fromiter((i for c in clusters for i in c), dtype=np.int64, count=len(docs))
    np.save(tmp / "clusters.members.npy", members)
    np.save(tmp / "clusters.offsets.npy", np.cumsum([0, *map(len, clusters)], dtype=np.int64))
    log.info("tokenising %d documents", len(docs))
    tokens = document_tokens(docs)
    log.info("indexing %d clusters with BM25", len(clusters))
    # A cluster's text (cluster_text) is its documents' joined by blank lines, so its tokens are theirs.
    _write_bm25(tokens.joined(clusters), tmp / "clusters.bm25")
    log.info("indexing %d documents with BM25", len(docs))
    _write_bm25(tokens, tmp / "documents.bm25")
    jobs = []  # (texts, vectors file, what): embedded one after the other, on Ray joining the cluster once
    if flat:
        jobs.append((_write_spans(docs, tmp, passage_words), tmp / "flat.vectors.npy", "embed passages"))
    if embed_documents:
        jobs.append(([d.render() for d in docs], tmp / DOCUMENT_VECTORS, "embed documents"))
    _write_vectors(jobs, spec=chosen.spec if chosen else DEFAULT_EMBEDDER, ray=ray,
                   identity=chosen.identity if chosen else None)
    n_passages = len(jobs[0][0]) if flat else 0
    faiss_config = None
    if flat and (faiss or ("auto" if faiss_installed() else "none")) != "none":
        from ragfunnel.retrieve.faiss_search import build as build_faiss

        faiss_config = build_faiss(np.load(tmp / "flat.vectors.npy", mmap_mode="r"), tmp / FAISS_FILE, faiss or "auto")
        log.info("FAISS index over %d passages: %s", n_passages, faiss_config.describe())
    info = None
    if chosen is not None:
        vectors = np.load(tmp / ("flat.vectors.npy" if flat else DOCUMENT_VECTORS), mmap_mode="r")
        info = EmbedderInfo(spec=chosen.spec, identity=chosen.identity, dim=int(vectors.shape[1]))
    manifest = Manifest(
        format=FORMAT, version=VERSION, source=source, content_sha256=digest,
        max_cluster_tokens=max_cluster_tokens, documents=len(docs), clusters=len(clusters),
        graph="links" if any(d.links for d in docs) else "title mentions", edges=graph.number_of_edges(),
        links_outside=sum(1 for d in docs for t in d.links if t not in titles),
        oversize_documents=sum(1 for s in sizes if s > max_cluster_tokens),
        passages=n_passages, passage_words=passage_words if flat else 0,
        build_seconds=round(time.perf_counter() - started, 3), files=_listing(tmp), faiss=faiss_config,
        embedder=info,
    )
    (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return manifest


def _faiss_matches(old: Manifest, faiss: str | None) -> bool:
    """Whether an index's FAISS file is what ``faiss`` asks for (unset: whatever it has)."""
    if faiss is None:
        return True
    if faiss == "none":
        return old.faiss is None
    return old.faiss is not None and faiss in ("auto", old.faiss.kind)


def cluster_text(docs: list[Document], members: list[int]) -> str:
    return "\n\n".join(docs[i].render() for i in members)


def document_tokens(docs: list[Document]) -> TokenIds:
    """Every document's rendered title and text, tokenised once for both BM25 indexes."""
    return tokenize_ids(d.render() for d in docs)


def _write_bm25(tokens: TokenIds, directory: Path) -> None:
    index_token_ids(tokens).save(directory)


def _write_spans(docs: list[Document], root: Path, passage_words: int) -> list[str]:
    """Cut every document into ``passage_words``-word passages, write where they are, and return their texts."""
    spans, texts = [], []
    for i, d in enumerate(docs):
        for start, end in word_windows(d.text, passage_words):
            spans.append((i, start, end))
            texts.append(f"{d.title}\n{d.text[start:end]}" if d.title else d.text[start:end])
    np.save(root / "flat.spans.npy", np.asarray(spans, dtype=np.int64).reshape(-1, 3))
    return texts


def _write_vectors(jobs: list[tuple[list[str], Path, str]], *, spec: str, ray: RayOptions | None,
                   identity: str | None) -> None:
    """Write the embeddings of every job's texts by the embedder ``spec`` to its file: on Ray workers with
    ``ray`` (into the same files, merged from shards; each worker's embedder must have ``identity``, the
    one the manifest records, when given), else in this process."""
    if ray is not None:
        from ragfunnel.corpus.ray_embedding import embed_on_ray

        embed_on_ray(jobs, spec=spec, identity=identity, options=ray)
        return
    for texts, path, desc in jobs:
        np.save(path, _embed(texts, desc, spec=spec))


def _embed(texts: list[str], desc: str, step: int = 256, *, spec: str = DEFAULT_EMBEDDER) -> np.ndarray:
    """Embeddings of ``texts`` by the embedder ``spec`` (float32, unit length), with a progress bar."""
    from tqdm.auto import tqdm

    embedder = resolve_embedder(spec)
    parts = []
    with tqdm(total=len(texts), desc=desc, unit="text", disable=None) as bar:
        for start in range(0, len(texts), step):
            parts.append(embedder.encode(texts[start:start + step]))
            bar.update(len(parts[-1]))
    return np.concatenate(parts).astype(np.float32, copy=False)


def _write_documents(docs: list[Document], root: Path) -> None:
    offsets = [0]
    with (root / "documents.jsonl").open("wb") as f:
        for d in docs:
            line = json.dumps({"id": d.id, "title": d.title, "text": d.text, "links": list(d.links)},
                              ensure_ascii=False).encode() + b"\n"
            f.write(line)
            offsets.append(offsets[-1] + len(line))
    np.save(root / "documents.offsets.npy", np.asarray(offsets, dtype=np.int64))


class CorpusIndex:
    """An index directory opened for search; every file is checked against the manifest first."""

    def __init__(self, root: str | Path, *, verify: bool = True):
        self.root = Path(root)
        self.manifest = m = _read_manifest(self.root)
        if verify:
            _verify(self.root, m)
        # Every count the manifest states is checked against the rows actually there (header reads only).
        self._offsets = self._array("documents.offsets.npy", m.documents + 1)
        self._members = self._array("clusters.members.npy", m.documents)
        self._cluster_offsets = self._array("clusters.offsets.npy", m.clusters + 1)
        self.cluster_bm25 = self._bm25("clusters.bm25", m.clusters)
        self.document_bm25 = self._bm25("documents.bm25", m.documents)
        # What made the passage and document vectors, loaded on first use: queries must be encoded by it too.
        self.embedder = RecordedEmbedder(m.embedder, where=str(self.root), fix=_rebuild(self.root, m))
        dim = self.embedder.dim  # as recorded (indexes of the bundled MiniLM record none: its 384)
        if m.passages:
            self._spans = self._array("flat.spans.npy", m.passages)
            self._vectors = self._array("flat.vectors.npy", m.passages, dim=dim)
        # Every document's embedding by self.embedder, row i for document(i); None if not built.
        self.document_vectors = self._array(DOCUMENT_VECTORS, m.documents, dim=dim) if m.document_vectors else None
        self._faiss: FaissIndex | None = None  # opened on the first flat search that uses it
        self._faiss_unavailable = False  # the index has one, but the [faiss] extra is not installed
        self._documents = (self.root / "documents.jsonl").open("rb")

    def _array(self, name: str, rows: int, *, dim: int | None = None) -> np.ndarray:
        """``name`` memory-mapped, refused unless it holds the ``rows`` rows (of ``dim`` columns) the manifest
        implies."""
        path = self.root / name
        try:
            array = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise InputError(f"{path} is not a readable numpy array ({e}); {_rebuild(self.root, self.manifest)}"
                             ) from None
        if array.shape[:1] != (rows,):
            raise InputError(f"{path} has {array.shape[0] if array.ndim else 0} rows where the manifest implies "
                             f"{rows}; {_rebuild(self.root, self.manifest)}")
        if dim is not None and array.shape[1:] != (dim,):
            raise InputError(f"{path} holds vectors of shape {array.shape[1:]} where the manifest's embedder gives "
                             f"{dim}-d ones; {_rebuild(self.root, self.manifest)}")
        return array

    def _bm25(self, name: str, rows: int) -> BM25Index:
        index = BM25Index.load(self.root / name)
        if len(index) != rows:
            raise InputError(f"{self.root / name} scores {len(index)} texts where the manifest implies {rows}; "
                             f"{_rebuild(self.root, self.manifest)}")
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
            try:
                self._faiss = FaissIndex(self.root / FAISS_FILE, config, rows=self.manifest.passages,
                                         dim=self._vectors.shape[1])
            except InputError as e:
                raise InputError(f"{e}; {_rebuild(self.root, self.manifest)}") from None
        return self._faiss

    def close(self) -> None:
        self._faiss = None
        self._documents.close()


def nearest(vectors: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact search: (row indices, cosine scores) of the ``k`` unit vectors nearest a unit ``query``."""
    return best_k(np.asarray(vectors @ query, dtype=np.float64), k)


def _rebuild(root: Path, manifest: Manifest | None = None) -> str:
    """The fix for a damaged index: the command that rebuilds it, with the options ``manifest`` says it had."""
    options = ""
    if manifest is not None:
        options += "".join((" --flat" if manifest.passages else "",
                            f" --faiss {manifest.faiss.kind}" if manifest.faiss else "",
                            " --embed-documents" if manifest.document_vectors else "",
                            f" --embedder {manifest.embedder.spec}" if manifest.embedder else ""))
    return f"rebuild it with `ragfunnel index CORPUS --out {root}{options} --force`"


def _read_manifest(root: Path) -> Manifest:
    """The manifest of the index at ``root``, refused unless its fields are well-typed and match its checksum.

    A manifest without ``manifest_sha256`` (written before manifests carried one) is refused too, with
    the rebuild command: accepting it would let anyone skip the check by deleting the field.
    """
    path = root / MANIFEST
    if not path.exists():
        raise InputError(f"{root} is not a ragfunnel index (no {MANIFEST}); build one with "
                         "`ragfunnel index CORPUS --out DIR`")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8, not JSON, nested beyond reason
        raise InputError(f"{path} is corrupted (not UTF-8 JSON); {_rebuild(root)}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} is corrupted (a JSON {type(data).__name__}, not an object); {_rebuild(root)}")
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise InputError(f"{root} was written as {data.get('format')!r} v{data.get('version')!r}; this ragfunnel "
                         f"reads {FORMAT} v{VERSION}: {_rebuild(root)}")
    if "manifest_sha256" not in data:
        raise InputError(f"{path} carries no checksum (an index from an earlier ragfunnel); {_rebuild(root)}")
    try:
        manifest = Manifest.from_json(data)
    except ValueError as e:
        raise InputError(f"{path} is corrupted ({e}); {_rebuild(root)}") from None
    if manifest.manifest_sha256 != data["manifest_sha256"]:
        raise InputError(f"{path} was altered (its checksum does not match its fields); {_rebuild(root)}")
    return manifest


def _verify(root: Path, manifest: Manifest) -> None:
    inside = root.resolve()
    for name, want in manifest.files.items():
        path = root / name
        if not path.resolve().is_relative_to(inside):  # a symlink planted in the index
            raise InputError(f"{path} leads outside the index directory; {_rebuild(root, manifest)}")
        if not path.is_file():
            raise InputError(f"{path} is missing from the index; {_rebuild(root, manifest)}")
        if path.stat().st_size != want["bytes"] or file_sha256(path) != want["sha256"]:
            raise InputError(f"{path} is corrupted (its checksum does not match the manifest); "
                             f"{_rebuild(root, manifest)}")
