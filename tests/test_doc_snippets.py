"""Every code block in README.md and docs/*.md runs, so the examples stay true.

A block's language says what is done with it:

- ``python``: run with this venv's Python;
- ``bash`` / ``sh``: run as one bash script (``set -euo pipefail``);
- ``console``: the lines that start with ``$ `` are commands (with their ``\\`` continuation lines and
  here-documents), run one by one; the lines between them are the output shown. A command whose shown output
  has a line starting with ``error:`` must fail and print that line on stderr; every other command must
  succeed. Timings and model output are not compared;
- ``json``: parsed; ``text`` (output, diagrams): not run.

Each block runs in a fresh directory holding ``examples/`` (the repository's), with ``../shared`` pointing at the
project's shared data when it exists (a block naming ``../shared/`` skips without it), and with the venv's
``bin`` first on ``PATH`` so ``ragfunnel`` and ``python`` are the venv's. Model calls go through the user's call
cache, as they do for a user: the first run pays for them.

An HTML comment on the line before a block tags it, ``<!-- snippet: TAG, TAG -->``:

- ``model``: it loads bundled models (the test is marked ``model``);
- ``continues``: it runs after the nearest block before it in the same file not tagged ``continues``, in the
  same directory (an index that block built, say);
- ``setup``, ``test-suite``, ``needs-server``, ``needs-ray``, ``needs-gpu``, ``long-run``: skipped, for the reason
  in ``SKIPS``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
RUN = frozenset({"python", "bash", "sh", "console"})
NOT_RUN = frozenset({"json", "text"})
SKIPS = {
    "setup": "sets up the venv (and runs the whole suite); CI runs it verbatim (.ci/run)",
    "test-suite": "runs the test suite, which is running it",
    "needs-server": "needs a running server (ragfunnel serve, or an OpenAI-compatible model server)",
    "needs-ray": "needs a Ray cluster",
    "needs-gpu": "needs a GPU",
    "long-run": "minutes to hours of model time: its steps are covered by the model tests",
}
TAGS = frozenset({"model", "continues", *SKIPS})
# Loads models on a short text each; every one added slows CI.
MAX_MODEL_BLOCKS = 8
TIMEOUT = 1200  # seconds per command: a cold model load on two busy cores, then an answer

MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<tags>[\w\s,-]*?)\s*-->$")
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)\s*$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<end>\w+)\1")
# Commands that load a model (an LLM, the attention post-ranker, or the MiniLM embedder).
MODEL_COMMAND = re.compile(r"\bragfunnel\s+(ask|eval|search|serve|mcp|scale\s+(demos|grid)|funnel\s+distill)\b"
                           r"|\bragfunnel\s+index\b.*--(flat|embed-documents)\b|\bintegrations\b")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    tags: frozenset[str]

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        return next((SKIPS[tag] for tag in SKIPS if tag in self.tags), None)


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, each with the tags of the ``snippet`` comment right before it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, start = opening["fence"], i
        end = next((j for j in range(i + 1, len(lines))
                    if lines[j].startswith(fence[0] * len(fence)) and not lines[j].strip(fence[0] + " ")), None)
        assert end is not None, f"{page.name}:{i + 1}: a code block that never closes"
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        tags = frozenset(t.strip() for t in marker["tags"].split(",") if t.strip()) if marker else frozenset()
        found.append(Block(page, start + 1, opening["lang"], "\n".join(lines[start + 1:end]), tags))
        i = end + 1
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]
RUNNABLE = [block for block in BLOCKS if block.lang in RUN]


def prerequisite(block: Block) -> Block | None:
    """The block a ``continues`` block runs after: the nearest runnable one before it in its file that does not
    continue another."""
    if "continues" not in block.tags:
        return None
    earlier = [b for b in RUNNABLE if b.page == block.page and b.line < block.line and "continues" not in b.tags]
    return earlier[-1] if earlier else None


def console_commands(code: str) -> list[tuple[str, list[str]]]:
    """The commands of a console transcript, each with the output lines shown after it."""
    lines, commands, i = code.splitlines(), [], 0
    while i < len(lines):
        assert lines[i].startswith("$ "), f"console output before any command: {lines[i]!r}"
        command = [lines[i][2:]]
        i += 1
        while command[-1].endswith("\\") and i < len(lines):
            command.append(lines[i])
            i += 1
        heredoc = HEREDOC.search(command[0])
        if heredoc:
            while i < len(lines) and lines[i] != heredoc["end"]:
                command.append(lines[i])
                i += 1
            assert i < len(lines), f"here-document {heredoc['end']} never ends"
            command.append(lines[i])
            i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        commands.append(("\n".join(command), output))
    return commands


# What a snippet may take from the user's cache: the assembled model files, their hashes, measured speeds and
# converted post-rankers. Never answers (calls.sqlite) or kept document states: every snippet runs its models.
SHARED_CACHE = ("models", "sha256", "speed", "post_ranker")


def environment(scratch: Path) -> dict[str, str]:
    """The user's environment with the venv's commands first and a cache of the snippet's own."""
    from ragfunnel.llm.cache_paths import cache_dir

    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    own = scratch / "cache"
    own.mkdir(exist_ok=True)
    for name in SHARED_CACHE:
        if (cache_dir() / name).is_dir() and not (own / name).exists():
            (own / name).symlink_to(cache_dir() / name, target_is_directory=True)
    env["RAGFUNNEL_CACHE"] = str(own)
    return env


