"""What `workload list` and `workload stats` show: typed rows over the workloads found."""

from __future__ import annotations

from pydantic import Field

from gb300lane.errors import WorkloadError
from gb300lane.models import FrozenModel
from gb300lane.workloads.importing import ClassStats, class_stats
from gb300lane.workloads.store import load_workload, workload_names

#: The parts `workload stats --part` takes.
PARTS = ("all", "dev", "held-out")


class WorkloadRow(FrozenModel):
    name: str = Field(description="The workload.")
    folder: str = Field(description="Where it was found.")
    classes: tuple[str, ...] = Field(description="Its classes.")
    transcripts: int = Field(description="Transcripts in all.")
    dev: int = Field(description="Transcripts in the dev part (all when there is no split).")
    held_out: int = Field(description="Transcripts held out (0: no split).")
    content_sha256: str = Field(description="The content hash a registration freezes.")


def list_workloads() -> list[WorkloadRow]:
    """Every workload found, first match of each name."""
    rows = []
    for name in workload_names():
        w = load_workload(name)
        total = sum(len(v) for v in w.by_class.values())
        held = len(w.manifest.split.held_out_ids) if w.manifest.split is not None else 0
        rows.append(WorkloadRow(name=name, folder=str(w.folder), classes=w.classes, transcripts=total,
                                dev=total - held, held_out=held, content_sha256=w.manifest.content_sha256))
    return rows


def workload_stats(name: str, part: str = "all") -> tuple[ClassStats, ...]:
    """Per class figures of one part of a workload (all, dev or held-out)."""
    if part not in PARTS:
        raise WorkloadError(f"--part {part!r}: expected one of {', '.join(PARTS)}")
    w = load_workload(name)
    out = []
    for cls in w.classes:
        items = list(w.by_class[cls]) if part == "all" else w.transcripts(cls, held_out=part == "held-out")
        out.append(class_stats(cls, items))
    return tuple(out)


__all__ = ["PARTS", "WorkloadRow", "list_workloads", "workload_stats"]
