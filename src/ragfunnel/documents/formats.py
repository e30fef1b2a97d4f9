"""Which reader a file needs: by its first bytes, then by its name."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

from ragfunnel.errors import InputError

SUPPORTED = ("pdf", "docx", "epub", "html", "markdown", "text", "spreadsheet", "csv", "slides", "image")
SUPPORTED_SUFFIXES = {".pdf": "pdf", ".docx": "docx", ".epub": "epub", ".html": "html", ".htm": "html",
                      ".xhtml": "html", ".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text",
                      ".xlsx": "spreadsheet", ".xlsm": "spreadsheet", ".ods": "spreadsheet", ".csv": "csv",
                      ".tsv": "csv", ".pptx": "slides", ".png": "image", ".jpg": "image", ".jpeg": "image",
                      ".tif": "image", ".tiff": "image", ".webp": "image"}
SUPPORTED_LINE = ("PDF (scanned pages by OCR), DOCX, EPUB, HTML, Markdown, UTF-8 plain text, spreadsheets (XLSX, ODS, "
                  "CSV), slides (PPTX) and images (PNG, JPEG, TIFF, WebP, by OCR)")
# Formats whose files are containers, named by their suffix when their first bytes say only "a zip".
_CONTAINERS = ("pdf", "docx", "epub", "spreadsheet", "slides", "image")
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")


def detect_format(path: Path) -> str:
    """One of :data:`SUPPORTED`, from magic bytes first and the suffix second; :class:`InputError` otherwise."""
    with path.open("rb") as f:
        head = f.read(4096)
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return _zip_format(path)
    if head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return "image"
    if head.startswith(b"\xd0\xcf\x11\xe0"):
        raise InputError(f"{path.name} is a legacy Office file (.doc/.xls/.ppt), or an Office file saved with a "
                         "password; save it as .docx, .xlsx or .pptx, without a password, first")
    suffix = SUPPORTED_SUFFIXES.get(path.suffix.lower())
    if suffix in _CONTAINERS:
        raise InputError(f"{path.name} is named {path.suffix.lower()} but is not one (it does not start like a "
                         f"{path.suffix.lower()[1:].upper()} file); it is damaged, or renamed from another format")
    lead = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if suffix == "html" or lead.startswith((b"<!doctype html", b"<html")):
        return "html"
    if suffix in ("markdown", "csv"):
        return suffix
    if b"\x00" in head and suffix is None:
        raise InputError(f"{path.name} is not a supported format; ragfunnel reads {SUPPORTED_LINE}")
    return "text"


def _zip_format(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            mimetype = _first_bytes(archive, "mimetype") if "mimetype" in names else b""
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"{path.name} is a damaged or truncated zip container ({e}); open and save it again") from None
    if "META-INF/container.xml" in names:
        return "epub"
    if "word/document.xml" in names:
        return "docx"
    if "xl/workbook.xml" in names or mimetype.startswith(b"application/vnd.oasis.opendocument.spreadsheet"):
        return "spreadsheet"
    if "ppt/presentation.xml" in names:
        return "slides"
    raise InputError(f"{path.name} is a zip archive ragfunnel cannot read; it reads {SUPPORTED_LINE}")


def _first_bytes(archive: zipfile.ZipFile, name: str) -> bytes:
    """The first 100 bytes of part ``name`` (an OpenDocument's ``mimetype`` says which kind it is); none when the
    part cannot be read (its reader says why)."""
    try:
        with archive.open(name) as part:
            return part.read(100)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError, zlib.error):
        return b""
