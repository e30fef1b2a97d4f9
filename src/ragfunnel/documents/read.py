"""One entry point for every format: files and folders in, :class:`SourceDocument` and a joined
:class:`LocatedContext` out."""

from __future__ import annotations

import errno
import importlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ragfunnel.documents.formats import SUPPORTED_LINE, SUPPORTED_SUFFIXES, detect_format
from ragfunnel.documents.limits import MB, ReadLimits, check_file_size
from ragfunnel.documents.model import LocatedContext, SourceDocument
from ragfunnel.documents.plain import decode_text, read_markdown, read_text
from ragfunnel.documents.read_cache import READERS, read_with_cache
from ragfunnel.errors import InputError, MissingExtra, option, spelled_plainly

log = logging.getLogger(__name__)
DEFAULT_LIMITS = ReadLimits()


def read_document(path: str | Path, limits: ReadLimits = DEFAULT_LIMITS) -> SourceDocument:
    """Read one file of any supported format (``-`` reads UTF-8 text from stdin); the reader's warnings (what it
    left out or doubts) are logged, and kept on the document."""
    document = _read(path, limits)
    for warning in document.warnings:
        log.warning("%s: %s", document.name, spelled_plainly(warning))
    return document


def _read(path: str | Path, limits: ReadLimits) -> SourceDocument:
    if str(path) == "-":
        raw = sys.stdin.buffer.read(int(limits.max_document_mb * MB) + 1)
        if len(raw) > limits.max_document_mb * MB:
            raise InputError(f"stdin holds over {limits.max_document_mb:g} MB; raise the limit with "
                             f"{option('max_document_mb')}")
        return SourceDocument.of_text("stdin", decode_text(raw, "stdin"))
    path = Path(path)
    if not _exists(path):
        raise InputError(f"{path} does not exist; check the path")
    if not path.is_file():
        raise InputError(f"{path} is not a regular file; pass a file or a folder of files")
    check_file_size(path, limits)
    kind = detect_format(path)
    if kind in READERS:
        return read_with_cache(path, kind, limits, _reader(kind))
    raw = path.read_bytes()
    if kind == "csv":
        from ragfunnel.documents.sheets import read_csv

        return read_csv(path, raw, limits)
    if kind == "html":
        from ragfunnel.documents.html import read_html

        return read_html(path, raw)
    return read_markdown(path, raw) if kind == "markdown" else read_text(path, raw)


# Each format read by a reader module of its own: (module, function), imported when a file needs it.
_READERS = {"pdf": ("pdf", "read_pdf"), "docx": ("docx", "read_docx"), "epub": ("epub", "read_epub"),
            "spreadsheet": ("sheets", "read_spreadsheet"), "slides": ("slides", "read_slides"),
            "image": ("ocr", "read_image")}


def _reader(kind: str) -> Callable[[Path, ReadLimits], SourceDocument]:
    """The reader of one of :data:`READERS`' formats (its module imported when a file of it is read)."""
    module, function = _READERS[kind]
    return getattr(importlib.import_module(f"ragfunnel.documents.{module}"), function)


def resolved(path: Path) -> Path:
    """``path`` with every symlink followed; a symlink loop or a dangling link is a one-line InputError."""
    try:
        return path.resolve(strict=True)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; check the path") from None
    except ValueError:  # a NUL byte, which no file name holds
        raise InputError(f"{str(path)!r} holds a NUL byte; no file is named so") from None
    except RuntimeError:  # Python 3.11-3.12 raise this for a loop; 3.13 raises OSError(ELOOP)
        raise InputError(f"symlink loop at {path}; point the link at a real file or folder") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"symlink loop at {path}; point the link at a real file or folder") from None
        raise InputError(f"{path} cannot be read ({e.strerror}); check it and its permissions") from None


def files_under(folder: Path, *, root: Path | None = None) -> list[Path]:
    """The supported files under ``folder`` (by suffix; hidden ones skipped), in a stable order.

    Every entry is resolved, symlinks followed, and kept only if it lands inside ``root`` (by default the
    folder itself): a link that points outside, a link loop or a folder already walked (``sub/up -> ..``) is
    skipped with a warning naming it. So a folder can never pull in a file its reader was not given.
    """
    folder = Path(folder)
    inside = resolved(Path(root) if root is not None else folder)
    files: list[Path] = []
    seen: set[Path] = set()
    pending = [folder]
    while pending:
        current = pending.pop()
        real = resolved(current)
        if real in seen:
            log.warning("skipped %s: it leads back to a folder already read", current)
            continue
        seen.add(real)
        for entry in sorted(os.scandir(current), key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                target = resolved(path)
            except InputError as e:
                log.warning("skipped %s: %s", path, e)
                continue
            if not target.is_relative_to(inside):
                log.warning("skipped %s: it resolves outside %s", path, inside)
            elif target.is_dir():
                pending.append(path)
            elif path.suffix.lower() not in SUPPORTED_SUFFIXES:
                continue
            elif target.is_file():
                files.append(path)
            else:  # named like a document, but reading it would block (a FIFO) or never end (a device)
                log.warning("skipped %s: it is not a regular file (a FIFO, socket or device)", path)
    files.sort()
    if not files:
        raise InputError(f"{folder} holds no supported files; ragfunnel reads {SUPPORTED_LINE} "
                         f"({', '.join(sorted(SUPPORTED_SUFFIXES))})")
    return files


def read_documents(paths: list[str | Path], limits: ReadLimits = DEFAULT_LIMITS, *,
                   root: Path | None = None) -> list[SourceDocument]:
    """Every file named, and every supported file under each folder named, in the order given. A file named
    that cannot be read is an error; one found in a folder is skipped with a warning naming it and why.
    A folder's walk stays inside ``root`` (by default, inside the folder named)."""
    documents = []
    for given in paths:
        if str(given) != "-" and Path(given).is_dir():
            folder = Path(given)
            found = []
            for file in files_under(folder, root=root):
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


def read_context(paths: list[str | Path], limits: ReadLimits = DEFAULT_LIMITS, *,
                 root: Path | None = None) -> LocatedContext:
    """The files (and folders) to answer one question from, joined into one context."""
    return LocatedContext.join(read_documents(paths, limits, root=root))


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a symlink loop is said as such, not as a missing file."""
    if path.is_symlink():
        resolved(path)
    return path.exists()


def _renamed(doc: SourceDocument, name: str) -> SourceDocument:
    return replace(doc, name=name)
