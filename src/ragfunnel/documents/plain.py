"""Plain UTF-8 text, and Markdown with the heading path of each stretch."""

from __future__ import annotations

from pathlib import Path

from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.errors import InputError, MissingExtra
from ragfunnel.text.context import check_context


def decode_text(raw: bytes, source: str) -> str:
    """``raw`` as UTF-8 text (a BOM dropped), checked as prose; :class:`InputError` naming ``source`` otherwise."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{source} is not UTF-8 text (bad byte at offset {e.start}); "
                         "convert it to UTF-8 first (e.g. iconv)") from None
    return check_context(text, source=source)


def read_text(path: Path, raw: bytes) -> SourceDocument:
    return SourceDocument.of_text(path.name, decode_text(raw, path.name))


def read_markdown(path: Path, raw: bytes) -> SourceDocument:
    return markdown_document(path.name, decode_text(raw, path.name), format="markdown")


def markdown_document(name: str, text: str, *, format: str) -> SourceDocument:
    """Markdown source kept as written, one section per heading with its heading path."""
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        raise MissingExtra("markdown-it-py", "documents") from None

    lines = text.splitlines(keepends=True)
    tokens = MarkdownIt("commonmark").parse(text)
    headings = [(tok.map[0], int(tok.tag[1]), tokens[i + 1].content.strip())
                for i, tok in enumerate(tokens) if tok.type == "heading_open" and tok.map]
    builder = DocumentBuilder(name, format)
    path: list[tuple[int, str]] = []
    bounds = [0] + [line for line, _, _ in headings] + [len(lines)]
    for i in range(len(bounds) - 1):
        if i > 0:
            _, level, title = headings[i - 1]
            path = [p for p in path if p[0] < level] + [(level, title)]
        builder.add("".join(lines[bounds[i]:bounds[i + 1]]), heading=tuple(t for _, t in path))
    document = builder.build()
    if not document.text:
        raise InputError(f"{name} holds no text; pass a file with the text to answer from")
    return document
