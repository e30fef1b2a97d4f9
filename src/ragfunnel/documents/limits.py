"""Size limits for the files a reader opens: a whole file, the parts of a zip container (DOCX, EPUB), what a
PDF's compressed streams, page tree and text may grow to, and the memory and time its reading process may take
(checked by :mod:`ragfunnel.documents.pdf` as it reads), each declared once with its bounds and help
(:mod:`ragfunnel.declared`)."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from ragfunnel.declared import Config, setting
from ragfunnel.errors import InputError, option

MB = 1024 * 1024


@dataclass(frozen=True)
class ReadLimits(Config):
    """What a reader may read of one file: the file, the parts of a zip container (DOCX, EPUB), what a PDF's
    compressed streams (pdfium holds a stream it decodes whole, and twice over while it grows), page tree and
    text may grow to, and the address space and time of the process that reads a PDF's pages."""

    max_document_mb: float = setting(200.0, "Refuse files larger than this (a reader holds a file's text in memory).",
                                     gt=0, unit="MB")
    max_unzipped_mb: float = setting(500.0, "Refuse a zip container (DOCX, EPUB, XLSX, ODS, PPTX) that expands to "
                                            "more than this (zip bombs).",
                                     gt=0, unit="MB")
    max_zip_ratio: float = setting(200.0, "Refuse a part of a zip container (DOCX, EPUB, XLSX, ODS, PPTX) that "
                                          "expands more than this many times.", ge=1)
    max_pdf_stream_mb: float = setting(64.0, "Refuse a PDF with a compressed stream that expands to more than this "
                                             "(decompression bombs; the PDF reader holds a stream whole, twice over).",
                                       gt=0, unit="MB")
    max_inflated_mb: float = setting(256.0, "Refuse a PDF whose compressed streams expand to more than this in all.",
                                     gt=0, unit="MB")
    # One page listed 900,000 times in a page tree is a small file.
    max_pdf_pages: int = setting(10_000, "Refuse a PDF whose page tree lists more pages than this.", ge=1)
    max_pdf_text_chars: int = setting(50_000_000, "Stop reading a PDF, and refuse it, past this many characters of "
                                                  "text.", ge=1, unit="characters")
    # pdfium's memory grows with what a page draws: about 190 bytes per character of text.
    max_pdf_memory_mb: float = setting(1024.0, "Refuse a PDF whose reading process needs more memory than this "
                                               "(pdfium's grows with what a page draws, whatever the file's size).",
                                       gt=0, unit="MB")
    # 10,000 pages (the page limit) of a real book take about 25 s.
    max_pdf_seconds: float = setting(120.0, "Stop reading a PDF, and refuse it, after this many seconds.", gt=0,
                                     unit="seconds")
    # PIL refuses images over 179M pixels as decompression bombs; a 300-dpi A3 page is 17.4M.
    max_image_megapixels: float = setting(50.0, "Refuse an image, or a scanned page as it is rendered for OCR, of more "
                                                "pixels than this (decompression bombs).", gt=0, unit="megapixels")
    # RapidOCR's models and one 300-dpi page take about 0.6 GB.
    max_ocr_memory_mb: float = setting(3072.0, "Refuse a scan or image whose OCR process needs more memory than this.",
                                       gt=0, unit="MB")
    # OCR reads a 300-dpi page in 5-10 s on two cores.
    max_ocr_seconds: float = setting(1800.0, "Stop reading a scan or image by OCR, and refuse it, after this many "
                                             "seconds.", gt=0, unit="seconds")
    max_sheet_cells: int = setting(2_000_000, "Read a spreadsheet's or CSV file's cells up to this many, and say "
                                              "where the rest were left out.", ge=1, unit="cells")


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


def check_xml_parts(archive: zipfile.ZipFile, path: Path) -> None:
    """Refuse a container any of whose XML parts declares entities (:func:`read_xml_part`), before a library whose
    parser expands none opens it anyway."""
    for name in archive.namelist():
        if name.endswith((".xml", ".rels")):
            read_xml_part(archive, name, path)


def read_xml_part(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    """A part of a zip container, refused if it declares entities (the billion-laughs and external-entity
    attacks both need a declaration); the parsers used afterwards resolve none either."""
    try:
        data = archive.read(name)
    except KeyError:
        raise InputError(f"{path.name} has no {name}; it is damaged, or not the format its name says") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise InputError(f"{path.name}: part {name} cannot be read ({e}); the file is damaged or truncated") from None
    except (RuntimeError, NotImplementedError) as e:  # an encrypted part, or a compression zipfile lacks (Deflate64)
        raise InputError(f"{path.name}: part {name} cannot be read ({e}); open the file and save it again without "
                         "a password") from None
    if b"<!ENTITY" in data:
        raise InputError(f"{path.name}: part {name} declares XML entities, which ragfunnel does not expand "
                         "(entity expansion attacks); remove the declarations or export the file again")
    return data
