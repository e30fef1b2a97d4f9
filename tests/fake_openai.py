"""A stand-in OpenAI-compatible server for tests of runs, not of answers: ``python fake_openai.py PORT SECONDS``.

Every completion replies "Paris" after SECONDS; ``/tokenize`` counts words; ``/v1/models`` lists model
"m" with an 8,192-token window; ``/v1/embeddings`` embeds each input as its letter counts
(:func:`letter_counts`, not normalised), listed in reverse order with their ``index``. It runs as its own
process so a test can kill it mid-run and start it again (or in a thread: ``Handler`` is importable).
"""

from __future__ import annotations

import http.server
import json
import string
import sys
import time


def send_json(handler: http.server.BaseHTTPRequestHandler, body: object, status: int = 200) -> None:
    """Reply to the request ``handler`` is serving with ``body`` as JSON (the test servers all answer so)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def letter_counts(text: str) -> list[float]:
    """A text's embedding on the fake server: how often each letter a-z occurs, plus one for every other
    character (so no text gets the zero vector)."""
    lowered = text.lower()
    return [float(lowered.count(c)) for c in string.ascii_lowercase] + [1.0 + sum(not c.isalpha() for c in text)]


class Handler(http.server.BaseHTTPRequestHandler):
    delay = 0.0

    def log_message(self, *args) -> None:  # quiet
        pass

    def _reply(self, body: dict) -> None:
        send_json(self, body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._reply({"data": [{"id": "m", "max_model_len": 8192}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("embeddings"):
            rows = [{"object": "embedding", "index": i, "embedding": letter_counts(text)}
                    for i, text in enumerate(body["input"])]
            self._reply({"object": "list", "data": rows[::-1], "model": body["model"]})
            return
        if self.path.endswith("tokenize"):
            self._reply({"tokens": [0] * len(str(body.get("prompt", body.get("input", ""))).split())})
            return
        time.sleep(self.delay)
        self._reply({"choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}] * body.get("n", 1),
                     "usage": {"prompt_tokens": 10, "completion_tokens": 1}})


if __name__ == "__main__":
    Handler.delay = float(sys.argv[2])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
