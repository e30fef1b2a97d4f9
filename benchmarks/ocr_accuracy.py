"""OCR accuracy and speed: character error rate (CER) against each page's known text, and seconds per page, for
ragfunnel's OCR and the engines it could use, side by side in one run.

Pages, each read by every engine (in turn, the engines' order rotating from page to page):

1. **Rendered** from the text-layer PDFs of ../shared/data/documents_real/pdf (English, and German from GeoTopo)
   at 300 dpi by pypdfium2; the truth is the page's text layer (pypdfium2 ``get_text_range``).
   unreadablemetadata.pdf is left out: neither pdfium nor poppler (nor pdfium after qpdf's repair) can render it.
2. **Chinese**, rendered from LongBench's multifieldqa_zh contexts (../shared/data/longbench_minilongbench_dev)
   onto A4 pages at 300 dpi, 10.5 pt (the usual body size, 五号), with a CJK font found by ``fc-list :lang=zh``
   (or ``--cjk-font``); the truth is the characters drawn. Without a CJK font Chinese is skipped, saying so
   (Debian: ``apt-get install -y fonts-wqy-microhei``).
3. **Degraded** copies of the first ``--degraded`` (1) rendered pages of each script, made by a seeded script:
   rotated 1-2 degrees either way, Gaussian noise (sigma 20 of 255), Gaussian blur (radius 1.5 px), JPEG at
   quality 40, and at 200 dpi (PDF pages rendered at 200 dpi, Chinese pages resampled to it).
4. **Real scans** made by other people, with their published text (``--scans``, default /work/data_ext/ocr; see
   its PROVENANCE.md): Tesseract's test pages and two UNLV-ISRI magazine pages.

Engines (``--engines``):

- ``ragfunnel``: ``ragfunnel.documents.ocr.read_image`` on a PNG of the page (what a user gets: a child process
  starts, loads the models and reads the page); its fixed cost is measured on a one-word image and reported
  (``seconds_less_fixed_cost`` per page). Its engine and settings are those of ragfunnel/documents/ocr_child.py
  (since commit 6562ede, RapidOCR without the angle classifier: ``rapidocr-nocls`` below, whose seconds are then
  ragfunnel's engine-only seconds). ``[unclear]`` marks are stripped before scoring and counted.
- ``rapidocr`` / ``rapidocr-nocls``: RapidOCR (the installed 3.x, its wheel's PP-OCR models) in this process,
  with its text-line angle classifier on (RapidOCR's default) and off.
- ``rapidocr-ort144``: ``rapidocr_onnxruntime`` 1.4.4 (PP-OCRv4 models in its wheel), installed outside the
  project's venv: ``pip download rapidocr_onnxruntime==1.4.4 --no-deps -d /tmp/whl`` then
  ``.venv/bin/pip install --no-deps --target /tmp/rapidocr_onnxruntime_1.4.4 /tmp/whl/rapidocr_onnxruntime-*.whl``
  (``--ort144-path``); skipped, saying so, when it is not there.

Every engine keeps all boxes, however low their confidence (``text_score`` 0, as ragfunnel sets it).

CER is the Levenshtein distance over the reference's length, both texts NFKC-normalised: ``cer`` with runs of
whitespace collapsed to one space (Latin) or all whitespace removed (Chinese), and ``cer_nospace`` with all
whitespace removed for every page. CER is order-sensitive: a page whose columns an engine reads across scores
badly however well it reads each word, so ``word_f1`` (ragfunnel.metrics.token_f1, a bag of words; of characters
for Chinese) is reported beside it.

By default 27 pages (8 rendered, 4 Chinese, 5 degraded copies of each script's first page, 5 scans) by 4 engines:
about 15-20 minutes on two cores when nothing else runs.

    .venv/bin/python benchmarks/ocr_accuracy.py --out benchmarks/results/ocr_accuracy.json
    nice -n 19 .venv/bin/python benchmarks/ocr_accuracy.py --pages 2 --out /tmp/ocr_smoke.json   # a smoke run
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import itertools
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from ragfunnel import __version__
from ragfunnel.documents.limits import ReadLimits
from ragfunnel.documents.ocr import UNCLEAR, read_image
from ragfunnel.errors import RagfunnelError
from ragfunnel.metrics import token_f1

ROOT = Path(__file__).resolve().parents[2]
PDFS = ROOT / "shared" / "data" / "documents_real" / "pdf"
LONGBENCH_ZH = ROOT / "shared" / "data" / "longbench_minilongbench_dev" / "multifieldqa_zh.jsonl"
SCANS = Path("/work/data_ext/ocr")
ORT144 = Path("/tmp/rapidocr_onnxruntime_1.4.4")

DPI = 300
POINTS_PER_INCH = 72
SEED = 45

# (file, 1-based page, language): the first ones are degraded too (--degraded), so they are dense prose.
RENDERED = [
    ("pdflatex-4-pages.pdf", 1, "en"), ("GeoTopo-komprimiert.pdf", 2, "de"), ("crazyones-pdfa.pdf", 1, "en"),
    ("google-doc-document.pdf", 1, "en"), ("multicolumn.pdf", 1, "en"), ("GeoTopo-komprimiert.pdf", 68, "de"),
    ("GeoTopo-komprimiert.pdf", 28, "de"), ("GeoTopo-komprimiert.pdf", 105, "de"),
]
NOT_RENDERED = {"unreadablemetadata.pdf": "pdfium cannot open it (data format error), poppler renders its pages "
                                          "0 x 0, and pdfium cannot open qpdf's repair either"}
# multifieldqa_zh examples whose context starts a page: a government report, a court judgement, an encyclopedia
# article (simplified), and a bank's card terms (traditional).
CHINESE = [("multifieldqa_zh-0", "zh-Hans"), ("multifieldqa_zh-1", "zh-Hans"), ("multifieldqa_zh-3", "zh-Hans"),
           ("multifieldqa_zh-9", "zh-Hant")]
# (image, its text, language): the scans of --scans (PROVENANCE.md there).
SCANNED = [
    ("tesseract-test/eurotext.tif", "tesseract-test/eurotext.txt", "multi-latin"),
    ("tesseract-test/phototest.tif", "tesseract-test/phototest.gold.txt", "en"),
    ("tesseract-test/8087_054.3B.tif", "tesseract-test/8087_054.3B.txt", "en"),
    ("tesseract-test/8087_054.3G.tif", "tesseract-test/8087_054.3B.txt", "en"),
    ("tesseract-test/8071_093.3B.tif", "tesseract-test/8071_093.3B.txt", "en"),
]

DEGRADATIONS = ("rotated", "noise20", "blur1.5", "jpeg40", "200dpi")
CHINESE_POINTS = 10.5
LINE_SPACING = 1.5
MARGIN_CM = 2.5
A4_INCHES = (8.27, 11.69)

# pdfium marks a hyphen it found at a line end with U+0002 (U+FFFE in some builds); other control characters are
# glyphs that map to no text.
CONTROLS = {c: " " for c in range(32) if chr(c) not in "\n\t"} | {0x02: "-", 0xFFFE: "-"}


@dataclass
class Sample:
    name: str
    kind: str  # rendered | chinese | scan
    language: str
    degradation: str
    image: Image.Image
    truth: str

    @property
    def script(self) -> str:
        return "han" if self.language.startswith("zh") else "latin"


@dataclass
class Reading:
    text: str
    seconds: float
    unclear_lines: int = 0
    error: str | None = None


# --- Edit distance and CER -------------------------------------------------------------------------------------

def levenshtein(a: str, b: str) -> int:
    """Insertions, deletions and substitutions that turn ``a`` into ``b``: Myers' bit-parallel algorithm
    (Hyyrö's formulation), one Python integer holding a column of the distance matrix."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    peq: dict[str, int] = {}
    for i, char in enumerate(b):
        peq[char] = peq.get(char, 0) | (1 << i)
    mask, top = (1 << len(b)) - 1, 1 << (len(b) - 1)
    pv, mv, score = mask, 0, len(b)
    for char in a:
        eq = peq.get(char, 0)
        xv = eq | mv
        xh = ((((eq & pv) + pv) & mask) ^ pv) | eq
        ph = (mv | ~(xh | pv)) & mask
        mh = pv & xh
        if ph & top:
            score += 1
        elif mh & top:
            score -= 1
        ph = ((ph << 1) | 1) & mask
        mh = (mh << 1) & mask
        pv = (mh | ~(xv | ph)) & mask
        mv = ph & xv
    return score


def collapsed(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def no_space(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def cer(hypothesis: str, reference: str) -> float:
    return levenshtein(hypothesis, reference) / max(len(reference), 1)


def scores(sample: Sample, text: str) -> dict:
    tight = cer(no_space(text), no_space(sample.truth))
    loose = tight if sample.script == "han" else cer(collapsed(text), collapsed(sample.truth))
    return {"cer": round(loose, 4), "cer_nospace": round(tight, 4), "word_f1": round(token_f1(text, sample.truth), 4)}


# --- Pages -----------------------------------------------------------------------------------------------------

def rendered_pages(degraded: int) -> Iterator[Sample]:
    for index, (file, number, language) in enumerate(RENDERED):
        pdf = pdfium.PdfDocument(str(PDFS / file))
        try:
            page = pdf[number - 1]
            truth = page.get_textpage().get_text_range().translate(CONTROLS)
            name = f"{file}#p{number}"
            clean = page.render(scale=DPI / POINTS_PER_INCH).to_pil().convert("RGB")
            low = page.render(scale=200 / POINTS_PER_INCH).to_pil().convert("RGB") if index < degraded else None
        finally:
            pdf.close()
        yield Sample(name, "rendered", language, "clean", clean, truth)
        if low is not None:
            yield from degraded_copies(name, "rendered", language, clean, low, truth)


def degraded_copies(name: str, kind: str, language: str, clean: Image.Image, low_dpi: Image.Image,
                    truth: str) -> Iterator[Sample]:
    """The page rotated, noised, blurred, JPEG-compressed and at 200 dpi, each seeded by the page's name."""
    rng = random.Random(f"{SEED}:{name}")
    angle = rng.uniform(1.0, 2.0) * rng.choice((-1, 1))
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0.0, 20.0, np.asarray(clean).shape)
    noised = Image.fromarray(np.clip(np.asarray(clean, dtype=np.float32) + noise, 0, 255).astype(np.uint8))
    buffer = io.BytesIO()
    clean.save(buffer, "JPEG", quality=40)
    copies = {  # DEGRADATIONS, in this order
        f"rotated{angle:+.1f}": clean.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True,
                                            fillcolor="white"),
        "noise20": noised,
        "blur1.5": clean.filter(ImageFilter.GaussianBlur(1.5)),
        "jpeg40": Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"),
        "200dpi": low_dpi,
    }
    return (Sample(name, kind, language, how, image, truth) for how, image in copies.items())


def cjk_font(chosen: Path | None) -> Path | None:
    """``chosen``, else the first font ``fc-list :lang=zh`` lists (WenQuanYi Micro Hei or Noto CJK first)."""
    if chosen is not None:
        return chosen
    if shutil.which("fc-list") is None:
        return None
    listed = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True).stdout
    files = sorted({line.split(":")[0].strip() for line in listed.splitlines() if line.strip()})
    preferred = [f for f in files if re.search(r"wqy-microhei|NotoSansCJK|NotoSerifCJK", f)]
    return Path((preferred or files)[0]) if files else None


