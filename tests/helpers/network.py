"""Loopback ports, and an OpenAI-compatible handler that fails on purpose."""

import http.server
import json
import socket

from tests.fake_openai import send_json


def free_port() -> int:
    """A loopback port nothing listens on (the socket that found it is closed): for a server to start on, or to
    find nothing at."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Fails with 503 ``fail_first`` times, then answers like an OpenAI server with one choice."""

    fail_first = 0
    refuse_grammar = False
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if "grammar" in body and type(self).refuse_grammar:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b"Unrecognized request argument supplied: grammar")
            return
        if len(type(self).seen) <= type(self).fail_first:
            self.send_response(503)
            self.end_headers()
            return
        send_json(self, {"choices": [{"message": {"content": f"ok {len(type(self).seen)}"}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 7, "completion_tokens": 2}})

    def log_message(self, *args):
        pass
