"""`ask` on a terminal: one live line of progress, erased before the answer is printed once; warnings on
lines of their own."""

from __future__ import annotations

import io
import logging
import os
import re
import select
import subprocess
import sys

import pytest

from ragfunnel.cli.live import ERASE, LiveLine, live_line

TOKEN = re.compile(r"\r|\n|\x1b\[K|\x1b\[[0-9;]*[A-Za-z]|[^\r\n\x1b]")


def screen(raw: str) -> list[str]:
    """What a terminal shows after ``raw``: carriage returns, erase-to-end-of-line and newlines applied."""
    lines, col = [""], 0
    for token in TOKEN.findall(raw):
        if token == "\r":
            col = 0
        elif token == "\n":
            lines.append("")
            col = 0
        elif token == "\x1b[K":
            lines[-1] = lines[-1][:col]
        elif token.startswith("\x1b"):
            continue  # colours
        else:
            lines[-1] = lines[-1][:col] + token + lines[-1][col + 1:]
            col += 1
    return [line for line in lines if line]


def test_the_line_shows_the_stage_and_the_text_and_is_gone_when_the_stage_ends():
    out = io.StringIO()
    line = LiveLine(out, width=60)
    line.started("generate")
    line.wrote("The keeper was ")
    line.wrote("Ada Penhallow")
    assert screen(out.getvalue()) == ["generate 0s: The keeper was Ada Penhallow"]
    line.done(object())
    assert screen(out.getvalue()) == [] and out.getvalue().endswith(ERASE)


def test_a_long_prompt_shows_how_much_is_read_until_the_model_writes():
    out = io.StringIO()
    line = LiveLine(out, width=80)
    line.started("generate")
    line.reading(1024, 4096)
    assert screen(out.getvalue()) == ["generate 0s: read 1,024 of 4,096 prompt tokens"]
    line.reading(4096, 4096)
    assert screen(out.getvalue()) == ["generate 0s"]
    line.wrote("Ada")
    assert screen(out.getvalue()) == ["generate 0s: Ada"]


def test_a_long_text_keeps_its_tail_within_the_width():
    out = io.StringIO()
    line = LiveLine(out, width=40)
    line.started("generate")
    line.wrote("word " * 30 + "LAST")
    (shown,) = screen(out.getvalue())
    assert len(shown) <= 39 and shown.endswith("LAST") and shown.startswith("generate")


def test_a_log_record_erases_the_line_and_stands_on_its_own():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with live_line(out) as line:
            line.started("stage2_forward")
            logging.getLogger("ragfunnel.test").warning("the context was cut in the middle")
            line.wrote("drafting")
        assert screen(out.getvalue()) == ["WARNING: the context was cut in the middle"]
    finally:
        root.removeHandler(handler)


@pytest.mark.model
def test_ask_on_a_terminal_shows_the_answer_once(tmp_path):
    context = tmp_path / "report.txt"
    context.write_text("The water cooperative met in June. " * 40 + "Odile Fenwick and Tomasz Brandt were elected "
                       "directors at the June general meeting. " + "The budget was approved. " * 40)
    ragfunnel = os.path.join(os.path.dirname(sys.executable), "ragfunnel")
    args = [ragfunnel, "ask", "Who were elected directors?", "--context", str(context), "--method", "op",
            "--strong", "bundled:smollm2-135m", "--no-cache"]
    plain = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    answer = plain.stdout.strip()

    primary, secondary = os.openpty()
    process = subprocess.Popen(args, stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True)
    os.close(secondary)
    raw = b""
    while True:
        ready, _, _ = select.select([primary], [], [], 300)
        if not ready:
            process.kill()
            pytest.fail("ask on a terminal did not finish")
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        raw += chunk
    os.close(primary)
    assert process.wait(timeout=60) == 0, raw.decode(errors="replace")
    text = raw.decode(errors="replace")
    assert re.search(r"\r\x1b\[Kgenerate \d+s", text)  # the live line was drawn while the model wrote
    assert re.search(r"generate \d+s: read [\d,]+ of [\d,]+ prompt tokens", text)  # and while it read the prompt
    shown = screen(text)
    assert answer and shown.count(answer) == 1, shown
    assert not any(re.match(r"generate \d+s", line) for line in shown), shown  # the live line is gone
    assert any(line.startswith("-- op:") for line in shown)
