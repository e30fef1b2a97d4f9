"""Retrievers and score helpers."""

from ragfunnel.retrieve.bm25 import BM25Index, tokenize

__all__ = ["BM25Index", "tokenize"]
