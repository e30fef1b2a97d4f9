"""Clustering documents into retrieval units of at most S tokens (FunnelRAG, Algorithm 1).

Documents are visited from the highest local clustering coefficient to the lowest, so that
tightly knit neighbourhoods group first. Each visited document's cluster absorbs the clusters
holding its related documents, closest first (harmonic closeness of the document to the
cluster's members), as long as the merged size stays within ``max_size``. In the paper every
visited document starts from its singleton; a document that an earlier merge already placed
in a cluster continues from that cluster, which is the same step for the singleton case.

Built for millions of documents: coefficients come from a vectorised triangle count, and a
document's distances are searched only as far as its related clusters' members need (most
documents need none: a cluster whose members all neighbour the document is as close as can be).
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

from ragfunnel.corpus.graph import RelationGraph
from ragfunnel.types import Document

_TOKEN = re.compile(r"\w+|[^\w\s]")
# The same classes for ASCII, as byte tables: the marks (neither word nor space characters), and a
# table that blanks every non-word byte so that splitting leaves exactly the word runs.
_ASCII_MARKS = bytes(c for c in range(128) if not re.fullmatch(r"[\w\s]", chr(c)))
_ASCII_WORDS_ONLY = bytes(c if re.fullmatch(r"\w", chr(c)) else ord(" ") for c in range(256))
# Shortest paths longer than this add nothing to a document's closeness to a cluster.
CLOSENESS_CUTOFF = 4
# 1/distance for distances 1..cutoff as integers over a common denominator: closeness values are
# then exact fractions, so equal closeness ties (and falls to size, then id) on any machine.
_DENOMINATOR = math.lcm(*range(1, CLOSENESS_CUTOFF + 1))
_UNSEEN = np.int8(CLOSENESS_CUTOFF + 1)
_WEIGHT = np.array([0] + [_DENOMINATOR // k for k in range(1, CLOSENESS_CUTOFF + 1)] + [0], dtype=np.int64)
# Wedges checked per numpy pass when counting triangles (bounds the pass's memory to ~1 GB).
_WEDGE_BLOCK = 1 << 23


def approx_tokens(doc: Document) -> int:
    """A tokenizer-free size: words and punctuation marks of title and text (close to BPE counts)."""
    return _count_tokens(doc.title) + _count_tokens(doc.text)


def _count_tokens(text: str) -> int:
    """``len(_TOKEN.findall(text))``; ASCII text is counted with byte tables, five times faster."""
    if not text.isascii():
        return len(_TOKEN.findall(text))
    raw = text.encode("ascii")
    marks = len(raw) - len(raw.translate(None, _ASCII_MARKS))
    return marks + len(raw.translate(_ASCII_WORDS_ONLY).split())


def closeness(distances: dict[int, int], members: list[int]) -> float:
    """Harmonic closeness of a document to a cluster: mean of 1/distance over the members (0 if unreached)."""
    numerator = sum(int(_WEIGHT[distances[m]]) for m in members if 0 < distances.get(m, 0) <= CLOSENESS_CUTOFF)
    return numerator / (_DENOMINATOR * len(members))


def local_clustering(graph: RelationGraph) -> np.ndarray:
    """Each node's local clustering coefficient: closed pairs of neighbours over all pairs (0 below degree 2)."""
    degrees = graph.degrees
    pairs = degrees * (degrees - 1)
    return np.divide(2 * triangles(graph), pairs, out=np.zeros(len(degrees)), where=pairs > 0)


def triangles(graph: RelationGraph) -> np.ndarray:
    """How many triangles each node lies on.

    Each edge is pointed from its lower- to its higher-degree end; every triangle is then found
    exactly once, at its lowest end, as a pair of that node's out-neighbours that are linked.
    Pointing edges up the degree order keeps out-lists short, so hubs cost little.
    """
    n, degrees = graph.number_of_nodes(), graph.degrees
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(degrees, kind="stable")] = np.arange(n)
    sources = np.repeat(np.arange(n), degrees)
    up = rank[sources] < rank[graph.indices]
    low, high = sources[up], graph.indices[up]  # grouped by low end, ids ascending within a group
    out_degree = np.bincount(low, minlength=n)
    out_start = np.concatenate([[0], np.cumsum(out_degree)])
    edge_keys = sources * n + graph.indices  # sorted: the CSR is ordered by (source, target)
    counts = np.zeros(n, dtype=np.int64)
    wedge_ends = np.cumsum(out_degree * (out_degree - 1) // 2)
    cuts = np.searchsorted(wedge_ends, np.arange(_WEDGE_BLOCK, int(wedge_ends[-1]) if n else 0, _WEDGE_BLOCK))
    for first, last in zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=True):
        apex, v, w = _wedges(out_start[first], out_start[last], out_start, low, high)
        key = v * n + w
        closed = edge_keys[np.minimum(np.searchsorted(edge_keys, key), len(edge_keys) - 1)] == key
        for ends in (apex, v, w):
            counts += np.bincount(ends[closed], minlength=n)
    return counts


def _wedges(start: int, stop: int, out_start: np.ndarray, low: np.ndarray, high: np.ndarray):
    """(apex, v, w) for every pair v < w of out-neighbours of the apexes whose out-lists lie in start:stop."""
    positions = np.arange(start, stop)
    later = out_start[low[positions] + 1] - positions - 1  # out-neighbours after this one in its list
    first = np.repeat(positions, later)
    run_start = np.repeat(np.cumsum(later) - later, later)
    second = first + 1 + np.arange(first.size) - run_start
    return low[first], high[first], high[second]


