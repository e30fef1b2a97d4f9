"""BM25 over a fixed set of texts (chunks), scoring many queries in one call.

Scores are bm25s's Lucene-style BM25 (k1=1.5, b=0.75 by default), stored in its sparse
term-by-document layout so :meth:`BM25Index.save` and :meth:`BM25Index.load` use its files.
Chunks and every query go through the same :func:`tokenize_ids`: Chinese and Japanese cut into words
(:func:`ragfunnel.text.scripts.words_for_search`), lower-case, ``\\w\\w+`` words and single Han characters,
English and Chinese stopwords removed, Snowball English stemming (PyStemmer).

The index is computed with numpy from one flat array of term ids (:class:`TokenIds`) rather
than by bm25s's per-document Python loops (identical scores, a fraction of the time), and texts tokenised
once can be indexed in several groupings (documents, and clusters of them).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from itertools import chain
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from ragfunnel.errors import InputError
from ragfunnel.retrieve.fusion import best_k
from ragfunnel.text.scripts import CHINESE_STOPWORDS, HAN_CHARACTER, words_for_search

# bm25s sets its own logger to DEBUG on import, which would print index-building notes.
logging.getLogger("bm25s").setLevel(logging.WARNING)

# A Chinese word may be one character (書, 税); an English one-letter word carries nothing.
SPLIT = rf"(?u)\b\w\w+\b|{HAN_CHARACTER}"
# bm25s needs at least one term per document; an all-stopword text holds this one. It is not a
# \w character, so no query can ever match it.
PLACEHOLDER = "\u2400"


# The one tokenizer is reset and grown by every call of tokenize_ids: two threads interleaving would number
# each other's terms (chunks being indexed, a query being scored), and the document cache keeps those ids.
_TOKENIZER_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _tokenizer() -> bm25s.tokenization.Tokenizer:
    return bm25s.tokenization.Tokenizer(
        lower=True, splitter=SPLIT, stopwords=[*STOPWORDS_EN, *CHINESE_STOPWORDS], stemmer=Stemmer.Stemmer("english")
    )


@dataclass(frozen=True)
class TokenIds:
    """Tokenised texts: their term ids concatenated in text order, ``lengths[i]`` of them for text ``i``."""

    ids: np.ndarray  # int32 term ids
    lengths: np.ndarray  # int64 terms per text
    vocab: dict[str, int]  # term -> id

    def __post_init__(self) -> None:
        if self.ids.ndim != 1 or self.lengths.ndim != 1 or self.ids.size != int(self.lengths.sum()):
            raise InputError(f"token ids ({self.ids.size}) and lengths (summing to {int(self.lengths.sum())}) "
                             "disagree; give one flat id array and one length per text")

    def __len__(self) -> int:
        return self.lengths.size

    def joined(self, groups: Sequence[Sequence[int]]) -> TokenIds:
        """Tokens of each group of texts, its texts' tokens concatenated in the group's order.

        Equal to tokenising the texts joined with blank lines, since no token spans a text's end.
        """
        order = np.fromiter(chain.from_iterable(groups), dtype=np.int64)
        return self._gathered(order, np.fromiter(map(len, groups), dtype=np.int64, count=len(groups)))

    def take(self, order: np.ndarray) -> TokenIds:
        """Tokens of the texts at ``order``, one text each."""
        return self._gathered(np.asarray(order, dtype=np.int64), np.ones(len(order), dtype=np.int64))

    def _gathered(self, order: np.ndarray, sizes: np.ndarray) -> TokenIds:
        """Texts ``order`` in groups of ``sizes`` consecutive ones, each group's tokens concatenated."""
        lengths = self.lengths[order]
        ends = np.cumsum(lengths)
        # Each output token's position in self.ids: its text's start, plus its rank in the output
        # minus where that text starts in the output.
        positions = np.repeat(_starts(self.lengths)[order] - (ends - lengths), lengths)
        positions += np.arange(positions.size)
        cumulative = np.concatenate([[0], ends])
        group_ends = np.cumsum(sizes)
        return TokenIds(self.ids[positions], cumulative[group_ends] - cumulative[group_ends - sizes], self.vocab)


    def in_first_seen_order(self) -> TokenIds:
        """The same tokens with their terms numbered by first occurrence and unused terms dropped: the ids
        :func:`tokenize_ids` gives when it reads these texts in this order."""
        ranked = _first_seen(self.ids, max(self.vocab.values(), default=-1) + 1)
        renumber = np.zeros(max(self.vocab.values(), default=-1) + 1, dtype=np.int32)
        renumber[ranked] = np.arange(ranked.size, dtype=np.int32)
        names = _terms(self.vocab)
        return TokenIds(renumber[self.ids], self.lengths, {names[t]: k for k, t in enumerate(ranked.tolist())})

    def save(self, directory: Path) -> None:
        """Write the ids, lengths and terms as ``ids.npy``, ``lengths.npy`` and ``terms.json`` (terms by id), and
        what tokenised them (:func:`tokeniser_identity`) as ``tokeniser.txt``."""
        directory.mkdir()
        np.save(directory / "ids.npy", self.ids)
        np.save(directory / "lengths.npy", self.lengths)
        (directory / "terms.json").write_text(json.dumps(_terms(self.vocab), ensure_ascii=False), encoding="utf-8")
        (directory / TOKENISER_FILE).write_text(tokeniser_identity(), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> TokenIds:
        """Tokens written by :meth:`save` (from an index whose checksums were verified)."""
        terms = json.loads((directory / "terms.json").read_text(encoding="utf-8"))
        return cls(np.load(directory / "ids.npy"), np.load(directory / "lengths.npy"),
                   {term: i for i, term in enumerate(terms)})


TOKENISER_FILE = "tokeniser.txt"


@lru_cache(maxsize=1)
def tokeniser_identity() -> str:
    """What decides the terms of a text: the versions of bm25s and the stemmer, and whether jieba cuts Chinese
    (without it, Han text is cut into character pairs). Terms made under another identity do not mix."""
    return ", ".join(f"{name} {_installed_version(name)}" for name in ("bm25s", "PyStemmer", "jieba"))


def _installed_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def concatenate_tokens(parts: Sequence[TokenIds]) -> TokenIds:
    """The texts of every part, in order, with one vocabulary: each part's terms mapped into it."""
    vocab: dict[str, int] = {}
    ids = []
    for part in parts:
        table = np.zeros(max(part.vocab.values(), default=-1) + 1, dtype=np.int32)
        for term, i in part.vocab.items():
            table[i] = vocab.setdefault(term, len(vocab))
        ids.append(table[part.ids])
    return TokenIds(np.concatenate([np.zeros(0, dtype=np.int32), *ids]),
                    np.concatenate([np.zeros(0, dtype=np.int64), *(p.lengths for p in parts)]), vocab)


def _first_seen(ids: np.ndarray, n_terms: int, step: int = 1 << 16) -> np.ndarray:
    """The distinct values of ``ids`` in order of first occurrence. Block by block, only values not seen before
    are sorted: after the first blocks of a corpus, few terms are new (one sort of all ids is 5x slower)."""
    seen = np.zeros(n_terms, dtype=bool)
    found = [np.zeros(0, dtype=ids.dtype)]
    for start in range(0, ids.size, step):
        block = ids[start:start + step]
        new = block[~seen[block]]
        if new.size:
            distinct, first = np.unique(new, return_index=True)
            found.append(distinct[np.argsort(first)])
            seen[distinct] = True
    return np.concatenate(found)


def _terms(vocab: dict[str, int]) -> list[str]:
    """The terms of ``vocab`` listed by id (ids are 0..n-1)."""
    terms = [""] * len(vocab)
    for term, i in vocab.items():
        terms[i] = term
    return terms


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.cumsum(lengths) - lengths


def tokenize_ids(texts: Iterable[str]) -> TokenIds:
    """Tokenise texts into one flat array of term ids, with a fresh vocabulary of their terms (one call at a
    time in a process: the tokenizer is shared)."""
    ids, lengths = array("i"), array("q")
    with _TOKENIZER_LOCK:
        tok = _tokenizer()
        tok.reset_vocab()
        # allow_empty=False: an all-stopword text yields no ids, rather than bm25s's "" term.
        for row in tok.streaming_tokenize(map(words_for_search, texts), update_vocab=True, allow_empty=False):
            ids.extend(row)
            lengths.append(len(row))
        vocab = dict(tok.get_vocab_dict())
    return TokenIds(np.frombuffer(ids, dtype=np.int32), np.frombuffer(lengths, dtype=np.int64), vocab)


def tokenize(texts: list[str]) -> list[list[str]]:
    """Tokenise texts into stemmed terms; the one tokenisation used for chunks and queries."""
    tokens = tokenize_ids(texts)
    terms = np.empty(len(tokens.vocab), dtype=object)
    for term, i in tokens.vocab.items():
        terms[i] = term
    flat = terms[tokens.ids]
    ends = np.cumsum(tokens.lengths).tolist()
    return [flat[end - n:end].tolist() for end, n in zip(ends, tokens.lengths.tolist(), strict=True)]


def index_token_ids(tokens: TokenIds, *, k1: float = 1.5, b: float = 0.75) -> BM25Index:
    """BM25 over texts tokenised beforehand by :func:`tokenize_ids` (e.g. once, for several groupings)."""
    index = BM25Index.__new__(BM25Index)
    index._model = _lucene_model(tokens, k1=k1, b=b)
    index._n_docs = len(tokens)
    return index


def _lucene_model(tokens: TokenIds, *, k1: float, b: float) -> bm25s.BM25:
    """A bm25s model over ``tokens`` with the scores bm25s's own indexing computes, to the bit.

    One sort of (term, text) keys gives the term-major (CSC) order bm25s stores, the term
    frequencies and the document frequencies; bm25s's float32/float64 steps are kept as is.
    """
    if not len(tokens):
        raise InputError("cannot build a BM25 index over zero texts; give at least one chunk")
    n_docs, vocab, lengths = len(tokens), dict(tokens.vocab), tokens.lengths
    keys = tokens.ids.astype(np.int64)
    keys *= n_docs
    keys += np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        placeholder = vocab.setdefault(PLACEHOLDER, max(vocab.values(), default=-1) + 1)
        keys = np.concatenate([keys, placeholder * n_docs + empty])
        lengths = np.maximum(lengths, 1)
    keys.sort()
    first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    tf = np.diff(np.append(first, keys.size)).astype(np.float64)
    term, doc = np.divmod(keys[first], n_docs)
    del keys
    n_terms = max(vocab.values(), default=-1) + 1
    df = np.bincount(term, minlength=n_terms)
    # bm25s: tf / (k1 * ((1 - b) + b * len / avglen) + tf) in float64, times a float32 idf, kept as float32.
    tfc = tf / (k1 * ((1 - b) + b * lengths[doc] / lengths.mean()) + tf)
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.scores = {"data": (_lucene_idf(df, n_docs)[term] * tfc).astype(np.float32),
                    "indices": doc.astype(np.int32),
                    "indptr": np.concatenate([[0], np.cumsum(df)]).astype(np.int64), "num_docs": n_docs}
    model.vocab_dict = vocab
    model.unique_token_ids_set = set(vocab.values())
    model.nonoccurrence_array = None  # only BM25L and BM25+ use one; save() asks
    return model


def _lucene_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """float32 ln(1 + (N - df + 0.5) / (df + 0.5)), 0 for unseen terms, as bm25s computes it."""
    values, inverse = np.unique(df, return_inverse=True)
    # math.log once per distinct df (a few thousand), the very call bm25s makes, so idf matches it.
    table = np.array([math.log(1 + (n_docs - v + 0.5) / (v + 0.5)) if v else 0.0 for v in values.tolist()],
                     dtype=np.float32)
    return table[inverse]


class BM25Index:
    """BM25 scores of arbitrary queries against a fixed list of texts."""

    def __init__(self, texts: list[str], *, k1: float = 1.5, b: float = 0.75):
        self._model = _lucene_model(tokenize_ids(texts), k1=k1, b=b)
        self._n_docs = len(texts)

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
        indices, scores = self.top_k_many([query], k)
        return indices[0], scores[0]

    def top_k_many(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, scores), each of shape (len(queries), min(k, len(texts))), of every query's ``k`` best
        texts, best first. Each query's scores are summed from its own terms' postings in the sparse
        term-by-text scores, one query at a time: no queries × texts matrix is ever built."""
        k = min(k, self._n_docs)
        out_indices = np.zeros((len(queries), k), dtype=np.int64)
        out_scores = np.zeros((len(queries), k), dtype=np.float64)
        vocab = self._model.vocab_dict
        s = self._model.scores
        data, indices, indptr = s["data"], s["indices"], s["indptr"]
        for q, terms in enumerate(tokenize(queries)):
            term_ids = np.fromiter((vocab[t] for t in terms if t in vocab), dtype=np.int64)
            positions = _postings(indptr, term_ids)
            scores = np.bincount(indices[positions], weights=data[positions], minlength=self._n_docs)
            out_indices[q], out_scores[q] = best_k(scores, k)
        return out_indices, out_scores

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
        positions = _postings(indptr, term_ids)
        rows = np.repeat(q_index, indptr[term_ids + 1] - indptr[term_ids])
        flat = rows * self._n_docs + indices[positions].astype(np.int64)
        out += np.bincount(flat, weights=data[positions], minlength=out.size).reshape(out.shape)
        return out


def _postings(indptr: np.ndarray, term_ids: np.ndarray) -> np.ndarray:
    """Flat positions into the score arrays of every posting of ``term_ids`` (a term repeated, repeated)."""
    starts, lengths = indptr[term_ids], indptr[term_ids + 1] - indptr[term_ids]
    run_start = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(int(lengths.sum())) - run_start + np.repeat(starts, lengths)
