"""The boot report: what booted, how long it took, and every check with its evidence.

Written as JSON under `<state>/lane/boots/` (write-once, one file per boot,
restarts included), and shown as one screen of text.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from gb300lane import __version__, paths
from gb300lane.errors import StateError
from gb300lane.fsio import dumps_json, write_once
from gb300lane.lane.checks import CheckResult
from gb300lane.lane.provenance import Provenance
from gb300lane.models import FrozenModel, format_validation_error

_MARK = {"pass": "PASS", "fail": "FAIL", "unknown": "----"}


BaselineKind = Literal["given", "last_boot", "parent", "keys", "none"]


class Baseline(FrozenModel):
    """What a boot's flag check compared the recipe with (named in the boot report)."""

    kind: BaselineKind = Field(
        description="given: a recipe the caller named (production, a card's control) on the "
        "same lane; last_boot: this recipe as the lane last booted it; parent: the recipe it "
        "extends; keys: the caller gave the keys; none: nothing to compare with."
    )
    recipe: str | None = Field(default=None, description="The baseline recipe's name (None for keys and none).")
    role: str | None = Field(
        default=None, description="What the caller said the given recipe is (production, control)."
    )
    report: str | None = Field(default=None, description="last_boot: the boot report the recipe was read from.")
    skipped: str | None = Field(default=None, description="A recipe the caller named that was not used, and why.")

    def label(self) -> str:
        """`production local-v26`, `the lane's last boot of cpu-v26`, `parent v26`, ...: for a person."""
        if self.kind == "given":
            return f"{self.role or 'recipe'} {self.recipe}"
        if self.kind == "last_boot":
            return f"the lane's last boot of {self.recipe}"
        if self.kind == "parent":
            return f"parent {self.recipe}"
        if self.kind == "keys":
            return "the keys the caller gave"
        return "no baseline"


#: Fields added since schema 1 that a report leaves out when it has none (older reports keep their bytes).
_OPTIONAL = ("provenance", "baseline", "recipe_json")


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
    expected_boot_seconds: float | None = Field(
        default=None, description="What earlier boots of this fingerprint took."
    )
    engine_boot_seconds: float | None = Field(
        default=None,
        description="The engine's own logged boot (weights + torch.compile + init engine), in the engine's seconds.",
    )
    checks: tuple[CheckResult, ...] = Field(description="Every check, in order.")
    path: str | None = Field(default=None, description="Where this report is stored.")
    provenance: Provenance | None = Field(
        default=None,
        description="What ran, read from what ran (image, engine "
        "version, installed vLLM/torch and patches, checkpoints, host).",
    )
    baseline: Baseline | None = Field(default=None, description="What the flag check compared the recipe with.")
    recipe_json: dict[str, Any] | None = Field(
        default=None,
        description="The resolved recipe booted (secrets as "
        "digests): the next boot of it names the keys changed since.",
    )

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in _OPTIONAL:
            if data.get(key) is None:
                data.pop(key, None)
        return data

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
        if self.provenance is not None:
            lines.extend(provenance_lines(self.provenance))
        if self.baseline is not None:
            lines.append(
                f"  flags checked against {self.baseline.label()}"
                + (f" ({self.baseline.skipped})" if self.baseline.skipped else "")
            )
        for c in self.checks:
            lines.append(f"  {_MARK[c.status]}  {c.name:<16} {c.summary}")
        verdict = (
            "all checks pass"
            if all(c.status == "pass" for c in self.checks)
            else ("some checks FAILED" if not self.ok else "no failures; some checks unknown")
        )
        lines.append(f"  {verdict}" + (f"; report {self.path}" if self.path else ""))
        return "\n".join(lines)


def provenance_lines(p: Provenance) -> list[str]:
    """The provenance as a few lines of the report's text."""
    out = []
    if p.image is not None:
        digest = ", ".join(p.image.repo_digests) or "no repo digest"
        pin = "" if p.image.pinned is None else f"; pin {'held' if p.image.pin_ok else 'NOT held'}"
        out.append(f"  image {p.image.ref}: id {p.image.id} ({digest}{pin})")
    eng = f"engine reports {p.engine.version or '?'}" + (f" ({p.engine.name})" if p.engine.name else "")
    if p.installed is not None:
        i = p.installed
        parts = [x for x in (i.vllm, f"torch {i.torch}" if i.torch else None) if x]
        if i.patches:
            parts.append("patches " + ", ".join(f"{x.patch}{'' if x.as_recorded else ' (CHANGED)'}" for x in i.patches))
        if i.engine_source:
            parts.append(f"engine source {i.engine_source}")
        eng += "; " + ("; ".join(parts) or "no vLLM installed") + f" under {i.python}"
    out.append("  " + eng)
    for c in p.checkpoints:
        rev = f" revision {c.revision[:16]}" if c.revision else ""
        out.append(
            f"  {c.role} {c.path}: config {str(c.config_sha256)[:12]} tokenizer {str(c.tokenizer_sha256)[:12]} "
            f"weights {str(c.weight_index_sha256)[:12]}{rev}"
        )
    h = p.host
    gpus = ", ".join(g.name for g in h.gpus) or "no GPU"
    extra = f", driver {h.driver}, CUDA {h.cuda}" if h.nvidia_smi else ""
    mem = f"{h.memory_bytes / 2**30:.1f} GiB" if h.memory_bytes else "? GiB"
    out.append(f"  host: {h.cpu_model or '?'} x{h.cpu_count or '?'}, {mem}, {gpus}{extra}")
    if p.missing:
        out.append(f"  provenance not read: {', '.join(sorted(p.missing))}")
    return out


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


def newest_report(match: Callable[[BootReport], bool]) -> BootReport | None:
    """The newest stored report `match` accepts (unreadable reports are passed over: `status` and the card chain
    name them)."""
    newest: BootReport | None = None
    for path in boots_dir().glob("*.json"):
        try:
            report = read_report(path)
        except StateError:
            continue
        if match(report) and (newest is None or report.started_at >= newest.started_at):
            newest = report
    return newest


def latest_recipe_boot(recipe: str, lane: str) -> BootReport | None:
    """The newest stored report of a boot of `recipe` on `lane` that recorded the recipe it booted."""
    return newest_report(lambda r: r.recipe == recipe and r.lane == lane and r.recipe_json is not None)


def latest_report(instance: str) -> BootReport | None:
    """The newest stored report of an instance."""
    newest: BootReport | None = None
    for path in boots_dir().glob(f"{instance}-*.json"):
        report = read_report(path)
        if report.instance == instance and (newest is None or report.started_at >= newest.started_at):
            newest = report
    return newest