def visiting_order(graph: RelationGraph) -> np.ndarray:
    """Nodes by local clustering coefficient, highest first; ties by index."""
    return np.argsort(-local_clustering(graph), kind="stable")


class _Distances:
    """Shortest-path distances (up to the cutoff) from one document to chosen targets, on reused scratch arrays."""

    def __init__(self, graph: RelationGraph):
        self.graph = graph
        self.seen = np.full(graph.number_of_nodes(), _UNSEEN, dtype=np.int8)
        self.slot = np.zeros(graph.number_of_nodes(), dtype=np.int64)

    def weights(self, source: int, neighbours: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Each target's 1/distance from ``source`` over the common denominator (0 beyond the cutoff).

        Breadth-first from the source, level by level, stopping once every target is placed;
        the last level is checked from the targets' side (a target is at the cutoff when one of
        its neighbours is just inside it), which spares expanding the widest level.
        """
        seen, graph = self.seen, self.graph
        seen[source], seen[neighbours] = 0, 1
        touched, frontier = [neighbours], neighbours
        found = seen[targets]
        for level in range(2, CLOSENESS_CUTOFF):
            if (found < _UNSEEN).all():
                break
            reached = graph.neighbors_of_all(frontier)
            frontier = reached[seen[reached] == _UNSEEN]
            if level < CLOSENESS_CUTOFF - 1:  # only a level that will be expanded needs its repeats removed
                frontier = self._distinct(frontier)
            seen[frontier] = level
            touched.append(frontier)
            found = seen[targets]
        far = np.flatnonzero(found == _UNSEEN)
        if far.size:
            around = graph.neighbors_of_all(targets[far])
            owner = np.repeat(far, graph.degrees_of(targets[far]))
            found[owner[seen[around] == CLOSENESS_CUTOFF - 1]] = CLOSENESS_CUTOFF
        seen[source] = _UNSEEN
        for nodes in touched:
            seen[nodes] = _UNSEEN
        return _WEIGHT[found]

    def _distinct(self, nodes: np.ndarray) -> np.ndarray:
        """``nodes`` without repeats, in linear time (np.unique sorts, and is slow on small arrays)."""
        positions = np.arange(len(nodes))
        self.slot[nodes] = positions
        return nodes[self.slot[nodes] == positions]


def cluster_documents(graph, sizes: list[int], *, max_size: int) -> list[list[int]]:
    """Clusters (lists of document indices, merge order inside) covering every node of ``graph`` once.

    ``graph`` is a :class:`RelationGraph` (or a ``networkx.Graph`` over nodes ``0..n-1``).
    ``sizes[i]`` is document i's size in the unit of ``max_size``. A document larger than
    ``max_size`` stays alone in its own cluster.
    """
    if not isinstance(graph, RelationGraph):
        graph = RelationGraph.from_networkx(graph)
    n = graph.number_of_nodes()
    cluster_of = list(range(n))  # document -> cluster id (the document that founded it)
    members: list[list[int] | None] = [[d] for d in range(n)]  # cluster id -> documents, None once merged
    size = list(sizes[:n])
    distances = _Distances(graph)
    indptr, indices = graph.indptr.tolist(), graph.indices
    for d in visiting_order(graph).tolist():
        own = cluster_of[d]
        neighbours = indices[indptr[d]:indptr[d + 1]]
        near = neighbours.tolist()
        # Clusters that do not fit now never will (the own cluster only grows), so their place in
        # the closeness order cannot matter and they are left out of it.
        room = max_size - size[own]
        fitting = {c for c in map(cluster_of.__getitem__, near) if c != own and size[c] <= room}
        if not fitting:
            continue
        ranked = _by_closeness(d, neighbours, near, fitting, cluster_of, members, size, distances) \
            if len(fitting) > 1 else fitting
        for c in ranked:
            if size[own] + size[c] <= max_size:
                for m in members[c]:
                    cluster_of[m] = own
                members[own].extend(members[c])
                members[c] = None
                size[own] += size[c]
    return sorted((m for m in members if m is not None), key=min)


def _by_closeness(d: int, neighbours: np.ndarray, near: list[int], related: set[int], cluster_of: list[int],
                  members: list, size: list[int], distances: _Distances) -> list[int]:
    """The ``related`` clusters, closest to ``d`` first; ties by smaller size, then by id.

    A cluster's members next to ``d`` are at distance 1; only its other members need a search,
    and none is needed when every cluster lies wholly next to ``d``.
    """
    adjacent = Counter(c for c in map(cluster_of.__getitem__, near) if c in related)
    numerator = {c: _DENOMINATOR * count for c, count in adjacent.items()}
    far = [c for c, count in adjacent.items() if count < len(members[c])]
    if far:
        near_set = set(near)
        targets = [(m, c) for c in far for m in members[c] if m not in near_set]
        weights = distances.weights(d, neighbours, np.array([m for m, _ in targets], dtype=np.int64))
        for (_, c), weight in zip(targets, weights.tolist(), strict=True):
            numerator[c] += weight
    return sorted(related, key=lambda c: (-numerator[c] / (_DENOMINATOR * len(members[c])), size[c], c))
