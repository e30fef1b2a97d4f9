"""What a corpus index directory holds, and its manifest: the file names, the ``Manifest`` that lists every
file with its size and SHA-256, reading it back checked, and the command that rebuilds a damaged index.

Building an index (``ragfunnel.corpus.index_build``) and opening one (``ragfunnel.corpus.index``) both read
the manifest through here.

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
``documents.sha256.npy``     every document's SHA-256 (32 bytes a row), by which ``--update`` finds what changed
``documents.tokens/``        every document's BM25 terms (``ids.npy``, ``lengths.npy``, ``terms.json``), so that
                             ``--update`` tokenises only the documents that changed

The last two came with ``--update``; an index built before them is read as before and rebuilt once
(``--force``) before it can be updated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal, Protocol

from ragfunnel.bounded import loads, read_regular_file
from ragfunnel.corpus.index_swap import MANIFEST, restore_previous
from ragfunnel.declared import Config, setting
from ragfunnel.errors import ConfigError, InputError, option
from ragfunnel.retrieve.embedders import DEFAULT_EMBEDDER, EmbedderInfo
from ragfunnel.retrieve.faiss_search import FaissConfig

FORMAT, VERSION = "ragfunnel-corpus-index", 2  # v2: documents.bm25/
MAX_MANIFEST_BYTES = 1 << 20  # a manifest is counts, settings and a digest per file: a few kilobytes
DOCUMENT_VECTORS = "documents.vectors.npy"
DOCUMENT_DIGESTS = "documents.sha256.npy"
DOCUMENT_TOKENS = "documents.tokens"
_BM25_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "params.index.json",
               "vocab.index.json")  # what bm25s writes for our Lucene BM25, all of which it reads back
# Files every index holds; ``flat`` adds FLAT_FILES, ``embed_documents`` adds DOCUMENT_VECTORS.
REQUIRED_FILES = ("documents.jsonl", "documents.offsets.npy", "clusters.members.npy", "clusters.offsets.npy",
                  *(f"{bm25}/{name}" for bm25 in ("clusters.bm25", "documents.bm25") for name in _BM25_FILES))
FLAT_FILES = ("flat.spans.npy", "flat.vectors.npy")
FAISS_FILE = "flat.faiss"  # with a FAISS index over flat.vectors.npy (manifest.faiss)
_JSON_TYPES = {"str": str, "int": int, "float": (int, float)}  # a field's annotation -> the Python types JSON gives


FaissChoice = Literal["auto", "flat", "hnsw", "ivf", "ivfpq", "none"]  # ragfunnel.retrieve.faiss_search.CHOICES


class Embedded(Protocol):
    """An embedder as an index's identity names it: a resolved one, or what a manifest records of it."""

    spec: str
    identity: str


