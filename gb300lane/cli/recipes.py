"""CLI group: recipes (placeholder until its issue lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
