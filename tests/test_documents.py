"""Readers on real files made by other people's tools, known pages, citations, and every bad input."""

from __future__ import annotations

import zipfile

import pytest

from ragfunnel.documents import FILE_SEPARATOR, LocatedContext, ReadLimits, cite, read_context, read_document
from ragfunnel.documents.read import read_documents
from ragfunnel.errors import InputError
from ragfunnel.text import chunk_words
from ragfunnel.types import Prediction, ScoredChunk, Trace
from tests.helpers.documents import REAL, make_epub, make_pdf, needs_real

# The real files that hold no text, and the one line each gets.
REFUSED = {"libreoffice-writer-password.pdf": "is encrypted (password-protected); decrypt it first, e.g. qpdf",
           "having-images.docx": "holds no text", "tbl-having-tables.docx": "holds no text"}


@needs_real
@pytest.mark.parametrize("path", sorted(p for p in REAL.rglob("*") if p.suffix in (".pdf", ".docx", ".epub")),
                         ids=lambda p: p.name)
def test_every_real_file_is_read_or_refused_in_one_line(path):
    if path.name in REFUSED:
        with pytest.raises(InputError, match=REFUSED[path.name].replace("(", r"\(").replace(")", r"\)")) as e:
            read_document(path)
        assert "\n" not in str(e.value)
        return
    doc = read_document(path)
    assert len(doc.text.split()) > 2 and FILE_SEPARATOR not in doc.text
    assert [s.start for s in doc.sections] == sorted(s.start for s in doc.sections)
    for s in doc.sections:
        assert doc.text[s.start:s.end].strip() == doc.text[s.start:s.end]  # each section is its own text
    if path.suffix == ".pdf" and path.name != "unreadablemetadata.pdf":
        import pypdfium2

        assert doc.pages == len(pypdfium2.PdfDocument(str(path)))
        assert all(1 <= s.page <= doc.pages for s in doc.sections)


@needs_real
def test_pdf_page_labels_and_outline_of_a_real_book():
    doc = read_document(REAL / "pdf" / "GeoTopo-komprimiert.pdf")
    assert doc.pages == 117 and len(doc.sections) > 100
    sixth = next(s for s in doc.sections if s.page == 6)
    assert sixth.page_label == "3" and sixth.heading[0] == "1 Topologische Grundbegriffe"
    assert sixth.describe().startswith('p. 6 (3) "')


@needs_real
def test_the_pdf_pypdfium2_cannot_open_is_read_by_the_fallback():
    doc = read_document(REAL / "pdf" / "unreadablemetadata.pdf")
    assert doc.sections[0].page == 1 and len(doc.text.split()) > 100


@needs_real
def test_epub_chapters_follow_the_spine_with_titles_from_the_nav():
    import re

    path = REAL / "epub" / "moby-dick.epub"
    with zipfile.ZipFile(path) as z:
        opf = z.read("OPS/package.opf").decode()
    spine = re.findall(r'<itemref[^>]*idref="([^"]+)"', opf)
    doc = read_document(path)
    assert len(doc.sections) <= len(spine) and len(doc.sections) >= 136  # 135 chapters, the epilogue, extracts
    titles = [s.heading[0] for s in doc.sections]
    assert "Chapter 1. Loomings." in titles and titles.index("Chapter 1. Loomings.") < titles.index(
        "Chapter 135. The Chase.—Third Day.")
    first = doc.sections[titles.index("Chapter 1. Loomings.")]
    assert "Call me Ishmael" in doc.text[first.start:first.end]


def test_known_pages_and_their_printed_labels(tmp_path):
    path = make_pdf(tmp_path / "known.pdf", ["Preface words here", "", "Alpha is on page three",
                                             "Bravo is on page four"], roman_first=2)
    doc = read_document(path)
    assert doc.pages == 4
    assert [(s.page, s.page_label) for s in doc.sections] == [(1, "i"), (3, "1"), (4, "2")]  # page 2 is blank
    context = LocatedContext.join([doc])
    chunks = chunk_words(context.text, chunk_words=8)
    bravo = next(c for c in chunks if "Bravo" in c.text)
    [citation] = cite(_prediction("Bravo", [bravo]), context, "What is on page four?")
    assert (citation.page, citation.page_label) == (4, "2") and citation.label() == "[known.pdf · p. 4 (2)]"
    assert doc.text[citation.start:citation.end] == citation.quote == "Bravo is on page four"


