"""Corpora: reading documents from files, the relation graph between them, and clustering."""

from ragfunnel.corpus.readers import load_corpus, read_mediawiki

__all__ = ["load_corpus", "read_mediawiki"]
