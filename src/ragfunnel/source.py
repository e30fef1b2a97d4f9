"""What an answer reads: exactly one source, checked here for every front end (the Python API, ``ragfunnel ask``,
``/v1/answer`` and MCP's ``answer``). Each front end takes some of the sources, under names of its own, so each
gives the sentence that refuses zero or two in those names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from ragfunnel.errors import ConfigError

Index = TypeVar("Index")  # how a front end names an index: a directory, an open index, one of the server's names


@dataclass(frozen=True, kw_only=True)
class Source(Generic[Index]):
    """Exactly one of ``context`` (a long text), ``files`` (documents or folders, read as one context),
    ``document`` (the id of a document the service stores) and ``index`` (a corpus index). ``refusal`` is the
    front end's sentence for zero or two sources, naming them as its caller writes them."""

    context: str | None = None
    files: Sequence[str | Path] | None = None
    document: str | None = None
    index: Index | None = None
    refusal: str = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if sum(given is not None for given in (self.context, self.files, self.document, self.index)) != 1:
            raise ConfigError(self.refusal)
