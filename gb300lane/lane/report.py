"""The boot report: what booted, how long it took, and every check with its evidence.

Written as JSON under `<state>/lane/boots/` (write-once, one file per boot,
restarts included), and shown as one screen of text.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from gb300lane import __version__, paths
from gb300lane.fsio import dumps_json, write_once
from gb300lane.lane.checks import CheckResult
from gb300lane.errors import StateError
from gb300lane.models import FrozenModel, format_validation_error

_MARK = {"pass": "PASS", "fail": "FAIL", "unknown": "----"}


class BootReport(FrozenModel):
    """One boot of one instance."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    tool_version: str = Field(default=__version__, description="gb300lane version that booted it.")
    python: str = Field(default_factory=lambda: platform.python_version(), description="Python version.")
    platform: str = Field(default_factory=lambda: sys.platform, description="Host platform.")
    instance: str = Field(description="Instance name, <lane>-<arm or recipe>.")
    lane: str = Field(description="Lane name.")
    recipe: str = Field(description="Recipe booted.")
    arm: str | None = Field(default=None, description="Arm name given with --name (None: the recipe name).")
    run: str = Field(description="Run id labelled on the containers.")
    runtime: str = Field(description="process or docker.")
    fingerprint: str = Field(description="Recipe fingerprint over image.hash_inputs.")
    compile_hash: str | None = Field(default=None, description="Compile hash the log showed.")
    endpoint: str = Field(description="Base URL of the OpenAI API.")
    served_model: str = Field(description="Model name the API serves.")
    dark: bool = Field(description="Booted dark (loopback only).")
    containers: tuple[str, ...] = Field(description="Container names, main first.")
    started_at: float = Field(description="Unix time the containers were started.")
    boot_seconds: float = Field(description="Containers started to ready, as the tool measured it.")
    expected_boot_seconds: float | None = Field(default=None, description="What earlier boots of this fingerprint took.")
    engine_boot_seconds: float | None = Field(
        default=None,
        description="The engine's own logged boot (weights + torch.compile + init engine), in the engine's seconds.",
    )
    checks: tuple[CheckResult, ...] = Field(description="Every check, in order.")
    path: str | None = Field(default=None, description="Where this report is stored.")

    @property
    def ok(self) -> bool:
        """No check failed (unknown is not a failure: it is reported as such)."""
        return all(c.status != "fail" for c in self.checks)

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_text(self) -> str:
        """One screen: header, one line per check, and where the JSON is."""
        expected = f" (expected {self.expected_boot_seconds:.1f} s)" if self.expected_boot_seconds else ""
        lines = [
            f"{self.instance}: recipe {self.recipe} on {self.runtime}, {self.endpoint}"
            + (" [dark]" if self.dark else ""),
            f"  fingerprint {self.fingerprint}  compile hash {self.compile_hash or '?'}  run {self.run}",
            f"  ready in {self.boot_seconds:.2f} s{expected}",
        ]
        for c in self.checks:
            lines.append(f"  {_MARK[c.status]}  {c.name:<16} {c.summary}")
        verdict = "all checks pass" if all(c.status == "pass" for c in self.checks) else (
            "some checks FAILED" if not self.ok else "no failures; some checks unknown"
        )
        lines.append(f"  {verdict}" + (f"; report {self.path}" if self.path else ""))
        return "\n".join(lines)


def boots_dir() -> Path:
    return paths.state_dir() / "lane" / "boots"


def write_report(report: BootReport) -> BootReport:
    """Store the report write-once (a restart of the same run is a new file); returns it with `path` set."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(report.started_at))
    stem = f"{report.instance}-{report.run}-{stamp}"
    path = boots_dir() / f"{stem}.json"
    n = 1
    while path.exists():
        n += 1
        path = boots_dir() / f"{stem}-{n}.json"
    stored = report.model_copy(update={"path": str(path)})
    # Owner-only: a report names the lane's env and args (secrets only as keyed digests, never values).
    write_once(path, dumps_json(stored.model_dump(mode="json")), mode=0o400)
    return stored


def read_report(path: Path) -> BootReport:
    """One stored boot report; StateError naming the file and the fix when it does not read back."""
    try:
        return BootReport.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        found = format_validation_error(exc, first_only=True, missing="missing")
    except (OSError, ValueError) as exc:
        found = f"{type(exc).__name__}: {exc}"
    raise StateError(
        f"{path}: unreadable boot report ({found}); boot reports are write-once records: restore it from a backup, "
        f"or move it aside (`mv {path} {path}.bad`) and the instance's earlier report counts again"
    )


def latest_report(instance: str) -> BootReport | None:
    """The newest stored report of an instance."""
    newest: BootReport | None = None
    for path in boots_dir().glob(f"{instance}-*.json"):
        report = read_report(path)
        if report.instance == instance and (newest is None or report.started_at >= newest.started_at):
            newest = report
    return newest
