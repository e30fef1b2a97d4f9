"""The error hierarchy. Every message names the bad value and how to fix it.

A message that names an option marks it with :func:`option`; each front end spells it its own way
(:meth:`RagfunnelError.spelled`): ``budget`` in Python (``str(error)``), ``--budget`` on the command line,
``options.budget`` over HTTP. The library never spells a command-line flag.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_OPTION = re.compile("\x1e([a-z][a-z0-9_]*)\x1f")


def option(name: str) -> str:
    """Option ``name`` inside an error message, to be spelled by the front end that shows it."""
    return f"\x1e{name}\x1f"


def python_spelling(name: str) -> str:
    return name


def spelled_plainly(message: str) -> str:
    """``message`` with every :func:`option` in it written by its name (a warning logged beneath any front end)."""
    return _OPTION.sub(lambda m: m.group(1), message)


class RagfunnelError(Exception):
    """Base class: anything ragfunnel raises on purpose."""

    def spelled(self, spell: Callable[[str], str]) -> str:
        """The message with every :func:`option` written by ``spell`` (a front end's spelling)."""
        return _OPTION.sub(lambda m: spell(m.group(1)), super().__str__())

    def __str__(self) -> str:
        return self.spelled(python_spelling)

    def marked(self) -> str:
        """The message with its options still marked: for a new error that wraps this one."""
        return self.spelled(option)


class ConfigError(RagfunnelError):
    """A bad option: unknown name, impossible value, conflicting settings."""


class InputError(RagfunnelError):
    """Bad user data: empty or binary context, empty question, malformed rows."""


class ModelError(RagfunnelError):
    """A model file is missing, corrupt, or cannot be loaded."""


class BackendUnavailable(RagfunnelError):
    """A backend cannot be reached or keeps failing (server down, extra not installed)."""


class MissingExtra(BackendUnavailable):
    """An optional dependency is not installed."""

    def __init__(self, module: str, extra: str):
        super().__init__(
            f"the optional dependency '{module}' is not installed; "
            f"install it with: pip install 'ragfunnel[{extra}]'"
        )
        self.module, self.extra = module, extra

    def __reduce__(self) -> tuple:
        """Rebuilt from its two names, so it survives the trip back from a Ray worker."""
        return (MissingExtra, (self.module, self.extra))


class RunBusy(ConfigError):
    """Another process is writing the same run (its lock is held)."""


class Interrupted(RagfunnelError):
    """A long run was stopped by Ctrl-C or SIGTERM; its message says how many rows are saved."""

    exit_code = 130
