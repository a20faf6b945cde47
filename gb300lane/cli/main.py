"""The `gb300lane` command: one app, each command group registered from its own module.

This is the one place where library errors become CLI messages and exit
codes: `LaneGroup.invoke` wraps every command (nested groups included), so
the console script and an in-process `CliRunner` behave alike. A `LaneError`
becomes one red line on stderr and its `exit_code` (1); a pydantic
`ValidationError` that escaped a loader becomes its dotted field paths.
Usage errors stay typer's own (exit code 2). The library's warnings (logged
on the `gb300lane` logger) become one yellow line each.

Help is click's plain layout (it wraps to the terminal, at most 80 columns,
and never cuts an option's name), with names rather than types as metavars:
`--port PORT`, `up RECIPE`, and nothing after a flag. Every command module
imports its library when the command runs, so `gb300lane --help` loads
neither pydantic's models nor numpy.

Start-up: the console script builds only the command module its command
line names (`GROUPS`; `gb300lane status` never imports the card or bench
commands). Parameter values convert by typer's own converters. `app` is
every command, for tests and tools.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperGroup, TyperOption

from gb300lane import __version__
from gb300lane.cli.common import err_console, fail
from gb300lane.errors import LaneError
from gb300lane.fsio import STORAGE_ERRNOS, storage_error


class _Warnings(logging.Handler):
    """The library's warnings (a quarantined record, ...) as one yellow line each on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(
            f"[yellow]warning:[/] {escape(record.getMessage())}", markup=True, highlight=False, soft_wrap=True
        )


_LIBRARY_LOG = logging.getLogger("gb300lane")
if not any(isinstance(h, _Warnings) for h in _LIBRARY_LOG.handlers):
    _LIBRARY_LOG.addHandler(_Warnings(logging.WARNING))
    _LIBRARY_LOG.propagate = False


