"""Updating a corpus index for a changed corpus: ``ragfunnel index CORPUS --out DIR --update``.

Documents are matched by the SHA-256 of their title and text (``documents.sha256.npy``), the only things
their BM25 terms, passages and vectors depend on: a document whose title and text the index holds keeps
them, whatever its id and links now (ids a corpus numbers by row move when a row above is removed); a new
or changed one is tokenised, cut into passages and embedded; documents the corpus no longer holds are
dropped. What depends on the whole corpus is then recomputed from those parts, so the updated index
is the one a fresh build of the same corpus writes:

- the relation graph and the clusters: Algorithm 1 is one greedy pass over the whole graph in one global
  order, so a single changed link can move clusters anywhere in its connected component (on a linked
  corpus, nearly all of it); it costs seconds per 100k documents;
- both BM25 indexes, whose idf and average length are the corpus's: rebuilt from the kept and new terms,
  numbered as a fresh tokenisation numbers them;
- the FAISS index, from the kept and new vectors.

Embedding is what a build spends its time on, and only the new passages are embedded. The update is
written into ``DIR.partial`` and swapped in as a build is, under the same writer lock
(``ragfunnel.corpus.index_swap``): a kill at any moment leaves the old index in ``DIR``, usable, and a second
writer is refused.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import (
    build_index,
    check_documents,
    check_extras,
    chosen_embedder,
    content_digests,
    document_tokens,
    faiss_matches,
    install,
    listing,
    passage_text,
    write_clusters,
    write_documents,
    write_faiss,
    write_vectors,
)
from ragfunnel.corpus.index_manifest import (
    DOCUMENT_DIGESTS,
    DOCUMENT_TOKENS,
    DOCUMENT_VECTORS,
    MANIFEST,
    IndexConfig,
    Manifest,
    read_manifest,
)
from ragfunnel.corpus.index_swap import index_folder, partial_directory, restore_previous, writing
from ragfunnel.errors import ConfigError, option
from ragfunnel.retrieve.bm25 import TOKENISER_FILE, TokenIds, concatenate_tokens, tokeniser_identity
from ragfunnel.retrieve.embedders import DEFAULT_EMBEDDER
from ragfunnel.retrieve.faiss_search import choose_kind, import_faiss, physical_memory
from ragfunnel.text import word_windows
from ragfunnel.types import Document

if TYPE_CHECKING:
    from ragfunnel.ray_cluster import RayOptions

log = logging.getLogger(__name__)

UPDATE_FILES = (DOCUMENT_DIGESTS, *(f"{DOCUMENT_TOKENS}/{name}" for name in ("ids.npy", "lengths.npy", "terms.json",
                                                                           TOKENISER_FILE)))


@dataclass(frozen=True)
class IndexUpdate:
    """What an update did: the new manifest, and how many documents it kept (their title and text were in the
    index), added, changed (an id the index holds, with another title or text) and removed."""

    manifest: Manifest
    kept: int
    added: int
    changed: int
    removed: int
    rewritten: bool = False  # False: the index held this corpus already

    def describe(self) -> str:
        if not self.rewritten:
            return "up to date"
        if not (self.added or self.changed or self.removed):
            return f"no text changed; links, ids or order updated in {self.manifest.build_seconds:.1f}s"
        return (f"{self.added:,} added, {self.changed:,} changed, {self.removed:,} removed, {self.kept:,} kept, "
                f"in {self.manifest.build_seconds:.1f}s")


def update_index(
    docs: list[Document],
    out: str | Path,
    config: IndexConfig = IndexConfig(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    source: str,
    ray: RayOptions | None = None,
) -> IndexUpdate:
    """Make the index in ``out`` hold ``docs``, reusing what it holds of them; build it when ``out`` has none.

    ``config`` must be the settings the index was built with (a ConfigError names ``force`` otherwise);
    ``config.faiss`` unset: see :func:`_faiss_kind`.
    """
    out = Path(out)
    check_extras(config, ray)
    restore_previous(out)
    if not (index_folder(out) / MANIFEST).exists():  # build_index takes the writer lock itself
        return IndexUpdate(build_index(docs, out, config, source=source, ray=ray), kept=0, added=len(docs),
                           changed=0, removed=0, rewritten=True)
    check_documents(docs)
    with writing(out) as out:  # the folder itself, when out is a link to it
        digest, digests = content_digests(docs)
        manifest = read_manifest(out)
        if digest == manifest.content_sha256 and faiss_matches(manifest, config.faiss):  # before hashing every file
            log.info("%s is up to date with %s", out, source)
            return IndexUpdate(manifest, kept=len(docs), added=0, changed=0, removed=0)
        chosen = chosen_embedder(config)
        old = CorpusIndex(out, remote_embedder=chosen and chosen.spec)  # every file checked against the manifest
        try:
            _check_updatable(old, out, config.identity(chosen), config.faiss)
            kind = _faiss_kind(old.manifest, config.faiss, old.embedder.dim)
            if kind != "none":
                import_faiss()  # a missing extra stops here, before any embedding
            return _update(old, docs, digest, digests, out, source=source, faiss=kind, ray=ray)
        finally:
            old.close()


def _faiss_kind(m: Manifest, faiss: str | None, dim: int) -> str:
    """The FAISS type to write: ``faiss`` when given; unset, none for an index without one, ``auto`` for one
    whose type is what ``auto`` chose at its size (so it chooses again at the new size, as a fresh build of
    the same command would), else the index's own."""
    if faiss is not None:
        return faiss
    if m.faiss is None:
        return "none"
    chosen_by_auto = choose_kind(m.passages, dim, memory_bytes=physical_memory())
    return "auto" if m.faiss.kind == chosen_by_auto else m.faiss.kind


