"""Any OpenAI-compatible HTTP server: vLLM, TGI, llama.cpp's server, Ollama, hosted APIs."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from ragfunnel.errors import BackendUnavailable, ConfigError, MissingExtra, ModelError
from ragfunnel.llm.base import (
    CANCEL_POLL_SECONDS,
    BaseLLM,
    Cancellation,
    Capabilities,
    TransientError,
    current_cancellation,
)
from ragfunnel.types import Completion, SamplingParams

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
_DOWN_STATUS = {500, 502, 503, 504}  # the server, not the request, is failing: another server may answer
_DEFAULT_WINDOW = 8192
_CHARS_PER_TOKEN = 4
_REFUSED = re.compile(r"HTTP (400|422)\b")  # only when the server exposes no tokenizer; logged once as an estimate


class OpenAICompatibleLLM(BaseLLM):
    """Chat or text completions over HTTP, asking for ``n`` samples in one request.

    Servers that ignore ``n`` (some return one choice) get follow-up requests for the
    rest. Token counts come from the server's tokenizer endpoint (vLLM ``/tokenize``,
    llama.cpp ``/extras/tokenize``); the context window from ``/v1/models`` when it is
    reported, else ``context_window``.

    ``timeout`` is how long to wait for an answer (a long prompt on a CPU server takes minutes),
    ``connect_timeout`` how long to wait for the connection, and ``deadline`` (default 1.5 x
    ``timeout``) how long one request may go on failing, retries and backoff included: a server that
    accepts connections and never answers costs about ``deadline``, not ``timeout`` per retry.

    ``base_url`` may list several servers of the same model. Each request (completion, tokenize,
    models lookup) goes to the next one in turn; a server that takes no connection, does not answer in
    time or answers HTTP 5xx sits out ``cool_off`` seconds and the request moves on to the next server at once, within
    the same attempt and deadline. A server sitting out is tried only after all the others, and
    rejoins the turn when its cool-off ends: the next request sent to it is the health check.

    A call that can be cancelled (it runs under a :class:`~ragfunnel.llm.base.Cancellation`) waits for its
    completion request in steps of a tenth of a second and closes it once cancelled, so the server sees
    the client go and stops generating.
    """

    capabilities = Capabilities(yes_probability=True, warm_up=True, check_reachable=True)
    cool_off: float = 30.0  # seconds a failing server (one of several) sits out

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key: str | None = None,
        mode: str = "chat",
        timeout: float = 300.0,
        connect_timeout: float = 10.0,
        deadline: float | None = None,
        max_retries: int = 3,
        context_window: int | None = None,
    ):
        super().__init__()
        if mode not in ("chat", "completions"):
            raise ConfigError(f"unknown mode {mode!r}; valid modes: chat, completions")
        for option, value in (("connect_timeout", connect_timeout), ("deadline", deadline)):
            if value is not None and not value > 0:
                raise ConfigError(f"{option} must be a positive number of seconds, got {value}")
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.base_urls = tuple(dict.fromkeys(url.rstrip("/") for url in urls))
        if not self.base_urls or len(self.base_urls) < len(urls):
            raise ConfigError(f"base_url must list one or more different servers, got {base_url!r}")
        self.model = model
        self.name = f"{model}@{','.join(self.base_urls)}"
        self.mode = mode
        self.connect_timeout = connect_timeout
        self.set_timeout(timeout)
        if deadline is not None:
            self.deadline = deadline
        self.max_retries = max_retries
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY", "")
        self._window = context_window
        self._tokenize_route: str | None = None
        self._send_grammar = True  # until the server refuses the field
        self._send_logprobs = True  # likewise
        self._client: Any = None
        self._lock = threading.Lock()  # the turn and the cool-offs are shared by the calling threads
        self._next = 0  # index in base_urls of the server whose turn is next
        self._down: dict[str, float] = {}  # server -> when it last failed, while it sits out

    @property
    def fingerprint(self) -> str:
        """The servers and the model they serve (a server swapping weights under one name is not seen).

        Several servers of one model answer alike, so a cached call is valid whichever of them served
        it: the key holds the sorted URL list, not the server asked, and does not depend on the order
        the spec lists them in. One server gives the same key as before several were possible.
        """
        return f"openai:{','.join(sorted(self.base_urls))}#{self.model}"

    @property
    def tokenizer_identity(self) -> str | None:
        """None: a server's counts are not kept on disk. No file decides them, and they may be its own
        tokenizer's or, where it has no tokenize route, an estimate from the characters."""
        return None

    def set_timeout(self, seconds: float) -> None:
        """Wait up to ``seconds`` for an answer, and give up on a request after 1.5 times that, retries included."""
        if not seconds > 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {seconds}")
        self.timeout = float(seconds)
        self.deadline = 1.5 * self.timeout

    def warm_up(self) -> None:
        """Make the HTTP client now (the first request would)."""
        if self._client is not None:
            return
        try:
            import httpx
        except ImportError:
            raise MissingExtra("httpx", "openai") from None
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._client = httpx.Client(headers=headers)

    def _timeouts(self) -> Any:
        """This request's waits: the answer timeout, cut to what is left of the call's deadline."""
        import httpx

        wait = self.timeout
        left = self._time_left()
        if left is not None:
            wait = max(min(wait, left), 0.01)
        return httpx.Timeout(wait, connect=min(self.connect_timeout, wait))

    def check_reachable(self) -> None:
        """Fail now, in one line, if no server can be reached or each refuses the API key (GET /models,
        waiting at most ``connect_timeout`` on each); runs call it before doing any work. Of several
        servers, those that fail the check are logged and sit out a cool-off; the run goes on with the rest."""
        self.warm_up()
        problems = {base: problem for base in self.base_urls if (problem := self._probe(base))}
        if len(problems) == len(self.base_urls):
            raise BackendUnavailable("; ".join(problems.values()))
        for base, problem in problems.items():
            self._mark_down(base)
            log.warning("%s; going on with the other servers", problem)

    def _probe(self, base: str) -> str | None:
        """Why the server at ``base`` cannot serve this model's requests, or None if it can."""
        import httpx

        wait = min(self.connect_timeout, self.timeout)
        try:
            r = self._client.get(base + "/models", timeout=wait)
        except httpx.ConnectTimeout:
            return f"cannot reach {base}: no connection within {wait:g}s; start the server or fix the URL"
        except httpx.TimeoutException:
            return (f"{base} accepted the connection but did not answer within {wait:g}s; "
                    "check that the server is not stuck, or raise the timeout")
        except httpx.HTTPError as e:
            reason = "connection refused" if "refused" in str(e).lower() else str(e)
            return f"cannot reach {base}: {reason}; start the server or fix the URL"
        if r.status_code in (401, 403):
            return (f"{base} rejected the API key (HTTP {r.status_code}); "
                    "set OPENAI_API_KEY to a key the server accepts")
        return None

    @property
    def context_window(self) -> int:
        if self._window is None:
            self._window = self._window_from_server() or _DEFAULT_WINDOW
        return self._window

    def _post(self, path: str, payload: dict[str, Any], *, root: bool = False,
              cancellable: bool = False) -> dict[str, Any]:
        """POST JSON to the next server in turn; network errors and retryable statuses become TransientError.
        ``cancellable``: a request that may run long (a completion), closed when the call is cancelled."""
        self.warm_up()  # first: without httpx it raises MissingExtra
        url, r = self._send("POST", path, root=root, cancellable=cancellable, json=payload)
        if r.status_code in _RETRY_STATUS:
            raise TransientError(f"{url} answered HTTP {r.status_code}")
        if r.status_code >= 400:
            body = " ".join(r.text[:200].split())  # one line, whatever the server sent
            # Wrong key, URL or model fails every request: the run stops. Any other refusal (a prompt
            # too long, an option the server rejects) is this request's: the pair fails, the run goes on.
            refused = BackendUnavailable if r.status_code in (401, 403, 404) else ModelError
            raise refused(f"{url} refused the request (HTTP {r.status_code}: {body}); "
                          "check the model name and the request options")
        try:
            reply = r.json()
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise TransientError(f"{url} answered with something other than a JSON object")
        return reply

    def _send(self, method: str, path: str, *, root: bool = False, cancellable: bool = False,
              **request: Any) -> tuple[str, Any]:
        """Send one request to the servers in turn until one is not down; return its URL and response.

        A server down (no connection, HTTP 5xx) is passed over for the next; when all are, the
        request fails with every server's error. Other network errors end the request at once.
        All of them become TransientError, for the base's retries.
        """
        import httpx

        errors = []
        for base in self._in_turn():
            url = (_root(base) if root else base) + path
            timeouts = self._timeouts()
            try:
                r = self._request(method, url, timeouts, cancellable=cancellable, **request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                errors.append(f"cannot connect to {url}: {e}")
            except httpx.TimeoutException:
                if len(self.base_urls) == 1:
                    raise TransientError(f"no answer from {url} within {timeouts.read:.3g}s; "
                                         "raise the timeout if the server is only slow") from None
                errors.append(f"no answer from {url} within {timeouts.read:.3g}s")  # stuck: the others may answer
            except httpx.HTTPError as e:
                raise TransientError(f"request to {url} failed: {e}") from None
            else:
                if r.status_code not in _DOWN_STATUS:
                    with self._lock:
                        self._down.pop(base, None)  # back, if it was sitting out
                    return url, r
                errors.append(f"{url} answered HTTP {r.status_code}")
            if self._mark_down(base):
                log.warning("%s; sending requests to the other servers for %gs", errors[-1], self.cool_off)
        raise TransientError("; ".join(errors))

    def _request(self, method: str, url: str, timeouts: Any, *, cancellable: bool, **request: Any) -> Any:
        """One HTTP request, on the pooled client unless it is cancellable and the call can be cancelled.

        A blocking request cannot be interrupted from outside, and abandoning it would leave the server
        generating; a request sent on an event loop can be cancelled, which closes its connection. It
        gets a loop and a connection of its own (a set-up small beside a completion), and runs only
        under a cancellation, whose caller (the server's worker thread) runs no event loop of its own.
        """
        token = current_cancellation() if cancellable else None
        if token is None:
            return self._client.request(method, url, timeout=timeouts, **request)
        return asyncio.run(self._request_until_cancelled(method, url, timeouts, request, token))

    async def _request_until_cancelled(self, method: str, url: str, timeouts: Any, request: dict[str, Any],
                                       token: Cancellation) -> Any:
        import httpx

        async with httpx.AsyncClient(headers=self._client.headers) as client:
            sending = asyncio.ensure_future(client.request(method, url, timeout=timeouts, **request))
            try:
                while not sending.done():
                    await asyncio.wait({sending}, timeout=CANCEL_POLL_SECONDS)
                    if not sending.done():
                        token.check()
                return sending.result()
            finally:
                sending.cancel()  # closes the connection of a request still waiting for its answer
                await asyncio.gather(sending, return_exceptions=True)

    def _in_turn(self) -> list[str]:
        """Every server, in the order this request tries them: from the next in turn, those sitting out
        a cool-off last (the longest out first). The turn moves past the first one."""
        with self._lock:
            now = time.monotonic()
            self._down = {base: t for base, t in self._down.items() if now - t < self.cool_off}
            n = len(self.base_urls)
            turn = [self.base_urls[(self._next + i) % n] for i in range(n)]
            order = sorted(turn, key=lambda base: self._down.get(base, -math.inf))  # stable: keeps the turn
            self._next = (self.base_urls.index(order[0]) + 1) % n
            return order

    def _mark_down(self, base: str) -> bool:
        """Let ``base`` sit out :attr:`cool_off` seconds from now; True if it was not sitting out already.
        A lone server is never marked: with no other to turn to, the base's retries handle it."""
        if len(self.base_urls) == 1:
            return False
        with self._lock:
            now = time.monotonic()
            was_up = now - self._down.get(base, -math.inf) >= self.cool_off
            self._down[base] = now
            return was_up

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        completions: list[Completion] = []
        while len(completions) < n:
            want = n - len(completions)
            started = time.perf_counter()
            body = self._request_body(prompt, params, want, seed=params.seed + len(completions))
            try:
                reply = self._post("/chat/completions" if self.mode == "chat" else "/completions", body,
                                   cancellable=True)
            except ModelError as e:
                if not _REFUSED.search(str(e)) or not ("grammar" in body or "logprobs" in body):
                    raise
                # A strict API (api.openai.com) rejects the unknown field: go on without it; the
                # callers that constrain a reply with a grammar also parse unconstrained replies.
                # A server that refuses logprobs answers without them (confidence then lacks that signal).
                field = "grammar" if "grammar" in body else "logprobs"
                log.warning("%s refused the %r field; sending requests without it", self.name, field)
                if field == "grammar":
                    self._send_grammar = False
                else:
                    self._send_logprobs = False
                continue
            seconds = time.perf_counter() - started
            self._restart_deadline()  # a server ignoring ``n`` needs more requests: each gets its own time
            choices = reply.get("choices") or []
            if not choices:
                raise ModelError(f"{self.name} returned no choices for this prompt; check the server logs")
            usage = reply.get("usage") or {}
            prompt_tokens = int(usage.get("prompt_tokens") or self.count_tokens(prompt))
            out_tokens = int(usage.get("completion_tokens") or 0)
            for choice in choices[:want]:
                text = (choice.get("message") or {}).get("content") if self.mode == "chat" else choice.get("text")
                text = text or ""
                completions.append(
                    Completion(
                        text=text,
                        # One prompt was read for all choices of this request: charge it once.
                        prompt_tokens=prompt_tokens if choice is choices[0] else 0,
                        completion_tokens=out_tokens // len(choices) if out_tokens else self.count_tokens(text),
                        seconds=seconds / len(choices),
                        finish_reason=choice.get("finish_reason") or "stop",
                        logprobs=_token_logprobs(choice),
                    )
                )
        return completions

    def yes_probability(self, prompt: str, answer: str, check: str) -> float | None:
        """P("Yes") against P("No") as the first token of the reply to ``check`` after ``answer`` (chat
        servers that return top log-probabilities; None elsewhere). A server with prefix caching (vLLM,
        llama.cpp's server) reads only the new turn."""
        if self.mode != "chat" or not self._send_logprobs:
            return None
        body = {"model": self.model, "max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 10,
                "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer},
                             {"role": "user", "content": check}]}
        try:
            reply = self._post("/chat/completions", body, cancellable=True)
        except (ModelError, TransientError) as e:
            log.warning("%s could not judge its answer (%s); confidence goes without that signal", self.name, e)
            return None
        try:
            top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            probs = {str(t["token"]).strip().lower(): math.exp(float(t["logprob"])) for t in top}
        except (KeyError, IndexError, TypeError, ValueError):
            return None
        yes, no = probs.get("yes", 0.0), probs.get("no", 0.0)
        return yes / (yes + no) if yes + no > 0 else None

    def _request_body(self, prompt: str, params: SamplingParams, n: int, *, seed: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": n,
            "seed": seed,
        }
        if params.top_k:
            body["top_k"] = params.top_k  # vLLM and llama.cpp accept it; others ignore it
        if params.stop:
            body["stop"] = list(params.stop)
        if params.temperature == 0 and self._send_logprobs:  # greedy answers: their tokens' log-probabilities
            body["logprobs"] = True if self.mode == "chat" else 1
        if params.grammar is not None and self._send_grammar:
            # llama.cpp's server enforces it; vLLM ignores unknown fields; strict hosted APIs refuse them.
            body["grammar"] = params.grammar
        if self.mode == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def _count_tokens(self, text: str) -> int:
        if self._tokenize_route == "estimate":
            return max(1, len(text) // _CHARS_PER_TOKEN)
        routes = [self._tokenize_route] if self._tokenize_route else ["/tokenize", "/extras/tokenize"]
        for route in routes:
            try:
                if route == "/tokenize":  # vLLM
                    reply = self._post(route, {"model": self.model, "prompt": text, "add_special_tokens": False},
                                       root=True)
                else:  # llama.cpp server
                    reply = self._post(route, {"input": text}, root=True)
            except MissingExtra:
                raise
            except (BackendUnavailable, ModelError):  # no such route here (404), or not this request form
                continue
            except TransientError as e:
                raise BackendUnavailable(f"cannot count tokens on {self.name}: {e}; "
                                         "check that the server is running") from None
            tokens = reply.get("tokens")
            if isinstance(tokens, list):
                self._tokenize_route = route
                return len(tokens)
        log.warning("%s exposes no tokenizer endpoint; estimating tokens as characters/%d",
                    self.name, _CHARS_PER_TOKEN)
        self._tokenize_route = "estimate"
        return max(1, len(text) // _CHARS_PER_TOKEN)

    def _window_from_server(self) -> int | None:
        self.warm_up()
        try:
            _, r = self._send("GET", "/models")
            cards = r.json().get("data", []) if r.status_code == 200 else []
        except Exception:  # noqa: BLE001 - an optional probe; the default applies
            cards = []
        for card in cards:
            if card.get("id") == self.model:
                for key in ("max_model_len", "context_length", "n_ctx"):
                    if isinstance(card.get(key), int):
                        return card[key]
        log.warning("%s does not report its context window; assuming %d tokens", self.name, _DEFAULT_WINDOW)
        return None


def _root(base: str) -> str:
    """The server's root, where tokenizer endpoints live, from its API base URL."""
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _token_logprobs(choice: dict[str, Any]) -> tuple[float, ...]:
    """The log-probability of each generated token in an OpenAI-format choice (chat or completions),
    or () where the server sent none."""
    got = choice.get("logprobs")
    if not isinstance(got, dict):
        return ()
    if isinstance(got.get("content"), list):  # chat
        values = [t.get("logprob") for t in got["content"] if isinstance(t, dict)]
    else:  # completions
        values = got.get("token_logprobs") or []
    try:
        return tuple(float(v) for v in values if v is not None)
    except (TypeError, ValueError):
        return ()
