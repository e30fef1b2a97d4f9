"""Word (.docx) with python-docx: paragraphs and tables in body order, under their heading path."""

from __future__ import annotations

import re
from pathlib import Path

from ragfunnel.documents.limits import ReadLimits, check_xml_parts, open_zip
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.errors import InputError, MissingExtra

_HEADING = re.compile(r"^(?:heading|überschrift|titre)\s*(\d+)$", re.IGNORECASE)


def read_docx(path: Path, limits: ReadLimits) -> SourceDocument:
    try:
        import docx
        from docx.table import Table
        from docx.text.paragraph import Paragraph
    except ImportError:
        raise MissingExtra("python-docx", "documents") from None
    with open_zip(path, limits, kind="DOCX") as archive:
        check_xml_parts(archive, path)
    try:
        document = docx.Document(str(path))
    except Exception as e:  # python-docx raises KeyError, ValueError, lxml errors ... for damaged packages
        raise InputError(f"{path.name} cannot be read as DOCX ({type(e).__name__}: {e}); it is damaged; "
                         "open and save it again") from None
    builder = DocumentBuilder(path.name, "docx")
    path_: list[tuple[int, str]] = []
    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(child, document)
            text = paragraph.text
            level = _heading_level(paragraph)
            if level is not None and text.strip():
                path_ = [p for p in path_ if p[0] < level] + [(level, " ".join(text.split()))]
            builder.add(text, heading=tuple(t for _, t in path_))
        elif tag == "tbl":
            builder.add(_table_text(Table(child, document)), heading=tuple(t for _, t in path_))
    result = builder.build()
    if not result.text:
        raise InputError(f"{path.name} holds no text (images only?); run OCR first, or pass a document with text")
    return result


def _heading_level(paragraph) -> int | None:
    name = (paragraph.style.name if paragraph.style is not None else "") or ""
    if name.lower() == "title":
        return 0
    match = _HEADING.match(name.strip())
    return int(match.group(1)) if match else None


def _table_text(table) -> str:
    """One line per row, cells apart by `` | `` (a merged cell once)."""
    lines = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if not cells or cells[-1] != text:
                cells.append(text)
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)