def chinese_page(text: str, font_path: Path, dpi: float) -> tuple[Image.Image, str]:
    """As much of ``text`` as fills one A4 page, a paragraph per line break, first lines indented by two
    characters; the page, and the characters drawn, a line per line of the page."""
    scale = dpi / POINTS_PER_INCH
    font = ImageFont.truetype(str(font_path), round(CHINESE_POINTS * scale))
    size = round(CHINESE_POINTS * scale)
    width, height = (round(inches * dpi) for inches in A4_INCHES)
    margin = round(MARGIN_CM / 2.54 * dpi)
    page = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(page)
    drawn: list[str] = []
    y = margin
    paragraphs = [p.strip(" \t\u3000") for p in text.replace("\r", "\n").split("\n")]
    for paragraph in filter(None, paragraphs):
        start, x, line = margin + 2 * size, margin + 2 * size, ""
        for char in paragraph:
            advance = font.getlength(char)
            if x + advance > width - margin:  # the line is full: draw it, if the page has room
                if y + size > height - margin:
                    break
                draw.text((start, y), line, font=font, fill="black")
                drawn.append(line)
                y, start, x, line = y + round(size * LINE_SPACING), margin, margin, ""
            line += char
            x += advance
        if y + size > height - margin:
            break
        draw.text((start, y), line, font=font, fill="black")
        drawn.append(line)
        y += round(size * LINE_SPACING)
    return page, "\n".join(drawn)


