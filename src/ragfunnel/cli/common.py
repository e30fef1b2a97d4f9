"""What every ``ragfunnel`` command shares: library errors become one line on stderr and exit code 1."""

from __future__ import annotations

import sys
from typing import Any

import click

from ragfunnel.errors import RagfunnelError


class OneLineErrors:
    """Turns a RagfunnelError into ``error: <message>`` and exit code 1, without a traceback.

    Mixed into the top-level group and into command groups that tests also run on their own.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except RagfunnelError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


class Group(OneLineErrors, click.Group):
    pass


class Command(OneLineErrors, click.Command):
    pass
