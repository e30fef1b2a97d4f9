"""Slide decks (.pptx) with python-pptx: each slide's title, then the text of its shapes in order (grouped shapes
read inside their group), tables as ``a | b | c`` lines, and its speaker notes after a ``Notes:`` line; one section
a slide, cited as ``[deck.pptx · slide 7]``. Slides without text are left out (their numbers stay the deck's)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from ragfunnel.documents.limits import ReadLimits, check_xml_parts, open_zip
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.errors import InputError, MissingExtra

# Characters no prose holds (controls; a line break inside a paragraph is a vertical tab to python-pptx).
_CONTROLS = {c: " " for c in range(32) if chr(c) not in "\t\n\r\x0b"} | {0x0B: "\n", 0x7F: " "}


def read_slides(path: Path, limits: ReadLimits) -> SourceDocument:
    try:
        from pptx import Presentation
    except ImportError:
        raise MissingExtra("python-pptx", "documents") from None
    with open_zip(path, limits, kind="PPTX") as archive:
        check_xml_parts(archive, path)
    try:
        deck = Presentation(str(path))
        builder = DocumentBuilder(path.name, "slides")
        for number, slide in enumerate(deck.slides, start=1):
            builder.add("\n".join(_slide_lines(slide)), slide=number)
    except Exception as e:  # python-pptx raises KeyError, ValueError, lxml errors ... for damaged packages
        detail = " ".join(str(e).split())[:200]
        raise InputError(f"{path.name} cannot be read as PPTX ({type(e).__name__}: {detail}); it is damaged; "
                         "open and save it again") from None
    document = builder.build()
    if not document.text:
        raise InputError(f"{path.name} holds no text on its slides (images only?); pass a deck with text")
    return document


def _slide_lines(slide) -> Iterator[str]:
    """A slide's title, its shapes' text in order, then its notes after a ``Notes:`` line."""
    title = slide.shapes.title
    if title is not None:
        yield from _text(title.text_frame.text)
    yield from _shapes_lines(slide.shapes, skip=title.shape_id if title is not None else None)
    frame = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
    notes = list(_text(frame.text)) if frame is not None else []
    if notes:
        yield "Notes:"
        yield from notes


def _shapes_lines(shapes: Iterable, *, skip: int | None = None) -> Iterator[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in shapes:
        if shape.shape_id == skip:
            continue
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shapes_lines(shape.shapes)
        elif shape.has_text_frame:
            yield from _text(shape.text_frame.text)
        elif shape.has_table:
            yield from _table_lines(shape.table)


def _table_lines(table) -> Iterator[str]:
    """One line per row, cells apart by `` | `` (a merged cell once)."""
    for row in table.rows:
        cells = [" ".join(_text(cell.text)) for cell in row.cells if not cell.is_spanned]
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            yield " | ".join(cells)


def _text(text: str) -> Iterator[str]:
    """``text``'s non-empty lines, spaces collapsed."""
    for line in text.translate(_CONTROLS).splitlines():
        if words := line.split():
            yield " ".join(words)
