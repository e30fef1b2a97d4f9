"""Every file ragfunnel reads for itself is read within bounds: a regular file, under a size cap, parsed
with its nesting limited. A damaged cache is dropped and rebuilt with one warning; a file the user named is
one error line. Corpora and datasets, streamed, are regular files too, each line read up to a limit. Files
that could block a read (a FIFO) are read in a thread or a subprocess with a timeout, so a regression fails
here instead of hanging the suite."""

from __future__ import annotations

import json
import logging
import os
import pickle
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ragfunnel.bounded import (
    MAX_JSON_DEPTH,
    RefusedPath,
    TooDeep,
    TooManyDigits,
    UnreadableFile,
    json_depth_exceeds,
    loads,
    numbered_lines,
    open_regular_file,
    read_json_file,
    read_regular_file,
)
from ragfunnel.errors import InputError
from ragfunnel.llm.fake import FakeLLM
from ragfunnel.llm.speed import SpeedProfile
from tests.helpers.cli import RAGFUNNEL

DEEP = "[" * 100_000 + "]" * 100_000  # the speed file of the report: 200 KB, past the smaller caps too
NESTED = "[" * 10_000 + "]" * 10_000  # within every cap: refused for its depth alone
SECONDS = 30
DIGITS = sys.get_int_max_str_digits()  # 4,300 unless changed: Python reads no integer longer
LONG_INT = "1" * 5000


def within_seconds(call, seconds: float = SECONDS, unblock: Path | None = None):
    """``call()``'s result or exception, from a thread that must finish within ``seconds``. A reader still
    blocked on the FIFO ``unblock`` is then released (a writer opens and closes it) before the test fails."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as e:  # handed back to the test, whatever it is
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if unblock is not None:
            os.close(os.open(unblock, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"still reading after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache dir of the test's own, with the disk caches on."""
    from ragfunnel.llm import registry

    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_disk_caches", True)
    return tmp_path / "cache"


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- bounded.py on hand-made cases ----------------------------------------------------------------------

@pytest.mark.parametrize(("text", "deep"), [
    ("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, False),
    ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), True),
    ('{"a": ' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1), True),
    ("[]" * 10_000, False),  # many brackets, never deep
    ('["' + "[" * 1000 + '"]', False),  # brackets inside a string are text
    ('["\\"' + "[" * 1000 + '"]', False),  # an escaped quote does not end the string
    ('["\\\\", ' + "[" * 1000 + "]" * 1000 + "]", True),  # an escaped backslash does
    ("]" * 1000 + "[" * 10, False),  # closing first never counts below zero into a pass
    (DEEP, True),
])
def test_json_depth_is_found_without_parsing(text, deep):
    assert json_depth_exceeds(text) is deep
    assert json_depth_exceeds(text.encode()) is deep
    assert json_depth_exceeds(text.encode("utf-16")) is deep  # json.loads reads UTF-16 bytes too


