"""Shared CLI plumbing: the consoles, JSON output, and the one-line error exit."""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

#: Width of output that is not a terminal: wide enough that no line or table is ever wrapped.
PIPE_WIDTH = 10_000


class LaneConsole(Console):
    """A console that wraps to the terminal it writes to, and not at all when its output is piped or redirected.

    Rich would wrap a pipe at 80 columns (or at the width of a terminal on stdin); output read by a program, a
    pager or an editor should keep its lines. Decided at each print, so a redirected stream is seen as one.
    """

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(PIPE_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    @property
    def soft_wrap(self) -> bool:
        return self._soft_wrap or not self.is_terminal

    @soft_wrap.setter
    def soft_wrap(self, value: bool) -> None:
        self._soft_wrap = value


# Markup and emoji codes are off: what the consoles print (recipe descriptions, reasons, names, errors) is user
# text and is printed as text (`:fire:` stays `:fire:`). A line that wants colour passes `markup=True` and escapes
# every value it interpolates.
console = LaneConsole(markup=False, emoji=False)
err_console = LaneConsole(stderr=True, markup=False, emoji=False)


def print_json(obj: object) -> None:
    """Machine-readable output on stdout, nothing else on it."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def fail(message: str, code: int = 1) -> NoReturn:
    """One red line on stderr, then exit. The message is printed as text: user input never becomes markup."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)
