"""Is a scanned copy of a PDF answered as well as its text layer? Two shared PDFs (../shared/data/documents_real/pdf:
crazyones-pdfa.pdf, a one-page essay, and google-doc-document.pdf, a page of aphorisms and a table) are copied as
scans: each page rendered at 300 dpi by pypdfium2 and saved as a PDF of images by PIL, under the same file names
in another folder, so ragfunnel reads them by OCR. Twelve questions written here, each with a short answer printed
on one page, are asked with ``ragfunnel.answer(question, files=[both PDFs])`` over the text-layer PDFs and over the
scanned copies, the two arms alternating which goes first, disk caches off and the models' prompt state dropped
before each ask.

Scores per answer: ``contains`` (an accepted answer occurs in it, after ragfunnel.metrics.normalize_answer) and
``f1`` (ragfunnel.metrics.token_f1 against the closest accepted answer); paired wins, losses and ties of the
scanned arm against the text layer, with a two-sided sign test; the mean of each arm; and whether the first
citation names the file and page that hold the answer. Seconds per ask include reading the files (OCR for the
scanned arm: nothing is cached between asks).

unreadablemetadata.pdf (a data sheet) is not used: neither pdfium nor poppler can render its pages.

    .venv/bin/python benchmarks/scanned_questions.py --out benchmarks/results/scanned_questions.json
    nice -n 19 .venv/bin/python benchmarks/scanned_questions.py --make-only   # the copies and their OCR; no model
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pypdfium2 as pdfium

from ragfunnel import __version__
from ragfunnel.documents.limits import ReadLimits
from ragfunnel.documents.read import read_context
from ragfunnel.metrics import best_over_references, contains_answer, normalize_answer, token_f1

PDFS = Path(__file__).resolve().parents[2] / "shared" / "data" / "documents_real" / "pdf"
FILES = ["crazyones-pdfa.pdf", "google-doc-document.pdf"]
DPI = 300
POINTS_PER_INCH = 72


@dataclass(frozen=True)
class Question:
    text: str
    accepted: tuple[str, ...]
    file: str
    page: int


CRAZY, GDOC = FILES
QUESTIONS = [
    Question("What date is given under the title of the essay The Crazy Ones?",
             ("October 14, 1998", "14 October 1998", "1998-10-14", "Oct 14, 1998"), CRAZY, 1),
    Question("According to The Crazy Ones, what do the crazy ones push forward?", ("human race",), CRAZY, 1),
    Question("In The Crazy Ones, what are the crazy ones called, in the square holes?", ("round pegs",), CRAZY, 1),
    Question("According to The Crazy Ones, what do the crazy ones have no respect for?", ("status quo",), CRAZY, 1),
    Question("In The Crazy Ones, what might one see when gazing at a red planet?", ("laboratory on wheels",),
             CRAZY, 1),
    Question("According to The Crazy Ones, what is the only thing you can't do about the crazy ones?",
             ("ignore them", "ignore"), CRAZY, 1),
    Question("In the example document's table, what is the capital of Austria?", ("Vienna",), GDOC, 1),
    Question("In the example document's table, what currency is given for Indonesia?", ("Rupia",), GDOC, 1),
    Question("In the example document's table, what is the population of Austria?", ("8,935,112",), GDOC, 1),
    Question("According to the example document, what is one honking great idea?", ("namespaces",), GDOC, 1),
    Question("According to the example document, what should one refuse in the face of ambiguity?",
             ("temptation to guess", "guess", "guessing"), GDOC, 1),
    Question("According to the example document, what is better than ugly?", ("beautiful",), GDOC, 1),
]


def make_scanned_copies(folder: Path) -> list[Path]:
    """Each of FILES as a PDF of its pages rendered at DPI (images only: no text layer)."""
    from PIL import Image  # noqa: F401  (PIL writes the PDF; imported here so --help needs nothing)

    folder.mkdir(parents=True, exist_ok=True)
    copies = []
    for name in FILES:
        pdf = pdfium.PdfDocument(str(PDFS / name))
        try:
            pages = [pdf[i].render(scale=DPI / POINTS_PER_INCH).to_pil().convert("RGB") for i in range(len(pdf))]
        finally:
            pdf.close()
        copy = folder / name
        pages[0].save(copy, "PDF", save_all=True, append_images=pages[1:], resolution=float(DPI))
        copies.append(copy)
    return copies


def check_copies(copies: list[Path]) -> dict:
    """Each copy has no text layer, and what ragfunnel reads from each arm (OCR for the copies): characters, and
    which questions' accepted answers occur in it (the best either arm can do, before any model)."""
    report: dict = {"copies": {}}
    for copy in copies:
        pdf = pdfium.PdfDocument(str(copy))
        try:
            text_layer = sum(len(pdf[i].get_textpage().get_text_range().strip()) for i in range(len(pdf)))
            report["copies"][copy.name] = {"pages": len(pdf), "text_layer_chars": text_layer,
                                           "bytes": copy.stat().st_size}
        finally:
            pdf.close()
    for arm, paths in (("text_layer", [PDFS / f for f in FILES]), ("scanned", copies)):
        started = time.perf_counter()
        located = read_context(paths, ReadLimits())
        seconds = time.perf_counter() - started
        text = normalize_answer(located.text)
        found = [any(f" {normalize_answer(a)} " in f" {text} " for a in q.accepted) for q in QUESTIONS]
        report[arm] = {"read_seconds": round(seconds, 2), "chars": len(located.text),
                       "answers_in_text": sum(found),
                       "answers_missing": [q.text for q, ok in zip(QUESTIONS, found, strict=True) if not ok]}
        report[f"{arm}_text"] = located.text
    return report


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test of wins against losses (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(rows: list[dict], score: str) -> dict:
    wins = sum(r["scanned"][score] > r["text_layer"][score] for r in rows)
    losses = sum(r["scanned"][score] < r["text_layer"][score] for r in rows)
    return {"scanned_wins": wins, "scanned_losses": losses, "ties": len(rows) - wins - losses,
            "sign_test_p": round(sign_test(wins, losses), 4)}


def ask_all(questions: list[Question], copies: list[Path], method: str | None) -> list[dict]:
    from ragfunnel import answer
    from ragfunnel.llm.registry import reset_loaded, set_disk_caches

    set_disk_caches(False)
    arms = {"text_layer": [PDFS / f for f in FILES], "scanned": copies}
    options = {"method": method} if method else {}
    answer("Warm-up: what is this about?", files=arms["text_layer"], **options)  # models loaded, not timed
    rows = []
    for i, question in enumerate(questions):
        row: dict = {"question": question.text, "accepted": list(question.accepted), "file": question.file,
                     "page": question.page}
        for arm in (("text_layer", "scanned") if i % 2 == 0 else ("scanned", "text_layer")):
            reset_loaded()  # cold prompt state: the second arm must not ride on the first
            started = time.perf_counter()
            prediction = answer(question.text, files=arms[arm], **options)
            seconds = time.perf_counter() - started
            first = prediction.citations[0] if prediction.citations else None
            row[arm] = {
                "answer": prediction.answer,
                "contains": best_over_references(contains_answer, prediction.answer, list(question.accepted)),
                "f1": round(best_over_references(token_f1, prediction.answer, list(question.accepted)), 4),
                "first_citation": first.label() if first else None,
                "first_citation_right": bool(first) and first.file == question.file and first.page == question.page,
                "seconds": round(seconds, 2),
            }
        rows.append(row)
        print(json.dumps(row, ensure_ascii=False), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ragfunnel_scanned_questions"),
                        help="where the scanned copies are written")
    parser.add_argument("--make-only", action="store_true",
                        help="make the scanned copies and read both arms (OCR, no language model), then stop")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="ask only the first N questions")
    parser.add_argument("--method", default=None, help="ragfunnel's method (default: answer()'s own)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scanned_questions.json"))
    args = parser.parse_args()
    if not all((PDFS / f).exists() for f in FILES):
        parser.error(f"shared PDFs not found under {PDFS}")
    copies = make_scanned_copies(args.workdir / "scanned")
    checked = check_copies(copies)
    shown = {k: v for k, v in checked.items() if not k.endswith("_text")}
    print(json.dumps(shown, indent=2, ensure_ascii=False), flush=True)
    if args.make_only:
        for arm in ("text_layer", "scanned"):
            print(f"\n--- {arm} ---\n{checked[f'{arm}_text']}")
        return
    rows = ask_all(QUESTIONS[:args.questions], copies, args.method)
    arms = ("text_layer", "scanned")
    result = {
        "date": date.today().isoformat(), "ragfunnel": __version__,
        "machine": f"{platform.machine()}, Python {platform.python_version()}", "method": args.method or "default",
        "files": FILES, "dpi": DPI, "copies": shown,
        "mean": {arm: {"contains": round(statistics.fmean(r[arm]["contains"] for r in rows), 4),
                       "f1": round(statistics.fmean(r[arm]["f1"] for r in rows), 4),
                       "first_citation_right": sum(r[arm]["first_citation_right"] for r in rows),
                       "seconds_per_question": round(statistics.fmean(r[arm]["seconds"] for r in rows), 2)}
                 for arm in arms},
        "paired": {"contains": paired(rows, "contains"), "f1": paired(rows, "f1")},
        "same_answer": sum(r["text_layer"]["answer"] == r["scanned"]["answer"] for r in rows),
        "questions": len(rows), "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "copies")}, indent=2))


if __name__ == "__main__":
    main()