def test_loads_refuses_deep_json_before_parsing_it():
    assert loads('{"a": [1, {"b": "["}]}') == {"a": [1, {"b": "["}]}
    with pytest.raises(TooDeep, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        loads(DEEP)
    with pytest.raises(ValueError):  # TooDeep is a ValueError, as JSONDecodeError is
        loads(DEEP.encode())
    assert loads("[[1]]", max_depth=2) == [[1]]
    with pytest.raises(TooDeep):
        loads("[[[1]]]", max_depth=2)


def test_read_regular_file_refuses_what_is_no_regular_file(tmp_path, fifo):
    (tmp_path / "small").write_bytes(b"12345")
    assert read_regular_file(tmp_path / "small", max_bytes=5, what="test file") == b"12345"
    with pytest.raises(RefusedPath, match=r"test file .*small is 5 bytes, over the limit of 4; fix it"):
        read_regular_file(tmp_path / "small", max_bytes=4, what="test file", fix="fix it")
    for special in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(RefusedPath, match="is not a regular file"):
            within_seconds(lambda p=special: read_regular_file(p, max_bytes=100, what="test file"), unblock=fifo)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(RefusedPath, match="is a symlink loop"):
        read_regular_file(tmp_path / "loop", max_bytes=100, what="test file")
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing", max_bytes=100, what="test file")
    with pytest.raises(FileNotFoundError):  # a file where a folder should be: no such file either
        read_regular_file(tmp_path / "small" / "inside", max_bytes=100, what="test file")


def test_open_regular_file_opens_a_regular_file_and_refuses_the_rest(tmp_path, fifo):
    (tmp_path / "rows").write_bytes(b"a\nb\n")
    with open_regular_file(tmp_path / "rows", what="test file") as file:
        assert file.read() == b"a\nb\n"
    for special in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(RefusedPath, match="is not a regular file"):
            within_seconds(lambda p=special: open_regular_file(p, what="test file").close(), unblock=fifo)
    with pytest.raises(RefusedPath, match=r"rows is 4 bytes, over the limit of 3; fix it"):
        open_regular_file(tmp_path / "rows", what="test file", max_bytes=3, fix="fix it")
    with pytest.raises(FileNotFoundError):
        open_regular_file(tmp_path / "missing", what="test file")


def test_a_path_holding_a_nul_is_refused_saying_so(tmp_path):
    path = tmp_path / "a\x00b"
    for read in (lambda: open_regular_file(path, what="test file"),
                 lambda: read_regular_file(path, max_bytes=100, what="test file")):
        with pytest.raises(RefusedPath) as error:
            read()
        assert str(error.value) == (f"test file {str(path)!r} holds a NUL character, which no file name can; "
                                    "check the path")


def test_numbered_lines_stop_at_the_limit_even_in_a_sparse_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"12345\n\n123\n123456\n")
    with open_regular_file(path, what="test file") as file:
        lines = numbered_lines(file, path, max_line_bytes=5, what="test file", fix="fix it")
        assert [next(lines) for _ in range(3)] == [(1, b"12345\n"), (2, b"\n"), (3, b"123\n")]
        with pytest.raises(UnreadableFile) as error:
            next(lines)
    assert str(error.value) == f"test file {path} is over 5 bytes on line 4; fix it"
    sparse = tmp_path / "sparse.jsonl"
    sparse.touch()
    os.truncate(sparse, 2 << 30)  # 2 GiB of NULs without a newline, taking no disk
    with open_regular_file(sparse, what="test file") as file:
        with pytest.raises(UnreadableFile, match=r"sparse.jsonl is over 1,048,576 bytes on line 1; fix it"):
            list(numbered_lines(file, sparse, max_line_bytes=1 << 20, what="test file", fix="fix it"))
        assert file.tell() == (1 << 20) + 1  # read no further than the limit
    path.write_bytes(b"last line, no newline")
    with open_regular_file(path, what="test file") as file:
        assert list(numbered_lines(file, path, max_line_bytes=100, what="", fix="")) == [(1, path.read_bytes())]


@pytest.mark.parametrize(("text", "said"), [
    (f'{{"id": {LONG_INT}, "text": "t"}}', f"'id' has over {DIGITS:,} digits"),
    (f'{{"text": "t", "id": -{LONG_INT}}}', f"'id' has over {DIGITS:,} digits"),
    (f'{{"links": [{LONG_INT}]}}', f"a number has over {DIGITS:,} digits"),
    (f'{{"id": {LONG_INT}, "text": ', f"a number has over {DIGITS:,} digits"),  # broken past the number too
    (LONG_INT, f"a number has over {DIGITS:,} digits"),
])
def test_loads_names_an_integer_longer_than_python_reads(text, said):
    with pytest.raises(TooManyDigits) as error:
        loads(text)
    assert str(error.value) == said
    with pytest.raises(ValueError):  # a ValueError, as JSONDecodeError is
        loads(text.encode())


@pytest.mark.parametrize(("content", "problem"), [
    (b"\xff\xfe{}", "not UTF-8 text"),
    (b'{"a": ', "not JSON (Expecting value)"),
    (DEEP.encode(), f"nested deeper than {MAX_JSON_DEPTH} levels"),
    (LONG_INT.encode(), f"not usable JSON (a number has over {DIGITS:,} digits)"),
])
def test_read_json_file_names_the_problem(tmp_path, content, problem):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(UnreadableFile) as error:
        read_json_file(path, max_bytes=1 << 20, what="test file", fix="write it again")
    assert error.value.problem.startswith(problem)
    assert str(error.value) == f"test file {path} is {error.value.problem}; write it again"
    assert "\n" not in str(error.value)


