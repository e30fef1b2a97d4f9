"""Clustering documents into retrieval units of at most S tokens (FunnelRAG, Algorithm 1).

Documents are visited from the highest local clustering coefficient to the lowest, so that
tightly knit neighbourhoods group first. Each visited document's cluster absorbs the clusters
holding its related documents, closest first (harmonic closeness of the document to the
cluster's members), as long as the merged size stays within ``max_size``. In the paper every
visited document starts from its singleton; a document that an earlier merge already placed
in a cluster continues from that cluster, which is the same step for the singleton case.
"""

from __future__ import annotations

import re

from ragfunnel.corpus.graph import require_networkx
from ragfunnel.types import Document

_TOKEN = re.compile(r"\w+|[^\w\s]")
# Shortest paths longer than this add nothing to a document's closeness to a cluster.
CLOSENESS_CUTOFF = 4


def approx_tokens(doc: Document) -> int:
    """A tokenizer-free size: words and punctuation marks of title and text (close to BPE counts)."""
    return len(_TOKEN.findall(doc.title)) + len(_TOKEN.findall(doc.text))


def closeness(distances: dict[int, int], members: list[int]) -> float:
    """Harmonic closeness of a document to a cluster: mean of 1/distance over the members (0 if unreached)."""
    return sum(1.0 / distances[m] for m in members if distances.get(m, 0) > 0) / len(members)


def cluster_documents(graph, sizes: list[int], *, max_size: int) -> list[list[int]]:
    """Clusters (lists of document indices, merge order inside) covering every node of ``graph`` once.

    ``sizes[i]`` is document i's size in the unit of ``max_size``. A document larger than
    ``max_size`` stays alone in its own cluster.
    """
    nx = require_networkx()
    coefficient = nx.clustering(graph)
    order = sorted(graph.nodes, key=lambda d: (-coefficient[d], d))
    cluster_of = {d: d for d in graph.nodes}  # document -> cluster id
    members = {d: [d] for d in graph.nodes}  # cluster id -> documents
    size = {d: sizes[d] for d in graph.nodes}
    for d in order:
        own = cluster_of[d]
        related = {cluster_of[n] for n in graph.neighbors(d)} - {own}
        if not related:
            continue
        distances = nx.single_source_shortest_path_length(graph, d, cutoff=CLOSENESS_CUTOFF)
        ranked = sorted(related, key=lambda c: (-closeness(distances, members[c]), size[c], c))
        for c in ranked:
            if size[own] + size[c] <= max_size:
                for m in members[c]:
                    cluster_of[m] = own
                members[own].extend(members.pop(c))
                size[own] += size.pop(c)
    return sorted(members.values(), key=min)
