"""One entry point for every format: files and folders in, :class:`SourceDocument` and a joined
:class:`LocatedContext` out."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from ragfunnel.documents.formats import SUPPORTED_LINE, SUPPORTED_SUFFIXES, detect_format
from ragfunnel.documents.limits import MB, ReadLimits, check_file_size
from ragfunnel.documents.model import LocatedContext, SourceDocument
from ragfunnel.documents.plain import decode_text, read_markdown, read_text
from ragfunnel.errors import InputError, MissingExtra

log = logging.getLogger(__name__)
DEFAULT_LIMITS = ReadLimits()


def read_document(path: str | Path, limits: ReadLimits = DEFAULT_LIMITS) -> SourceDocument:
    """Read one file of any supported format (``-`` reads UTF-8 text from stdin)."""
    if str(path) == "-":
        raw = sys.stdin.buffer.read(int(limits.max_document_mb * MB) + 1)
        if len(raw) > limits.max_document_mb * MB:
            raise InputError(f"stdin holds over {limits.max_document_mb:g} MB; pass --max-document-mb to raise it")
        return SourceDocument.of_text("stdin", decode_text(raw, "stdin"))
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; check the path")
    if not path.is_file():
        raise InputError(f"{path} is not a regular file; pass a file or a folder of files")
    check_file_size(path, limits)
    kind = detect_format(path)
    if kind == "pdf":
        from ragfunnel.documents.pdf import read_pdf

        return read_pdf(path)
    if kind == "docx":
        from ragfunnel.documents.docx import read_docx

        return read_docx(path, limits)
    if kind == "epub":
        from ragfunnel.documents.epub import read_epub

        return read_epub(path, limits)
    raw = path.read_bytes()
    if kind == "html":
        from ragfunnel.documents.html import read_html

        return read_html(path, raw)
    return read_markdown(path, raw) if kind == "markdown" else read_text(path, raw)


def files_under(folder: Path) -> list[Path]:
    """The supported files under ``folder`` (by suffix; hidden ones skipped), in a stable order."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise InputError(f"{folder} holds no supported files; ragfunnel reads {SUPPORTED_LINE} "
                         f"({', '.join(sorted(SUPPORTED_SUFFIXES))})")
    return files


def read_documents(paths: list[str | Path], limits: ReadLimits = DEFAULT_LIMITS) -> list[SourceDocument]:
    """Every file named, and every supported file under each folder named, in the order given. A file named
    that cannot be read is an error; one found in a folder is skipped with a warning naming it and why."""
    documents = []
    for given in paths:
        if str(given) != "-" and Path(given).is_dir():
            folder = Path(given)
            found = []
            for file in files_under(folder):
                try:
                    found.append(_renamed(read_document(file, limits), str(file.relative_to(folder))))
                except MissingExtra:
                    raise
                except InputError as e:
                    log.warning("skipped %s: %s", file, e)
            if not found:
                raise InputError(f"{folder}: none of its files could be read (see the warnings above)")
            documents += found
        else:
            documents.append(read_document(given, limits))
    return documents


def read_context(paths: list[str | Path], limits: ReadLimits = DEFAULT_LIMITS) -> LocatedContext:
    """The files (and folders) to answer one question from, joined into one context."""
    return LocatedContext.join(read_documents(paths, limits))


def _renamed(doc: SourceDocument, name: str) -> SourceDocument:
    return SourceDocument(name, doc.format, doc.text, doc.sections, doc.pages)
