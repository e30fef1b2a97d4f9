"""Read a corpus file into :class:`~ragfunnel.types.Document` records.

Formats, picked by the file's name and first record:

``.json``            HippoRAG-style ``{title: [sentences]}`` or ``[{title, text}]``
``.jsonl``           ragfunnel's own ``{id, title, text, links}`` (``id`` and ``links`` optional),
                     FlashRAG ``{id, contents}`` (title on the first line of ``contents``) or
                     KILT ``{wikipedia_title, text: [paragraphs]}``
XML (``.bz2`` or not) a MediaWiki XML export; article text is stripped of markup, ``[[links]]``
                     become :attr:`Document.links` (redirects resolved), non-article pages skipped
a folder             every file ragfunnel.documents reads (PDF, DOCX, EPUB, HTML, Markdown, text, spreadsheets,
                     slides, images) is a
                     document; with ``split="chapters"``, each EPUB chapter, PDF outline section or
                     top-level heading is one

A field of the wrong JSON type (a number for a text, a string for ``links``) is refused with the
file, the row and the field named; ``null`` stands for an absent optional field (``id``, ``title``,
``links``). A corpus file must be a regular file (never a FIFO or a device), opened through
:mod:`ragfunnel.bounded`: a ``.json`` corpus is read whole up to :data:`MAX_JSON_CORPUS_BYTES`, and JSON
Lines and XML are streamed, a JSON line at most :data:`MAX_CORPUS_LINE_BYTES` long.
"""

from __future__ import annotations

import bz2
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO
from xml.etree import ElementTree

from ragfunnel.bounded import (
    MAX_JSON_DEPTH,
    TooDeep,
    TooManyDigits,
    loads,
    numbered_lines,
    open_regular_file,
    read_regular_file,
)
from ragfunnel.documents import ReadLimits, SourceDocument, read_documents
from ragfunnel.errors import ConfigError, InputError, MissingExtra
from ragfunnel.text.hygiene import RecordCleaner
from ragfunnel.types import Document

log = logging.getLogger(__name__)


SPLITS = ("files", "chapters")
# A .json corpus is read and parsed whole, in memory several times its size. The corpora published in this
# form (HippoRAG's) are tens of megabytes, so this leaves room for far larger ones and still stops a
# runaway file; a corpus past it belongs in JSON Lines, which is read a line at a time.
MAX_JSON_CORPUS_BYTES = 2 << 30
# One passage a line: the longest Wikipedia article is under a megabyte of text, so even a KILT row holding
# a whole article stays far under this, while a file without newlines (a sparse file's NULs) stops here.
MAX_CORPUS_LINE_BYTES = 64 << 20
_FIX = "pass a corpus file (JSON, JSON Lines or MediaWiki XML) or a folder of documents"
_JSON_FIX = f"pass a regular file of at most {MAX_JSON_CORPUS_BYTES >> 30} GiB, or a larger corpus as JSON Lines"
_LINE_FIX = f"pass a JSON Lines corpus: one passage a line, each under {MAX_CORPUS_LINE_BYTES >> 20} MiB"


def load_corpus(path: str | Path, *, split: str = "files", limits: ReadLimits | None = None) -> list[Document]:
    """Every document of the corpus file or folder at ``path`` (see the module docstring for formats)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"corpus file {path} does not exist; check the path")
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if path.is_dir():
        return folder_corpus(path, split=split, limits=limits or ReadLimits())
    if _is_xml(path):
        return read_mediawiki(path)
    if path.suffix == ".json":
        return list(_json_corpus(path))
    return list(_jsonl_corpus(path))


def folder_corpus(folder: Path, *, split: str, limits: ReadLimits) -> list[Document]:
    """The files under ``folder`` as documents: one per file, or one per top-level chapter or section."""
    return [doc for source in read_documents([folder], limits) for doc in documents_of(source, split)]


def documents_of(source: SourceDocument, split: str) -> list[Document]:
    """The documents a file read becomes in a corpus: one, or one per top-level chapter or section
    (``split="chapters"``)."""
    parts = _chapters(source) if split == "chapters" else [("", source.text)]
    return [Document(id=source.name if len(parts) == 1 else f"{source.name}#{number}",
                     title=f"{source.name} \u00b7 {chapter}" if chapter else source.name, text=text)
            for number, (chapter, text) in enumerate(parts)]


def _chapters(source: SourceDocument) -> list[tuple[str, str]]:
    """(title, text) of each run of sections under one top-level heading; the whole file if it has none."""
    runs: list[tuple[str, int, int]] = []
    for section in source.sections:
        title = section.heading[0] if section.heading else ""
        if runs and runs[-1][0] == title:
            runs[-1] = (title, runs[-1][1], section.end)
        else:
            runs.append((title, section.start, section.end))
    if len(runs) <= 1:
        return [("", source.text)]
    return [(title, source.text[start:end]) for title, start, end in runs]


@contextmanager
def _stream(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened as a regular file (a FIFO or a device refused before a byte is read), decompressed
    as it is read when its name ends in .bz2."""
    with open_regular_file(path, what="corpus file", fix=_FIX) as raw:
        if path.suffix != ".bz2":
            yield raw
            return
        with bz2.open(raw) as unpacked:
            yield unpacked


