"""One PDF's pages read in a process of its own, under an address-space limit: :mod:`ragfunnel.documents.pdf`
starts it and kills it when it runs past its time.

No check of the file bounds what pdfium allocates: it grows with what a page draws (about 190 bytes per character
of text), so a 900-byte file that draws one form a thousand times takes gigabytes. A process can be bounded.

``python -P pdf_child.py FILE MEMORY_MB`` (or ``python -m ragfunnel.documents.pdf_child FILE MEMORY_MB``) writes
one JSON object a line to stdout:

- first ``{"reader": "pdfium", "pages": N}``, or ``{"reader": "pdfminer", "because": ...}`` when pdfium cannot
  open the file (pdfminer.six finds the pages one by one);
- then ``{"page": n, "label": ..., "heading": [...], "text": ...}`` for each page, in order, with ``"images": k``
  when the page has no text: a page of images and no text is a scan, to be read by OCR;
- or, where reading stops, ``{"error": "encrypted" | "damaged" | "unreadable" | "missing", "detail": ...}``.

When Python cannot allocate it exits with :data:`OUT_OF_MEMORY` (:mod:`ragfunnel.documents.child_io`'s);
when pdfium cannot, pdfium aborts the process.
Only the standard library and the readers are imported: run by path, the child starts in 0.05 s; importing the
ragfunnel package on the way (``-m``) would make that 0.35 s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

if __package__:  # imported as a module of ragfunnel (tests, the parent's constants)
    from ragfunnel.documents.child_io import OUT_OF_MEMORY, limit_memory, say
else:  # run by path (-P): its folder goes after the standard library, where its html.py shadows nothing
    sys.path.append(os.path.dirname(__file__))
    from child_io import OUT_OF_MEMORY, limit_memory, say



def main(argv: list[str]) -> int:
    path, memory_mb = argv
    import pypdfium2  # noqa: F401  loaded before the limit, which bounds reading the file, not loading the library

    limit_memory(float(memory_mb))
    try:
        read_pages(path)
    except MemoryError:
        return OUT_OF_MEMORY
    return 0


def read_pages(path: str) -> None:
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as e:
        if "password" in str(e).lower():
            return say(error="encrypted")
        say(reader="pdfminer", because=str(e))
        return read_with_pdfminer(path)
    try:
        pages = len(pdf)
        say(reader="pdfium", pages=pages)  # before the outline is read: the page count alone may refuse the file
        for index, heading in enumerate(headings(pdf, pages)):
            text = page_text(pdf, index)
            images = {} if text.strip() else {"images": image_count(pdf, index)}
            say(page=index + 1, label=pdf.get_page_label(index) or None, heading=heading, text=text, **images)
    except pdfium.PdfiumError as e:  # a page tree that lists itself, a page that cannot be parsed ...
        say(error="damaged", detail=f"pdfium: {e}".rstrip("."))
    finally:
        pdf.close()


def page_text(pdf, index: int) -> str:
    page = pdf[index]
    textpage = page.get_textpage()
    text = textpage.get_text_range()
    textpage.close()  # each page's memory goes before the next is read
    page.close()
    return text.replace("\r\n", "\n").replace("\r", "\n")


def image_count(pdf, index: int) -> int:
    import pypdfium2.raw as pdfium_c

    page = pdf[index]
    count = sum(1 for _ in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,)))
    page.close()
    return count


def headings(pdf, pages: int) -> Iterator[list[str]]:
    """The outline's heading path in force on each page in turn (the last bookmark at or before it)."""
    marks = []
    path: list[str] = []
    for bookmark in pdf.get_toc():
        dest = bookmark.get_dest()
        index = dest.get_index() if dest is not None else None
        path = path[:bookmark.level] + [" ".join((bookmark.get_title() or "").split())]
        if index is not None:
            marks.append((index, path))
    marks.sort(key=lambda mark: mark[0])
    current: list[str] = []
    at = 0
    for index in range(pages):
        while at < len(marks) and marks[at][0] <= index:
            current = marks[at][1]
            at += 1
        yield current


def read_with_pdfminer(path: str) -> None:
    try:
        from pdfminer.high_level import extract_pages
        from pdfminer.layout import LTTextContainer
        from pdfminer.pdfdocument import PDFPasswordIncorrect
    except ImportError:
        return say(error="missing", detail="pdfminer.six")
    try:
        for number, page in enumerate(extract_pages(path), start=1):
            text = "\n".join(element.get_text() for element in page if isinstance(element, LTTextContainer))
            say(page=number, label=None, heading=[], text=text)
    except PDFPasswordIncorrect:
        say(error="encrypted")
    except MemoryError:
        raise
    except Exception as e:  # pdfminer raises many unrelated types for damaged files
        say(error="unreadable", detail=f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
