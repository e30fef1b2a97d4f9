"""`ragfunnel serve` as users run it: a real uvicorn on 127.0.0.1 with real bundled models (the 135M model
for both roles, to keep it quick), driven over HTTP with httpx and, for the inspector, by Debian's
chromium through Selenium."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ragfunnel.confidence import current_calibration
from tests.browser import headless_chromium
from tests.helpers.cli import RAGFUNNEL
from tests.helpers.network import free_port

httpx = pytest.importorskip("httpx", reason="needs the [serve] extra")
pytest.importorskip("fastapi", reason="needs the [serve] extra")

pytestmark = pytest.mark.model

TINY = "bundled:smollm2-135m"
REPORT = Path(__file__).resolve().parents[1] / "examples" / "kestrel_valley_water.txt"
QUESTION = "Whose findings led the cooperative to lay a new main across the footbridge?"


def start(*args: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([RAGFUNNEL, "serve", "--port", str(port), "--light", TINY, "--strong", TINY, "--no-cache",
                             *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).json()["status"] == "ok":
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise AssertionError("the server did not come up within 180 s")


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = start("--queue", "4", port=port)
    yield f"http://127.0.0.1:{port}", proc
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0  # a clean shutdown


def test_a_stored_document_is_answered_and_its_chunks_shown(server):
    url, _ = server
    doc = httpx.post(f"{url}/v1/documents", json={"text": REPORT.read_text(), "name": "report"}, timeout=30).json()
    r = httpx.post(f"{url}/v1/answer", json={"question": QUESTION, "document_id": doc["id"], "method": "fb",
                                            "options": {"budget": 700}}, timeout=600)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"].strip() and len(body["samples"]) == 5
    assert 0 < sum(c["read"] for c in body["chunks"]) < len(body["chunks"])
    assert [s["name"] for s in body["trace"]["stages"]] == ["stage1_recall", "stage2_forward", "stage3_generate",
                                                            "confidence"]
    assert set(body["signals"]) >= {"support", "drafts_answered", "echo"}  # log-probabilities: test_confidence_model
    listed = httpx.get(f"{url}/v1/documents", timeout=5).json()
    assert [d["id"] for d in listed] == [doc["id"]] and set(listed[0]["prefill"].values()) <= {"kept", "reading",
                                                                                                "queued"}


def test_answer_tokens_stream_before_the_result(server):
    url, _ = server
    events = []
    with httpx.stream("POST", f"{url}/v1/answer", timeout=600,
                      json={"question": QUESTION, "text": REPORT.read_text(), "method": "op", "stream": True,
                            "options": {"budget": 700}}) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                events.append(line[len("event: "):])
    assert events.count("token") >= 2 and events[-1] == "result"
    assert events.index("result") > max(i for i, e in enumerate(events) if e == "token")
    # Stages stream as they begin and end: op's retrieval stage is done before the first token of the answer.
    assert events[:2] == ["stage_started", "stage"] and events.index("stage") < events.index("token")


def test_a_client_gone_mid_stream_is_cancelled_and_the_server_keeps_serving(server):
    url, _ = server
    with httpx.stream("POST", f"{url}/v1/answer", timeout=600,
                      json={"question": QUESTION, "text": REPORT.read_text(), "method": "lc", "stream": True,
                            "options": {"max_tokens": 400}}) as r:
        for line in r.iter_lines():
            if line == "event: token":
                break  # the client hangs up after the first token
    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/healthz", timeout=5).json()["pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(f"{url}/healthz", timeout=5).json()["pending"] == 0  # cancelled, not written to the end
    ok = httpx.post(f"{url}/v1/answer", json={"question": "Who runs the cooperative?", "text": REPORT.read_text(),
                                             "method": "op", "options": {"budget": 700}}, timeout=600)
    assert ok.status_code == 200


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_twenty_concurrent_clients_are_each_answered_or_told_to_retry(server):
    url, proc = server
    before = rss_mb(proc.pid)
    results: list[tuple[int, str | None]] = []

    def client(i: int) -> None:
        r = httpx.post(f"{url}/v1/answer", timeout=900,
                       json={"question": f"Question {i}: who runs the cooperative?", "text": REPORT.read_text(),
                             "method": "op", "options": {"budget": 700, "max_tokens": 8}})
        results.append((r.status_code, r.headers.get("retry-after")))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    statuses = sorted(s for s, _ in results)
    assert len(results) == 20 and set(statuses) <= {200, 429}, statuses  # every request got its answer or a 429
    assert statuses.count(200) >= 4  # the queue holds 4
    assert all(retry is not None and int(retry) >= 1 for s, retry in results if s == 429)
    assert rss_mb(proc.pid) - before < 300, (before, rss_mb(proc.pid))


def test_the_inspector_in_a_browser(server, tmp_path):
    """Under the page's own CSP, with a document holding U+2028 and U+2029 (line ends to JavaScript)."""
    url, _ = server
    page = httpx.get(f"{url}/", timeout=10)
    assert "script-src 'self'" in page.headers["content-security-policy"]
    paragraphs = REPORT.read_text().split("\n\n")
    text = "\n\n".join([paragraphs[0] + "\u2028Line two of it.\u2029", *paragraphs[1:]])
    shot = drive_inspector(url, text, QUESTION, tmp_path / "inspector.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sigterm_answers_running_and_queued_requests_and_exits_within_two_seconds():
    """A generation running and one waiting: SIGTERM answers both with 503 and the server is gone in 2 s."""
    port = free_port()
    proc = start("--no-prefill", port=port)
    url = f"http://127.0.0.1:{port}"
    outcomes: dict[str, tuple[int, float]] = {}

    def ask(name: str, method: str) -> None:
        r = httpx.post(f"{url}/v1/answer", timeout=120, json={"question": QUESTION, "text": REPORT.read_text() * 3,
                                                              "method": method, "options": {"max_tokens": 400}})
        outcomes[name] = (r.status_code, time.monotonic())

    jobs = (("running", "lc"), ("queued", "op"))
    clients = [threading.Thread(target=ask, args=job) for job in jobs]
    clients[0].start()
    time.sleep(1.0)
    clients[1].start()
    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/healthz", timeout=5).json()["pending"] < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the long read is under way
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(10)
    exited = time.monotonic() - sent
    for client in clients:
        client.join(10)
    stderr = proc.stderr.read()
    print(f"exited {exited:.2f} s after SIGTERM")
    assert code == 0 and exited < 2.0, (code, exited, stderr)
    assert {name: status for name, (status, _) in outcomes.items()} == {"running": 503, "queued": 503}, stderr
    assert all(at - sent < 2.0 for _, at in outcomes.values())
    assert "Traceback" not in stderr and "ASGI" not in stderr, stderr


@contextmanager
def inspector(url: str) -> Iterator[Any]:
    """The inspector page in headless chromium, once it has reached the server."""
    with headless_chromium() as browser:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser.get(url + "/")
        WebDriverWait(browser, 30).until(lambda b: "light" in b.find_element(By.ID, "models").text)
        yield browser


def ask_in(browser: Any, question: str, method: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.find_element(By.ID, "question").send_keys(question)
    Select(browser.find_element(By.ID, "method")).select_by_value(method)
    browser.find_element(By.ID, "ask").click()
    WebDriverWait(browser, 900).until(lambda b: b.find_element(By.ID, "status").text.startswith(("done", "4", "5")))
    assert browser.find_element(By.ID, "status").text.startswith("done"), browser.find_element(By.ID, "status").text


def drive_inspector(url: str, text: str, question: str, screenshot: Path, method: str = "fb") -> Path:
    """Load the page in headless chromium, paste ``text``, ask, wait for the answer and the read chunks."""
    from selenium.webdriver.common.by import By

    with inspector(url) as browser:
        browser.execute_script("document.getElementById('text').value = arguments[0]", text)
        ask_in(browser, question, method)
        assert browser.find_element(By.ID, "answer").text.strip()
        read = browser.find_elements(By.CSS_SELECTOR, "#chunks .chunk.read")
        assert read and len(read) < len(browser.find_elements(By.CSS_SELECTOR, "#chunks .chunk"))
        assert browser.find_elements(By.CSS_SELECTOR, "#drafts li")
        # the confidence bar (the shipped calibration covers fb's answers) and the signals it came from
        assert browser.find_element(By.ID, "confidence").is_displayed()
        shown = float(browser.find_element(By.ID, "confidence-value").text)
        assert 0 <= shown <= 1
        signals = browser.find_elements(By.CSS_SELECTOR, "#signals span")
        support = next(span for span in signals if span.get_attribute("title") == "support")
        assert support.text.startswith("answer found in the text read")  # a label for people, the name as tooltip
        # an answer under the calibration's supported_at is marked unsupported, one above it is not
        caution = browser.find_element(By.ID, "caution")
        if abs(shown - current_calibration().supported_at) > 0.01:
            assert caution.is_displayed() == (shown < current_calibration().supported_at)
            assert not caution.is_displayed() or "Unsupported" in caution.text
        browser.save_screenshot(str(screenshot))
    return screenshot


def test_the_inspector_uploads_a_pdf_and_a_citation_scrolls_to_its_page(server, tmp_path):
    """Upload a PDF through the file button, ask, click the first citation: its passage is marked."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.helpers.documents import make_pdf

    url, _ = server
    pdf = make_pdf(tmp_path / "ferry.pdf", ["Harbour notes about gulls and boats."] * 3
                   + ["The ferry to Gull Rock leaves at nine every morning."])
    with inspector(url) as browser:
        browser.find_element(By.ID, "upload").send_keys(str(pdf))
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "status").text.startswith(("stored", "4")))
        assert "ferry.pdf (4 pages)" in browser.find_element(By.ID, "status").text
        ask_in(browser, "When does the ferry to Gull Rock leave?", "op")
        citations = browser.find_elements(By.CSS_SELECTOR, "#citations a.citation")
        assert citations and citations[0].text.startswith("[ferry.pdf · p. ")
        citations[0].click()
        marked = browser.find_elements(By.CSS_SELECTOR, "#chunks mark")
        assert marked and marked[0].text in browser.find_element(By.CSS_SELECTOR, "#citations q").text
        assert "p. " in browser.find_element(By.CSS_SELECTOR, "#chunks .chunk .where").text
        browser.save_screenshot(str(tmp_path / "upload.png"))


def test_stored_and_inline_answers_match_the_cli(server, tmp_path):
    """The same question and options through the server and through `ragfunnel ask` give the same answer."""
    url, _ = server
    r = httpx.post(f"{url}/v1/answer", timeout=600, json={"question": QUESTION, "text": REPORT.read_text(),
                                                         "method": "op", "options": {"budget": 700}})
    cli = subprocess.run([RAGFUNNEL, "ask", QUESTION, "--context", str(REPORT), "--method", "op", "--budget", "700",
                          "--strong", TINY, "--json", "--no-cache"], capture_output=True, text=True, timeout=600)
    assert r.status_code == 200 and cli.returncode == 0, cli.stderr
    assert r.json()["answer"] == json.loads(cli.stdout)["answer"]
