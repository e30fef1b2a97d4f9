"""``ragfunnel read FILE...``: the text ragfunnel reads from files, with the marks its citations use (pages,
sheets, rows, slides) and the readers' warnings, so a user sees what a question will be answered from and why a
file gives nothing."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ragfunnel.cli.common import cli_spelling, document_options, read_limits, reading_bars
from ragfunnel.documents import SourceDocument, read_documents
from ragfunnel.documents.formats import SUPPORTED_LINE
from ragfunnel.errors import InputError
from ragfunnel.text.chunking import GROUP_SEPARATOR

HELP = f"""Print the text ragfunnel reads from FILES (and the files in folders) to stdout, with a [place] line where
the page, sheet, row or slide changes; warnings and refusals go to stderr, and the exit status is 1 if a file could
not be read. Reads {SUPPORTED_LINE}."""


@click.command(help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print each file's text with its map (sections: start, end, page, sheet, row, slide, OCR "
                   "confidence, label) and warnings, as JSON.")
@document_options
def read(files: tuple[Path, ...], as_json: bool, **given: Any) -> None:
    limits = read_limits(given)
    read_all, failed = [], False
    for path in files:
        try:
            with reading_bars():
                found = read_documents([path], limits)
        except InputError as e:
            click.echo(f"error: {e.spelled(cli_spelling(click.get_current_context()))}", err=True)
            failed = True
            continue
        for document in found:  # its warnings are logged to stderr as it is read
            if as_json:
                read_all.append(document.to_dict())
            else:
                sys.stdout.write(marked_text(document, heading=len(files) > 1 or len(found) > 1))
    if as_json:
        click.echo(json.dumps({"files": read_all}, ensure_ascii=False, indent=1))
    if failed:
        raise SystemExit(1)


def marked_text(document: SourceDocument, *, heading: bool) -> str:
    """The document's text with a ``[place]`` line before each stretch whose place (page, heading, sheet, slide)
    differs from the one before, a spreadsheet's rows each begun by ``[row N]`` (and a ``==> name <==`` line first
    when several files are printed). The separators between a sheet's groups of rows print as blank lines."""
    parts = [f"==> {document.name} <==\n"] if heading else []
    shown, end = "", 0
    for section in document.sections:
        parts.append(document.text[end:section.start].replace(GROUP_SEPARATOR, ""))
        place = replace(section, row=None).describe()
        if place and place != shown:
            if parts and not parts[-1].endswith("\n") and parts[-1]:
                parts.append("\n")
            parts.append(f"[{place}]\n")
            shown = place
        parts.append(("" if section.row is None else f"[row {section.row}] ")
                     + document.text[section.start:section.end])
        end = section.end
    parts.append(document.text[end:])
    return "".join(parts).rstrip("\n") + "\n"
