"""The API reference at ``/docs``: every ``$ref`` of the server's own /openapi.json resolves by the rules
``static/docs.js`` follows (mirrored here in a few lines of Python), and headless chromium shows every endpoint,
of the live app and of a schema made to trip the page up (scripted models: no model loads)."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote
from urllib.request import urlopen

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import STATIC, Settings, create_app  # noqa: E402
from tests.browser import headless_chromium  # noqa: E402
from tests.helpers.serve import reply  # noqa: E402

VERBS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


# The resolver of docs.js, rule for rule: a ref's scopes are the document and every object holding "$defs" or
# "definitions" on the way down to the ref (itself included); its JSON pointer is tried innermost scope first.

def within(scopes: list[Any], node: Any) -> list[Any]:
    holds = isinstance(node, dict) and any(isinstance(node.get(k), dict) for k in ("$defs", "definitions"))
    return [*scopes, node] if holds else scopes


def pointer(ref: str) -> list[str] | None:
    """The reference tokens of a local ref (RFC 6901), or None for a ref to another file or a named anchor."""
    if not ref.startswith("#"):
        return None
    fragment = unquote(ref[1:])
    if fragment == "":
        return []
    if not fragment.startswith("/"):
        return None
    return [token.replace("~1", "/").replace("~0", "~") for token in fragment[1:].split("/")]


def step(node: Any, token: str) -> Any:
    if isinstance(node, list):
        return node[int(token)] if re.fullmatch(r"0|[1-9][0-9]*", token) and int(token) < len(node) else None
    return node.get(token) if isinstance(node, dict) else None


def lookup(ref: str, scopes: list[Any]) -> tuple[dict, list[Any]] | None:
    """Where ``ref`` points and the target's own scopes, or None."""
    tokens = pointer(ref)
    if tokens is None:
        return None
    for i in range(len(scopes) - 1, -1, -1):
        node, chain = scopes[i], scopes[: i + 1]
        for token in tokens:
            node = step(node, token)
            if node is None:
                break
            chain = within(chain, node)
        if isinstance(node, dict):
            return node, chain
    return None


