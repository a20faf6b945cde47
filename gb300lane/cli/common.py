"""Shared CLI plumbing: the consoles, JSON output, and the one-line error exit."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

# Markup is off: what the consoles print (recipe descriptions, reasons, names, errors) is user text and is
# printed as text. A line that wants colour passes `markup=True` and escapes every value it interpolates.
console = Console(markup=False)
err_console = Console(stderr=True, markup=False)


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout, nothing else on it."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def fail(message: str, code: int = 1) -> NoReturn:
    """One red line on stderr, then exit. The message is printed as text: user input never becomes markup."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)
