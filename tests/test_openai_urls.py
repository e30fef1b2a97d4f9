"""One ``openai:`` spec listing several servers of a model: turns, failover, cool-off, checks (no model).

The servers are tests/fake_openai.py's handler on loopback ports, in this process, each counting its requests.
"""

import http.server
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragfunnel.errors import BackendUnavailable, ConfigError
from ragfunnel.llm import registry
from ragfunnel.llm.openai import OpenAICompatibleLLM
from tests.fake_openai import Handler, send_json


class FakeServer:
    """A fake OpenAI-compatible server that can be stopped and started again on the same port."""

    def __init__(self, status: int = 200):
        self.requests: list[str] = []  # the paths it was asked for
        self.status = status  # what completions answer: 200 as fake_openai does, or an error status
        self.port = 0
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        server = self

        class Counting(Handler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                server.requests.append(self.path)
                super().do_GET()

            def do_POST(self):  # noqa: N802
                server.requests.append(self.path)
                if server.status != 200:
                    send_json(self, {"error": "overloaded"}, server.status)
                    return
                super().do_POST()

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Counting)
        self.port = self._httpd.server_port
        # Polls often, so stop() (which waits for the loop to notice) is quick.
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()  # the port now refuses connections
            self._httpd = None


@pytest.fixture
def servers():
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    started = [FakeServer() for _ in range(3)]
    yield started
    for server in started:
        server.stop()


def several(servers: list[FakeServer], **options) -> OpenAICompatibleLLM:
    llm = OpenAICompatibleLLM([s.url for s in servers], "m", **options)
    llm.backoff_seconds = 0.01
    return llm


def completions(server: FakeServer) -> int:
    return server.requests.count("/v1/chat/completions")


def test_a_spec_with_several_urls_resolves_to_one_model_over_all_of_them(servers):
    llm = registry.resolve(f"openai:{servers[0].url}/,{servers[1].url}#m")
    assert llm.base_urls == (servers[0].url, servers[1].url)
    assert llm.name == f"m@{servers[0].url},{servers[1].url}"


def test_calls_take_the_servers_in_turn(servers):
    llm = several(servers)
    answers = [llm.generate([f"question {i}"])[0][0].text for i in range(6)]
    assert answers == ["Paris"] * 6
    assert [completions(s) for s in servers] == [2, 2, 2]


def test_token_counts_and_the_window_come_from_whichever_server_is_next(servers):
    llm = several(servers)
    assert llm.count_tokens("one two three") == 3
    assert llm.count_tokens("four five") == 2
    assert llm.context_window == 8192
    assert [s.requests for s in servers] == [["/tokenize"], ["/tokenize"], ["/v1/models"]]


def test_a_stopped_server_is_skipped_until_its_cool_off_ends(servers, monkeypatch, caplog):
    monkeypatch.setattr(OpenAICompatibleLLM, "cool_off", 60.0)
    llm = several(servers, max_retries=0)  # moving on to the next server is no retry
    llm.generate(["before"])
    servers[1].stop()
    for i in range(6):
        assert llm.generate([f"question {i}"])[0][0].text == "Paris"
    assert completions(servers[1]) == 0 and completions(servers[0]) + completions(servers[2]) == 7
    (warning,) = [r.getMessage() for r in caplog.records if servers[1].url in r.getMessage()]
    assert warning.startswith(f"cannot connect to {servers[1].url}/chat/completions: ")
    assert warning.endswith("; sending requests to the other servers for 60s")

    servers[1].start()  # back, but still sitting out
    for i in range(6):
        llm.generate([f"again {i}"])
    assert completions(servers[1]) == 0

    monkeypatch.setattr(OpenAICompatibleLLM, "cool_off", 0.0)  # its cool-off is over: it is tried again
    for i in range(6):
        llm.generate([f"later {i}"])
    assert completions(servers[1]) == 2


def test_a_server_answering_5xx_sits_out_while_the_others_answer(servers):
    servers[0].status = 503
    llm = several(servers, max_retries=0)
    assert [llm.generate([f"q{i}"])[0][0].text for i in range(4)] == ["Paris"] * 4
    assert completions(servers[0]) == 1


def test_every_server_down_is_one_line_naming_each(servers):
    for server in servers:
        server.stop()
    llm = several(servers, max_retries=1)
    with pytest.raises(BackendUnavailable, match="kept failing after 2 attempts") as e:
        llm.generate(["hi"])
    assert "\n" not in str(e.value)
    assert all(f"cannot connect to {s.url}/chat/completions" in str(e.value) for s in servers)