def refs_in(node: Any, scopes: list[Any], where: str = "#") -> Iterator[tuple[str, list[Any], str]]:
    """Every ``$ref`` of a document with the scopes it is looked up in, and where it stands."""
    scopes = within(scopes, node)
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"], scopes, where
        for key, value in node.items():
            yield from refs_in(value, scopes, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from refs_in(value, scopes, f"{where}/{i}")


def served_schema() -> dict:
    """The app's /openapi.json as a browser reads it."""
    app = create_app(Settings(light="fake:light", strong="fake:strong", prefill=False))
    return json.loads(json.dumps(app.openapi()))


def operations(spec: dict) -> set[tuple[str, str]]:
    return {(verb.upper(), path) for path, item in spec["paths"].items() for verb in item if verb in VERBS}


# A schema made to trip the page up: definitions nested in a component and in a definition, a pointer with
# escaped characters, recursive models, refs that go round in a circle or lead nowhere, markup in its strings.
TRICKY = {
    "openapi": "3.1.0",
    "info": {"title": "tricky", "version": "1", "description": "<img src=x onerror=\"document.title='owned'\">"},
    "paths": {
        "/outer": {"post": {
            "requestBody": {"$ref": "#/components/requestBodies/OuterBody"},
            "responses": {"200": {"$ref": "#/components/responses/Fine"}}}},
        "/tree/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {"responses": {"200": {"description": "the tree", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Tree"}}}}}},
            "put": {"requestBody": {"content": {"application/json": {"schema": {
                "$ref": "#/components/schemas/Json"}}}}, "responses": {"204": {"description": "stored"}}}},
        "/slash": {"get": {"responses": {"200": {"description": "ok", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/a~1b%20c~0d"}}}}}}},
        "/broken": {"delete": {"responses": {
            "200": {"description": "circle", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/RoundA"}}}},
            "404": {"description": "nowhere", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Missing"}}}},
            "410": {"description": "elsewhere", "content": {"application/json": {
                "schema": {"$ref": "other.json#/Thing"}}}}}}},
    },
    "components": {
        "requestBodies": {"OuterBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Outer"}}}}},
        "responses": {"Fine": {"description": "fine", "content": {"application/json": {"schema": {
            "$defs": {"Receipt": {"type": "object", "properties": {"receipt_no": {"type": "integer"}}}},
            "type": "array", "items": {"$ref": "#/$defs/Receipt"}}}}}},
        "schemas": {
            "Outer": {
                "type": "object", "title": "Outer",
                "$defs": {
                    "Inner": {"type": "object", "title": "Inner",
                              "$defs": {"Deep": {"type": "object", "title": "Deep",
                                                 "properties": {"deep_field": {"type": "string"}}}},
                              "properties": {"deep": {"$ref": "#/$defs/Deep"},
                                             "sibling": {"$ref": "#/$defs/Sibling"}}},
                    "Sibling": {"type": "object", "title": "Sibling",
                                "properties": {"sibling_field": {"const": "<b>bold</b>"}}}},
                "properties": {"inner": {"$ref": "#/$defs/Inner", "description": "<script>alert(1)</script>"},
                               "tree": {"$ref": "#/components/schemas/Tree"}}},
            "Tree": {"type": "object", "title": "Tree",
                     "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/Tree"}},
                                    "label": {"type": ["string", "null"]}}},
            "Json": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/components/schemas/Json"}}]},
            "a/b c~d": {"type": "object", "title": "Escaped", "properties": {"escaped_field": {"type": "boolean"}}},
            "RoundA": {"$ref": "#/components/schemas/RoundB"},
            "RoundB": {"$ref": "#/components/schemas/RoundA"},
        },
    },
}


def test_every_ref_of_the_servers_schema_resolves_as_the_docs_page_resolves_it():
    spec = served_schema()
    found = list(refs_in(spec, [spec]))
    assert {"#/components/schemas/AnswerIn", "#/$defs/Message"} <= {ref for ref, _, _ in found}
    for ref, scopes, where in found:
        assert lookup(ref, scopes) is not None, f"{ref} at {where}"
    # The chat body's refs point into its own "$defs", which the document's root does not hold.
    assert lookup("#/$defs/Message", [spec]) is None


def test_the_resolver_follows_nested_definitions_outwards_and_escaped_pointers():
    spec = json.loads(json.dumps(TRICKY))
    outer = spec["components"]["schemas"]["Outer"]
    inner, scopes = lookup("#/$defs/Inner", within([spec], outer))
    assert inner["title"] == "Inner" and scopes == [spec, outer, inner]
    assert lookup("#/$defs/Deep", scopes)[0]["title"] == "Deep"
    assert lookup("#/$defs/Sibling", scopes)[0]["title"] == "Sibling"  # not in Inner: found in Outer
    assert lookup("#/components/schemas/a~1b%20c~0d", scopes)[0]["title"] == "Escaped"
    for nowhere in ("#/components/schemas/Missing", "other.json#/Thing", "#anchor", "#/paths/~1outer/post/9"):
        assert lookup(nowhere, [spec]) is None
    unresolved = {ref for ref, scopes, _ in refs_in(spec, [spec]) if lookup(ref, scopes) is None}
    assert unresolved == {"#/components/schemas/Missing", "other.json#/Thing"}


# In headless chromium.

@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


