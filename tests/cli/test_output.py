"""Output that is not a terminal keeps its lines: no hard wrap at 80 columns (or at a terminal's width on stdin)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from typer.testing import CliRunner

from gb300lane.cli.common import LaneConsole
from gb300lane.cli.main import app


def test_a_piped_table_keeps_every_row_on_one_line() -> None:
    rows = json.loads(CliRunner().invoke(app, ["recipes", "list", "--json"]).output)
    described = [r for r in rows if len(r["description"]) > 60]
    assert described, "no long description to check"
    for columns in ("40", "80"):
        text = CliRunner().invoke(app, ["recipes", "list"], env={"COLUMNS": columns}).output
        for r in described:
            whole = any(r["description"] in line for line in text.splitlines())
            assert whole, f"COLUMNS={columns}: {r['name']}'s row is wrapped:\n{text}"


def test_a_redirected_command_writes_long_lines_whole() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gb300lane", "recipes", "list"], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) > 100


def test_a_terminal_still_wraps_to_its_width() -> None:
    out = io.StringIO()
    console = LaneConsole(file=out, force_terminal=True, width=50, markup=False)
    console.print("word " * 40)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 50
    piped = LaneConsole(file=io.StringIO(), markup=False)
    assert not piped.is_terminal and piped.soft_wrap and piped.width > 1000
