"""CLI command `metrics`: the lane's own facts in Prometheus text format (node_exporter's textfile collector)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gb300lane.cli.common import err_console


def metrics_cmd(
    textfile: Annotated[
        Path | None,
        typer.Option(
            "--textfile",
            help="Write here for node_exporter's textfile collector (a .prom file in its "
            "--collector.textfile.directory; replaced atomically) instead of printing.",
        ),
    ] = None,
    systemd: Annotated[
        Path | None,
        typer.Option(
            "--systemd",
            help="Instead, write a systemd service and timer into this directory that run "
            "`metrics --textfile PATH` every --every seconds, with this state directory and working "
            "directory (templates gb300lane-metrics.service and .timer).",
        ),
    ] = None,
    every: Annotated[int, typer.Option("--every", min=1, help="Seconds between the timer's writes (--systemd).")] = 60,
) -> None:
    """Print the lane's facts for Prometheus: production recipe and fingerprint, verdicts, promotions, rollbacks, boots."""
    if systemd is not None:
        if textfile is None:
            raise typer.BadParameter(
                "--systemd writes units that keep a textfile fresh: name it with --textfile PATH",
                param_hint="--systemd",
            )
        from gb300lane import paths
        from gb300lane.promote.units import write_systemd_units

        env = {
            "GB300LANE_STATE_DIR": str(paths.state_root().resolve()),
            "GB300LANE_RESULTS_DIR": str(paths.results_dir().resolve()),
        }
        written = write_systemd_units(
            systemd,
            textfile.resolve(),
            every_s=every,
            workdir=Path.cwd(),
            program=[sys.executable, "-m", "gb300lane"],
            environment=env,
        )
        for path in written:
            err_console.print(f"wrote {path}", highlight=False)
        return
    from gb300lane.promote.exposition import lane_facts_text, write_textfile

    if textfile is None:
        sys.stdout.write(lane_facts_text())
        return
    write_textfile(textfile)
    err_console.print(f"lane facts written to {textfile}", highlight=False)


def register(app: typer.Typer) -> None:
    """Attach `metrics` to the top-level app."""
    app.command(
        "metrics",
        help="Print the lane's facts in Prometheus text format (production, verdicts, promotions, "
        "rollbacks, boot seconds, compile-cache hits and misses).",
    )(metrics_cmd)