@dataclass(frozen=True)
class IndexConfig(Config):
    """The settings an index is built with: ``ragfunnel index``'s options, and :func:`build_index`'s and
    :func:`update_index`'s configuration (``ragfunnel.corpus.index_build``, ``ragfunnel.corpus.index_update``)."""

    max_cluster_tokens: int = setting(
        4000, "Largest cluster of linked documents (FunnelRAG's retrieval unit), in approximate tokens.", ge=1,
        unit="tokens")
    flat: bool = setting(False, "Also cut documents into passages and embed them (--embedder) for `search --flat`.")
    passage_words: int = setting(100, "Words per flat passage.", ge=1, le=100_000, unit="words")
    embed_documents: bool = setting(
        False, "Also embed every document (--embedder), so the default funnel pre-ranker looks vectors up instead of "
               "encoding each query's retrieved documents.")
    embedder: str = setting(
        DEFAULT_EMBEDDER, "With --flat or --embed-documents: what embeds passages, documents and later the queries: "
                          "bundled:minilm, hf:NAME_OR_DIR (a Hugging Face encoder in the local cache, or its "
                          "directory), a model directory, or openai:URL#MODEL (an OpenAI-compatible embeddings "
                          "server).", operator_only=True, metavar="SPEC")
    faiss: FaissChoice | None = setting(
        None, "With --flat: a FAISS index over the passage vectors for `search --flat`. auto picks by size: exact "
              "flat up to 100k passages, hnsw up to 1M, ivf above, ivfpq when the vectors would fill half the memory.",
        default_text="auto with the [faiss] extra installed, else none")

    def check(self) -> None:
        if self.faiss not in (None, "none") and not self.flat:
            raise ConfigError(f"{option('faiss')}={self.faiss} indexes the flat passages' vectors; set "
                              f"{option('flat')} too")
        if self.embedder != DEFAULT_EMBEDDER and not self.embeds:
            raise ConfigError(f"{option('embedder')}={self.embedder} embeds flat passages and documents; set "
                              f"{option('flat')} (or {option('embed_documents')}) too")

    @property
    def embeds(self) -> bool:
        """Whether the index holds vectors (of flat passages, or of documents)."""
        return self.flat or self.embed_documents

    def identity(self, embedder: Embedded | None) -> tuple[object, ...]:
        """What an index must share with these settings to be kept in their place, or updated: its clusters'
        size, its passages' (0 without them), whether it embeds documents, and by which ``embedder`` (the resolved
        one, or the one a manifest records; None for the bundled MiniLM). A FAISS file is rebuilt at will."""
        return (self.max_cluster_tokens, self.passage_words if self.flat else 0, self.embed_documents,
                embedder and (embedder.spec, embedder.identity))


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

    def settings(self) -> IndexConfig:
        """The settings the index was built with."""
        return IndexConfig(max_cluster_tokens=self.max_cluster_tokens, flat=bool(self.passages),
                           passage_words=self.passage_words or IndexConfig.passage_words,
                           embed_documents=self.document_vectors, faiss=self.faiss.kind if self.faiss else None,
                           embedder=self.embedder.spec if self.embedder else DEFAULT_EMBEDDER)

    def identity(self) -> tuple[object, ...]:
        """What decides whether the index can be kept or updated (:meth:`IndexConfig.identity`)."""
        return self.settings().identity(self.embedder)

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


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def rebuild_fix(root: Path, manifest: Manifest | None = None) -> str:
    """The fix for a damaged index: the command that rebuilds it, with the options ``manifest`` says it had."""
    options = build_options(manifest) if manifest is not None else ""
    return f"rebuild it with `ragfunnel index CORPUS --out {root}{options} --force`"


def build_options(m: Manifest) -> str:
    """The options of ``ragfunnel index`` that build an index like ``m`` (those not at their default)."""
    return "".join(f" --{name.replace('_', '-')}" + ("" if value is True else f" {value}")
                   for name, value in m.settings().not_at_default())


def read_manifest(root: Path) -> Manifest:
    """The manifest of the index at ``root``, refused unless its fields are well-typed and match its checksum.

    A manifest without ``manifest_sha256`` (written before manifests carried one) is refused too, with
    the rebuild command: accepting it would let anyone skip the check by deleting the field.
    """
    restore_previous(root)
    path = root / MANIFEST
    try:
        raw = read_regular_file(path, max_bytes=MAX_MANIFEST_BYTES, what="index manifest", fix=rebuild_fix(root))
    except FileNotFoundError:
        raise InputError(f"{root} is not a ragfunnel index (no {MANIFEST}); build one with "
                         "`ragfunnel index CORPUS --out DIR`") from None
    try:
        data = loads(raw.decode("utf-8"))
    except ValueError:  # not UTF-8, not JSON, nested beyond reason
        raise InputError(f"{path} is corrupted (not UTF-8 JSON); {rebuild_fix(root)}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} is corrupted (a JSON {type(data).__name__}, not an object); {rebuild_fix(root)}")
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise InputError(f"{root} was written as {data.get('format')!r} v{data.get('version')!r}; this ragfunnel "
                         f"reads {FORMAT} v{VERSION}: {rebuild_fix(root)}")
    if "manifest_sha256" not in data:
        raise InputError(f"{path} carries no checksum (an index from an earlier ragfunnel); {rebuild_fix(root)}")
    try:
        manifest = Manifest.from_json(data)
    except ValueError as e:
        raise InputError(f"{path} is corrupted ({e}); {rebuild_fix(root)}") from None
    if manifest.manifest_sha256 != data["manifest_sha256"]:
        raise InputError(f"{path} was altered (its checksum does not match its fields); {rebuild_fix(root)}")
    return manifest
