"""Peak memory of `ragfunnel serve` while it refuses the security review's hostile PDFs, uploaded as a client would.

A real server (uvicorn on 127.0.0.1, default limits; scripted models, since no model reads a refused upload)
receives each file once, then two flate bombs at once. For each: the HTTP status, the one-line reason, the
seconds, and the server's peak resident memory (VmHWM) above its idle peak. Files, built here:

``flate``    one page whose content stream inflates to 1 GiB of spaces (a 1 MB file)
``tree``     a page tree listing one page 900,000 times (a 5.4 MB file)
``looped``   a page tree that lists itself
``drawn``    16 MiB of text operators in a small deflated stream (pdfium: ~190 bytes a character drawn)
``form``     one form of 10,000 characters drawn 1,000 times (under a kilobyte)
``png``      a PNG whose header claims 100,000 x 100,000 pixels (a few hundred bytes): refused from its header
``giant_scan`` a scanned page 200 inches square (an image PDF): refused before OCR renders it

Targets: ≤ 300 MB above the idle server for one bomb, ≤ 600 MB for two at once.

    .venv/bin/python benchmarks/document_bombs.py --out benchmarks/results/document_bombs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' PDF builders: one writer of hostile PDFs in the project

from tests.test_document_bombs import (  # noqa: E402
    TEXT_OPS,
    deflated_spaces,
    form_drawn,
    lines_drawn,
    one_page,
    stream,
)
from tests.test_ocr import png_bomb  # noqa: E402
from tests.test_registry_and_http import free_port  # noqa: E402
from tests.test_serve_requests_hostile import SERVER, peak_kb  # noqa: E402

from ragfunnel import __version__  # noqa: E402

TARGET_ONE_MB, TARGET_TWO_MB = 300, 600


def build(folder: Path) -> dict[str, Path]:
    pages = 900_000
    return {"flate": one_page(folder / "flate.pdf", stream(deflated_spaces(1024), b"/Filter /FlateDecode")),
            "tree": one_page(folder / "tree.pdf", stream(TEXT_OPS), kids=b"[" + b"3 0 R " * pages + b"]",
                             count=pages),
            "looped": one_page(folder / "looped.pdf", stream(TEXT_OPS), kids=b"[3 0 R 2 0 R]", count=2),
            "drawn": lines_drawn(folder / "drawn.pdf"),
            "form": form_drawn(folder / "form.pdf"), "png": png_bomb(folder / "bomb.png"),
            "giant_scan": giant_scan(folder / "giant_scan.pdf")}


def giant_scan(path: Path) -> Path:
    """An image-only PDF page of 200 x 200 inches (a 200-pixel image at 1 dpi)."""
    from PIL import Image

    Image.new("RGB", (200, 200), "white").save(path, resolution=1)
    return path


def upload(url: str, path: Path) -> dict:
    started = time.monotonic()
    r = httpx.post(f"{url}/v1/documents", files=[("file", (path.name, path.read_bytes(), "application/octet-stream"))],
                   timeout=600)
    body = r.json()
    reason = body.get("detail") if isinstance(body, dict) else None
    return {"status": r.status_code, "reason": reason if isinstance(reason, str) else json.dumps(reason)[:200],
            "seconds": round(time.monotonic() - started, 2), "file_bytes": path.stat().st_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/document_bombs"))
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env={**os.environ, "PYTHONPATH": str(ROOT)})
    results: dict = {}
    try:
        with tempfile.TemporaryDirectory() as folder:
            bombs = build(Path(folder))
            for _ in range(300):
                try:
                    if httpx.get(f"{url}/healthz").json()["status"] == "ok":
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
            warm = httpx.post(f"{url}/v1/documents", files=[("file", ("a.txt", b"warm up", "text/plain"))])
            assert warm.status_code == 201, warm.text
            idle = peak_kb(server.pid)
            for name, path in bombs.items():
                results[name] = upload(url, path) | {"peak_above_idle_mb": round((peak_kb(server.pid) - idle) / 1024)}
                print(name, results[name], flush=True)
            with ThreadPoolExecutor(2) as pool:
                both = list(pool.map(lambda p: upload(url, p), [bombs["flate"]] * 2))
            results["two flate bombs at once"] = {"uploads": both,
                                                  "peak_above_idle_mb": round((peak_kb(server.pid) - idle) / 1024)}
            print("two at once", results["two flate bombs at once"], flush=True)
    finally:
        server.terminate()
        server.wait(10)
    one = max(r["peak_above_idle_mb"] for name, r in results.items() if name != "two flate bombs at once")
    summary = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {platform.python_version()}",
               "ragfunnel": __version__, "idle_peak_mb": round(idle / 1024), "results": results,
               "target_one_mb": TARGET_ONE_MB, "met_one": one <= TARGET_ONE_MB, "target_two_mb": TARGET_TWO_MB,
               "met_two": results["two flate bombs at once"]["peak_above_idle_mb"] <= TARGET_TWO_MB}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "document_bombs.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("idle_peak_mb", "met_one", "met_two")}))


if __name__ == "__main__":
    main()