def shell(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=cwd, env=environment(cwd.parent),
                          capture_output=True, text=True, timeout=TIMEOUT)


def explain(what: str, result: subprocess.CompletedProcess) -> str:
    return (f"{what}\nexit code {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n"
            f"--- stderr\n{result.stderr[-3000:]}")


def run_block(block: Block, cwd: Path, scratch: Path) -> None:
    if block.lang == "python":
        script = scratch / f"snippet_{block.line}.py"
        script.write_text(block.code + "\n", encoding="utf-8")
        result = subprocess.run([sys.executable, str(script)], cwd=cwd, env=environment(scratch), capture_output=True,
                                text=True, timeout=TIMEOUT)
        assert result.returncode == 0, explain(f"{block.name}: the Python block failed", result)
    elif block.lang in ("bash", "sh"):
        result = shell(block.code, cwd)
        assert result.returncode == 0, explain(f"{block.name}: the shell block failed", result)
    else:
        for command, output in console_commands(block.code):
            result = shell(command, cwd)
            shown_error = next((line for line in output if line.startswith("error:")), None)
            if shown_error is None:
                assert result.returncode == 0, explain(f"{block.name}: `{command}` failed", result)
            else:
                assert result.returncode != 0, explain(f"{block.name}: `{command}` should fail", result)
                assert shown_error in result.stderr.splitlines(), explain(
                    f"{block.name}: `{command}` no longer prints the error shown:\n{shown_error}", result)


def needs_shared(block: Block) -> bool:
    return "../shared/" in block.code


@pytest.mark.parametrize("block", [
    pytest.param(block, id=block.name, marks=[pytest.mark.model] if "model" in block.tags else [])
    for block in RUNNABLE])
def test_block_runs(block: Block, tmp_path: Path) -> None:
    if block.skip_reason:
        pytest.skip(f"{block.name} {block.skip_reason}")
    chain = [block]
    while (before := prerequisite(chain[-1])) is not None:
        chain.append(before)
    if any(b.skip_reason for b in chain):
        pytest.skip(f"{block.name} continues a block that is skipped")
    if any(needs_shared(b) for b in chain) and not (SHARED / "data").is_dir():
        pytest.skip(f"{block.name} reads ../shared/data, which is absent")
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)
    for b in reversed(chain):
        run_block(b, cwd, tmp_path)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=lambda b: b.name)
def test_json_block_parses(block: Block) -> None:
    json.loads(block.code)


def test_every_block_says_what_it_is() -> None:
    """A block without a known language, or with an unknown tag, would escape the tests unnoticed."""
    for block in BLOCKS:
        assert block.lang in RUN | NOT_RUN, f"{block.name}: a ```{block.lang} block; use one of {sorted(RUN | NOT_RUN)}"
        assert block.tags <= TAGS, f"{block.name}: unknown snippet tags {sorted(block.tags - TAGS)}"
        assert not block.tags or block.lang in RUN, f"{block.name}: only a runnable block takes snippet tags"
        if "continues" in block.tags:
            assert prerequisite(block) is not None, f"{block.name}: continues no block before it"


def test_blocks_that_load_models_say_so() -> None:
    """An untagged block runs with the unit tests, which load no model."""
    for block in RUNNABLE:
        if block.tags & {"model", *SKIPS}:
            continue
        commands = ([command for command, output in console_commands(block.code)
                     if not any(line.startswith("error:") for line in output)]  # refused before any model loads
                    if block.lang == "console" else [block.code])
        for command in commands:
            assert not MODEL_COMMAND.search(command), f"{block.name} loads a model: tag it `<!-- snippet: model -->`"


def test_model_blocks_are_few() -> None:
    model = [b.name for b in RUNNABLE if "model" in b.tags and not b.skip_reason]
    assert len(model) <= MAX_MODEL_BLOCKS, f"{len(model)} blocks load models: {model}"


def test_the_readme_setup_is_what_ci_runs() -> None:
    """The README's two commands: one sets up and answers, one sets up and runs every test, as CI does."""
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    setup = "\n".join(b.code for b in BLOCKS if b.page.name == "README.md" and "setup" in b.tags)
    assert ci[-1] in setup.splitlines()
    assert any(line.startswith("bash scripts/setup.sh && .venv/bin/ragfunnel ask ") for line in setup.splitlines())


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower().replace("`", "")
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def headings(page: Path) -> set[str]:
    inside, found = False, set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def test_links_between_pages_resolve() -> None:
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for match in LINK.finditer(text):
            target = match["target"]
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            assert resolved.exists(), f"{page.name}: the link {target} names a missing file"
            if anchor and resolved.suffix == ".md":
                assert anchor in headings(resolved), f"{page.name}: the link {target} names a missing heading"