def test_several_files_form_one_context_whose_chunks_never_span_two(tmp_path):
    (tmp_path / "a.md").write_text("# Ships\n\nThe Pequod sailed from Nantucket.\n\n## Crew\n\nAhab was captain.\n")
    (tmp_path / "b.txt").write_text("line one\nline two\nQueequeg carried a harpoon.\n")
    context = read_context([tmp_path / "a.md", tmp_path / "b.txt"])
    assert [d.name for d in context.documents] == ["a.md", "b.txt"]
    assert "[a.md]" in context.text and "[b.txt]" in context.text  # the prompt names the files
    chunks = chunk_words(context.text, chunk_words=1000)
    assert len(chunks) == 2 and "Queequeg" not in chunks[0].text and chunks[1].text.startswith("[b.txt]")
    citations = cite(_prediction("a harpoon", chunks), context, "What did Queequeg carry?")
    assert citations[0].file == "b.txt" and citations[0].quote == "Queequeg carried a harpoon."
    assert citations[0].lines == (3, 3) and citations[0].label() == "[b.txt · line 3]"
    ahab = cite(_prediction("Ahab", chunks[:1]), context, "Who was captain?")[0]
    assert ahab.section == "Crew" and ahab.quote == "Ahab was captain."
    for c in citations + [ahab]:
        assert next(d for d in context.documents if d.name == c.file).text[c.start:c.end] == c.quote


def test_a_folder_is_read_in_a_stable_order_and_unreadable_files_are_skipped_by_name(tmp_path, caplog):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("second file")
    (tmp_path / "a.txt").write_text("first file")
    (tmp_path / "empty.txt").write_text("  ")
    (tmp_path / "notes.bin").write_bytes(b"\x00\x01")  # not a supported suffix: not looked at
    (tmp_path / ".hidden.txt").write_text("hidden")
    docs = read_documents([tmp_path])
    assert [d.name for d in docs] == ["a.txt", "sub/b.txt"]
    assert "skipped" in caplog.text and "empty.txt" in caplog.text


def test_markdown_and_html_keep_their_heading_paths(tmp_path):
    md = tmp_path / "guide.md"
    md.write_text("# Install\n\nRun the setup.\n\n## Offline\n\nCopy the wheels.\n\n# Use\n\nAsk a question.\n")
    doc = read_document(md)
    assert [s.heading for s in doc.sections] == [("Install",), ("Install", "Offline"), ("Use",)]
    html = tmp_path / "page.html"
    html.write_text("<html><head><title>T</title></head><body><nav><a href='/'>Home</a> | <a href='/x'>Menu</a>"
                    "</nav><article><h1>Whales</h1>" + "<p>The sperm whale dives deep for squid. </p>" * 12
                    + "<h2>Size</h2><p>A bull may reach sixteen metres in length.</p></article>"
                    "<footer>Copyright 2026 cookie policy</footer></body></html>")
    doc = read_document(html)
    assert "sixteen metres" in doc.text and "cookie policy" not in doc.text
    size = doc.section_at(doc.text.index("sixteen"))
    assert size.heading[-1] == "Size"


def test_docx_paragraphs_tables_and_headings_in_body_order(tmp_path):
    import docx

    d = docx.Document()
    d.add_heading("Contract", level=1)
    d.add_paragraph("The parties agree.")
    d.add_heading("Payment", level=2)
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Due", "Amount"
    table.cell(1, 0).text, table.cell(1, 1).text = "1 May", "400 EUR"
    d.add_paragraph("Late payment costs interest.")
    d.save(tmp_path / "c.docx")
    doc = read_document(tmp_path / "c.docx")
    assert doc.text.index("The parties") < doc.text.index("1 May | 400 EUR") < doc.text.index("Late payment")
    assert doc.section_at(doc.text.index("400 EUR")).heading == ("Contract", "Payment")


def test_a_file_name_and_format_is_detected_by_its_bytes(tmp_path):
    path = make_pdf(tmp_path / "report.txt", ["Hidden PDF text"])  # a PDF under a .txt name
    assert read_document(path).format == "pdf"


# --- bad input: one line each, naming the problem and the fix -------------------------------------------

def _refused(path, match, limits=None):
    with pytest.raises(InputError, match=match) as e:
        read_document(path, limits or ReadLimits())
    assert "\n" not in str(e.value) and str(e.value).count(". ") < 3
    return str(e.value)


def test_a_pdf_without_text_names_ocr(tmp_path):
    _refused(make_pdf(tmp_path / "scan.pdf", ["", ""]), r"no extractable text: no page holds text or a scanned image")