def test_refusals_survive_pickling_with_their_problem():
    error = pickle.loads(pickle.dumps(RefusedPath("f is a FIFO; fix", "a FIFO")))
    assert type(error) is RefusedPath and str(error) == "f is a FIFO; fix" and error.problem == "a FIFO"
    assert isinstance(error, InputError)


def test_a_file_longer_than_its_size_says_is_read_within_the_limit():
    status = Path("/proc/self/status")  # a kernel file: regular, 0 bytes by its size, a kilobyte or so when read
    if not status.exists() or status.stat().st_size != 0:
        pytest.skip("needs Linux's /proc")
    assert b"Name:" in read_regular_file(status, max_bytes=1 << 20, what="test file")
    with pytest.raises(RefusedPath, match="is over the limit of 100 bytes"):
        read_regular_file(status, max_bytes=100, what="test file")


# --- --calibration names a file the user chose -----------------------------------------------------------

def run_refused(args: list[str], tmp_path: Path) -> str:
    """Run ``ragfunnel ARGS`` (60 s at most, 2 GiB of memory, so an endless read fails fast) and return its
    one error line."""
    def small_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = {k: v for k, v in os.environ.items() if k != "RAGFUNNEL_CALIBRATION"}
    result = subprocess.run([RAGFUNNEL, *args], capture_output=True, text=True, timeout=60, preexec_fn=small_memory,
                            env={**env, "RAGFUNNEL_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_ask_refuses_a_calibration_that_is_a_fifo_or_a_device_in_one_line(tmp_path, fifo, special):
    path = fifo if special == "fifo" else Path(special)
    (tmp_path / "doc.txt").write_text("The ferry to Gull Rock leaves at nine.\n")
    line = run_refused(["ask", "--calibration", str(path), "--context", str(tmp_path / "doc.txt"), "When?"], tmp_path)
    assert line == (f"error: calibration file {path} is not a regular file (a folder, FIFO or device); "
                    "pass a file `ragfunnel calibrate` wrote, or refit one with it")


def test_serve_refuses_a_fifo_calibration_before_it_listens(tmp_path, fifo):
    pytest.importorskip("uvicorn", reason="needs the [serve] extra")
    from tests.helpers.network import free_port

    line = run_refused(["serve", "--port", str(free_port()), "--calibration", str(fifo)], tmp_path)
    assert f"calibration file {fifo} is not a regular file" in line


def test_a_fifo_named_by_the_environment_is_warned_about_and_the_shipped_calibration_used(fifo, monkeypatch,
                                                                                          caplog):
    from ragfunnel.confidence.calibration import SHIPPED, CalibrationFile, load_calibration

    monkeypatch.setenv("RAGFUNNEL_CALIBRATION", str(fifo))
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        cal = within_seconds(load_calibration, unblock=fifo)
    assert cal == CalibrationFile.read(SHIPPED)
    (warning,) = warnings_of(caplog)
    assert f"calibration file {fifo} is not a regular file" in warning


def test_a_calibration_nested_100k_deep_is_damage_not_a_crash(tmp_path, caplog):
    from ragfunnel.confidence.calibration import CalibrationFile, load_calibration

    path = tmp_path / "cal.json"
    path.write_text(DEEP)
    with pytest.raises(InputError, match=f"calibration file {path} is nested deeper than"):
        CalibrationFile.read(path)
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        load_calibration(path)
    assert len(warnings_of(caplog)) == 1


# --- caches ragfunnel owns: dropped and rebuilt with one warning ---------------------------------------------

@pytest.fixture
def measuring(tmp_path, monkeypatch, cache):
    """A fake model whose speed is never measured for real, and the list of times it was measured."""
    from ragfunnel.llm import speed

    monkeypatch.setattr(speed, "_measured", {})
    measured: list[str] = []
    monkeypatch.setattr(speed, "calibrate", lambda llm: measured.append(llm.name) or SpeedProfile(300, 30))
    return FakeLLM(lambda prompt, i: "1 2 3", name="fake-speed"), measured


@pytest.mark.parametrize("damage", ["deep", "nested", "fifo", "huge", "list"])
def test_a_damaged_speed_file_is_measured_again_with_one_warning(measuring, caplog, damage):
    from ragfunnel.llm import speed

    llm, measured = measuring
    path = speed._profile_path(llm)
    path.parent.mkdir(parents=True)
    if damage == "fifo":
        os.mkfifo(path)
    else:
        path.write_text({"deep": DEEP, "nested": NESTED, "huge": " " * (speed.MAX_SPEED_FILE_BYTES + 1),
                         "list": "[1, 2]"}[damage])
    with caplog.at_level(logging.WARNING, logger="ragfunnel.llm.speed"):
        profile = within_seconds(lambda: speed.speed_of(llm), unblock=path if damage == "fifo" else None)
    assert profile.prefill_tps == 300 and measured == ["fake-speed"]
    (warning,) = warnings_of(caplog)
    assert f"fake-speed's saved speed in {path} is unusable" in warning and warning.endswith("measuring it again")
    assert json.loads(path.read_text())["machine"] == speed.machine_of(llm.fingerprint)  # rebuilt in its place
    speed._measured.clear()
    assert speed.speed_of(llm).prefill_tps == 300 and measured == ["fake-speed"]  # and trusted next time


@pytest.mark.parametrize("damage", ["deep", "fifo", "list"])
def test_a_damaged_document_ledger_is_started_afresh_with_one_warning(cache, caplog, damage):
    from ragfunnel.methods.auto import DocumentLedger

    path = cache / "documents.json"
    cache.mkdir()
    if damage == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(DEEP if damage == "deep" else "[1, 2]")
    ledger = DocumentLedger()
    with caplog.at_level(logging.WARNING, logger="ragfunnel.methods.auto"):
        assert within_seconds(lambda: ledger.spent("a document"), unblock=path if damage == "fifo" else None) == 0
        ledger.spent("another")
        ledger.add("a document", 2.5)
    (warning,) = warnings_of(caplog)
    assert f"the document ledger {path} is unusable" in warning
    assert json.loads(path.read_text()) == {DocumentLedger.key("a document"): 2.5}
    assert DocumentLedger().spent("a document") == 2.5  # a fresh process reads it back


@pytest.mark.parametrize("damage", ["deep", "fifo", "no digest"])
def test_a_damaged_sha256_record_is_removed_and_the_file_hashed_again(tmp_path, cache, caplog, damage):
    import hashlib

    from ragfunnel.llm import fingerprint

    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF weights")
    record = fingerprint._record(model)
    record.parent.mkdir(parents=True)
    if damage == "fifo":
        os.mkfifo(record)
    else:
        record.write_text(NESTED if damage == "deep" else '{"stamp": {}}')
    with caplog.at_level(logging.WARNING, logger="ragfunnel.llm.fingerprint"):
        found = within_seconds(lambda: fingerprint.recorded_sha256(model), unblock=record if damage == "fifo" else None)
        assert found is None and not record.exists()
        assert fingerprint.file_sha256(model) == hashlib.sha256(b"GGUF weights").hexdigest()
    assert len(warnings_of(caplog)) == 1
    assert fingerprint.recorded_sha256(model) == hashlib.sha256(b"GGUF weights").hexdigest()


# --- corpora and datasets the user names ------------------------------------------------------------------

CORPUS_FIX = "pass a corpus file (JSON, JSON Lines or MediaWiki XML) or a folder of documents"


@pytest.mark.parametrize(("reader", "name"), [("corpus", "c.jsonl"), ("corpus", "c.json"), ("corpus", "dump.xml.bz2"),
                                              ("mediawiki", "dump.xml"), ("dataset", "q.jsonl"), ("dataset", "q.json")])
def test_a_corpus_or_dataset_that_is_a_fifo_is_refused_at_once(tmp_path, reader, name):
    from ragfunnel.corpus import load_corpus, read_mediawiki
    from ragfunnel.eval.datasets import load_dataset

    if reader == "mediawiki":
        pytest.importorskip("mwparserfromhell")
    path = tmp_path / name
    os.mkfifo(path)
    read = {"corpus": load_corpus, "mediawiki": read_mediawiki, "dataset": load_dataset}[reader]
    with pytest.raises(RefusedPath) as error:
        within_seconds(lambda: read(path), unblock=path)
    fix = "pass one .json or .jsonl file" if reader == "dataset" else CORPUS_FIX
    kind = "dataset" if reader == "dataset" else "corpus"
    assert str(error.value) == f"{kind} file {path} is not a regular file (a folder, FIFO or device); {fix}"


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("command", ["index", "eval"])
def test_index_and_eval_refuse_a_fifo_or_a_device_in_one_line(tmp_path, fifo, special, command):
    path = fifo if special == "fifo" else Path(special)
    line = run_refused([command, str(path), "--out", str(tmp_path / "out")], tmp_path)
    kind, fix = ("corpus", CORPUS_FIX) if command == "index" else ("dataset", "pass one .json or .jsonl file")
    assert line == f"error: {kind} file {path} is not a regular file (a folder, FIFO or device); {fix}"


# --- files of runs, indexes and models: one error line ----------------------------------------------------

def test_an_index_manifest_that_is_a_fifo_or_nested_deep_is_refused_with_the_rebuild_command(tmp_path):
    from ragfunnel.corpus.index_manifest import read_manifest

    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(InputError, match=r"index manifest .*manifest.json is not a regular file .*; rebuild it with"):
        within_seconds(lambda: read_manifest(tmp_path), unblock=tmp_path / "manifest.json")
    (tmp_path / "manifest.json").unlink()
    (tmp_path / "manifest.json").write_text(DEEP)
    with pytest.raises(InputError, match=r"manifest.json is corrupted \(not UTF-8 JSON\); rebuild it with"):
        read_manifest(tmp_path)


def test_journal_files_are_refused_when_fifos_or_nested_deep(tmp_path):
    from ragfunnel.journal import read_config, read_jsonl

    os.mkfifo(tmp_path / "rows.jsonl")
    with pytest.raises(InputError, match=r"the rows file .*rows.jsonl is not a regular file"):
        within_seconds(lambda: read_jsonl(tmp_path / "rows.jsonl"), unblock=tmp_path / "rows.jsonl")
    (tmp_path / "deep.jsonl").write_text('{"a": 1}\n' + DEEP + "\n")
    with pytest.raises(InputError, match=r"deep.jsonl:2 is not a JSON row \(nested deeper than 64 levels\)"):
        read_jsonl(tmp_path / "deep.jsonl")
    (tmp_path / "config.json").write_text(DEEP)
    with pytest.raises(InputError, match=r"config.json is damaged \(TooDeep\); it records what the run is"):
        read_config(tmp_path / "config.json")


def test_a_journal_of_many_rows_reads_fast(tmp_path):
    import time

    from ragfunnel.journal import read_jsonl

    row = json.dumps({"example_id": "q", "metrics": {"f1": 0.5}, "trace": {"stages": [[1, 2]] * 40}})
    (tmp_path / "rows.jsonl").write_text((row + "\n") * 20_000)  # each row past the count that skips the scan
    started = time.perf_counter()
    assert len(read_jsonl(tmp_path / "rows.jsonl")) == 20_000
    assert time.perf_counter() - started < 10  # ~1 s on a slow machine; the scan is a few numpy passes a row


@pytest.mark.parametrize("reader", ["allocation fit", "prior weight", "checksums"])
def test_model_side_files_that_are_fifos_are_refused_at_once(tmp_path, reader):
    from ragfunnel.retrieve.attention import CHECKSUMS, verify_checked_dir
    from ragfunnel.retrieve.rerank import PRIOR_FILE, read_prior_weight
    from ragfunnel.scaling.allocation import load_fit

    name, read = {
        "allocation fit": ("fit.json", lambda: load_fit(tmp_path / "fit.json")),
        "prior weight": (PRIOR_FILE, lambda: read_prior_weight(tmp_path)),
        "checksums": (CHECKSUMS, lambda: verify_checked_dir(tmp_path)),
    }[reader]
    os.mkfifo(tmp_path / name)
    if reader == "checksums":  # a cache entry: what is wrong, for the warning that rebuilds it
        problem = within_seconds(read, unblock=tmp_path / name)
        assert problem == f"{CHECKSUMS} is unreadable (not a regular file (a folder, FIFO or device))"
        return
    with pytest.raises(InputError, match="not a regular file") as error:
        within_seconds(read, unblock=tmp_path / name)
    assert name in str(error.value) and "\n" not in str(error.value)
    (tmp_path / name).unlink()
    (tmp_path / name).write_text(NESTED)
    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        read()