def test_check_reachable_warns_about_a_down_server_and_goes_on_without_it(servers, caplog):
    servers[0].stop()
    llm = several(servers)
    llm.check_reachable()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"cannot reach {servers[0].url}: connection refused; start the server or fix the URL; "
                        "going on with the other servers"]
    servers[0].start()  # the check set it to sit out a cool-off
    for i in range(4):
        llm.generate([f"q{i}"])
    assert completions(servers[0]) == 0 and completions(servers[1]) + completions(servers[2]) == 4


def test_check_reachable_with_every_server_down_is_one_line_naming_each(servers):
    for server in servers:
        server.stop()
    with pytest.raises(BackendUnavailable) as e:
        several(servers).check_reachable()
    assert str(e.value) == "; ".join(f"cannot reach {s.url}: connection refused; start the server or fix the URL"
                                     for s in servers)


def test_calls_from_eight_threads_are_all_answered_and_spread(servers):
    llm = several(servers[:2])
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: llm.generate([f"question {i}"])[0][0].text, range(32)))
    assert answers == ["Paris"] * 32
    assert [completions(s) for s in servers[:2]] == [16, 16]


@pytest.mark.parametrize("rest, message", [
    ("http://a:1/v1,localhost:2/v1#m", "bad server URL 'localhost:2/v1' in 'openai:http://a:1/v1,localhost:2/v1#m'; "
                                       "list the servers of one model as "
                                       "openai:http://HOST1:PORT/v1,http://HOST2:PORT/v1#MODEL"),
    ("localhost:1,http://b:1/v1#m", "bad server URL 'localhost:1'"),
    ("http://a:1/v1,#m", "bad server URL ''"),
    ("http://a:1/v1,http://b:1/v1/,http://b:1/v1#m", "server http://b:1/v1 is listed twice in "
                                                     "'openai:http://a:1/v1,http://b:1/v1/,http://b:1/v1#m'; "
                                                     "list each server once"),
    ("http://a:1/v1,http://b:1/v1", "write it as openai:http://HOST:PORT/v1#MODEL"),
    ("http://a:1/v1,http://b:1/v1#", "write it as openai:http://HOST:PORT/v1#MODEL"),
])
def test_bad_lists_of_urls_are_one_line_config_errors(rest, message):
    with pytest.raises(ConfigError) as e:
        registry.resolve(f"openai:{rest}")
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("urls", [[], ["http://a:1/v1", "http://a:1/v1/"]])
def test_the_backend_refuses_no_or_repeated_urls(urls):
    with pytest.raises(ConfigError, match="one or more different servers"):
        OpenAICompatibleLLM(urls, "m")


def test_model_identity_records_url_for_one_server_and_urls_for_several():
    assert registry.model_identity("openai:http://a:1/v1/#m") == {
        "spec": "openai:http://a:1/v1/#m", "url": "http://a:1/v1", "model": "m"}
    assert registry.model_identity("openai:http://b:1/v1/,http://a:1/v1#m") == {
        "spec": "openai:http://b:1/v1/,http://a:1/v1#m", "urls": ["http://b:1/v1", "http://a:1/v1"], "model": "m"}


def test_the_fingerprint_is_the_same_whichever_order_lists_the_servers():
    one = OpenAICompatibleLLM("http://a:1/v1/", "m")
    assert one.fingerprint == "openai:http://a:1/v1#m"  # as before several servers were possible
    forward = OpenAICompatibleLLM(["http://a:1/v1", "http://b:1/v1"], "m")
    backward = OpenAICompatibleLLM(["http://b:1/v1/", "http://a:1/v1"], "m")
    assert forward.fingerprint == backward.fingerprint == "openai:http://a:1/v1,http://b:1/v1#m"


def test_a_stuck_server_among_several_sits_out_and_the_others_answer(servers, monkeypatch, caplog):
    import socket
    import time

    monkeypatch.setattr(OpenAICompatibleLLM, "cool_off", 60.0)
    stuck = socket.create_server(("127.0.0.1", 0))  # accepts connections (the backlog), never answers
    try:
        url = f"http://127.0.0.1:{stuck.getsockname()[1]}/v1"
        llm = OpenAICompatibleLLM([url, servers[0].url], "m", timeout=1, max_retries=0)
        started = time.monotonic()
        answers = [llm.generate([f"question {i}"])[0][0].text for i in range(4)]
        assert answers == ["Paris"] * 4 and completions(servers[0]) == 4
        assert time.monotonic() - started < 4  # one timeout, then the stuck server sits out
        warned = [r.getMessage() for r in caplog.records]
        assert any(m.startswith(f"no answer from {url}/chat/completions within 1s") for m in warned)
    finally:
        stuck.close()
