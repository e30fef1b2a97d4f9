"""Files read once: what the PDF (with OCR of its scanned pages), DOCX, EPUB, spreadsheet, slide and image (OCR)
readers made of a file, kept across processes by the file's bytes.

Reading the shared 117-page PDF takes 0.6 s (in a child process, within the limits), *Moby-Dick*'s EPUB 0.3 s;
a later question about the same file, in another process, finds its text and page map kept (0.02-0.03 s). A
reading is an entry of the document cache (:mod:`ragfunnel.retrieve.document_cache`: the same bound, eviction,
damaged-entry handling, ``--no-cache`` and ``ragfunnel cache clear``), named by the SHA-256 of
:data:`READ_FORMAT`, ragfunnel's version, the format, its reader libraries' versions, the reading limits and the
file's bytes. Only readings that succeeded are kept (a refusal is given again, as it was), and only when the file
did not change while it was read. Plain text, Markdown and HTML are read faster than they would be looked up.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ragfunnel.documents.limits import ReadLimits
from ragfunnel.documents.model import Section, SourceDocument
from ragfunnel.llm.fingerprint import file_stamp
from ragfunnel.retrieve.document_cache import DOCUMENTS, Damaged
from ragfunnel.version import __version__

READ_FORMAT = "ragfunnel-read-2"  # raise it when what a reading holds changes
# The formats worth keeping, and the libraries whose versions decide what their readers make of a file.
READERS = {"pdf": ("pypdfium2", "pdfminer.six", "rapidocr"), "docx": ("python-docx", "lxml"),
           "epub": ("defusedxml", "lxml"), "spreadsheet": ("python-calamine",), "slides": ("python-pptx", "lxml"),
           "image": ("rapidocr", "onnxruntime", "pillow")}
_HASH_BLOCK = 1 << 20


def read_with_cache(path: Path, kind: str, limits: ReadLimits,
                    reader: Callable[[Path, ReadLimits], SourceDocument]) -> SourceDocument:
    """``reader(path, limits)`` (``kind``: one of :data:`READERS`), or the reading kept from an earlier one of the
    same bytes (then named ``path``'s name as given now)."""
    if DOCUMENTS.root is None:
        return reader(path, limits)
    before = file_stamp(path)
    key = reading_key(path, kind, limits)
    kept = DOCUMENTS.read_meta(key, max_bytes=_record_bytes(before["size"]),
                               parse=lambda record: _document_from(record, key))
    if kept is not None:
        return replace(kept, name=path.name)
    document = reader(path, limits)
    if file_stamp(path) == before:  # a file written to while it was read: its key may not be what was read
        DOCUMENTS.write_meta(key, _record(key, document))
    return document


def reading_key(path: Path, kind: str, limits: ReadLimits) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    canonical = json.dumps([READ_FORMAT, __version__, kind, _libraries(kind), asdict(limits), digest.hexdigest()],
                           separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@cache
def _libraries(kind: str) -> list[str]:
    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    return [f"{name} {installed(name)}" for name in READERS[kind]]


def _record_bytes(file_bytes: int) -> int:
    """The most a reading of a file of ``file_bytes`` may take as JSON: its text (an EPUB or DOCX is zipped, so up
    to the unzip ratio more than the file), escaped, with its map."""
    return 64 * max(file_bytes, 1 << 20)


def _record(key: str, document: SourceDocument) -> dict[str, Any]:
    return {"reading": READ_FORMAT, "key": key, "format": document.format, "text": document.text,
            "pages": document.pages, "warnings": list(document.warnings),
            "sections": [[s.start, s.end, s.page, s.page_label, list(s.heading), s.sheet, s.row, s.slide, s.confidence]
                         for s in document.sections]}


def _document_from(record: Any, key: str) -> SourceDocument:
    """The document a kept record holds; :class:`Damaged` when it is not one this module wrote for ``key``."""
    try:
        if record["reading"] != READ_FORMAT or record["key"] != key:
            raise Damaged("another reading's record")
        text, pages, warnings = record["text"], record["pages"], tuple(record["warnings"])
        if not isinstance(text, str) or not isinstance(pages, int) or not isinstance(record["format"], str) \
                or not all(isinstance(w, str) for w in warnings):
            raise Damaged("a reading of the wrong types")
        sections = tuple(Section(start, end, page, label, tuple(heading), sheet, row, slide, confidence)
                         for start, end, page, label, heading, sheet, row, slide, confidence in record["sections"])
        for s in sections:
            if not (isinstance(s.start, int) and isinstance(s.end, int) and 0 <= s.start <= s.end <= len(text)):
                raise Damaged("a section outside the text")
            if not (isinstance(s.page, int | None) and isinstance(s.page_label, str | None)
                    and all(isinstance(h, str) for h in s.heading) and isinstance(s.sheet, str | None)
                    and isinstance(s.row, int | None) and isinstance(s.slide, int | None)
                    and isinstance(s.confidence, float | int | None)):
                raise Damaged("a section of the wrong types")
    except (KeyError, TypeError, ValueError) as e:
        raise Damaged(f"not a reading ({type(e).__name__})") from None
    return SourceDocument("", record["format"], text, sections, pages, warnings)
