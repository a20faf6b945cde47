"""The `gb300lane` command: one app, each command group registered from its own module."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from gb300lane import __version__
from gb300lane.cli import bench, card, engine, lane, promote, recipes, spec
from gb300lane.cli.common import fail, format_validation_error
from gb300lane.errors import LaneError

app = typer.Typer(
    name="gb300lane",
    help="Run one LLM serving lane on evidence: recipes, boot checks, bench windows, cards, promotion.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Run one LLM serving lane on evidence."""


for module in (recipes, spec, engine, lane, bench, card, promote):
    module.register(app)


@app.command("version", help="Print the tool version.")
def version() -> None:
    typer.echo(__version__)


def main() -> None:
    """Console-script entry point: maps library errors to one line and exit code 1.

    Usage errors are typer's own (exit code 2); everything the library raises
    as LaneError becomes one red line on stderr, without a traceback.
    """
    try:
        app()
    except LaneError as exc:
        _exit_with(str(exc), exc.exit_code)
    except ValidationError as exc:
        _exit_with(format_validation_error(exc), 1)


def _exit_with(message: str, code: int) -> None:
    try:
        fail(message, code)
    except typer.Exit as done:
        sys.exit(done.exit_code)
