"""The fast relation graph and Algorithm 1 against plain networkx reference implementations."""

import random
import re
from fractions import Fraction

import numpy as np
import pytest

from ragfunnel.corpus.clustering import (
    CLOSENESS_CUTOFF,
    _count_tokens,
    _Distances,
    cluster_documents,
    local_clustering,
)
from ragfunnel.corpus.graph import RelationGraph, relation_graph
from ragfunnel.errors import InputError
from ragfunnel.types import Document

nx = pytest.importorskip("networkx", reason="needs the [corpus] extra")


def reference_clusters(graph: nx.Graph, sizes: list[int], max_size: int) -> list[list[int]]:
    """Algorithm 1 written plainly on networkx: a BFS per document, closeness as exact fractions."""
    coefficient = nx.clustering(graph)
    order = sorted(graph.nodes, key=lambda d: (-coefficient[d], d))
    cluster_of = {d: d for d in graph.nodes}
    members = {d: [d] for d in graph.nodes}
    size = {d: sizes[d] for d in graph.nodes}
    for d in order:
        own = cluster_of[d]
        related = {cluster_of[n] for n in graph.neighbors(d)} - {own}
        if not related:
            continue
        distances = nx.single_source_shortest_path_length(graph, d, cutoff=CLOSENESS_CUTOFF)
        closeness = {c: exact_closeness(distances, members[c]) for c in related}
        for c in sorted(related, key=lambda c: (-closeness[c], size[c], c)):
            if size[own] + size[c] <= max_size:
                for m in members[c]:
                    cluster_of[m] = own
                members[own].extend(members.pop(c))
                size[own] += size.pop(c)
    return sorted(members.values(), key=min)


def exact_closeness(distances: dict[int, int], members: list[int]) -> Fraction:
    return sum((Fraction(1, distances[m]) for m in members if distances.get(m, 0) > 0), Fraction(0)) / len(members)


def linked_graph(n: int, seed: int, *, hubs: int = 0) -> nx.Graph:
    """Mostly nearby links (so triangles and clusters form), some anywhere, some to a few hubs."""
    rng = random.Random(seed)
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    for i in range(n):
        for _ in range(rng.randint(1, 5)):
            kind = rng.random()
            j = rng.randrange(hubs) if kind < 0.1 and hubs else \
                (i + rng.choice([-1, 1]) * rng.randint(1, 8)) % n if kind < 0.85 else rng.randrange(n)
            if j != i:
                graph.add_edge(i, j)
    return graph


@pytest.mark.parametrize("seed, hubs, max_size", [(1, 0, 300), (2, 0, 1500), (3, 3, 800), (4, 10, 4000),
                                                  (5, 1, 120)])
def test_algorithm_1_matches_the_plain_networkx_reference(seed, hubs, max_size):
    graph = linked_graph(700, seed, hubs=hubs)
    sizes = random.Random(seed).choices(range(20, 400), k=700)
    assert cluster_documents(graph, sizes, max_size=max_size) == reference_clusters(graph, sizes, max_size)


def test_clustering_coefficients_match_networkx_with_hubs_and_cliques():
    graph = linked_graph(2000, 7, hubs=5)
    graph.add_edges_from((a, b) for a in range(1990, 2000) for b in range(a + 1, 2000))  # a 10-clique
    expected = nx.clustering(graph)
    assert local_clustering(RelationGraph.from_networkx(graph)).tolist() == [expected[i] for i in range(2000)]


def test_distances_up_to_the_cutoff_match_breadth_first_search():
    graph = linked_graph(500, 11, hubs=2)
    fast = RelationGraph.from_networkx(graph)
    search = _Distances(fast)
    rng = np.random.default_rng(0)
    for source in rng.choice(500, size=40, replace=False).tolist():
        exact = nx.single_source_shortest_path_length(graph, source, cutoff=CLOSENESS_CUTOFF)
        neighbours = fast.neighbors(source)
        targets = np.array([t for t in rng.choice(500, size=60, replace=False).tolist()
                            if t != source and t not in set(neighbours.tolist())], dtype=np.int64)
        weights = search.weights(source, neighbours, targets)
        assert weights.tolist() == [12 // exact[t] if t in exact else 0 for t in targets.tolist()]
    assert (search.seen == search.seen[0]).all()  # the scratch array is clean again


def test_relation_graph_from_edges_drops_loops_and_repeats():
    g = RelationGraph.from_edges(4, np.array([0, 1, 2, 2, 3]), np.array([1, 0, 2, 3, 0]))
    assert sorted(g.edges) == [(0, 1), (0, 3), (2, 3)]
    assert g.number_of_edges() == 3 and g.number_of_nodes() == 4
    assert g.neighbors(0).tolist() == [1, 3] and g.degrees.tolist() == [2, 1, 1, 2]
    with pytest.raises(InputError, match="outside 0..3"):
        RelationGraph.from_edges(4, np.array([0]), np.array([4]))
    with pytest.raises(InputError, match="0..n-1"):
        RelationGraph.from_networkx(nx.Graph([("a", "b")]))


def test_a_link_to_a_title_shared_by_two_documents_reaches_both():
    docs = [Document("a", "Gull Rock", "x", ("Port Ellis", "Nowhere")), Document("b", "Port Ellis", "y"),
            Document("c", "Port Ellis", "z"), Document("d", "Seabirds", "w", ("Gull Rock",))]
    assert sorted(relation_graph(docs).edges) == [(0, 1), (0, 2), (0, 3)]


def test_a_hub_with_many_leaves_clusters_under_the_cap():
    star = nx.star_graph(5000)  # node 0 linked to 5000 leaves; no triangles at all
    clusters = cluster_documents(star, [1] * 5001, max_size=100)
    assert sorted(i for c in clusters for i in c) == list(range(5001))
    assert max(map(len, clusters)) == 100 and clusters[0][:3] == [0, 1, 2]


def test_token_count_matches_the_regex_on_ascii_and_other_text():
    rng = random.Random(3)
    alphabet = [chr(c) for c in range(128)] + ["é", "ß", "\u00a0", "\u2014", "名"]
    pattern = re.compile(r"\w+|[^\w\s]")
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert _count_tokens(text) == len(pattern.findall(text)), repr(text)
