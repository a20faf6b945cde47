"""Instance records: one booted recipe (main + sidecar) as `<state>/lane/instances/<instance>.json`.

The record keeps what a later command needs without the recipe file: the
resolved recipe, the runtime, the container names, the run id and the state
of the last transition (booting, up, failed, interrupted, stopped). Container
liveness is always asked of the runtime; the record never claims it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from gb300lane import paths
from gb300lane.errors import StateError
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.models import FrozenModel

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
    recipe_json: dict[str, Any] = Field(description="The resolved recipe, so restarts check against what booted.")
    phase: InstancePhase = Field(description="Outcome of the last transition.")
    created_at: float = Field(description="Unix time of the up.")
    updated_at: float = Field(description="Unix time of the last change.")
    report: str | None = Field(default=None, description="Path of the last boot report.")
    detail: str = Field(default="", description="Why the phase is what it is.")


def instances_dir() -> Path:
    return paths.state_dir() / "lane" / "instances"


def save(rec: InstanceRecord, **changes: Any) -> InstanceRecord:
    rec = rec.model_copy(update={**changes, "updated_at": time.time()})
    atomic_write(instances_dir() / f"{rec.name}.json", dumps_json(rec.model_dump(mode="json")))
    return rec


def load(name: str) -> InstanceRecord | None:
    path = instances_dir() / f"{name}.json"
    try:
        return InstanceRecord.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (ValidationError, ValueError) as exc:
        raise StateError(f"{path}: unreadable instance record ({exc.__class__.__name__}); delete it to forget {name}") from exc


def load_all() -> list[InstanceRecord]:
    folder = instances_dir()
    if not folder.is_dir():
        return []
    return [rec for p in sorted(folder.glob("*.json")) if (rec := load(p.stem)) is not None]


def delete(name: str) -> None:
    (instances_dir() / f"{name}.json").unlink(missing_ok=True)
