"""The CLI in this process (typer's runner), answering like `subprocess.run([python, -m, gb300lane, ...])`.

For tests where the process boundary is not what is tested: no interpreter to start, no package to import
again. `cli(*args, env=...)` returns `returncode`, `stdout` and `stderr` as a finished process would; an
exception the CLI did not turn into a message ends its stderr with the traceback, as Python would print it,
so a test that asserts "Traceback" is absent still can fail. `env` values replace the process environment's
for the call (None removes a variable); the terminal is 400 columns wide unless `env` says otherwise.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass

from typer.testing import CliRunner

from gb300lane.cli.main import app


@dataclass(frozen=True)
class Ran:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, env: Mapping[str, str | None] | None = None) -> Ran:
    """`gb300lane ARGS` run in this process."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400", **(env or {})})
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return Ran(tuple(args), result.exit_code, result.stdout, stderr)
