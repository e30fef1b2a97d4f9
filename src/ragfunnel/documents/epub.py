"""EPUB 2 and 3, read from the zip directly: container.xml → the package (OPF) → the spine, in order, with
chapter titles from the navigation document (EPUB 3) or the NCX (EPUB 2)."""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from urllib.parse import unquote

from ragfunnel.documents.limits import ReadLimits, open_zip, read_xml_part
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.documents.xhtml import first_heading, html_text, parse_html
from ragfunnel.errors import InputError, MissingExtra


def read_epub(path: Path, limits: ReadLimits) -> SourceDocument:
    with open_zip(path, limits, kind="EPUB") as archive:
        package = _rootfile(archive, path)
        opf = _xml(archive, package, path)
        base = posixpath.dirname(package)
        manifest = {item.get("id"): item for item in _all(opf, "item")}
        spine = _first(opf, "spine")
        if spine is None:
            raise InputError(f"{path.name} has no spine (reading order) in {package}; it is damaged")
        titles = _titles(archive, manifest, spine, base, path)
        if _is_encrypted(archive):
            raise InputError(f"{path.name} is DRM-protected (META-INF/encryption.xml); ragfunnel reads only "
                             "unencrypted EPUBs")
        builder = DocumentBuilder(path.name, "epub")
        for ref in _all(spine, "itemref"):
            item = manifest.get(ref.get("idref"))
            if item is None or "html" not in (item.get("media-type") or ""):
                continue
            href = _join(base, item.get("href", ""))
            root = parse_html(read_xml_part(archive, href, path))
            if root is None:  # an empty chapter file
                continue
            body = root.find(".//body")
            text = html_text(body if body is not None else root)
            title = titles.get(href) or first_heading(root) or posixpath.basename(href)
            builder.add(text, heading=(title,))
    document = builder.build()
    if not document.text:
        raise InputError(f"{path.name} holds no text in its spine; pass an EPUB with text")
    return document


def _rootfile(archive: zipfile.ZipFile, path: Path) -> str:
    container = _xml(archive, "META-INF/container.xml", path)
    rootfile = _first(container, "rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise InputError(f"{path.name}: META-INF/container.xml names no package file; the EPUB is damaged")
    return rootfile.get("full-path")


def _titles(archive: zipfile.ZipFile, manifest: dict, spine, base: str, path: Path) -> dict[str, str]:
    """Chapter title by content file, from the EPUB 3 nav's table of contents, else the EPUB 2 NCX."""
    titles: dict[str, str] = {}
    nav = next((i for i in manifest.values() if "nav" in (i.get("properties") or "").split()), None)
    if nav is not None:
        nav_href = _join(base, nav.get("href", ""))
        root = parse_html(read_xml_part(archive, nav_href, path))
        tocs = [] if root is None else [n for n in root.iter("nav")
                                        if "toc" in (n.get("epub:type") or n.get("type") or "")]
        for a in (tocs[0] if tocs else root).iter("a") if root is not None else ():
            _add_title(titles, posixpath.dirname(nav_href), a.get("href"), " ".join(a.text_content().split()))
    ncx = manifest.get(spine.get("toc"))
    if not titles and ncx is not None:
        ncx_href = _join(base, ncx.get("href", ""))
        for point in _all(_xml(archive, ncx_href, path), "navPoint"):
            label, content = _first(point, "text"), _first(point, "content")
            if label is not None and content is not None:
                title = " ".join((label.text or "").split())
                _add_title(titles, posixpath.dirname(ncx_href), content.get("src"), title)
    return titles


def _add_title(titles: dict[str, str], base: str, href: str | None, title: str) -> None:
    if href and title:
        titles.setdefault(_join(base, href.split("#", 1)[0]), title)


def _is_encrypted(archive: zipfile.ZipFile) -> bool:
    """Whether content documents are encrypted (font obfuscation is listed there too, and is harmless)."""
    if "META-INF/encryption.xml" not in archive.namelist():
        return False
    return b"html" in archive.read("META-INF/encryption.xml")


def _join(base: str, href: str) -> str:
    return posixpath.normpath(posixpath.join(base, unquote(href)))


def _xml(archive: zipfile.ZipFile, name: str, path: Path):
    try:
        from defusedxml import ElementTree
    except ImportError:
        raise MissingExtra("defusedxml", "documents") from None
    data = read_xml_part(archive, name, path)
    try:
        return ElementTree.fromstring(data)
    except ElementTree.ParseError as e:
        raise InputError(f"{path.name}: {name} is not well-formed XML ({e}); the EPUB is damaged") from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _all(root, name: str) -> list:
    return [el for el in root.iter() if _local(el.tag) == name]


def _first(root, name: str):
    return next((el for el in root.iter() if _local(el.tag) == name), None)
