"""`ragfunnel read FILE...`: the text a question is answered from, with its [place] marks; --json with its map;
warnings and refusals on stderr; and the same text from `GET /v1/documents/{id}/text`."""

from __future__ import annotations

import json

import pytest

from ragfunnel.documents.model import DocumentBuilder
from tests.helpers.cli import invoke, one_line
from tests.helpers.documents import make_pdf


def test_read_prints_each_page_under_its_mark(tmp_path):
    pdf = make_pdf(tmp_path / "report.pdf", ["The ferry leaves at nine.", "", "Ada keeps the light."])
    result = invoke("read", pdf)
    assert result.exit_code == 0, result.output
    assert result.stdout == "[p. 1]\nThe ferry leaves at nine.\n\n[p. 3]\nAda keeps the light.\n"


def test_read_heads_each_file_of_several_and_a_folder(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("Alpha line.\n")
    (tmp_path / "docs" / "b.md").write_text("# Title\n\nBeta line.\n")
    result = invoke("read", tmp_path / "docs")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("==> a.txt <==\nAlpha line.\n==> b.md <==\n")
    assert "Beta line." in result.stdout


def test_read_json_gives_the_text_with_its_map(tmp_path):
    pdf = make_pdf(tmp_path / "report.pdf", ["The ferry leaves at nine.", "Ada keeps the light."], roman_first=1)
    result = invoke("read", "--json", pdf)
    assert result.exit_code == 0, result.output
    [file] = json.loads(result.stdout)["files"]
    assert file["name"] == "report.pdf" and file["format"] == "pdf" and file["pages"] == 2
    assert file["text"] == "The ferry leaves at nine.\n\nAda keeps the light."
    assert file["sections"] == [{"start": 0, "end": 25, "page": 1, "page_label": "i", "label": "p. 1 (i)"},
                                {"start": 27, "end": 47, "page": 2, "page_label": "1", "label": "p. 2 (1)"}]
    assert file["warnings"] == []


def test_read_says_why_a_file_gives_nothing_and_goes_on(tmp_path):
    (tmp_path / "empty.pdf").write_text("")
    (tmp_path / "fine.txt").write_text("Still read.")
    result = invoke("read", tmp_path / "empty.pdf", tmp_path / "fine.txt")
    assert result.exit_code == 1
    assert "Still read." in result.stdout
    assert "error: empty.pdf is named .pdf but is not one" in result.stderr


def test_read_names_the_flag_that_raises_a_limit(tmp_path):
    (tmp_path / "big.txt").write_text("word " * 300_000)
    one_line(invoke("read", "--max-document-mb", "1", tmp_path / "big.txt"), "raise it with --max-document-mb")


def test_marks_name_sheets_rows_and_slides():
    from ragfunnel.cli.read import marked_text

    builder = DocumentBuilder("sales.xlsx", "spreadsheet")
    builder.add("Region | Sales", sheet="Q3", row=1)
    builder.add("North | 1200", sheet="Q3", row=2, joiner="\n")
    assert marked_text(builder.build(), heading=False) == "[Q3]\n[row 1] Region | Sales\n[row 2] North | 1200\n"
    deck = DocumentBuilder("deck.pptx", "slides")
    deck.add("Plan", slide=1)
    deck.add("Budget", slide=2)
    assert marked_text(deck.build(), heading=True) == "==> deck.pptx <==\n[slide 1]\nPlan\n\n[slide 2]\nBudget\n"


def test_the_server_gives_a_stored_documents_text_with_its_map_and_an_uploads_progress(tmp_path, monkeypatch):
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    import ragfunnel.serve.request_bodies as bodies
    from ragfunnel.documents.progress import report_progress
    from tests.helpers.serve import served

    real = bodies.read_document

    def slow_scan(path, limits):  # the progress OCR reports, a page at a time, under the upload's own name
        for page in range(3):
            report_progress(f"OCR {path.name}", page, 2)
        return real(path, limits)

    monkeypatch.setattr(bodies, "read_document", slow_scan)
    pdf = make_pdf(tmp_path / "report.pdf", ["The ferry leaves at nine.", "Ada keeps the light."])
    with served() as client:
        streamed = client.post("/v1/documents", files=[("file", ("my report.pdf", pdf.read_bytes()))],
                               headers={"Accept": "text/event-stream"})
        assert streamed.status_code == 200
        events = [block.split("\n", 1) for block in streamed.text.strip().split("\n\n")]
        kinds = [kind.removeprefix("event: ") for kind, _ in events]
        assert kinds == ["progress", "progress", "progress", "result"]
        assert json.loads(events[1][1].removeprefix("data: ")) == {"what": "OCR my report.pdf", "done": 1, "total": 2}
        stored = json.loads(events[-1][1].removeprefix("data: "))
        text = client.get(f"/v1/documents/{stored['id']}/text").json()
        assert text["name"] == "my report.pdf"
        assert [s["label"] for s in text["files"][0]["sections"]] == ["p. 1", "p. 2"]
        assert client.get("/v1/jobs").json() == {"jobs": []}
        assert client.get("/v1/documents/nope/text").status_code == 404


def test_a_running_jobs_status_shows_its_reading_progress():
    import threading

    from ragfunnel.documents.progress import report_progress
    from ragfunnel.serve.jobs import JobQueue

    queue, reported, release = JobQueue(capacity=2), threading.Event(), threading.Event()

    def scan(job):
        report_progress("OCR scan.pdf", 4, 10)
        reported.set()
        release.wait(10)
        return "read"

    job = queue.submit(scan, label="read 1 uploaded files")
    queue.submit(lambda job: None, label="prefill abc")
    assert reported.wait(10)
    assert queue.statuses() == [
        {"label": "read 1 uploaded files", "state": "running",
         "progress": {"what": "OCR scan.pdf", "done": 4, "total": 10}},
        {"label": "prefill abc", "state": "waiting", "progress": None}]
    release.set()
    assert job.future.result(10) == "read"
    queue.close()


def test_the_inspector_shows_an_uploads_reading_progress(tmp_path, monkeypatch):
    """The inspector uploads a file through its file button and shows the reading's progress until it is stored."""
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    import threading

    import ragfunnel.serve.request_bodies as bodies
    from ragfunnel.documents.progress import report_progress
    from ragfunnel.llm import FakeLLM
    from ragfunnel.serve.app import Settings
    from tests.browser import headless_chromium
    from tests.helpers.serve import LiveServer, create_app, registered, reply

    seen, real = threading.Event(), bodies.read_document

    def scan(path, limits):
        report_progress(f"OCR {path.name}", 1, 3)
        seen.wait(60)  # held until the page has shown the progress
        return real(path, limits)

    monkeypatch.setattr(bodies, "read_document", scan)
    pdf = make_pdf(tmp_path / "scan.pdf", ["The ferry leaves at nine."])
    settings = Settings(light="fake:light", strong="fake:strong", prefill=False)
    with registered("fake:light", FakeLLM(reply)), registered("fake:strong", FakeLLM(reply)), \
            LiveServer(create_app(settings)) as url, headless_chromium() as browser:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser.get(url)
        browser.find_element(By.ID, "upload").send_keys(str(pdf))
        status = lambda b: b.find_element(By.ID, "status").text  # noqa: E731
        WebDriverWait(browser, 30).until(lambda b: status(b) == "OCR scan.pdf: page 1 of 3…")
        seen.set()
        WebDriverWait(browser, 30).until(lambda b: status(b).startswith("stored scan.pdf (1 page)"))
