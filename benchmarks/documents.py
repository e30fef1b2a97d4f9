"""Documents as people keep them: PDF extraction against pdftotext, ``ask`` over an EPUB against the same
text as plain text, and whether answers cite the chapter that holds them.

1. **PDF** (GeoTopo, 117 pages): ragfunnel's reader (pypdfium2, with the page map) against poppler's
   ``pdftotext``, alternating, ``--repeats`` each; median seconds, and token F1 against pdftotext per page,
   averaged over pages. pdftotext comes from Debian's poppler-utils (installed here if missing and root).
2. **EPUB vs text**: ``ragfunnel.answer`` with the default models (``auto``) over *Moby-Dick* as the EPUB and
   as the same text in a ``.txt``, alternating per question, disk caches off and the models' prompt state
   dropped before each ask; total seconds each.
3. **Cited chapter**: ten questions written here, each answered by a phrase that occurs in one chapter only
   (checked below); a hit when the first citation names that chapter.

    .venv/bin/python benchmarks/documents.py --out benchmarks/results/documents
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path

from ragfunnel import answer
from ragfunnel.documents import read_document
from ragfunnel.llm.registry import reset_loaded, set_disk_caches

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "documents_real"
GEOTOPO = SHARED / "pdf" / "GeoTopo-komprimiert.pdf"
MOBY = SHARED / "epub" / "moby-dick.epub"
# (question, a phrase of the answer that occurs in exactly one chapter, that chapter)
QUESTIONS = [
    ("What was Queequeg out in the town selling, according to the landlord of the Spouter-Inn?",
     "new zealand heads", "Chapter 3. The Spouter-Inn."),
    ("Who is the captain of the German ship Jungfrau that the Pequod meets?",
     "derick de deer", "Chapter 81. The Pequod Meets The Virgin."),
    ("What is the French name of the ship whose English name is the Rose-Bud?",
     "bouton de rose", "Chapter 91. The Pequod Meets The Rose-Bud."),
    ("What is the name of the surgeon of the English whaler Samuel Enderby?",
     "bunger", "Chapter 100. Leg and Arm."),
    ("What is the name of the captain of the Samuel Enderby, who lost an arm to the white whale?",
     "boomer", "Chapter 100. Leg and Arm."),
    ("In the Town-Ho's story, who is the Lakeman who struck the mate Radney?",
     "steelkilt", "Chapter 54. The Town-Ho’s Story."),
    ("In the Town-Ho's story, which mate of the ship was killed by Moby Dick?",
     "radney", "Chapter 54. The Town-Ho’s Story."),
    ("What does Ahab give the blacksmith Perth to make the barbs of his harpoon from?",
     "razors", "Chapter 113. The Forge."),
    ("Who keeps the Try Pots, the chowder house on Nantucket?",
     "hosea hussey", "Chapter 15. Chowder."),
    ("What are the pale fires that burn on the yard-arms and mast-heads in the typhoon called?",
     "corpusants", "Chapter 119. The Candles."),
]
_TOKEN = re.compile(r"\w+")


def token_f1(a: str, b: str) -> float:
    x, y = Counter(_TOKEN.findall(a.lower())), Counter(_TOKEN.findall(b.lower()))
    common = sum((x & y).values())
    if not x and not y:
        return 1.0
    if not common:
        return 0.0
    p, r = common / sum(x.values()), common / sum(y.values())
    return 2 * p * r / (p + r)


def pdftotext() -> str | None:
    found = shutil.which("pdftotext")
    if found is None and shutil.which("apt-get") and Path("/root").exists():
        subprocess.run(["apt-get", "install", "-y", "-qq", "poppler-utils"], check=False, capture_output=True)
        found = shutil.which("pdftotext")
    return found


def pdf_benchmark(repeats: int) -> dict:
    tool = pdftotext()
    if tool is None:
        return {"skipped": "pdftotext not installed (Debian: apt-get install poppler-utils)"}
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "geotopo.txt"
        for _ in range(repeats):
            started = time.perf_counter()
            doc = read_document(GEOTOPO)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run([tool, "-enc", "UTF-8", str(GEOTOPO), str(out)], check=True)
            theirs.append(time.perf_counter() - started)
        reference = out.read_text(encoding="utf-8").split("\f")
    pages = {}
    for s in doc.sections:
        pages[s.page] = pages.get(s.page, "") + " " + doc.text[s.start:s.end]
    scores = [token_f1(pages.get(i + 1, ""), ref) for i, ref in enumerate(reference[:doc.pages])
              if ref.strip() or pages.get(i + 1, "").strip()]
    return {"file": GEOTOPO.name, "pages": doc.pages, "repeats": repeats,
            "ragfunnel_median_seconds": round(statistics.median(ours), 4),
            "pdftotext_median_seconds": round(statistics.median(theirs), 4),
            "ratio": round(statistics.median(ours) / statistics.median(theirs), 3),
            "page_token_f1_mean": round(statistics.mean(scores), 4), "pages_scored": len(scores),
            "pdftotext": subprocess.run([tool, "-v"], capture_output=True, text=True).stderr.splitlines()[0]}


def epub_benchmark(questions: list[tuple[str, str, str]]) -> dict:
    set_disk_caches(False)
    book = read_document(MOBY)
    chapter_of = {}
    for s in book.sections:
        chapter_of.setdefault(s.heading[0], []).append(book.text[s.start:s.end].lower())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "moby-dick.txt"
        plain.write_text(book.text, encoding="utf-8")
        answer("Warm-up: who narrates the book?", files=[plain])  # models loaded and measured once, not timed
        for i, (question, phrase, chapter) in enumerate(questions):
            holders = [title for title, texts in chapter_of.items() if any(phrase in t for t in texts)]
            assert holders == [chapter], (phrase, holders)  # the phrase is in that chapter alone
            timed = {}
            for kind in (("epub", "txt") if i % 2 == 0 else ("txt", "epub")):
                reset_loaded()  # cold prompt state: the second read of the same text must not ride on the first
                started = time.perf_counter()
                prediction = answer(question, files=[MOBY if kind == "epub" else plain])
                timed[kind] = (time.perf_counter() - started, prediction)
            epub = timed["epub"][1]
            cited = [c.section for c in epub.citations]
            rows.append({"question": question, "expected_chapter": chapter, "answer": epub.answer,
                         "answer_has_phrase": phrase in epub.answer.lower(),
                         "first_citation": cited[0] if cited else None, "cited_chapters": cited,
                         "first_cites_chapter": bool(cited) and cited[0] == chapter,
                         "any_cites_chapter": chapter in cited,
                         "same_answer_as_txt": epub.answer == timed["txt"][1].answer,
                         "epub_seconds": round(timed["epub"][0], 2), "txt_seconds": round(timed["txt"][0], 2)})
            print(json.dumps(rows[-1]), flush=True)
    epub_total, txt_total = sum(r["epub_seconds"] for r in rows), sum(r["txt_seconds"] for r in rows)
    return {"book": MOBY.name, "words": len(book.text.split()), "questions": len(rows),
            "epub_total_seconds": round(epub_total, 1), "txt_total_seconds": round(txt_total, 1),
            "ratio": round(epub_total / txt_total, 3),
            "first_citation_right_chapter": sum(r["first_cites_chapter"] for r in rows),
            "any_citation_right_chapter": sum(r["any_cites_chapter"] for r in rows),
            "answers_with_the_phrase": sum(r["answer_has_phrase"] for r in rows), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/documents"))
    parser.add_argument("--repeats", type=int, default=7, help="PDF extractions per tool")
    parser.add_argument("--skip-ask", action="store_true", help="only the PDF part (no model runs)")
    args = parser.parse_args()
    if not SHARED.exists():
        parser.error(f"shared documents not found at {SHARED}")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": str(date.today()), "pdf": pdf_benchmark(args.repeats)}
    print(json.dumps(result["pdf"], indent=2), flush=True)
    if not args.skip_ask:
        result["epub"] = epub_benchmark(QUESTIONS)
    (args.out / "documents.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in result.get("epub", {}).items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()