def rendered(browser: Any, url: str) -> Any:
    """Load the docs page at ``url`` and wait until it has drawn the schema (or given up on it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    endpoints = browser.find_element(By.ID, "endpoints")
    WebDriverWait(browser, 30).until(lambda b: endpoints.get_attribute("data-state"))
    return endpoints


def listed(endpoints: Any) -> set[tuple[str, str]]:
    from selenium.webdriver.common.by import By

    """The (method, path) of every endpoint the page shows, each under a heading that names it."""
    shown = set()
    for s in endpoints.find_elements(By.CSS_SELECTOR, "section.endpoint"):
        method, path = s.get_attribute("data-method"), s.get_attribute("data-path")
        assert s.find_element(By.TAG_NAME, "h2").text == f"{method} {path}"
        shown.add((method, path))
    return shown


def section(endpoints: Any, method: str, path: str) -> str:
    from selenium.webdriver.common.by import By

    return endpoints.find_element(By.CSS_SELECTOR, f'section[data-method="{method}"][data-path="{path}"]').text


@pytest.fixture(scope="module")
def live_app() -> Iterator[str]:
    """The app on a real uvicorn over scripted models, under its own host checks and CSP."""
    pytest.importorskip("uvicorn", reason="needs the [serve] extra")
    from tests.helpers.serve import LiveServer

    settings = Settings(light="fake:light", strong="fake:strong", prefill=False)
    with registered("fake:light", FakeLLM(reply, name="fake-light")), \
            registered("fake:strong", FakeLLM(reply, name="fake-strong")), LiveServer(create_app(settings)) as url:
        yield url


@contextmanager
def static_site(folder: Path, schema: dict) -> Iterator[str]:
    """The docs page's three files and ``schema`` as openapi.json, from a plain static server."""
    for name in ("docs.html", "docs.js", "style.css"):
        shutil.copy(STATIC / name, folder / name)
    (folder / "openapi.json").write_text(json.dumps(schema))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_docs_page_lists_every_endpoint_of_the_server(browser, live_app):
    with urlopen(f"{live_app}/openapi.json", timeout=10) as r:
        spec = json.load(r)
    endpoints = rendered(browser, f"{live_app}/docs")
    assert endpoints.get_attribute("data-state") == "ready", endpoints.text
    assert "could not" not in endpoints.text and "$ref" not in endpoints.text, endpoints.text
    assert listed(endpoints) == operations(spec)
    chat = section(endpoints, "POST", "/v1/chat/completions")
    for shown in ("messages", "Message[]", "Message", "role", '"user"', "ContentPart", "StreamOptions | null",
                  "include_usage"):
        assert shown in chat, shown
    answer = section(endpoints, "POST", "/v1/answer")
    assert "question" in answer and "HTTPValidationError" in answer and "ValidationError[]" in answer
    assert "doc_id" in section(endpoints, "GET", "/v1/documents/{doc_id}")
    assert "multipart/form-data" in section(endpoints, "POST", "/v1/documents")


def test_the_docs_page_survives_a_tricky_schema(browser, tmp_path):
    from selenium.webdriver.common.by import By

    with static_site(tmp_path, TRICKY) as url:
        endpoints = rendered(browser, f"{url}/docs.html")
        assert endpoints.get_attribute("data-state") == "ready", endpoints.text
        assert listed(endpoints) == operations(TRICKY)
        outer = section(endpoints, "POST", "/outer")
        for shown in ("Inner", "deep_field", "sibling_field", "Tree[]", "<script>alert(1)</script>", '"<b>bold</b>"',
                      "receipt_no", "Receipt[]"):
            assert shown in outer, shown
        assert "children" in section(endpoints, "GET", "/tree/{id}") and "id" in section(endpoints, "GET", "/tree/{id}")
        assert "string | Json[]" in section(endpoints, "PUT", "/tree/{id}")
        assert "escaped_field" in section(endpoints, "GET", "/slash")
        broken = section(endpoints, "DELETE", "/broken")
        assert "circular $ref" in broken and "unresolved $ref #/components/schemas/Missing" in broken
        assert "unresolved $ref other.json#/Thing" in broken
        # Markup from the schema is shown as text, never run.
        assert "<img src=x" in endpoints.text
        assert not endpoints.find_elements(By.CSS_SELECTOR, "img, script, b")
        assert browser.title == "ragfunnel API"
