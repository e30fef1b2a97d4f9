"""The on-disk LLM call cache: keys, damaged rows and files, and the `ragfunnel cache` command."""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import fields, replace

import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.llm import FakeLLM, SamplingParams, registry, set_disk_caches
from ragfunnel.llm.call_cache import CallCache, call_key, default_call_cache
from ragfunnel.llm.llamacpp import LlamaCppLLM
from ragfunnel.types import Completion


@pytest.fixture(autouse=True)
def private_cache_dir(tmp_path, monkeypatch):
    """Every test gets its own cache dir, registry and caching switch."""
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_loaded", {})
    monkeypatch.setattr(registry, "_disk_caches", True)


def echo(prompt: str, i: int) -> str:
    return f"answer {i} to {prompt}"


def cached_llm(tmp_path, name: str = "fake") -> FakeLLM:
    llm = FakeLLM(echo, name=name)
    llm.call_cache = CallCache(tmp_path / "calls.sqlite")
    return llm


def edit(path, sql: str, *args) -> list[tuple]:
    """Change the database behind the cache's back, as another program (or a disk fault) would."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(sql, args).fetchall()
        db.commit()
        return rows
    finally:
        db.close()


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_repeated_call_is_served_from_disk_without_calling_the_model(tmp_path):
    llm = cached_llm(tmp_path)
    (first,) = llm.generate(["What is the capital?"], SamplingParams(temperature=0.7, seed=3), n=2)
    (again,) = llm.generate(["What is the capital?"], SamplingParams(temperature=0.7, seed=3), n=2)
    assert llm.calls == [("What is the capital?", 2)]
    assert not any(c.cached for c in first) and all(c.cached for c in again)
    assert [replace(c, seconds=0.0, cached=False) for c in again] == [replace(c, seconds=0.0) for c in first]
    assert all(0 <= c.seconds < 1 for c in again)  # the lookup's time, not the model's

    fresh = FakeLLM(echo)  # another process: a new object over the same file
    fresh.call_cache = CallCache(tmp_path / "calls.sqlite")
    (kept,) = fresh.generate(["What is the capital?"], SamplingParams(temperature=0.7, seed=3), n=2)
    assert kept[0].cached and not fresh.calls


def test_threads_share_one_cache(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    llm = cached_llm(tmp_path)
    prompts = [f"question {i % 10}" for i in range(200)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda p: llm.generate([p])[0][0], prompts))
    assert [o.text for o in outs] == [f"answer 0 to {p}" for p in prompts]
    assert llm.call_cache.enabled and llm.call_cache.info().entries == 10
    assert sum(not o.cached for o in outs) == len(llm.calls) < 200


def test_the_stored_row_keeps_the_original_seconds(tmp_path):
    calls = CallCache(tmp_path / "calls.sqlite")
    params = SamplingParams()
    calls.put("m", "p", params, 1, [Completion("x", 3, 1, 12.5)])
    ((value,),) = edit(tmp_path / "calls.sqlite", "SELECT value FROM calls")
    assert json.loads(value)[0]["seconds"] == 12.5
    (hit,) = calls.get("m", "p", params, 1)
    assert hit.cached and hit.seconds < 1 and (hit.text, hit.prompt_tokens, hit.completion_tokens) == ("x", 3, 1)


@pytest.mark.parametrize("change", [
    {"prompt": "What is the capital of France?"},
    {"n": 3},
    {"max_tokens": 65},
    {"temperature": 0.5},
    {"top_p": 0.9},
    {"top_k": 50},
    {"stop": ("\n",)},
    {"seed": 1},
    {"grammar": 'root ::= "yes" | "no"'},
])
def test_any_change_to_the_call_is_a_miss(tmp_path, change):
    llm = cached_llm(tmp_path)
    call = {"n": 2, "prompt": "What is the capital?"}
    llm.generate([call["prompt"]], SamplingParams(), n=call["n"])
    changed = {**call, **change}
    prompt, n = changed.pop("prompt"), changed.pop("n")
    (outs,) = llm.generate([prompt], SamplingParams(**changed), n=n)
    assert len(llm.calls) == 2 and not any(c.cached for c in outs)


def test_another_model_misses(tmp_path):
    a, b = cached_llm(tmp_path, "model-a"), cached_llm(tmp_path, "model-b")
    assert a.fingerprint != b.fingerprint
    a.generate(["q"])
    assert not b.generate(["q"])[0][0].cached and len(b.calls) == 1


def test_every_sampling_field_takes_part_in_the_key():
    base = SamplingParams(max_tokens=64, temperature=0.2, top_p=0.9, top_k=5, stop=("x",), seed=1, grammar="g")
    other = {"max_tokens": 65, "temperature": 0.3, "top_p": 0.8, "top_k": 6, "stop": ("y",), "seed": 2,
             "grammar": "h"}
    # a new field needs a case here; keep_prefix only says where to keep model state, so it is left out
    assert set(other) | {"keep_prefix"} == {f.name for f in fields(SamplingParams)}
    keys = {call_key("m", "p", replace(base, **{name: value}), 1) for name, value in other.items()}
    assert len(keys | {call_key("m", "p", base, 1)}) == len(other) + 1
    assert call_key("m", "p", replace(base, keep_prefix=40), 1) == call_key("m", "p", base, 1)
    assert call_key("m", "p", SamplingParams(temperature=0), 1) == call_key("m", "p", SamplingParams(), 1)


@pytest.mark.parametrize("damage", [
    "UPDATE calls SET value = CAST('not json' AS BLOB)",  # checksum no longer matches
    "UPDATE calls SET value = substr(value, 1, 10)",  # truncated
    "UPDATE calls SET checksum = 'x'",
    "UPDATE calls SET value = 42",
])
def test_a_damaged_row_is_recomputed_with_one_warning(tmp_path, caplog, damage):
    llm = cached_llm(tmp_path)
    llm.generate(["q"])
    edit(tmp_path / "calls.sqlite", damage)
    with caplog.at_level(logging.WARNING):
        (outs,) = llm.generate(["q"])
    assert not outs[0].cached and outs[0].text == "answer 0 to q" and len(llm.calls) == 2
    (warning,) = warnings_of(caplog)
    assert "damaged" in warning
    assert llm.generate(["q"])[0][0].cached  # stored afresh


def test_a_row_with_a_valid_checksum_but_wrong_fields_is_recomputed(tmp_path, caplog):
    from ragfunnel.llm.call_cache import _checksum

    llm = cached_llm(tmp_path)
    llm.generate(["q"])
    ((key,),) = edit(tmp_path / "calls.sqlite", "SELECT key FROM calls")
    value = json.dumps([{"text": "x"}]).encode()
    edit(tmp_path / "calls.sqlite", "UPDATE calls SET value = ?, checksum = ?", value, _checksum(key, value))
    with caplog.at_level(logging.WARNING):
        assert not llm.generate(["q"])[0][0].cached
    assert len(warnings_of(caplog)) == 1


@pytest.mark.parametrize("spoil", ["truncate", "garbage"])
def test_a_damaged_database_file_is_replaced_with_one_warning(tmp_path, caplog, spoil):
    path = tmp_path / "calls.sqlite"
    first = CallCache(path)
    for i in range(300):
        first.put("m", f"prompt {i}", SamplingParams(), 1, [Completion("y" * 500, 1, 1, 0.1)])
    first.close()  # the last connection folds the write-ahead log into the file
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if spoil == "truncate" else b"not a database " * 100)
    with caplog.at_level(logging.WARNING):
        llm = FakeLLM(echo)
        llm.call_cache = CallCache(path)
        assert llm.call_cache.enabled and llm.call_cache.info().entries == 0
        llm.generate(["q"])
        assert llm.generate(["q"])[0][0].cached
    (warning,) = warnings_of(caplog)
    assert "damaged" in warning and "empty one" in warning


def test_an_unwritable_cache_dir_runs_without_the_cache(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(blocker / "cache"))  # mkdir fails even as root
    with caplog.at_level(logging.WARNING):
        assert default_call_cache() is None and default_call_cache() is None  # tried once per process
        llm = FakeLLM(echo)
        llm.call_cache = CallCache(blocker / "calls.sqlite")
        assert not llm.call_cache.enabled
        assert llm.generate(["q"])[0][0].text == "answer 0 to q"
        assert not llm.generate(["q"])[0][0].cached and len(llm.calls) == 2
    assert len(warnings_of(caplog)) == 2  # one per cache that could not be opened
    assert all("running without it" in w for w in warnings_of(caplog))


def test_a_failing_write_turns_the_cache_off_with_one_warning(tmp_path, caplog):
    llm = cached_llm(tmp_path)
    llm.call_cache._conn.execute("DROP TABLE calls")  # every later statement fails
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert llm.generate(["q"])[0][0].text == "answer 0 to q"
    assert len(warnings_of(caplog)) == 1 and not llm.call_cache.enabled


def test_damage_found_mid_run_replaces_the_file_with_one_warning(tmp_path, caplog):
    calls = CallCache(tmp_path / "calls.sqlite")
    fill(calls, "m", "m", 2)
    damage = sqlite3.DatabaseError("database disk image is malformed")
    damage.sqlite_errorname = "SQLITE_CORRUPT"  # as SQLite reports a page it cannot read
    with caplog.at_level(logging.WARNING):
        calls._fail(damage)
    assert calls.enabled and calls.info().entries == 0 and len(warnings_of(caplog)) == 1
    fill(calls, "m", "m", 1)
    assert calls.info().entries == 1


def test_a_changed_model_file_is_never_served_from_the_cache(tmp_path):
    class Offline(LlamaCppLLM):  # the GGUF file is hashed but never loaded
        def _complete(self, prompt, params, n):
            return [Completion(f"from {self.model_path.read_text()}", 1, 1, 0.0)] * n

    weights = tmp_path / "model.gguf"
    weights.write_text("weights v1")
    old = Offline(weights)
    old.call_cache = CallCache(tmp_path / "calls.sqlite")
    assert old.generate(["q"])[0][0].text == "from weights v1"
    assert old.generate(["q"])[0][0].cached
    weights.write_text("weights v2, retrained")
    new = Offline(weights)  # the next run
    new.call_cache = old.call_cache
    assert new.fingerprint != old.fingerprint
    (outs,) = new.generate(["q"])
    assert outs[0].text == "from weights v2, retrained" and not outs[0].cached


def test_the_registry_attaches_the_cache_and_the_switch_detaches_it(tmp_path):
    llm = registry.resolve("openai:http://127.0.0.1:9/v1#m")  # resolving does not connect
    assert llm.call_cache is default_call_cache() and llm.call_cache is not None
    assert llm.call_cache.path == tmp_path / "cache" / "calls.sqlite"
    set_disk_caches(False)
    assert llm.call_cache is None
    assert registry.resolve("openai:http://127.0.0.1:9/v1#other").call_cache is None
    set_disk_caches(True)
    assert llm.call_cache is default_call_cache()


def test_ask_records_cache_hits_and_no_cache_bypasses_them(tmp_path):
    fake = FakeLLM(lambda prompt, i: "Paris")
    fake.call_cache = default_call_cache()
    context = tmp_path / "context.txt"
    context.write_text("The capital of France is Paris.")
    args = ["ask", "What is the capital of France?", "--context", str(context), "--method", "lc",
            "--strong", "fake:strong", "--json"]

    def stage_details(result) -> list[dict]:
        assert result.exit_code == 0, result.output
        return [s["detail"] for s in json.loads(result.stdout)["trace"]["stages"] if "cached" in s["detail"]]

    with registry.registered("fake:strong", fake):
        first, second = (stage_details(CliRunner().invoke(main, args)) for _ in range(2))
        assert [d["cached"] for d in first] == [False] and [d["cached"] for d in second] == [True]
        assert len(fake.calls) == 1
        bypassed = stage_details(CliRunner().invoke(main, [*args, "--no-cache"]))
    assert [d["cached"] for d in bypassed] == [False] and len(fake.calls) == 2 and fake.call_cache is None


def test_no_cache_is_offered_by_ask_eval_and_scale_grid():
    for command in (["ask"], ["eval"], ["scale", "grid"]):
        assert "--no-cache" in CliRunner().invoke(main, [*command, "--help"]).output


def fill(calls: CallCache, name: str, fingerprint: str, count: int) -> None:
    for i in range(count):
        calls.put(fingerprint, f"prompt {i}", SamplingParams(), 1, [Completion("a", 1, 1, 0.5)], name=name)


def test_cache_info_and_clear(tmp_path):
    path = tmp_path / "cache" / "calls.sqlite"
    empty = CliRunner().invoke(main, ["cache", "info", "--json"])
    assert empty.exit_code == 0 and json.loads(empty.stdout)["entries"] == 0
    assert not path.exists()  # looking creates nothing

    calls = CallCache(path)
    fill(calls, "bundled:qwen2.5-1.5b", "a" * 64, 3)
    fill(calls, "gguf:other.gguf", "b" * 64, 2)
    calls.close()
    info = json.loads(CliRunner().invoke(main, ["cache", "info", "--json"]).stdout)
    assert info["entries"] == 5 and info["bytes"] > 0 and info["path"] == str(path)
    assert [(m["fingerprint"], m["names"], m["entries"]) for m in info["models"]] == [
        ("a" * 64, ["bundled:qwen2.5-1.5b"], 3), ("b" * 64, ["gguf:other.gguf"], 2)]
    table = CliRunner().invoke(main, ["cache", "info"]).stdout
    assert "5 entries" in table and "a" * 64 in table and "bundled:qwen2.5-1.5b" in table

    by_name = CliRunner().invoke(main, ["cache", "clear", "--model", "bundled:qwen2.5-1.5b"])
    assert by_name.exit_code == 0 and "removed 3 entries" in by_name.stdout
    by_fingerprint = CliRunner().invoke(main, ["cache", "clear", "--model", "b" * 64])
    assert "removed 2 entries" in by_fingerprint.stdout
    fill(CallCache(path), "x", "x", 1)
    assert "removed 1 entry " in CliRunner().invoke(main, ["cache", "clear"]).stdout
    assert json.loads(CliRunner().invoke(main, ["cache", "info", "--json"]).stdout)["entries"] == 0


def test_cache_command_on_an_unusable_dir_is_one_error_line(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(blocker))  # calls.sqlite would live inside a file
    result = CliRunner().invoke(main, ["cache", "clear"])
    assert result.exit_code == 1 and result.output == (f"error: RAGFUNNEL_CACHE={blocker} is a file, not a directory; "
                                                       "point it at a directory or unset it\n")
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))
    (tmp_path / "calls.sqlite").mkdir()  # exists, but is no file
    result = CliRunner().invoke(main, ["cache", "info"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "cannot use the call cache" in result.output
