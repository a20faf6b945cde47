"""CLI command `metrics`: the lane's own facts in Prometheus text format (node_exporter's textfile collector)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gb300lane.cli.common import err_console


def metrics_cmd(
    textfile: Annotated[
        Optional[Path],
        typer.Option("--textfile", help="Write here for node_exporter's textfile collector (a .prom file in its "
                     "--collector.textfile.directory; replaced atomically) instead of printing."),
    ] = None,
) -> None:
    """Print the lane's facts for Prometheus: production recipe and fingerprint, verdicts, promotions, rollbacks, boots."""
    from gb300lane.promote.exposition import lane_facts_text, write_textfile

    if textfile is None:
        sys.stdout.write(lane_facts_text())
        return
    write_textfile(textfile)
    err_console.print(f"lane facts written to {textfile}", highlight=False)


def register(app: typer.Typer) -> None:
    """Attach `metrics` to the top-level app."""
    app.command("metrics", help="Print the lane's facts in Prometheus text format (production, verdicts, promotions, "
                "rollbacks, boot seconds, compile-cache hits and misses).")(metrics_cmd)