def chinese_pages(degraded: int, font_path: Path) -> Iterator[Sample]:
    with LONGBENCH_ZH.open(encoding="utf-8") as f:
        contexts = {row["_id"]: row["context"] for row in map(json.loads, f)}
    for index, (example, language) in enumerate(CHINESE):
        clean, truth = chinese_page(contexts[example], font_path, DPI)
        yield Sample(example, "chinese", language, "clean", clean, truth)
        if index < degraded:  # at 200 dpi: the 300-dpi page resampled, as a 200-dpi scanner would see it
            low = clean.resize((round(clean.width * 2 / 3), round(clean.height * 2 / 3)), Image.Resampling.LANCZOS)
            yield from degraded_copies(example, "chinese", language, clean, low, truth)


def scanned_pages(root: Path) -> Iterator[Sample]:
    for image, text, language in SCANNED:
        truth = (root / text).read_text(encoding="utf-8").replace("~", "")  # UNLV's mark for an untypable char
        with Image.open(root / image) as scan:
            yield Sample(image.split("/")[-1], "scan", language, "as scanned", scan.convert("RGB"), truth)


# --- Engines ---------------------------------------------------------------------------------------------------

@dataclass
class Engine:
    name: str
    describe: Callable[[], dict]
    load: Callable[[], Callable[[Image.Image], Reading]]
    reader: Callable[[Image.Image], Reading] | None = field(default=None, repr=False)
    load_seconds: float = 0.0


