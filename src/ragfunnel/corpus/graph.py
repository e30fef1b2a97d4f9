"""The relation graph between documents: hyperlinks where the corpus has them, else title mentions.

Nodes are document indices (positions in the corpus list); edges are undirected. The graph is
kept as numpy arrays in compressed sparse rows, so a corpus of millions of documents costs a
few bytes per link and its neighbourhoods are read without Python objects per node.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from ragfunnel.errors import InputError
from ragfunnel.types import Document

_WORD = re.compile(r"\w+")
# Titles made only of these words are too common to count as a mention of the document.
_COMMON = frozenset("a an and the of in on at to for by with from is it as or this that he she they we i you "
                    "his her its their one two new old first may will can be not no".split())


@dataclass(frozen=True, eq=False)
class RelationGraph:
    """An undirected simple graph over nodes ``0..n-1``: node i's neighbours, sorted, are
    ``indices[indptr[i]:indptr[i + 1]]``."""

    indptr: np.ndarray  # int64, n + 1 values
    indices: np.ndarray  # int64, every edge twice (once from each end)

    @classmethod
    def from_edges(cls, n: int, sources: np.ndarray, targets: np.ndarray) -> RelationGraph:
        """The graph on ``n`` nodes with edges ``sources[k]``-``targets[k]``; self-loops and repeats dropped."""
        sources, targets = np.asarray(sources, dtype=np.int64), np.asarray(targets, dtype=np.int64)
        if sources.size and (min(sources.min(), targets.min()) < 0 or max(sources.max(), targets.max()) >= n):
            raise InputError(f"an edge names a node outside 0..{n - 1}; number the nodes 0..n-1")
        keep = sources != targets
        sources, targets = sources[keep], targets[keep]
        # One sort of (source, target) keys, both directions, groups rows and orders each row.
        # (np.sort and a mask, not np.unique: numpy 2.4's hash-based unique takes 100x longer here.)
        keys = np.sort(np.concatenate([sources * n + targets, targets * n + sources]))
        first = np.ones(keys.size, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        keys = keys[first]
        rows, columns = np.divmod(keys, n)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return cls(indptr, columns)

    @classmethod
    def from_networkx(cls, graph) -> RelationGraph:
        """The same graph from a ``networkx.Graph`` whose nodes are ``0..n-1``."""
        n = graph.number_of_nodes()
        if set(graph.nodes) != set(range(n)):
            raise InputError("the graph's nodes must be the document indices 0..n-1")
        pairs = np.array(list(graph.edges), dtype=np.int64).reshape(-1, 2)
        return cls.from_edges(n, pairs[:, 0], pairs[:, 1])

    def number_of_nodes(self) -> int:
        return len(self.indptr) - 1

    def number_of_edges(self) -> int:
        return len(self.indices) // 2

    @property
    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def edges(self) -> Iterator[tuple[int, int]]:
        """Every edge once, as (i, j) with i < j."""
        sources = np.repeat(np.arange(self.number_of_nodes()), self.degrees)
        forward = sources < self.indices
        return zip(sources[forward].tolist(), self.indices[forward].tolist(), strict=True)

    def neighbors(self, node: int) -> np.ndarray:
        return self.indices[self.indptr[node]:self.indptr[node + 1]]

    def neighbors_of_all(self, nodes: np.ndarray) -> np.ndarray:
        """The neighbours of every node in ``nodes``, concatenated (with repeats), in one gather."""
        starts, lengths = self.indptr[nodes], self.degrees_of(nodes)
        run_start = np.repeat(np.cumsum(lengths) - lengths - starts, lengths)
        return self.indices[np.arange(run_start.size) - run_start]

    def degrees_of(self, nodes: np.ndarray) -> np.ndarray:
        return self.indptr[nodes + 1] - self.indptr[nodes]


def relation_graph(docs: list[Document]) -> RelationGraph:
    """The relation graph over ``range(len(docs))``.

    If any document carries links, edges are its links to documents of the corpus (by title,
    links to titles outside the corpus are dropped). Otherwise an edge joins A and B when A's
    text names B's title (whole words, case-sensitive; titles made only of common words skipped).
    """
    if any(d.links for d in docs):
        sources, targets = _links(docs)
    else:
        sources, targets = _mentions(docs)
    return RelationGraph.from_edges(len(docs), sources, targets)


def _links(docs: list[Document]) -> tuple[np.ndarray, np.ndarray]:
    """(sources, targets): every link of document i to a document j of the corpus.

    One dictionary lookup per link and no Python object per document: at millions of
    documents, per-document lists cost more in allocation and garbage collection than the lookups.
    """
    index_of = {d.title: i for i, d in enumerate(docs)}  # the last document of a title shared by several
    titles = [t for d in docs for t in d.links]
    sources = np.repeat(np.arange(len(docs)), [len(d.links) for d in docs])
    targets = np.array(list(map(index_of.get, titles, repeat(-1, len(titles)))), dtype=np.int64)
    found = targets >= 0
    sources, targets = sources[found], targets[found]
    if len(index_of) == len(docs):
        return sources, targets
    # Titles shared by several documents: a link to one is a link to all of them.
    shared = _by_title(docs)
    extra = [(i, j) for i, d in enumerate(docs) for t in d.links if len(shared.get(t, ())) > 1 for j in shared[t]]
    more = np.array(extra, dtype=np.int64).reshape(-1, 2)
    return np.concatenate([sources, more[:, 0]]), np.concatenate([targets, more[:, 1]])


def _by_title(docs: list[Document]) -> dict[str, list[int]]:
    by_title: dict[str, list[int]] = defaultdict(list)
    for i, d in enumerate(docs):
        by_title[d.title].append(i)
    return by_title


def _mentions(docs: list[Document]) -> tuple[list[int], list[int]]:
    """(sources, targets): every document i whose text contains document j's title as a word sequence."""
    phrases: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for title, ids in _by_title(docs).items():
        words = tuple(_WORD.findall(title))
        if words and not all(w.lower() in _COMMON for w in words) and len("".join(words)) >= 3:
            phrases[words].extend(ids)
    longest = max((len(p) for p in phrases), default=0)
    sources, targets = [], []
    for i, d in enumerate(docs):
        words = _WORD.findall(d.text)
        found = set()
        for n in range(1, longest + 1):
            for start in range(len(words) - n + 1):
                found.update(phrases.get(tuple(words[start:start + n]), ()))
        found.discard(i)
        sources.extend([i] * len(found))
        targets.extend(found)
    return sources, targets