def _built_with(m: Manifest) -> str:
    """The settings an index was built with that are not the defaults, each spelled by the front end."""
    return ", ".join(option(name) if value is True else f"{option(name)} {value}"
                     for name, value in m.settings().not_at_default()) or "the defaults"


def _check_updatable(old: CorpusIndex, out: Path, wanted: tuple[object, ...], faiss: str | None) -> None:
    m = old.manifest
    rebuild = f"or rebuild it with these (with {option('force')} instead of {option('update')})"
    if m.identity()[:3] != wanted[:3] or not faiss_matches(m, faiss):
        raise ConfigError(f"{out} was built with other options ({_built_with(m)}); pass the same ones to update "
                          f"it, {rebuild}")
    if m.identity()[3] != wanted[3]:
        raise ConfigError(f"{out} was embedded by another embedder, or by other files of the same one "
                          f"({m.embedder.spec if m.embedder else DEFAULT_EMBEDDER}); {rebuild}")
    if missing := [name for name in UPDATE_FILES if name not in m.files]:
        raise ConfigError(f"{out} was built by an earlier ragfunnel, without the {missing[0]} an update reads; "
                          f"rebuild it once with {option('force')}")
    made_by = (old.root / DOCUMENT_TOKENS / TOKENISER_FILE).read_text(encoding="utf-8")
    if made_by != tokeniser_identity():
        raise ConfigError(f"{out}'s terms were made by {made_by}, and this ragfunnel tokenises with "
                          f"{tokeniser_identity()}; they would not mix: rebuild it once with {option('force')}")


def _update(old: CorpusIndex, docs: list[Document], digest: str, digests: np.ndarray, out: Path, *, source: str,
            faiss: str, ray: RayOptions | None) -> IndexUpdate:
    """Write the index of ``docs`` (whose SHA-256 is ``digest``, and each document's ``digests``) from ``old``'s
    parts and what is new, and swap it in."""
    started = time.perf_counter()
    m = old.manifest
    held = [row.tobytes() for row in np.load(out / DOCUMENT_DIGESTS)]
    where = {key: j for j, key in enumerate(held)}
    wanted = [row.tobytes() for row in digests]
    # Each document's row in the old index, or -1 when it is new or changed.
    source_of = np.fromiter((where.get(key, -1) for key in wanted), dtype=np.int64, count=len(docs))
    fresh = np.flatnonzero(source_of < 0).tolist()
    still = set(wanted)
    dropped = [j for j, key in enumerate(held) if key not in still]
    changed = len({old.document(j).id for j in dropped} & {docs[i].id for i in fresh})
    log.info("updating %s: %d documents new or changed, %d dropped", out, len(fresh), len(dropped))

    tmp = partial_directory(out)
    write_documents(docs, tmp, digests)
    tokens = _updated_tokens(TokenIds.load(out / DOCUMENT_TOKENS), docs, source_of, fresh)
    clustering = write_clusters(docs, tokens, tmp, m.max_cluster_tokens)
    n_passages = _write_updated_vectors(old, docs, source_of, fresh, tmp, ray=ray)
    faiss_config = write_faiss(tmp, faiss, n_passages) if m.passages else None
    manifest = install(tmp, out, Manifest(
        format=m.format, version=m.version, source=source, content_sha256=digest,
        max_cluster_tokens=m.max_cluster_tokens, documents=len(docs), clusters=clustering.clusters,
        graph=clustering.graph, edges=clustering.edges, links_outside=clustering.links_outside,
        oversize_documents=clustering.oversize_documents, passages=n_passages, passage_words=m.passage_words,
        build_seconds=round(time.perf_counter() - started, 3), files=listing(tmp), faiss=faiss_config,
        embedder=m.embedder,
    ))
    return IndexUpdate(manifest, kept=len(docs) - len(fresh), added=len(fresh) - changed, changed=changed,
                       removed=len(dropped) - changed, rewritten=True)


