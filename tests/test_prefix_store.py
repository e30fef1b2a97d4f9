"""Document states kept between questions: keys, the memory LRU, and damaged files on disk."""

from __future__ import annotations

import logging

from ragfunnel.llm.prefix_store import DiskPrefixStore, MemoryPrefixStore, PrefixState, prefix_key


def test_keys_change_with_the_model_and_every_token():
    assert prefix_key("m", [1, 2, 3]) == prefix_key("m", (1, 2, 3))
    assert prefix_key("m", [1, 2, 3]) != prefix_key("other", [1, 2, 3])
    assert prefix_key("m", [1, 2, 3]) != prefix_key("m", [1, 2, 4])
    assert prefix_key("m", [1, 2, 3]) != prefix_key("m", [1, 2])


def test_memory_store_drops_the_least_recently_used_past_its_cap():
    store = MemoryPrefixStore(max_bytes=10)
    store.put("a", PrefixState((1,), b"aaaa"))
    store.put("b", PrefixState((2,), b"bbbb"))
    assert store.get("a") is not None  # a is now the most recent
    store.put("c", PrefixState((3,), b"cccc"))
    assert store.get("b") is None and store.get("a") and store.get("c")


def test_disk_round_trip_and_lru_cap(tmp_path):
    store = DiskPrefixStore(tmp_path, max_bytes=2500)
    for i in range(3):
        state = PrefixState((i, i + 1), bytes([i]) * 1000)
        store.put(prefix_key("m", state.tokens), "m", state)
    assert store.size()[0] == 2  # the oldest went past the cap
    kept = store.get(prefix_key("m", (2, 3)), "m")
    assert kept == PrefixState((2, 3), bytes([2]) * 1000)
    assert store.get(prefix_key("m", (2, 3)), "another-model") is None  # never served across models


def test_a_damaged_file_is_dropped_with_one_warning(tmp_path, caplog):
    store = DiskPrefixStore(tmp_path)
    state = PrefixState((5, 6, 7), b"x" * 500)
    key = prefix_key("m", state.tokens)
    store.put(key, "m", state)
    path = tmp_path / f"{key}.kv"
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF  # one flipped byte in the state
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        assert store.get(key, "m") is None
    assert "damaged" in caplog.text and not path.exists()
    store.put(key, "m", state)
    path.write_bytes(path.read_bytes()[:-100])  # truncated
    assert store.get(key, "m") is None and not path.exists()
    path.write_bytes(b"not a state at all")
    assert store.get(key, "m") is None


def test_an_unwritable_store_warns_once_and_keeps_working(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the store's folder should be")
    store = DiskPrefixStore(blocker / "kv")
    with caplog.at_level(logging.WARNING):
        store.put("k", "m", PrefixState((1,), b"a"))
        store.put("k2", "m", PrefixState((2,), b"b"))
    assert caplog.text.count("cannot write") == 1
    assert store.get("k", "m") is None
