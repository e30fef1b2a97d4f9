"""The relation graph between documents: hyperlinks where the corpus has them, else title mentions.

Nodes are document indices (positions in the corpus list); edges are undirected.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ragfunnel.errors import MissingExtra
from ragfunnel.types import Document

_WORD = re.compile(r"\w+")
# Titles made only of these words are too common to count as a mention of the document.
_COMMON = frozenset("a an and the of in on at to for by with from is it as or this that he she they we i you "
                    "his her its their one two new old first may will can be not no".split())


def require_networkx():
    try:
        import networkx
    except ImportError:
        raise MissingExtra("networkx", "corpus") from None
    return networkx


def relation_graph(docs: list[Document]):
    """Undirected ``networkx.Graph`` over ``range(len(docs))``.

    If any document carries links, edges are its links to documents of the corpus (by title,
    links to titles outside the corpus are dropped). Otherwise an edge joins A and B when A's
    text names B's title (whole words, case-sensitive; titles made only of common words skipped).
    """
    nx = require_networkx()
    graph = nx.Graph()
    graph.add_nodes_from(range(len(docs)))
    by_title: dict[str, list[int]] = defaultdict(list)
    for i, d in enumerate(docs):
        by_title[d.title].append(i)
    if any(d.links for d in docs):
        for i, d in enumerate(docs):
            graph.add_edges_from((i, j) for t in d.links for j in by_title.get(t, ()) if j != i)
    else:
        graph.add_edges_from(_mentions(docs, by_title))
    return graph


def _mentions(docs: list[Document], by_title: dict[str, list[int]]):
    """(i, j) for every document i whose text contains document j's title as a word sequence."""
    phrases: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for title, ids in by_title.items():
        words = tuple(_WORD.findall(title))
        if words and not all(w.lower() in _COMMON for w in words) and len("".join(words)) >= 3:
            phrases[words].extend(ids)
    longest = max((len(p) for p in phrases), default=0)
    for i, d in enumerate(docs):
        words = _WORD.findall(d.text)
        found = set()
        for n in range(1, longest + 1):
            for start in range(len(words) - n + 1):
                found.update(phrases.get(tuple(words[start:start + n]), ()))
        yield from ((i, j) for j in found if j != i)
