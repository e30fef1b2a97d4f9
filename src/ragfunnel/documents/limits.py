"""Size limits for the files a reader opens: a whole file, the parts of a zip container (DOCX, EPUB), what a
PDF's compressed streams, page tree and text may grow to, and the memory and time its reading process may take
(checked by :mod:`ragfunnel.documents.pdf` as it reads)."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

from ragfunnel.errors import ConfigError, InputError, option

MB = 1024 * 1024


@dataclass(frozen=True)
class ReadLimits:
    """``max_document_mb``: the largest file read (a reader holds a file's text in memory);
    ``max_unzipped_mb`` and ``max_zip_ratio``: what a DOCX or EPUB may expand to, in all and per part;
    ``max_pdf_stream_mb`` and ``max_inflated_mb``: what one compressed stream of a PDF, and all of them, may
    expand to (pdfium holds a stream it decodes whole, and twice over while it grows);
    ``max_pdf_pages``: the pages a PDF's page tree may list (one page listed 900,000 times is a small file);
    ``max_pdf_text_chars``: the text read from one PDF;
    ``max_pdf_memory_mb`` and ``max_pdf_seconds``: the address space and the time of the process that reads a
    PDF's pages (pdfium's memory grows with what a page draws: about 190 bytes per character of text)."""

    max_document_mb: float = 200.0
    max_unzipped_mb: float = 500.0
    max_zip_ratio: float = 200.0
    max_pdf_stream_mb: float = 64.0
    max_inflated_mb: float = 256.0
    max_pdf_pages: int = 10_000
    max_pdf_text_chars: int = 50_000_000
    max_pdf_memory_mb: float = 1024.0
    max_pdf_seconds: float = 120.0  # 10,000 pages (the page limit) of a real book take about 25 s

    def __post_init__(self) -> None:
        for field in fields(self):
            if not getattr(self, field.name) > 0:
                raise ConfigError(f"{field.name} is {getattr(self, field.name)!r}; it must be a number above 0")


def check_file_size(path: Path, limits: ReadLimits) -> None:
    size = path.stat().st_size
    if size > limits.max_document_mb * MB:
        raise InputError(f"{path.name} is {size / MB:.0f} MB, over the {limits.max_document_mb:g} MB limit; "
                         f"raise it with {option('max_document_mb')}")


def open_zip(path: Path, limits: ReadLimits, *, kind: str) -> zipfile.ZipFile:
    """``path`` as a zip, refused if it is damaged or would expand past ``limits`` (a zip bomb)."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"{path.name} is a damaged or truncated {kind} ({e}); open and save it again") from None
    total = 0
    for info in archive.infolist():
        total += info.file_size
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > MB and ratio > limits.max_zip_ratio:
            archive.close()
            raise InputError(f"{path.name}: part {info.filename} expands {ratio:.0f}-fold, over the limit of "
                             f"{limits.max_zip_ratio:g} (a zip bomb?); raise it with {option('max_zip_ratio')}")
    if total > limits.max_unzipped_mb * MB:
        archive.close()
        raise InputError(f"{path.name} expands to {total / MB:.0f} MB, over the {limits.max_unzipped_mb:g} MB limit "
                         f"(a zip bomb?); raise it with {option('max_unzipped_mb')}")
    return archive


def read_xml_part(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    """A part of a zip container, refused if it declares entities (the billion-laughs and external-entity
    attacks both need a declaration); the parsers used afterwards resolve none either."""
    try:
        data = archive.read(name)
    except KeyError:
        raise InputError(f"{path.name} has no {name}; it is damaged, or not the format its name says") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise InputError(f"{path.name}: part {name} cannot be read ({e}); the file is damaged or truncated") from None
    if b"<!ENTITY" in data:
        raise InputError(f"{path.name}: part {name} declares XML entities, which ragfunnel does not expand "
                         "(entity expansion attacks); remove the declarations or export the file again")
    return data