def rapidocr_engine(use_cls: bool) -> Callable[[], Callable[[Image.Image], Reading]]:
    def load():
        from rapidocr import RapidOCR

        engine = RapidOCR(params={"Global.text_score": 0.0, "Global.log_level": "error"})

        def read(image: Image.Image) -> Reading:
            started = time.perf_counter()
            found = engine(image, use_cls=use_cls)
            seconds = time.perf_counter() - started
            return Reading("\n".join(found.txts or ()), seconds)
        return read
    return load


def rapidocr_models() -> dict:
    import rapidocr

    models = sorted(p.name for p in (Path(rapidocr.__file__).parent / "models").glob("*.onnx"))
    return {"package": f"rapidocr {importlib.metadata.version('rapidocr')}", "models_in_wheel": models,
            "onnxruntime": importlib.metadata.version("onnxruntime")}


def ort144_engine(path: Path) -> Callable[[], Callable[[Image.Image], Reading]]:
    def load():
        if str(path) not in sys.path:
            sys.path.append(str(path))
        from rapidocr_onnxruntime import RapidOCR

        engine = RapidOCR(text_score=0.0)

        def read(image: Image.Image) -> Reading:
            started = time.perf_counter()
            found, _ = engine(np.asarray(image))
            seconds = time.perf_counter() - started
            return Reading("\n".join(text for _, text, _ in found or ()), seconds)
        return read
    return load


def ort144_models(path: Path) -> dict:
    versions = [d.version for d in importlib.metadata.distributions(path=[str(path)])
                if d.metadata["Name"].lower().replace("_", "-") == "rapidocr-onnxruntime"]
    models = sorted(p.name for p in (path / "rapidocr_onnxruntime" / "models").glob("*.onnx"))
    return {"package": f"rapidocr_onnxruntime {versions[0] if versions else '?'}", "installed_at": str(path),
            "models_in_wheel": models}


