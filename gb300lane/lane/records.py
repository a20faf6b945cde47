"""Instance records: one booted recipe (main + sidecar) as `<state>/lane/instances/<instance>.json`.

The record keeps what a later command needs without the recipe file: the
resolved recipe, the runtime, the container names, the run id and the state
of the last transition (booting, up, failed, interrupted, stopped). Container
liveness is always asked of the runtime; the record never claims it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from gb300lane import paths
from gb300lane.errors import StateError
from gb300lane.fsio import atomic_write, dumps_json, quarantine
from gb300lane.lane.report import Baseline
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.names import name_problem

log = logging.getLogger(__name__)

InstancePhase = Literal["booting", "up", "failed", "interrupted", "stopped"]


class InstanceRecord(FrozenModel):
    """What `up` created, as recorded."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    name: str = Field(description="Instance name, <lane>-<arm or recipe>.")
    lane: str = Field(description="Lane name.")
    recipe: str = Field(description="Recipe name.")
    arm: str | None = Field(default=None, description="Arm given with --name.")
    runtime: str = Field(description="process or docker.")
    fingerprint: str = Field(description="Recipe fingerprint.")
    endpoint: str = Field(description="Base URL of the OpenAI API.")
    port: int = Field(description="Main container port.")
    served_model: str = Field(description="Served model name.")
    dark: bool = Field(description="Booted dark.")
    run: str = Field(description="Run id of the last up.")
    containers: tuple[str, ...] = Field(description="Container names, main first.")
    extra_health: tuple[str, ...] = Field(default=(), description="Readiness URLs beyond the main /health (sidecar).")
    check_keys: tuple[str, ...] = Field(default=(), description="Flag-check keys used at boot.")
    baseline: Baseline | None = Field(default=None, description="What the flag-check keys were chosen against.")
    recipe_json: dict[str, Any] = Field(description="The resolved recipe, so restarts check against what booted.")
    phase: InstancePhase = Field(description="Outcome of the last transition.")
    created_at: float = Field(description="Unix time of the up.")
    updated_at: float = Field(description="Unix time of the last change.")
    report: str | None = Field(default=None, description="Path of the last boot report.")
    detail: str = Field(default="", description="Why the phase is what it is.")
    held: str | None = Field(
        default=None,
        description="What the layer above recorded this instance as holding (e.g. production), one of the witnesses "
        "it keeps of its own records; the lane stores it and never reads a role from it.",
    )
    held_by: int | None = Field(default=None, description="The record of the layer above that set `held` (its number).")


def instances_dir() -> Path:
    return paths.state_dir() / "lane" / "instances"


def quarantine_dir() -> Path:
    return paths.state_dir() / "lane" / "quarantine"


def check_name(name: str) -> str:
    """`name` itself when it is an instance name; StateError otherwise (it becomes a file name in the state directory)."""
    problem = name_problem(name, "instance name")
    if problem:
        raise StateError(problem)
    return name


def record_path(name: str) -> Path:
    """Where an instance's record lives; the name is checked, so no path ever leaves the instances directory."""
    return instances_dir() / f"{check_name(name)}.json"


def save(
    rec: InstanceRecord, *, phase: InstancePhase | None = None, detail: str | None = None, report: str | None = None
) -> InstanceRecord:
    """Write the record (with the changes given) atomically; returns what was written."""
    changes: dict[str, object] = {"updated_at": time.time()}
    if phase is not None:
        changes["phase"] = phase
    if detail is not None:
        changes["detail"] = detail
    if report is not None:
        changes["report"] = report
    rec = rec.model_copy(update=changes)
    atomic_write(record_path(rec.name), dumps_json(rec.model_dump(mode="json")))
    return rec


def load(name: str) -> InstanceRecord | None:
    """The record of instance `name`; None when there is none, or when it was unreadable and is now quarantined.

    One bad record must not stop the commands that read the others: it is moved
    to the quarantine folder with a note, a warning says what was found and
    where it went, and the instance's containers (if any) are still found by
    their labels as an unrecorded leftover. A name that is not an instance name
    never has a record (e.g. a leftover container labelled with a path): nothing
    is read outside the instances directory.
    """
    if name_problem(name) is not None:
        return None
    path = record_path(name)
    try:
        return InstanceRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        found = format_validation_error(exc, first_only=True, missing="missing")
    except (OSError, ValueError) as exc:
        found = f"{type(exc).__name__}: {exc}"
    try:
        moved = quarantine(path, quarantine_dir(), f"unreadable instance record ({found})")
    except FileNotFoundError:
        return None  # another command moved it first
    log.warning(
        "%s: unreadable instance record (%s); moved to %s. Any containers it had are still found by their "
        "labels: `gb300lane status` lists them as unrecorded; delete the moved file once you have read it",
        path,
        found,
        moved,
    )
    return None


def quarantined() -> list[str]:
    """What the quarantine folder holds, one line each: the file and why it was moved."""
    folder = quarantine_dir()
    if not folder.is_dir():
        return []
    out = []
    for note in sorted(folder.glob("*.why.txt")):
        try:
            why = note.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            why = "(the note cannot be read)"
        out.append(f"{note.with_name(note.name.removesuffix('.why.txt'))}: {why}")
    return out


def load_all() -> list[InstanceRecord]:
    folder = instances_dir()
    if not folder.is_dir():
        if folder.exists() or folder.is_symlink():
            raise StateError(
                f"{folder}: not a directory (the instance records live in it); move it aside and run the command "
                "again: the instances' containers are still found by their labels"
            )
        return []
    names = [p.stem for p in sorted(folder.glob("*.json")) if name_problem(p.stem) is None]
    return [rec for name in names if (rec := load(name)) is not None]


def hold(name: str, held: str | None, by: int) -> bool:
    """Mark instance `name`'s record as holding `held` (None: nothing), set by record `by`; False when it has no record."""
    rec = load(name)
    if rec is None:
        return False
    if rec.held != held or rec.held_by != by:
        save(rec.model_copy(update={"held": held, "held_by": by}))
    return True


def holds() -> dict[str, tuple[str, int, Path]]:
    """Instance -> (what it holds, the record that set it, the record file), for every readable record with a mark."""
    return {rec.name: (rec.held, rec.held_by or 0, record_path(rec.name)) for rec in load_all() if rec.held}


def delete(name: str) -> None:
    if name_problem(name) is None:
        record_path(name).unlink(missing_ok=True)
