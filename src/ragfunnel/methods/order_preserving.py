"""Order-preserving RAG (Yu et al., 2024): vanilla's chunks, shown in document order."""

from __future__ import annotations

from ragfunnel.methods.vanilla import VanillaRAG


class OrderPreservingRAG(VanillaRAG):
    name = "op"
    keep_document_order = True
