"""The inspector's chunk list holds a whole book: headless chromium opens the page from disk (no server, no
model) and shows a result of 710 chunks, as Moby-Dick makes. Only the chunks in view are drawn; the list
scrolls to its end, lists the chunks read on demand, and a citation far down draws, marks and shows its chunk."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from tests.browser import headless_chromium

PAGE = Path(__file__).resolve().parents[1] / "src" / "ragfunnel" / "serve" / "static" / "index.html"
CHUNKS = 710
READ = (3, 41, 88, 150, 151, 152, 260, 333, 404, 515, 620, 700)
WORDS = ("whale ship sea captain harpoon deck mast sail boat crew voyage ocean wind wave oil sperm white "
         "ahab ishmael queequeg starbuck stubb flask pequod nantucket chase line boat lance").split()


def book_result(seed: int = 7) -> dict[str, Any]:
    """A result as /v1/answer gives it for a long book: 710 chunks of 60 to 240 words, 12 of them read."""
    rng = random.Random(seed)
    chunks, start = [], 0
    for position in range(CHUNKS):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 240))) + f". End of chunk {position}."
        chunks.append({"position": position, "start": start, "text": text, "read": position in READ,
                       "question_score": round(rng.random(), 4),
                       "draft_score": None if position % 5 == 0 else round(rng.random(), 4),
                       "where": f'moby-dick.epub · "Chapter {position // 6 + 1}."' if position % 3 else ""})
        start += len(text) + 1
    stages = [{"name": name, "seconds": seconds, "input_tokens": tokens, "output_tokens": 20, "detail": {}}
              for name, seconds, tokens in (("rank", 0.4, 0), ("draft", 3.1, 9000), ("answer", 1.2, 1500))]
    return {"method": "fb", "answer": "Ahab", "confidence": 0.81, "supported": True,
            "signals": {"support": 1.0, "draft_agreement": 0.67},
            "trace": {"seconds": 4.7, "input_tokens": 10500, "stages": stages},
            "samples": [{"answer": "Ahab", "rationale": "the captain", "text": "Answer: Ahab"}],
            "chunks": chunks, "citations": [citation(chunks[600], "c600"), citation(chunks[640], "c640")],
            "citation_note": None}


def citation(chunk: dict[str, Any], name: str) -> dict[str, Any]:
    """A citation of a few words from the middle of ``chunk``."""
    words = chunk["text"].split()
    quote = " ".join(words[30:38])
    at = chunk["text"].index(quote)
    return {"file": "moby-dick.epub", "start": chunk["start"] + at, "end": chunk["start"] + at + len(quote),
            "quote": quote, "page": None, "page_label": None, "section": name, "lines": None,
            "label": f'[moby-dick.epub · "{name}"]', "context_start": chunk["start"] + at}


def until(browser: Any, script: str, *args: Any, timeout: float = 10) -> Any:
    """Run ``script`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while not (value := browser.execute_script(script, *args)):
        assert time.monotonic() < deadline, f"timed out: {script}"
        time.sleep(0.05)
    return value


def drawn(browser: Any) -> list[int]:
    return browser.execute_script(
        "return [...document.querySelectorAll('#chunks .chunk')].map((d) => Number(d.dataset.position))")


SHOWN = """
const box = document.getElementById('chunks'), div = box.querySelector(`.chunk[data-position="${arguments[0]}"]`);
if (!div) return null;
const a = box.getBoundingClientRect(), b = div.getBoundingClientRect();
return {inside: b.top >= a.top - 1 && b.bottom <= a.bottom + 1,
        mark: div.querySelector('.chunk-text mark')?.textContent ?? null,
        text: div.querySelector('.chunk-text').textContent, cited: div.classList.contains('cited')};
"""


def test_a_book_of_710_chunks_draws_only_those_in_view():
    from selenium.webdriver.common.by import By

    result = book_result()
    with headless_chromium() as browser:
        browser.get(PAGE.as_uri())
        until(browser, "return document.readyState === 'complete' && typeof show === 'function'")
        browser.execute_script("show(arguments[0])", result)
        first = drawn(browser)
        assert first[:3] == [0, 1, 2] and len(first) < 80, first
        assert browser.execute_script("return document.body.scrollHeight") < 10_000
        assert browser.execute_script("return document.getElementById('chunks').scrollHeight") > 50_000
        assert browser.find_element(By.ID, "chunk-count").text == "12 of 710 chunks read"
        # the drawn chunks are as before: classes, data, title, the two score swatches, place and text
        read = browser.find_element(By.CSS_SELECTOR, '#chunks .chunk[data-position="3"]')
        assert read.get_attribute("class") == "chunk read"
        assert read.get_attribute("data-start") == str(result["chunks"][3]["start"])
        assert read.get_attribute("title").endswith(", read by the answering model")
        assert len(read.find_elements(By.CSS_SELECTOR, ".scores span")) == 2
        assert read.find_element(By.CSS_SELECTOR, ".chunk-text").text == result["chunks"][3]["text"]
        placed = browser.find_element(By.CSS_SELECTOR, '#chunks .chunk[data-position="1"]')
        assert placed.get_attribute("class") == "chunk" and not placed.find_elements(By.CSS_SELECTOR, "mark")
        assert placed.find_element(By.CSS_SELECTOR, ".where").text == 'moby-dick.epub · "Chapter 1."'

        # scrolled to the bottom, the last chunk is drawn, and still few others
        browser.execute_script("const c = document.getElementById('chunks'); c.scrollTop = c.scrollHeight")
        until(browser, "return document.querySelector('#chunks .chunk[data-position=\"709\"]')")
        assert len(drawn(browser)) < 80 and 0 not in drawn(browser)

        # only the chunks read, on demand, and back
        only = browser.find_element(By.ID, "only-read")
        only.click()
        assert sorted(drawn(browser)) == list(READ)
        assert all("read" in d.get_attribute("class").split()
                   for d in browser.find_elements(By.CSS_SELECTOR, "#chunks .chunk"))
        assert browser.find_element(By.ID, "chunk-count").text == "12 of 710 chunks read"
        only.click()
        assert len(drawn(browser)) > 12

        # a citation of chunk 600, clicked with the list at its top: the chunk is drawn, marked and in view
        browser.execute_script("document.getElementById('chunks').scrollTop = 0")
        until(browser, "return document.querySelector('#chunks .chunk[data-position=\"0\"]')")
        assert 600 not in drawn(browser)
        browser.find_elements(By.CSS_SELECTOR, "#citations a.citation")[0].click()
        shown = browser.execute_script(SHOWN, 600)
        assert shown and shown["mark"] == result["citations"][0]["quote"] and shown["cited"]
        assert shown["text"] == result["chunks"][600]["text"]
        until(browser, "const s = (() => {" + SHOWN + "})(...arguments); return s && s.inside", 600)
        assert len(drawn(browser)) < 80

        # listing only the chunks read, a citation of one not read lists them all again to show it
        browser.execute_script("document.getElementById('chunks').scrollTop = 0")
        only.click()
        assert 640 not in drawn(browser)
        browser.execute_script("highlight(arguments[0])", result["citations"][1])
        assert not only.is_selected()
        shown = browser.execute_script(SHOWN, 640)
        assert shown and shown["mark"] == result["citations"][1]["quote"]
        assert browser.find_elements(By.CSS_SELECTOR, "#chunks mark")[0].text == result["citations"][1]["quote"]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#chunks mark")) == 1
        until(browser, "const s = (() => {" + SHOWN + "})(...arguments); return s && s.inside", 640)