def ragfunnel_engine(workdir: Path) -> Callable[[], Callable[[Image.Image], Reading]]:
    limits = ReadLimits()

    def load():
        def read(image: Image.Image) -> Reading:
            path = workdir / "page.png"
            image.save(path)
            started = time.perf_counter()
            try:
                document = read_image(path, limits)
            except RagfunnelError as e:
                return Reading("", time.perf_counter() - started, error=str(e))
            seconds = time.perf_counter() - started
            unclear = document.text.count(UNCLEAR)
            return Reading(document.text.replace(UNCLEAR, ""), seconds, unclear_lines=unclear)
        return read
    return load


def ragfunnel_fixed_cost(read: Callable[[Image.Image], Reading], rounds: int = 3) -> float:
    """Seconds ``read_image`` takes for one short word: the child's start, imports and model load."""
    word = Image.new("RGB", (420, 120), "white")
    ImageDraw.Draw(word).text((20, 25), "Overhead", fill="black", font=ImageFont.load_default(size=60))
    return statistics.median(read(word).seconds for _ in range(rounds))


def engines(names: list[str], workdir: Path, ort144_path: Path) -> dict[str, Engine]:
    available = {
        "ragfunnel": Engine("ragfunnel", lambda: {"path": "ragfunnel.documents.ocr.read_image on a PNG (child "
                                                          "process: start, model load, read)", **rapidocr_models()},
                            ragfunnel_engine(workdir)),
        "rapidocr": Engine("rapidocr", lambda: {"use_cls": True, **rapidocr_models()}, rapidocr_engine(True)),
        "rapidocr-nocls": Engine("rapidocr-nocls", lambda: {"use_cls": False, **rapidocr_models()},
                                 rapidocr_engine(False)),
        "rapidocr-ort144": Engine("rapidocr-ort144", lambda: {"use_cls": True, **ort144_models(ort144_path)},
                                  ort144_engine(ort144_path)),
    }
    return {name: available[name] for name in names}


ENGINE_NAMES = ["ragfunnel", "rapidocr", "rapidocr-nocls", "rapidocr-ort144"]


# --- The run ---------------------------------------------------------------------------------------------------

def summarise(rows: list[dict], names: list[str]) -> dict:
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        degradation = "rotated" if row["degradation"].startswith("rotated") else row["degradation"]
        groups.setdefault((row["engine"], row["kind"], row["script"], degradation), []).append(row)
    summary: dict = {}
    for (engine, kind, script, degradation), group in sorted(groups.items(), key=lambda g: names.index(g[0][0])):
        summary.setdefault(engine, {}).setdefault(f"{kind}/{script}", {})[degradation] = {
            "pages": len(group),
            "cer_mean": round(statistics.fmean(r["cer"] for r in group), 4),
            "cer_nospace_mean": round(statistics.fmean(r["cer_nospace"] for r in group), 4),
            "word_f1_mean": round(statistics.fmean(r["word_f1"] for r in group), 4),
            "seconds_per_page_mean": round(statistics.fmean(r["seconds"] for r in group), 2),
            "errors": sum(r["error"] is not None for r in group),
        }
    return summary


def targets(rows: list[dict]) -> dict:
    """The issue's targets, per engine, on clean 300-dpi pages: CER <= 5 %, <= 10 s a page on two cores."""
    out = {}
    for engine in dict.fromkeys(r["engine"] for r in rows):
        for script in ("latin", "han"):
            clean = [r for r in rows if r["engine"] == engine and r["script"] == script
                     and r["degradation"] == "clean"]
            if clean:
                cer_mean = statistics.fmean(r["cer"] for r in clean)
                seconds = statistics.fmean(r["seconds"] for r in clean)
                out[f"{engine}/{script}"] = {"clean_pages": len(clean), "cer_mean": round(cer_mean, 4),
                                             "cer_at_most_5pct": cer_mean <= 0.05,
                                             "seconds_per_page": round(seconds, 2),
                                             "at_most_10_s": seconds <= 10.0}
    return out


