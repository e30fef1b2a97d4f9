"""Time to the first streamed token against the whole answer's time, through `ragfunnel serve`'s chat endpoint.

Three questions about examples/kestrel_valley_water.txt (about 2,400 words, sent as the system message), each a
streamed `ragfunnel-op` chat completion read with the official `openai` client from an in-process server with
the bundled 1.5B as the strong model. Disk caches are off, so no call is answered from an earlier run's cache
(a cached answer is not streamed) and no document state is reused; the models load before the first question.
Per question: seconds to the first content chunk, to the last chunk, the number of content chunks, whether the
streamed text differs from the clean answer, and the method's own stage seconds. Run nothing else meanwhile.

    .venv/bin/python benchmarks/chat_streaming.py --out benchmarks/results/chat_streaming.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import threading
import time
from pathlib import Path

import openai
import uvicorn

from ragfunnel.llm.registry import set_disk_caches
from ragfunnel.serve.app import Settings, create_app

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "examples" / "kestrel_valley_water.txt"
QUESTIONS = ["Who chairs the cooperative?", "Which company was the contractor for the work?",
             "Where does most of the cooperative's water come from?"]


def serve(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # the models load before the server starts listening
        time.sleep(0.1)
    return server, thread, f"http://127.0.0.1:{port}/v1"


def ask(client: openai.OpenAI, text: str, question: str, model: str) -> dict:
    started = time.perf_counter()
    first = None
    pieces, final, usage = [], None, None
    stream = client.chat.completions.create(
        model=model, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": text}, {"role": "user", "content": question}])
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        if not chunk.choices:
            continue
        if chunk.choices[0].delta.content:
            first = first if first is not None else time.perf_counter() - started
            pieces.append(chunk.choices[0].delta.content)
        if chunk.choices[0].finish_reason == "stop":
            final = chunk.model_extra["ragfunnel"]
    total = time.perf_counter() - started
    return {"question": question, "first_token_seconds": round(first, 3), "total_seconds": round(total, 3),
            "content_chunks": len(pieces), "streamed_text": "".join(pieces), "answer": final["answer"],
            "streamed_text_differs": final["streamed_text_differs"], "confidence": final["confidence"],
            "stages": {s["name"]: round(s["seconds"], 3) for s in final["trace"]["stages"]}, "usage": usage}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strong", default="bundled:qwen2.5-1.5b")
    parser.add_argument("--method", default="op")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "chat_streaming.json")
    args = parser.parse_args()
    set_disk_caches(False)
    text = TEXT.read_text()
    loading = time.perf_counter()
    server, thread, url = serve(Settings(strong=args.strong, prefill=False))
    load_seconds = time.perf_counter() - loading
    try:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=3600)
        rows = []
        for question in QUESTIONS:
            rows.append(ask(client, text, question, f"ragfunnel-{args.method}"))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        server.should_exit = True
        thread.join(30)
    summary = {"method": args.method, "strong": args.strong, "document": str(TEXT.relative_to(ROOT)),
               "document_words": len(text.split()), "load_seconds": round(load_seconds, 2),
               "median_first_token_seconds": round(statistics.median(r["first_token_seconds"] for r in rows), 3),
               "median_total_seconds": round(statistics.median(r["total_seconds"] for r in rows), 3),
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))


if __name__ == "__main__":
    main()
