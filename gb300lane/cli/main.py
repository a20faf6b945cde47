"""The `gb300lane` command: one app, each command group registered from its own module.

This is the one place where library errors become CLI messages and exit
codes: `LaneGroup.invoke` wraps every command (nested groups included), so
the console script and an in-process `CliRunner` behave alike. A `LaneError`
becomes one red line on stderr and its `exit_code` (1); a pydantic
`ValidationError` that escaped a loader becomes its dotted field paths.
Usage errors stay typer's own (exit code 2). The library's warnings (logged
on the `gb300lane` logger) become one yellow line each.
"""

from __future__ import annotations

import logging
from typing import Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from typer.core import TyperGroup

from gb300lane import __version__
from gb300lane.cli import bench, card, engine, lane, promote, recipes, spec, verify
from gb300lane.cli.common import err_console, fail
from gb300lane.errors import LaneError
from gb300lane.fsio import STORAGE_ERRNOS, storage_error
from gb300lane.models import format_validation_error


class _Warnings(logging.Handler):
    """The library's warnings (a quarantined record, ...) as one yellow line each on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(f"[yellow]warning:[/] {escape(record.getMessage())}", markup=True, highlight=False, soft_wrap=True)


_LIBRARY_LOG = logging.getLogger("gb300lane")
if not any(isinstance(h, _Warnings) for h in _LIBRARY_LOG.handlers):
    _LIBRARY_LOG.addHandler(_Warnings(logging.WARNING))
    _LIBRARY_LOG.propagate = False


class LaneGroup(TyperGroup):
    """The top-level group: runs a command and maps what the library raised to a message and an exit code."""

    # typer.Context is the click context of whichever click typer uses (vendored in recent typer).
    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except LaneError as exc:
            fail(str(exc), exc.exit_code)
        except ValidationError as exc:
            fail(format_validation_error(exc), 1)
        except OSError as exc:
            # A write the storage refused somewhere no library boundary translated it: still one line.
            if exc.errno in STORAGE_ERRNOS:
                fail(str(storage_error(None, exc)), 1)
            raise


app = typer.Typer(
    name="gb300lane",
    cls=LaneGroup,
    help="Run one LLM serving lane on evidence: recipes, boot checks, bench windows, cards, promotion.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Run one LLM serving lane on evidence."""


for module in (recipes, spec, engine, lane, bench, card, promote, verify):
    module.register(app)


@app.command("version", help="Print the tool version.")
def version() -> None:
    typer.echo(__version__)


def main() -> None:
    """Console-script entry point."""
    app()