def print_table(summary: dict, names: list[str]) -> None:
    shown = [n for n in names if n in summary]
    keys = sorted({(group, how) for n in shown for group, per in summary[n].items() for how in per},
                  key=lambda k: (k[0], k[1] != "clean", k[1]))
    print(f"\n{'pages':18s} {'degradation':11s} {'n':>2s}  " + "  ".join(f"{n[:15]:>15s}" for n in shown))
    print(f"{'':18s} {'':11s} {'':2s}  " + "  ".join(f"{'CER':>7s} {'s/page':>7s}" for _ in shown))
    for group, how in keys:
        cells, pages = [], ""
        for name in shown:
            cell = summary[name].get(group, {}).get(how)
            pages = pages or (str(cell["pages"]) if cell else "")
            cells.append(f"{cell['cer_mean']:7.3f} {cell['seconds_per_page_mean']:7.1f}" if cell else f"{'-':>15s}")
        print(f"{group:18s} {how:11s} {pages:>2s}  " + "  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=None,
                        help="read only the first N pages of each source (rendered, Chinese, scans), a degraded "
                             "copy counting as a page, after its clean page (a smoke run); default all")
    parser.add_argument("--degraded", type=int, default=1,
                        help="degrade the first N rendered pages of each script, Latin and Chinese (5 copies each; "
                             "default 1; each more adds 10 pages to the run)")
    parser.add_argument("--engines", default=",".join(ENGINE_NAMES),
                        help=f"comma-separated, of: {', '.join(ENGINE_NAMES)} (default all)")
    parser.add_argument("--scans", type=Path, default=SCANS, help="the folder of real scans (its PROVENANCE.md)")
    parser.add_argument("--cjk-font", type=Path, default=None, help="a font with Chinese glyphs (default: fc-list)")
    parser.add_argument("--ort144-path", type=Path, default=ORT144,
                        help="where rapidocr_onnxruntime 1.4.4 was installed with pip --target")
    parser.add_argument("--keep-images", type=Path, default=None, help="also save every page read, as PNG, here")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ocr_accuracy.json"))
    args = parser.parse_args()
    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENGINE_NAMES]
    if unknown or not names:
        parser.error(f"unknown engine {', '.join(unknown) or '(none)'}; choose from {', '.join(ENGINE_NAMES)}")
    if not PDFS.exists():
        parser.error(f"shared PDFs not found at {PDFS}")
    skipped = dict(NOT_RENDERED)
    if "rapidocr-ort144" in names and not (args.ort144_path / "rapidocr_onnxruntime").exists():
        names.remove("rapidocr-ort144")
        skipped["rapidocr-ort144"] = (f"not installed at {args.ort144_path}: pip download rapidocr_onnxruntime==1.4.4 "
                                      f"--no-deps -d /tmp/whl; .venv/bin/pip install --no-deps --target "
                                      f"{args.ort144_path} /tmp/whl/rapidocr_onnxruntime-*.whl")
        print(f"skipping rapidocr-ort144: {skipped['rapidocr-ort144']}", flush=True)
    degraded = args.degraded
    started_run = time.perf_counter()
    def planned_pages(listed: list) -> int:
        return len(listed) + len(DEGRADATIONS) * min(degraded, len(listed))

    sources = {"rendered": (rendered_pages(degraded), planned_pages(RENDERED))}
    font = cjk_font(args.cjk_font)
    if font is None or not font.exists():
        skipped["chinese"] = ("no CJK font: fc-list :lang=zh lists none (Debian: apt-get install -y "
                              "fonts-wqy-microhei), or --cjk-font does not exist")
        print(f"skipping Chinese pages: {skipped['chinese']}", flush=True)
    elif not LONGBENCH_ZH.exists():
        skipped["chinese"] = f"{LONGBENCH_ZH} not found"
        print(f"skipping Chinese pages: {skipped['chinese']}", flush=True)
    else:
        print(f"Chinese pages drawn with {font}", flush=True)
        sources["chinese"] = (chinese_pages(degraded, font), planned_pages(CHINESE))
    if (args.scans / "tesseract-test").exists():
        sources["scan"] = (scanned_pages(args.scans), len(SCANNED))
    else:
        skipped["scans"] = f"no scans under {args.scans} (see the docstring)"
        print(f"skipping real scans: {skipped['scans']}", flush=True)
    limit = args.pages if args.pages is not None else max(total for _, total in sources.values())
    samples = itertools.chain.from_iterable(itertools.islice(pages, limit) for pages, _ in sources.values())
    planned = sum(min(limit, total) for _, total in sources.values())
    if args.keep_images:
        args.keep_images.mkdir(parents=True, exist_ok=True)
    print(f"{planned} pages, engines: {', '.join(names)}", flush=True)

    rows, texts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        chosen = engines(names, Path(tmp), args.ort144_path)
        warm = Image.new("RGB", (400, 100), "white")
        ImageDraw.Draw(warm).text((10, 20), "warm up", fill="black", font=ImageFont.load_default(size=48))
        for engine in chosen.values():
            began = time.perf_counter()
            engine.reader = engine.load()
            engine.load_seconds = time.perf_counter() - began
            engine.reader(warm)  # the first call builds the ONNX sessions' buffers: not a page's cost
        fixed = ragfunnel_fixed_cost(chosen["ragfunnel"].reader) if "ragfunnel" in chosen else None
        if fixed is not None:
            print(f"ragfunnel's fixed cost (child start, imports, model load, one word): {fixed:.2f} s", flush=True)
        for i, sample in enumerate(samples):
            if args.keep_images:
                name = re.sub(r"[^A-Za-z0-9.+-]+", "_", sample.name)
                sample.image.save(args.keep_images / f"{name}.{sample.degradation}.png")
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                reading = chosen[name].reader(sample.image)
                row = {"page": sample.name, "kind": sample.kind, "language": sample.language,
                       "script": sample.script, "degradation": sample.degradation, "engine": name,
                       "reference_chars": len(no_space(sample.truth)), **scores(sample, reading.text),
                       "seconds": round(reading.seconds, 2), "error": reading.error}
                if name == "ragfunnel":
                    row["unclear_lines"] = reading.unclear_lines
                    row["seconds_less_fixed_cost"] = round(reading.seconds - fixed, 2)
                rows.append(row)
                texts.append({"page": sample.name, "degradation": sample.degradation, "engine": name,
                              "text": reading.text})
            line = "  ".join(f"{r['engine']} {r['cer']:.3f} {r['seconds']:.1f}s" for r in rows[-len(order):])
            print(f"[{i + 1}/{planned}] {sample.name} {sample.degradation}: {line}", flush=True)

    summary = summarise(rows, names)
    result = {
        "date": date.today().isoformat(), "ragfunnel": __version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "engines": {name: {**engine.describe(), "load_seconds": round(engine.load_seconds, 2)}
                    for name, engine in chosen.items()},
        "ragfunnel_fixed_cost_seconds": None if fixed is None else round(fixed, 2),
        "chinese_font": str(font) if "chinese" not in skipped else None,
        "settings": {"dpi": DPI, "degraded_pages_per_script": degraded, "seed": SEED, "pages_per_source": limit,
                     "degradations": "rotated 1-2 deg either way, Gaussian noise sigma 20, Gaussian blur 1.5 px, "
                                     "JPEG quality 40, rendered at 200 dpi",
                     "cer": "Levenshtein / reference length, NFKC; whitespace collapsed (Latin) or removed (Chinese)"},
        "skipped": skipped, "targets": targets(rows), "summary": summary, "rows": rows,
        "run_seconds": round(time.perf_counter() - started_run, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    with args.out.with_suffix(".texts.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    print_table(summary, names)
    print(json.dumps(result["targets"], indent=1))
    print(f"wrote {args.out} (and the texts read, {args.out.with_suffix('.texts.jsonl')}) in "
          f"{result['run_seconds']:.0f} s")


if __name__ == "__main__":
    main()