def _updated_tokens(kept: TokenIds, docs: list[Document], source_of: np.ndarray, fresh: list[int]) -> TokenIds:
    """The BM25 terms of every document: the index's for a kept one, tokenised now for the others, numbered as
    tokenising the whole corpus afresh numbers them."""
    both = concatenate_tokens([kept, document_tokens([docs[i] for i in fresh])])
    rows = source_of.copy()
    rows[fresh] = len(kept) + np.arange(len(fresh))
    return both.take(rows).in_first_seen_order()


def _write_updated_vectors(old: CorpusIndex, docs: list[Document], source_of: np.ndarray, fresh: list[int],
                           root: Path, *, ray: RayOptions | None) -> int:
    """Write the passages, their vectors and the document vectors the index has, each kept or embedded now;
    return how many passages there are."""
    m = old.manifest
    jobs, assemble = [], []  # what to embed (as index_build.write_vectors takes it), and how to place it
    n_passages = 0
    if m.passages:
        spans, rows, texts = _updated_spans(old, docs, source_of, m.passage_words)
        np.save(root / "flat.spans.npy", spans)
        jobs.append((texts, root / "new.flat.vectors.npy", "embed new passages"))
        assemble.append((root / "flat.vectors.npy", np.load(old.root / "flat.vectors.npy", mmap_mode="r"), rows,
                         jobs[-1][1]))
        n_passages = len(spans)
    if m.document_vectors:
        jobs.append(([docs[i].render() for i in fresh], root / f"new.{DOCUMENT_VECTORS}", "embed new documents"))
        assemble.append((root / DOCUMENT_VECTORS, old.document_vectors, source_of, jobs[-1][1]))
    jobs = [job for job in jobs if job[0]]
    if jobs:
        write_vectors(jobs, spec=m.embedder.spec if m.embedder else DEFAULT_EMBEDDER, ray=ray,
                      identity=m.embedder.identity if m.embedder else None)
    for path, kept, rows, new in assemble:
        vectors = np.empty((len(rows), kept.shape[1]), dtype=np.float32)
        have = rows >= 0
        vectors[have] = kept[rows[have]]
        if not have.all():
            vectors[~have] = np.load(new)
            new.unlink()
        np.save(path, vectors)
    return n_passages


def _updated_spans(old: CorpusIndex, docs: list[Document], source_of: np.ndarray,
                   passage_words: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Every document's passages (document, first char, end char), the old index's row of each passage's vector
    (-1 for a passage of a new or changed document), and the texts of those to embed, in corpus order."""
    old_spans = np.load(old.root / "flat.spans.npy")
    first = np.searchsorted(old_spans[:, 0], np.arange(old.manifest.documents + 1))
    spans, rows, texts = [], [], []
    for i, (d, j) in enumerate(zip(docs, source_of.tolist(), strict=True)):
        if j >= 0:
            kept = old_spans[first[j]:first[j + 1]].copy()
            kept[:, 0] = i
            spans.append(kept)
            rows.append(np.arange(first[j], first[j + 1]))
        else:
            windows = word_windows(d.text, passage_words)
            spans.append(np.asarray([(i, start, end) for start, end in windows], dtype=np.int64).reshape(-1, 3))
            rows.append(np.full(len(windows), -1, dtype=np.int64))
            texts.extend(passage_text(d, start, end) for start, end in windows)
    return np.concatenate(spans), np.concatenate(rows), texts
