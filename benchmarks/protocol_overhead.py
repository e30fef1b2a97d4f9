"""What the OpenAI-compatible endpoint and the MCP server add to an answer.

1. ``POST /v1/chat/completions`` against ``POST /v1/answer`` on one ``ragfunnel serve`` (tiny model for both
   roles), the same question over the same text with ``op``, alternating, ``--rounds`` each after one warm-up
   of each. The server's in-memory call cache answers the repeated model calls, so the difference of the
   medians is the protocol's own cost (parsing, mapping, the response), not model noise.
2. MCP ``tools/call answer`` over stdio (``ragfunnel mcp``, the SDK's own client) against a direct
   ``ragfunnel.answer(files=[...])`` in this process, the same way.

    .venv/bin/python benchmarks/protocol_overhead.py --out benchmarks/results/protocol_overhead
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import anyio
import httpx

import ragfunnel

TINY = "bundled:smollm2-135m"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kestrel_valley_water.txt"
QUESTION = "Whose findings led the cooperative to lay a new main across the footbridge?"
RAGFUNNEL = shutil.which("ragfunnel", path=str(Path(sys.executable).parent)) or "ragfunnel"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openai_endpoint(rounds: int) -> dict:
    port = _free_port()
    server = subprocess.Popen([RAGFUNNEL, "serve", "--port", str(port), "--light", TINY, "--strong", TINY,
                               "--no-prefill", "--no-cache"], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    text = EXAMPLE.read_text()
    requests = {
        "answer": ("/v1/answer", {"question": QUESTION, "text": text, "method": "op"}),
        "chat": ("/v1/chat/completions", {"model": "ragfunnel-op", "messages": [
            {"role": "system", "content": text}, {"role": "user", "content": QUESTION}]}),
    }
    timings: dict[str, list[float]] = {name: [] for name in requests}
    try:
        with httpx.Client(base_url=url, timeout=600) as client:
            for _ in range(600):
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.5)
            for path, body in requests.values():  # warm-up: models read, calls cached
                assert client.post(path, json=body).status_code == 200
            for i in range(rounds):
                for name in (("answer", "chat") if i % 2 == 0 else ("chat", "answer")):
                    path, body = requests[name]
                    started = time.perf_counter()
                    r = client.post(path, json=body)
                    timings[name].append(time.perf_counter() - started)
                    assert r.status_code == 200, r.text
    finally:
        server.terminate()
        server.wait(30)
    return _summary(timings, "answer", "chat")


def mcp_server(rounds: int) -> dict:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    root = Path(tempfile.mkdtemp())
    shutil.copy(EXAMPLE, root / EXAMPLE.name)
    timings: dict[str, list[float]] = {"direct": [], "mcp": []}
    arguments = {"question": QUESTION, "path": EXAMPLE.name, "method": "op"}

    def direct() -> None:
        ragfunnel.answer(QUESTION, files=[root / EXAMPLE.name], method="op", strong=TINY)

    async def main() -> None:
        params = StdioServerParameters(command=RAGFUNNEL, args=["mcp", "--root", str(root), "--light", TINY,
                                                                 "--strong", TINY, "--no-cache"], env=dict(os.environ))
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            direct()  # warm-up of each
            assert not (await session.call_tool("answer", arguments)).is_error
            for i in range(rounds):
                for name in (("direct", "mcp") if i % 2 == 0 else ("mcp", "direct")):
                    started = time.perf_counter()
                    if name == "mcp":
                        assert not (await session.call_tool("answer", arguments)).is_error
                    else:
                        direct()
                    timings[name].append(time.perf_counter() - started)

    anyio.run(main)
    return _summary(timings, "direct", "mcp")


def _summary(timings: dict[str, list[float]], base: str, other: str) -> dict:
    medians = {name: statistics.median(ts) for name, ts in timings.items()}
    return {"rounds": len(timings[base]), **{f"{name}_median_ms": round(1000 * m, 1) for name, m in medians.items()},
            "added_ms": round(1000 * (medians[other] - medians[base]), 1),
            **{f"{name}_all_ms": [round(1000 * t, 1) for t in ts] for name, ts in timings.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/protocol_overhead"))
    args = parser.parse_args()
    ragfunnel.llm.set_disk_caches(False)
    result = {"date": str(date.today()), "model": TINY, "openai": openai_endpoint(args.rounds),
              "mcp": mcp_server(args.rounds)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "protocol_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if not kk.endswith("_all_ms")} if isinstance(v, dict)
                      else v for k, v in result.items()}, indent=2))


if __name__ == "__main__":
    main()