def _is_xml(path: Path) -> bool:
    """True for an XML file, bz2-compressed or not (dump names do not always end in .xml.bz2)."""
    try:
        with _stream(path) as f:
            return f.read(256).lstrip().startswith(b"<")
    except (OSError, EOFError):
        return False


def _json_corpus(path: Path) -> Iterator[Document]:
    raw = read_regular_file(path, max_bytes=MAX_JSON_CORPUS_BYTES, what="corpus file", fix=_JSON_FIX)
    try:
        data = loads(raw.decode("utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); fix the file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; pass a JSON corpus") from None
    except TooDeep:
        raise InputError(f"{path} nests JSON deeper than {MAX_JSON_DEPTH} levels, too deep to be a corpus; "
                         "fix the file") from None
    except TooManyDigits as e:
        raise InputError(f"{path}: {e}, more than Python reads as a number; write it as a string") from None
    cleaner = RecordCleaner(path)
    data = cleaner.clean(data, 1)
    cleaner.done()
    if isinstance(data, dict):
        for title, sents in data.items():
            where = f"{path}, title {title!r}"
            text = sents if isinstance(sents, str) else "".join(
                _strings(sents, where, "sentences", expected="a list of sentences (strings) or a string"))
            yield Document(title, title, text)
        return
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a {{title: sentences}} object or a list of passages; fix the file")
    for number, record in enumerate(data, start=1):
        yield _passage(record, f"{path}, passage {number}", number)


def _jsonl_corpus(path: Path) -> Iterator[Document]:
    """The passages of a JSON Lines corpus, read a line at a time: a corpus may be gigabytes."""
    cleaner = RecordCleaner(path)
    with open_regular_file(path, what="corpus file", fix=_FIX) as f:
        for number, raw in numbered_lines(f, path, max_line_bytes=MAX_CORPUS_LINE_BYTES, what="corpus file",
                                          fix=_LINE_FIX):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{where} is not UTF-8 text; pass a JSON Lines corpus") from None
            if line.strip():
                yield _passage(cleaner.clean(_row(line, where), number), where, number)
    cleaner.done()


def _row(line: str, where: str) -> object:
    """One JSON Lines row parsed; ``where`` (file:line) names it in errors."""
    try:
        return loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON ({e.msg}); fix the row") from None
    except TooDeep:
        raise InputError(f"{where}: JSON nested too deeply for a passage (over {MAX_JSON_DEPTH} levels); "
                         "fix the row") from None
    except TooManyDigits as e:
        raise InputError(f"{where}: {e}, more than Python reads as a number; write it as a string") from None


def _passage(record: object, where: str, number: int) -> Document:
    """The document of one corpus record; ``where`` names it in errors, ``number`` is its default id."""
    if not isinstance(record, dict):
        raise InputError(f"{where}: not a passage object; fix the row")
    if "contents" in record:  # FlashRAG
        title, _, text = _string(record, "contents", where).partition("\n")
        return Document(_id(record, "id", where, number), title.strip().strip('"'), text)
    if "wikipedia_title" in record:  # KILT: paragraphs, the first one repeating the title
        title = _string(record, "wikipedia_title", where)
        paragraphs = _strings(record.get("text"), where, "text", expected="a list of paragraphs (strings)")
        body = paragraphs[1:] if paragraphs and paragraphs[0].strip() == title else paragraphs
        return Document(_id(record, "wikipedia_id", where, title), title, "".join(body).strip())
    if "text" in record:
        title = _string(record, "title", where, default="")
        links = record.get("links")
        return Document(_id(record, "id", where, f"{title}#{number}" if title else number), title,
                        _string(record, "text", where),
                        () if links is None else tuple(_strings(links, where, "links", expected="a list of titles")))
    raise InputError(f"{where}: a passage needs 'text' (or FlashRAG 'contents'); fix the row")


def _json_type(value: object) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), "null")


