"""HTML: the main content (trafilatura drops navigation and boilerplate), as Markdown with its headings."""

from __future__ import annotations

from pathlib import Path

from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.documents.plain import markdown_document
from ragfunnel.documents.xhtml import html_text, parse_html
from ragfunnel.errors import InputError, MissingExtra


def read_html(path: Path, raw: bytes) -> SourceDocument:
    try:
        import trafilatura
    except ImportError:
        raise MissingExtra("trafilatura", "documents") from None
    if b"<!ENTITY" in raw:
        raise InputError(f"{path.name} declares XML entities, which ragfunnel does not expand; remove them")
    main = trafilatura.extract(raw, output_format="markdown", include_tables=True, include_comments=False,
                               favor_recall=True)
    if main and main.strip():
        return markdown_document(path.name, main, format="html")
    # Too short or too plain for boilerplate removal: every visible word instead.
    builder = DocumentBuilder(path.name, "html")
    root = parse_html(raw) if raw.strip() else None
    builder.add(html_text(root) if root is not None else "")
    document = builder.build()
    if not document.text:
        raise InputError(f"{path.name} holds no visible text; pass a page with text")
    return document
