"""Shared CLI plumbing: the console, JSON output, and error mapping."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console


console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout, nothing else on it."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def fail(message: str, code: int = 1) -> None:
    """One red line on stderr, then exit."""
    err_console.print(f"[bold red]error:[/] {message}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def format_validation_error(exc: ValidationError, source: str = "") -> str:
    """A pydantic error as dotted field paths with their messages, on one line."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}")
    prefix = f"{source}: " if source else ""
    return prefix + "; ".join(parts)
