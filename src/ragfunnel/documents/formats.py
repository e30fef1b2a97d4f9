"""Which reader a file needs: by its first bytes, then by its name."""

from __future__ import annotations

import zipfile
from pathlib import Path

from ragfunnel.errors import InputError

SUPPORTED = ("pdf", "docx", "epub", "html", "markdown", "text")
SUPPORTED_SUFFIXES = {".pdf": "pdf", ".docx": "docx", ".epub": "epub", ".html": "html", ".htm": "html",
                      ".xhtml": "html", ".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text"}
SUPPORTED_LINE = "PDF, DOCX, EPUB, HTML, Markdown and UTF-8 plain text"


def detect_format(path: Path) -> str:
    """One of :data:`SUPPORTED`, from magic bytes first and the suffix second; :class:`InputError` otherwise."""
    with path.open("rb") as f:
        head = f.read(4096)
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return _zip_format(path)
    if head.startswith(b"\xd0\xcf\x11\xe0"):
        raise InputError(f"{path.name} is a legacy Office file (.doc/.xls); save it as .docx first")
    suffix = SUPPORTED_SUFFIXES.get(path.suffix.lower())
    if suffix in ("pdf", "docx", "epub"):
        raise InputError(f"{path.name} is named .{suffix} but is not one (it does not start like a {suffix.upper()} "
                         "file); it is damaged, or renamed from another format")
    lead = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if suffix == "html" or lead.startswith((b"<!doctype html", b"<html")):
        return "html"
    if suffix == "markdown":
        return "markdown"
    if b"\x00" in head and suffix is None:
        raise InputError(f"{path.name} is not a supported format; ragfunnel reads {SUPPORTED_LINE}")
    return "text"


def _zip_format(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"{path.name} is a damaged or truncated zip container ({e}); open and save it again") from None
    if "META-INF/container.xml" in names:
        return "epub"
    if "word/document.xml" in names:
        return "docx"
    raise InputError(f"{path.name} is a zip archive ragfunnel cannot read; it reads {SUPPORTED_LINE}")