def _string(record: dict, key: str, where: str, *, default: str | None = None) -> str:
    value = record.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise InputError(f"{where}: '{key}' must be a string, not {_json_type(value)}; fix the row")
    return value


def _strings(value: object, where: str, key: str, *, expected: str) -> list[str]:
    """``value`` if it is a list of strings, else an error naming the field and what it must be."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        found = _json_type(value) if not isinstance(value, list) else "a list holding " + next(
            _json_type(x) for x in value if not isinstance(x, str))
        raise InputError(f"{where}: '{key}' must be {expected}, not {found}; fix the row")
    return value


def _id(record: dict, key: str, where: str, default: str | int) -> str:
    """An id as given (a string or a whole number), or ``default`` when absent."""
    value = record.get(key)
    if value is None:
        return str(default)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InputError(f"{where}: '{key}' must be a string or a whole number, not {_json_type(value)}; fix the row")
    return str(value)


# MediaWiki namespaces whose [[links]] are not links to articles.
_NON_ARTICLE = ("file:", "image:", "category:", "template:", "wikipedia:", "wp:", "help:", "portal:",
                "user:", "talk:", "special:", "media:", "wiktionary:", "wikt:", "s:", "q:", "commons:")


def _normal_title(title: str) -> str:
    """MediaWiki's title rules for article links: no anchor, spaces for underscores, first letter capital."""
    title = title.split("#", 1)[0].replace("_", " ").strip()
    title = " ".join(title.split())
    return title[:1].upper() + title[1:]


def read_mediawiki(path: str | Path) -> list[Document]:
    """Articles (namespace 0) of a MediaWiki XML export, plain text with their resolved links."""
    try:
        import mwparserfromhell
    except ImportError:
        raise MissingExtra("mwparserfromhell", "corpus") from None
    path = Path(path)
    pages: list[tuple[str, str, str, list[str]]] = []
    redirects: dict[str, str] = {}
    try:
        with _stream(path) as f:
            for page in _pages(f, path):
                title, ns, page_id, redirect, wikitext = page
                if ns != "0":
                    continue
                if redirect is not None:
                    redirects[title] = _normal_title(redirect)
                    continue
                code = mwparserfromhell.parse(wikitext)
                links = [_normal_title(str(link.title)) for link in code.filter_wikilinks()]
                links = [t for t in links if t and not t.lower().startswith(_NON_ARTICLE)]
                text = "\n".join(line.strip() for line in code.strip_code().splitlines() if line.strip())
                pages.append((page_id, title, text, links))
    except (OSError, EOFError, ElementTree.ParseError) as e:
        raise InputError(f"{path} is not a readable MediaWiki XML export ({e}); check the file") from None
    if not pages:
        raise InputError(f"{path} holds no articles (namespace 0 pages); pass a MediaWiki XML export")
    docs = []
    for page_id, title, text, links in pages:
        resolved = dict.fromkeys(redirects.get(t, t) for t in links)  # de-duplicated, in order
        resolved.pop(title, None)
        docs.append(Document(page_id, title, text, tuple(resolved)))
    log.info("%s: %d articles, %d redirects", path, len(docs), len(redirects))
    return docs


def _pages(f, path: Path) -> Iterator[tuple[str, str, str, str | None, str]]:
    """(title, ns, id, redirect target or None, wikitext) per <page>, streaming.

    A page without a title or an id is refused, as a broken export is: MediaWiki writes both for every page.
    """
    number = 0
    for _, elem in ElementTree.iterparse(f, events=("end",)):
        if elem.tag.rsplit("}", 1)[-1] != "page":
            continue
        number += 1
        fields = {child.tag.rsplit("}", 1)[-1]: child for child in elem}
        for tag in ("title", "id"):
            if fields.get(tag) is None or not (fields[tag].text or "").strip():
                raise InputError(f"{path}: page {number} has no <{tag}>; fix the export (MediaWiki writes a <title> "
                                 "and an <id> for every page)")
        redirect = fields.get("redirect")
        text = elem.find("./{*}revision/{*}text")
        yield (
            _normal_title(fields["title"].text),
            (fields.get("ns").text if fields.get("ns") is not None else "0") or "0",
            fields["id"].text.strip(),
            redirect.get("title") if redirect is not None else None,
            (text.text or "") if text is not None else "",
        )
        elem.clear()
