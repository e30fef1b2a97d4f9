"""Corpora: reading documents from files, the relation graph between them, clustering, the persistent
index, and FunnelRAG's progressive retrieval over it (``funnel``) with its distillation (``distill``)."""

from ragfunnel.corpus.readers import load_corpus, read_mediawiki

__all__ = ["load_corpus", "read_mediawiki"]
