"""Building a corpus index: documents, their clusters (Algorithm 1), BM25 over clusters and documents, and,
when asked, passage and document vectors and a FAISS file over them, all listed in the manifest
(``ragfunnel.corpus.index_manifest``, which also says what each file holds).

Building holds the index's writer lock and writes into ``DIR.partial``, which is then swapped into place
(``ragfunnel.corpus.index_swap``), so a crash never leaves a half-written index behind and two writers never
mix their files. A directory that already holds an index is rebuilt only when asked.
With ``ray``, the vectors are embedded on a Ray cluster (``ragfunnel.corpus.ray_embedding``) into the
same files, so the manifest is the same as a one-process build's but for float rounding in the vectors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragfunnel.corpus.clustering import approx_tokens, cluster_documents
from ragfunnel.corpus.graph import relation_graph
from ragfunnel.corpus.index_manifest import (
    DOCUMENT_DIGESTS,
    DOCUMENT_TOKENS,
    DOCUMENT_VECTORS,
    FAISS_FILE,
    FORMAT,
    MANIFEST,
    VERSION,
    IndexConfig,
    Manifest,
    file_sha256,
    read_manifest,
)
from ragfunnel.corpus.index_swap import PARTIAL_MARK, finish_index, partial_directory, writing
from ragfunnel.errors import ConfigError, InputError, option
from ragfunnel.retrieve.bm25 import TokenIds, index_token_ids, tokenize_ids
from ragfunnel.retrieve.embedders import DEFAULT_EMBEDDER, EmbedderInfo, resolve_embedder
from ragfunnel.retrieve.faiss_search import faiss_installed, import_faiss
from ragfunnel.text import word_windows
from ragfunnel.types import Document

if TYPE_CHECKING:
    from ragfunnel.ray_cluster import RayOptions
    from ragfunnel.retrieve.embedders import Embedder
    from ragfunnel.retrieve.faiss_search import FaissConfig

log = logging.getLogger(__name__)


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


def content_digests(docs: list[Document]) -> tuple[str, np.ndarray]:
    """The corpus's SHA-256 over every document's id, title, text and links (what the manifest records), and
    every document's over its title and text (32 bytes a row): what ``--update`` reuses a document's terms,
    passages and vectors by, as they depend on nothing else (an id renumbered, or a link changed, is kept)."""
    corpus = hashlib.sha256()
    digests = np.empty((len(docs), 32), dtype=np.uint8)
    for i, d in enumerate(docs):
        corpus.update(_unambiguous(d.id, d.title, d.text, *d.links))
        digests[i] = np.frombuffer(hashlib.sha256(_unambiguous(d.title, d.text)).digest(), dtype=np.uint8)
    return corpus.hexdigest(), digests


def _unambiguous(*strings: str) -> bytes:
    fields = [f.encode() for f in strings]
    # A header of the fields' byte lengths (so also their count) makes the stream unambiguous:
    # no two different corpora hash the same bytes. Cheaper than one json.dumps per document.
    return " ".join(str(len(f)) for f in fields).encode() + b"\n" + b"".join(fields)


def listing(root: Path) -> dict[str, dict[str, int | str]]:
    return {str(p.relative_to(root)): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in (MANIFEST, PARTIAL_MARK)}


def build_index(
    docs: list[Document],
    out: str | Path,
    config: IndexConfig = IndexConfig(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    source: str,
    ray: RayOptions | None = None,
    force: bool = False,
) -> Manifest:
    """Cluster ``docs`` and write an index to ``out`` with the settings ``config``; an up-to-date index there is
    kept as is.

    ``config.faiss`` (with ``flat``): a FAISS index over the passage vectors, ``auto`` (its type by corpus size,
    ``faiss_search.choose_kind``), ``flat``, ``hnsw``, ``ivf``, ``ivfpq``, or ``none``. Left unset, it is
    ``auto`` when the ``[faiss]`` extra is installed and ``none`` otherwise; set, it needs the extra.
    ``config.embedder`` (a spec, ``ragfunnel.retrieve.embedders``) embeds the passages and documents, on the
    Ray cluster ``ray`` describes when given. Another process writing ``out`` meanwhile is refused
    (:class:`~ragfunnel.errors.RunBusy`, naming its PID).
    """
    check_extras(config, ray)
    with writing(Path(out)) as out:
        chosen = chosen_embedder(config)  # a bad spec or missing model stops before any work
        digest, digests = content_digests(docs)
        old = _kept_index(out, (digest, *config.identity(chosen)), config.faiss, force=force)
        if old is not None:
            log.info("%s is up to date with %s", out, source)
            return old
        check_documents(docs)

        started = time.perf_counter()
        tmp = partial_directory(out)
        write_documents(docs, tmp, digests)
        tokens = document_tokens(docs)
        clustering = write_clusters(docs, tokens, tmp, config.max_cluster_tokens)
        n_passages, info = _write_embeddings(docs, tmp, config, chosen=chosen, ray=ray)
        faiss_config = write_faiss(tmp, config.faiss, n_passages) if config.flat else None
        return install(tmp, out, Manifest(
            format=FORMAT, version=VERSION, source=source, content_sha256=digest,
            max_cluster_tokens=config.max_cluster_tokens, documents=len(docs), clusters=clustering.clusters,
            graph=clustering.graph, edges=clustering.edges, links_outside=clustering.links_outside,
            oversize_documents=clustering.oversize_documents,
            passages=n_passages, passage_words=config.passage_words if config.flat else 0,
            build_seconds=round(time.perf_counter() - started, 3), files=listing(tmp), faiss=faiss_config,
            embedder=info,
        ))


def install(tmp: Path, out: Path, manifest: Manifest) -> Manifest:
    """Write ``manifest`` into the finished build ``tmp`` and swap it in for ``out``."""
    finish_index(tmp, out, json.dumps(manifest.to_json(), indent=2))
    return manifest


def check_extras(config: IndexConfig, ray: RayOptions | None) -> None:
    """Refuse a FAISS index without its extra, and Ray with nothing to embed, before any work."""
    if config.faiss not in (None, "none"):
        import_faiss()  # a missing extra stops here, before any work
    if ray is not None and not config.embeds:
        raise ConfigError(f"{option('ray')} embeds flat passages and documents; set {option('flat')} (or "
                          f"{option('embed_documents')}) too")


def chosen_embedder(config: IndexConfig) -> Embedder | None:
    """The embedder ``config`` names, resolved (a bad spec or a missing model fails here); None for the bundled
    MiniLM, which the manifest does not record."""
    return resolve_embedder(config.embedder) if config.embedder != DEFAULT_EMBEDDER else None


def _kept_index(out: Path, wanted: tuple[object, ...], faiss: str | None, *, force: bool) -> Manifest | None:
    """The index in ``out`` when it is the one asked for (its corpus digest and :meth:`Manifest.identity` are
    ``wanted``), None when ``out`` may be built into; a ConfigError when it holds another index (unless
    ``force``) or other files."""
    if (out / MANIFEST).exists() and not force:
        try:
            old = read_manifest(out)
        except InputError:
            old = None  # damaged, or from another ragfunnel: rebuilt only when asked
        if old is not None and faiss_matches(old, faiss) and (old.content_sha256, *old.identity()) == wanted:
            return old
        raise ConfigError(f"{out} holds an index of another corpus or configuration, or a damaged one; set "
                          f"{option('force')} to rebuild it, or write to another directory ({option('out')})")
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).exists():
        raise ConfigError(f"{out} is not empty and holds no index; choose an empty or new directory ({option('out')})")
    return None


@dataclass(frozen=True)
class _Clustering:
    """What the manifest records of the relation graph and the clusters cut from it."""

    clusters: int
    graph: str  # "links" when any document lists its links, else "title mentions"
    edges: int
    links_outside: int  # links to titles the corpus does not hold
    oversize_documents: int  # documents larger than a cluster may be, each a cluster of its own


def write_clusters(docs: list[Document], tokens: TokenIds, root: Path, max_cluster_tokens: int) -> _Clustering:
    """Cluster the documents over their relation graph (Algorithm 1), write the clusters and BM25 over the
    clusters and over the documents from the documents' ``tokens`` (:func:`document_tokens`), kept beside them
    for ``--update``."""
    log.info("building the relation graph of %d documents", len(docs))
    graph = relation_graph(docs)
    titles = {d.title for d in docs}
    sizes = [approx_tokens(d) for d in docs]
    log.info("clustering (%d edges, at most %d tokens per cluster)", graph.number_of_edges(), max_cluster_tokens)
    clusters = cluster_documents(graph, sizes, max_size=max_cluster_tokens)
    members = np.fromiter((i for c in clusters for i in c), dtype=np.int64, count=len(docs))
    np.save(root / "clusters.members.npy", members)
    np.save(root / "clusters.offsets.npy", np.cumsum([0, *map(len, clusters)], dtype=np.int64))
    _write_bm25_indexes(tokens, clusters, root)
    return _Clustering(
        clusters=len(clusters), graph="links" if any(d.links for d in docs) else "title mentions",
        edges=graph.number_of_edges(), links_outside=sum(1 for d in docs for t in d.links if t not in titles),
        oversize_documents=sum(1 for s in sizes if s > max_cluster_tokens),
    )


def _write_bm25_indexes(tokens: TokenIds, clusters: list[list[int]], root: Path) -> None:
    tokens.save(root / DOCUMENT_TOKENS)
    log.info("indexing %d clusters with BM25", len(clusters))
    # A cluster's text (cluster_text) is its documents' joined by blank lines, so its tokens are theirs.
    _write_bm25(tokens.joined(clusters), root / "clusters.bm25")
    log.info("indexing %d documents with BM25", len(tokens))
    _write_bm25(tokens, root / "documents.bm25")


def _write_embeddings(docs: list[Document], root: Path, config: IndexConfig, *, chosen: Embedder | None,
                      ray: RayOptions | None) -> tuple[int, EmbedderInfo | None]:
    """Write the flat passages and their vectors (``config.flat``) and the documents' vectors
    (``config.embed_documents``); return how many passages there are and, for an embedder other than the
    default, what it is."""
    flat = config.flat
    jobs = []  # (texts, vectors file, what): embedded one after the other, on Ray joining the cluster once
    if flat:
        jobs.append((_write_spans(docs, root, config.passage_words), root / "flat.vectors.npy", "embed passages"))
    if config.embed_documents:
        jobs.append(([d.render() for d in docs], root / DOCUMENT_VECTORS, "embed documents"))
    write_vectors(jobs, spec=chosen.spec if chosen else DEFAULT_EMBEDDER, ray=ray,
                   identity=chosen.identity if chosen else None)
    n_passages = len(jobs[0][0]) if flat else 0
    if chosen is None:
        return n_passages, None
    vectors = np.load(root / ("flat.vectors.npy" if flat else DOCUMENT_VECTORS), mmap_mode="r")
    return n_passages, EmbedderInfo(spec=chosen.spec, identity=chosen.identity, dim=int(vectors.shape[1]))


def write_faiss(root: Path, faiss: str | None, n_passages: int) -> FaissConfig | None:
    """A FAISS index over the passage vectors, of the type ``faiss`` names; unset, ``auto`` when the extra is
    installed and none otherwise."""
    kind = faiss or ("auto" if faiss_installed() else "none")
    if kind == "none":
        return None
    from ragfunnel.retrieve.faiss_search import build as build_faiss

    config = build_faiss(np.load(root / "flat.vectors.npy", mmap_mode="r"), root / FAISS_FILE, kind)
    log.info("FAISS index over %d passages: %s", n_passages, config.describe())
    return config


def faiss_matches(old: Manifest, faiss: str | None) -> bool:
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
    log.info("tokenising %d documents", len(docs))
    return tokenize_ids(d.render() for d in docs)


def _write_bm25(tokens: TokenIds, directory: Path) -> None:
    index_token_ids(tokens).save(directory)


def _write_spans(docs: list[Document], root: Path, passage_words: int) -> list[str]:
    """Cut every document into ``passage_words``-word passages, write where they are, and return their texts."""
    spans, texts = [], []
    for i, d in enumerate(docs):
        for start, end in word_windows(d.text, passage_words):
            spans.append((i, start, end))
            texts.append(passage_text(d, start, end))
    np.save(root / "flat.spans.npy", np.asarray(spans, dtype=np.int64).reshape(-1, 3))
    return texts


def passage_text(d: Document, start: int, end: int) -> str:
    """What is embedded for the passage ``d.text[start:end]``: the document's title, then the passage."""
    return f"{d.title}\n{d.text[start:end]}" if d.title else d.text[start:end]


def write_vectors(jobs: list[tuple[list[str], Path, str]], *, spec: str, ray: RayOptions | None,
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


def write_documents(docs: list[Document], root: Path, digests: np.ndarray) -> None:
    """Write the documents, where each starts, and their digests (from :func:`content_digests`)."""
    offsets = [0]
    with (root / "documents.jsonl").open("wb") as f:
        for d in docs:
            line = json.dumps({"id": d.id, "title": d.title, "text": d.text, "links": list(d.links)},
                              ensure_ascii=False).encode() + b"\n"
            f.write(line)
            offsets.append(offsets[-1] + len(line))
    np.save(root / "documents.offsets.npy", np.asarray(offsets, dtype=np.int64))
    np.save(root / DOCUMENT_DIGESTS, digests)
