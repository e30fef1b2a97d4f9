"""Text handling: reading contexts, chunking, BM25 tokenisation."""

from ragfunnel.text.chunking import chunk_words, word_windows
from ragfunnel.text.context import check_context

__all__ = ["chunk_words", "check_context", "word_windows"]
