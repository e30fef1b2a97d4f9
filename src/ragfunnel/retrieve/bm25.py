"""BM25 over a fixed set of texts (chunks), scoring many queries in one call.

Indexing uses bm25s (Lucene-style BM25, k1=1.5, b=0.75 by default). Chunks and every
query go through the same :func:`tokenize`: lower-case, ``\\w\\w+`` words, English
stopwords removed, Snowball English stemming (PyStemmer).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

import bm25s
import numpy as np
import Stemmer

from ragfunnel.errors import InputError
from ragfunnel.retrieve.fusion import best_k

# bm25s sets its own logger to DEBUG on import, which would print index-building notes.
logging.getLogger("bm25s").setLevel(logging.WARNING)

_SPLIT = r"(?u)\b\w\w+\b"


@lru_cache(maxsize=1)
def _tokenizer() -> bm25s.tokenization.Tokenizer:
    return bm25s.tokenization.Tokenizer(
        lower=True, splitter=_SPLIT, stopwords="english", stemmer=Stemmer.Stemmer("english")
    )


def tokenize(texts: list[str]) -> list[list[str]]:
    """Tokenise texts into stemmed terms; the one tokenisation used for chunks and queries."""
    tok = _tokenizer()
    # A fresh vocabulary each call: we only want the strings, not bm25s's running id table.
    tok.reset_vocab()
    ids = tok.tokenize(list(texts), update_vocab=True, return_as="ids", show_progress=False)
    vocab = {i: term for term, i in tok.get_vocab_dict().items()}
    return [[vocab[i] for i in row if vocab[i] != ""] for row in ids]


class BM25Index:
    """BM25 scores of arbitrary queries against a fixed list of texts."""

    def __init__(self, texts: list[str], *, k1: float = 1.5, b: float = 0.75):
        if not texts:
            raise InputError("cannot build a BM25 index over zero texts; give at least one chunk")
        self._n_docs = len(texts)
        corpus_tokens = tokenize(texts)
        self._model = bm25s.BM25(k1=k1, b=b, method="lucene")
        # bm25s needs at least one term per document; an all-stopword chunk gets a placeholder.
        self._model.index([toks or ["\u2400"] for toks in corpus_tokens], show_progress=False)

    def __len__(self) -> int:
        return self._n_docs

    def save(self, directory: str | Path) -> None:
        """Write the index as plain files (numpy arrays and JSON; no pickle) into ``directory``."""
        self._model.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: str | Path, *, mmap: bool = True) -> BM25Index:
        """Open an index written by :meth:`save`; ``mmap`` keeps the score arrays on disk."""
        index = cls.__new__(cls)
        index._model = bm25s.BM25.load(str(directory), mmap=mmap, load_corpus=False)
        index._n_docs = int(index._model.scores["num_docs"])
        return index

    def top_k(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, scores) of the ``k`` best texts for ``query``, best first (ties by position)."""
        return best_k(self.score([query])[0], k)

    def score(self, queries: list[str]) -> np.ndarray:
        """Return an array of shape (len(queries), len(texts)) of BM25 scores.

        A query term counts once per occurrence (as in bm25s and rank_bm25); terms
        absent from the texts contribute nothing. All queries are scored in one
        vectorised pass over the precomputed sparse term-document scores.
        """
        vocab = self._model.vocab_dict
        query_terms = tokenize(queries)
        q_index = np.array([q for q, terms in enumerate(query_terms) for t in terms if t in vocab], dtype=np.int64)
        term_ids = np.array([vocab[t] for terms in query_terms for t in terms if t in vocab], dtype=np.int64)
        out = np.zeros((len(queries), self._n_docs), dtype=np.float64)
        if term_ids.size == 0:
            return out
        s = self._model.scores
        data, indices, indptr = s["data"], s["indices"], s["indptr"]
        starts, lengths = indptr[term_ids], indptr[term_ids + 1] - indptr[term_ids]
        total = int(lengths.sum())
        # Flat positions into data/indices for every (query term, posting) pair.
        run_start = np.repeat(np.cumsum(lengths) - lengths, lengths)
        positions = np.arange(total) - run_start + np.repeat(starts, lengths)
        rows = np.repeat(q_index, lengths)
        flat = rows * self._n_docs + indices[positions].astype(np.int64)
        out += np.bincount(flat, weights=data[positions], minlength=out.size).reshape(out.shape)
        return out