@needs_real
@pytest.mark.parametrize("name", ["pdf/GeoTopo-komprimiert.pdf", "docx/test.docx", "epub/childrens-literature.epub"])
def test_truncated_files_of_each_format(tmp_path, name):
    data = (REAL / name).read_bytes()
    path = tmp_path / name.split("/")[1]
    path.write_bytes(data[: len(data) // 3])
    message = _refused(path, "damaged|truncated|cannot be read")
    assert path.name in message


def test_zip_bombs_are_refused_with_the_limit_and_its_option(tmp_path):
    bomb = make_epub(tmp_path / "bomb.epub", [("One", "text")], extra={"OEBPS/zeros.bin": b"\0" * (20 << 20)})
    _refused(bomb, r"expands \d+-fold, over the limit of 200 .*raise it with max_zip_ratio")
    _refused(bomb, r"expands to 20 MB, over the 5 MB limit .*raise it with max_unzipped_mb",
             ReadLimits(max_unzipped_mb=5, max_zip_ratio=10_000))
    docx_bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(docx_bomb, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", b" " * (30 << 20), compress_type=zipfile.ZIP_DEFLATED)
    _refused(docx_bomb, "zip bomb")


def test_xml_entity_declarations_are_refused_in_epub_docx_and_html(tmp_path):
    laughs = b'<?xml version="1.0"?><!DOCTYPE html [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;">]>'
    _refused(make_epub(tmp_path / "laughs.epub", [("One", "&b;")], chapter_prefix=laughs), "declares XML entities")
    external = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
    path = tmp_path / "xxe.docx"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", external + b"<w:document>&e;</w:document>")
    _refused(path, "declares XML entities")
    page = tmp_path / "p.html"
    page.write_bytes(external + b"<html><body><p>&e;</p></body></html>")
    _refused(page, "declares XML entities")


def test_unknown_formats_legacy_office_and_missing_or_huge_files(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\x00\x01\x02" * 100)
    _refused(tmp_path / "x.bin", "not a supported format; ragfunnel reads PDF .*, DOCX, EPUB, HTML, Markdown")
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0" + b"\0" * 100)
    _refused(tmp_path / "old.doc", r"legacy Office file .*save it as \.docx, \.xlsx or \.pptx")
    (tmp_path / "renamed.pdf").write_text("just text")
    _refused(tmp_path / "renamed.pdf", "is named .pdf but is not one")
    with zipfile.ZipFile(tmp_path / "photos.zip", "w") as z:
        z.writestr("holiday/notes.xml", "<notes/>")
    _refused(tmp_path / "photos.zip", "zip archive ragfunnel cannot read")
    _refused(tmp_path / "nope.pdf", "does not exist")
    (tmp_path / "big.txt").write_text("word " * 300_000)
    _refused(tmp_path / "big.txt", r"over the 1 MB limit; raise it with max_document_mb", ReadLimits(max_document_mb=1))


def test_a_folder_without_supported_files(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"\0")
    with pytest.raises(InputError, match="holds no supported files; ragfunnel reads PDF"):
        read_documents([tmp_path])


def _prediction(answer, chunks):
    return Prediction(answer=answer, method="op", chunks_used=[ScoredChunk(c, 1.0) for c in chunks], trace=Trace())


def test_dataset_rows_may_name_a_context_file(tmp_path):
    from ragfunnel.eval.datasets import load_dataset

    (tmp_path / "docs").mkdir()
    make_pdf(tmp_path / "docs" / "memo.pdf", ["The budget is 40 euros."])
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "What is the budget?", "answer": "40 euros", "context_file": "docs/memo.pdf"}\n'
                    '{"question": "Where?", "answer": "x", "context_file": "docs/missing.txt"}\n')
    loaded = load_dataset(data, on_error="skip")
    assert loaded.examples[0].context == "The budget is 40 euros."
    assert "line 2" in str(loaded.errors[0]) or loaded.errors[0].line == 2
    assert "does not exist" in loaded.errors[0].message


def test_a_folder_corpus_is_one_document_per_file_or_per_chapter(tmp_path):
    from ragfunnel.corpus import load_corpus

    make_epub(tmp_path / "book.epub", [("Chapter 1. Loomings.", "Call me Ishmael."),
                                      ("Chapter 2. The Bag.", "I stuffed a shirt.")])
    (tmp_path / "notes.md").write_text("# Whales\n\nBig.\n\n## Sperm\n\nDeep divers.\n")
    make_pdf(tmp_path / "memo.pdf", ["Memo text"])
    by_file = load_corpus(tmp_path)
    assert [d.id for d in by_file] == ["book.epub", "memo.pdf", "notes.md"]
    by_chapter = load_corpus(tmp_path, split="chapters")
    assert [d.title for d in by_chapter] == ["book.epub · Chapter 1. Loomings.", "book.epub · Chapter 2. The Bag.",
                                             "memo.pdf", "notes.md"]
    assert by_chapter[1].text.endswith("I stuffed a shirt.") and "Ishmael" not in by_chapter[1].text


def test_a_long_unpunctuated_stretch_is_quoted_around_the_answer():
    text = " ".join(f"word{i}" for i in range(200)) + " the keeper is Ada Brun and " + " ".join(
        f"tail{i}" for i in range(200))
    context = LocatedContext.of_text(text)
    [citation] = cite(_prediction("Ada Brun", chunk_words(text, chunk_words=1000)), context, "Who is the keeper?")
    assert "Ada Brun" in citation.quote and len(citation.quote) <= 400
    assert text[citation.start:citation.end] == citation.quote and citation.quote[0] != " "


@pytest.mark.parametrize("content", [b"<html>", b"<!-- only a comment -->", b"<!doctype html>\n"])
def test_html_without_a_document_is_refused_in_one_line(tmp_path, content):
    page = tmp_path / "empty.html"
    page.write_bytes(content)
    _refused(page, "holds no visible text")
