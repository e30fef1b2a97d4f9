"""PDF, from its text layer: pypdfium2 (fast, page labels and outline), with pdfminer.six for files whose
structure pypdfium2 cannot parse (a broken cross-reference table)."""

from __future__ import annotations

import logging
from pathlib import Path

from ragfunnel.documents.limits import ReadLimits
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.errors import InputError, MissingExtra

log = logging.getLogger(__name__)

ENCRYPTED = ("{name} is encrypted (password-protected); decrypt it first, "
             "e.g. qpdf --decrypt --password=PASSWORD {name} out.pdf")
NO_TEXT = "{name} has no extractable text (scanned?); run OCR first (e.g. ocrmypdf {name} out.pdf)"


def read_pdf(path: Path, limits: ReadLimits) -> SourceDocument:
    try:
        import pypdfium2 as pdfium
    except ImportError:
        raise MissingExtra("pypdfium2", "documents") from None
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        if "password" in str(e).lower():
            raise InputError(ENCRYPTED.format(name=path.name)) from None
        log.info("pypdfium2 cannot open %s (%s); reading it with pdfminer.six", path.name, e)
        return _read_with_pdfminer(path)
    try:
        builder = DocumentBuilder(path.name, "pdf")
        headings = _outline_by_page(pdf)
        for index in range(len(pdf)):
            page = pdf[index]
            text = page.get_textpage().get_text_range().replace("\r\n", "\n").replace("\r", "\n")
            label = pdf.get_page_label(index) or None
            builder.add(_clean(text), page=index + 1, page_label=label, heading=headings.get(index, ()))
        pages = len(pdf)
    finally:
        pdf.close()
    return _checked(builder.build(pages=pages))


def _outline_by_page(pdf) -> dict[int, tuple[str, ...]]:
    """The outline's heading path in force on each page (the last bookmark at or before it)."""
    marks = []
    path: list[str] = []
    for bookmark in pdf.get_toc():
        dest = bookmark.get_dest()
        index = dest.get_index() if dest is not None else None
        path = path[:bookmark.level] + [" ".join((bookmark.get_title() or "").split())]
        if index is not None:
            marks.append((index, tuple(path)))
    by_page: dict[int, tuple[str, ...]] = {}
    current: tuple[str, ...] = ()
    marks.sort(key=lambda m: m[0])
    for index in range(len(pdf)):
        while marks and marks[0][0] <= index:
            current = marks.pop(0)[1]
        by_page[index] = current
    return by_page


def _read_with_pdfminer(path: Path) -> SourceDocument:
    try:
        from pdfminer.high_level import extract_pages
        from pdfminer.layout import LTTextContainer
        from pdfminer.pdfdocument import PDFPasswordIncorrect
    except ImportError:
        raise MissingExtra("pdfminer.six", "documents") from None
    builder = DocumentBuilder(path.name, "pdf")
    number = 0
    try:
        for number, page in enumerate(extract_pages(str(path)), start=1):
            text = "\n".join(el.get_text() for el in page if isinstance(el, LTTextContainer))
            builder.add(_clean(text), page=number)
    except PDFPasswordIncorrect:
        raise InputError(ENCRYPTED.format(name=path.name)) from None
    except Exception as e:  # pdfminer raises many unrelated types for damaged files
        raise InputError(f"{path.name} cannot be read as a PDF ({type(e).__name__}: {e}); it is damaged or "
                         f"truncated; repair it first (e.g. qpdf {path.name} repaired.pdf)") from None
    document = builder.build(pages=number)
    if not document.text:  # pdfium could not open it either: damage is likelier than a scan
        raise InputError(f"{path.name} is damaged or truncated (no page could be read); repair it first "
                         f"(e.g. qpdf {path.name} repaired.pdf)")
    return document


# pdfium marks a hyphen it found at a line end with U+0002 (U+FFFE in some builds); other control
# characters are glyphs of math and symbol fonts that map to no text (and U+001C separates files).
_CONTROLS = {c: " " for c in range(32) if chr(c) not in "\n\t"} | {0x02: "-", 0xFFFE: "-"}


def _clean(text: str) -> str:
    return text.translate(_CONTROLS)


def _checked(document: SourceDocument) -> SourceDocument:
    if not document.text.strip():
        raise InputError(NO_TEXT.format(name=document.name))
    return document
