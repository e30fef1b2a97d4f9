"""The CLI as a user runs it: the installed executable in a subprocess, or the command in-process with click's
CliRunner; each with its check that an error is one line."""

import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from ragfunnel.cli.main import main

RAGFUNNEL = shutil.which("ragfunnel", path=str(Path(sys.executable).parent)) or "ragfunnel"
TINY = "bundled:smollm2-135m"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([RAGFUNNEL, *args], capture_output=True, text=True, input=stdin, timeout=900)


def assert_one_line_error(result: subprocess.CompletedProcess, match: str, code: int = 1) -> None:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert match in lines[0]


def invoke(*args: str):
    return CliRunner().invoke(main, list(map(str, args)))


def one_line(result, match: str, code: int = 1) -> str:
    """The result's single stderr line, checked: the exit code, no traceback, ``match`` in it."""
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert match in lines[0], lines[0]
    return lines[0]