class _Argument(TyperArgument):
    """An argument shown by its name alone: `RECIPE`, `[RECIPE]` when optional; no `<str>` beside it."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        # click's own hook for the usage line (typer's brace style differs between its releases).
        raw = (self.metavar or (self.name or "value").upper()).strip("[]")  # `[TARGET]` is bracketed once, not twice
        name = raw if self.required else f"[{raw}]"
        return [name + ("..." if self.nargs != 1 else "")]


#: The end of a sentence: a full stop before a capital (not "e.g. v27").
_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z])")


def _stems(dirs: tuple[Path, ...], incomplete: str) -> list[str]:
    return sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml") if p.stem.startswith(incomplete)})


def _complete_recipe(_ctx: Any, _param: Any, incomplete: str) -> list[str]:
    """Shell completion: the recipe names here and shipped (file stems; nothing is loaded)."""
    from gb300lane import paths

    return _stems(paths.recipe_dirs(), incomplete)


def _complete_card(_ctx: Any, _param: Any, incomplete: str) -> list[str]:
    """Shell completion: the card names here and shipped."""
    from gb300lane import paths

    return _stems(paths.card_dirs(), incomplete)


def _completion_for(path: tuple[str, ...], param: Any) -> Any:
    """Which names complete a parameter: recipes for a RECIPE (and `render`'s, `recipes`' and `--lane`), cards for a CARD."""
    if param.metavar == "CARD":
        return _complete_card
    takes_recipe = isinstance(param, TyperArgument) and path[:1] in (("render",), ("recipes",))
    if param.metavar == "RECIPE" or takes_recipe or "--lane" in getattr(param, "opts", ()):
        return _complete_recipe
    return None


def _tidy_help(command: Any, path: tuple[str, ...] = ()) -> None:
    """Name every value a command takes by what it is, not by its Python type, all the way down the tree.

    Recipe and card parameters also complete in the shell (typer's completion hook, set where none is).
    """
    for param in getattr(command, "params", ()):
        if isinstance(param, TyperArgument):
            if param.metavar is None:
                param.metavar = (param.name or "value").upper()
            # typer builds the argument objects itself; how one shows in help (`<str>`, `{name}`) is its class's.
            param.__class__ = _Argument
        elif isinstance(param, TyperOption) and param.metavar is None and not (param.is_flag or param.count):
            choices = _choices(param)
            if choices:
                param.metavar = "[" + "|".join(choices) + "]"
            else:
                param.metavar = (param.name or "value").upper()
        complete = _completion_for(path, param) if isinstance(param, (TyperArgument, TyperOption)) else None
        if complete is not None and getattr(param, "_custom_shell_complete", None) is None:
            param._custom_shell_complete = complete
    for name, sub in getattr(command, "commands", {}).items():
        if sub.short_help is None and sub.help:
            # click would cut the listing's line at the column's width ("..."); the first sentence, wrapped, reads whole.
            first = _SENTENCE_END.split(sub.help.strip().split("\n\n", 1)[0], maxsplit=1)[0]
            sub.short_help = " ".join(first.split()).rstrip(".") + "."
        _tidy_help(sub, (*path, name))


def _choices(param: TyperOption) -> list[str]:
    """The values an option of choices takes: typer 0.29 describes them (`type_descriptor`), earlier typers hand
    click a `Choice` type."""
    desc = getattr(param, "type_descriptor", None)
    found = (
        desc.choices if desc is not None and desc.is_choice else getattr(getattr(param, "type", None), "choices", None)
    )
    return [str(getattr(c, "value", c)) for c in found or ()]


def _validation_error(exc: Exception) -> str | None:
    """The dotted field paths of a pydantic ValidationError that escaped a loader (pydantic is loaded by then)."""
    import sys

    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(exc, pydantic.ValidationError):
        return None
    from gb300lane.models import format_validation_error

    return format_validation_error(exc)


class LaneGroup(TyperGroup):
    """The top-level group: runs a command and maps what the library raised to a message and an exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _tidy_help(self)

    # typer.Context is the click context of whichever click typer uses (vendored in recent typer).
    def invoke(self, ctx: typer.Context) -> object:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except LaneError as exc:
            fail(str(exc), exc.exit_code)
        except OSError as exc:
            # A write the storage refused somewhere no library boundary translated it: still one line.
            if exc.errno in STORAGE_ERRNOS:
                fail(str(storage_error(None, exc)), 1)
            raise
        except Exception as exc:
            message = _validation_error(exc)
            if message is None:
                raise
            fail(message, 1)


#: Each command module (`gb300lane.cli.<module>`), in the order its commands are listed, and the top-level
#: commands and groups it registers. A command line that names one of them loads that module alone.
GROUPS: dict[str, tuple[str, ...]] = {
    "recipes": ("render", "recipes"),
    "spec": ("spec",),
    "engine": ("engine",),
    "lane": ("up", "down", "status", "logs", "engine-image"),
    "bench": ("smoke", "bench"),
    "card": ("card",),
    "promote": ("promote", "rollback", "history", "prune"),
    "verify": ("verify",),
    "evidence": ("evidence",),
    "metrics": ("metrics",),
    "workload": ("workload",),
}


def installed_version() -> str:
    """The version pip recorded for the installed distribution; the package's own where none is installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gb300lane")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gb300lane {installed_version()}")
        raise typer.Exit()


def _root(
    _version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        expose_value=False,
        callback=_print_version,
        help="Print the version and exit.",
    ),
) -> None:
    """Run one LLM serving lane on evidence."""


def version(as_json: bool = typer.Option(False, "--json", help="Print the name and version as JSON.")) -> None:
    if as_json:
        from gb300lane.cli.common import print_json

        print_json({"name": "gb300lane", "version": installed_version()})
        return
    typer.echo(installed_version())


def build_app(modules: Iterable[str] = tuple(GROUPS)) -> typer.Typer:
    """The `gb300lane` app with the commands of these modules (of GROUPS), and `version`."""
    built = typer.Typer(
        name="gb300lane",
        cls=LaneGroup,
        help="Run one LLM serving lane on evidence: recipes, boot checks, bench windows, cards, promotion.",
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
    )
    built.callback()(_root)
    for module in modules:
        importlib.import_module(f"gb300lane.cli.{module}").register(built)
    built.command("version", help="Print the tool version.")(version)
    return built


@functools.cache
def full_app() -> typer.Typer:
    """Every command (built once): the app tests and tools import as `gb300lane.cli.main.app`."""
    return build_app()


if TYPE_CHECKING:
    app: typer.Typer
else:

    def __getattr__(name: str) -> typer.Typer:
        if name == "app":
            return full_app()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_for(argv: Sequence[str]) -> typer.Typer:
    """The app that runs `argv`: the one module its command is in, or `version` alone; every command otherwise.

    What a command does, prints and exits with is the same either way (its usage line and help included); the
    top-level help, a misspelt command's suggestions and shell completion see every command.
    """
    word = argv[0] if argv else ""
    if word == "version":
        return build_app(())
    for module, names in GROUPS.items():
        if word in names:
            return build_app((module,))
    return full_app()


def main() -> None:
    """Console-script entry point."""
    # pydantic looks for third-party plugins the first time it builds a model, by reading the entry points of
    # every installed distribution: tens of milliseconds of each command. The tool's models run none; a value
    # the user set (some plugins disabled, or none) is theirs.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    app_for(sys.argv[1:])()
