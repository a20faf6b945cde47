"""What `workload list` and `workload stats` show: typed rows over the workloads found."""

from __future__ import annotations

from pydantic import Field

from gb300lane.errors import WorkloadError
from gb300lane.models import FrozenModel
from gb300lane.workloads.folders import load_workload, workload_names
from gb300lane.workloads.importing import ClassStats, class_stats

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
        rows.append(
            WorkloadRow(
                name=name,
                folder=str(w.folder),
                classes=w.classes,
                transcripts=total,
                dev=total - held,
                held_out=held,
                content_sha256=w.manifest.content_sha256,
            )
        )
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


class ClassDiff(FrozenModel):
    name: str = Field(description="The class.")
    only_a: tuple[str, ...] = Field(description="Transcript ids only the first workload has.")
    only_b: tuple[str, ...] = Field(
        description="Transcript ids only the second has (an edited transcript is one "
        "id gone and one new: ids are content digests)."
    )
    same: int = Field(description="Transcripts both have.")


class WorkloadDiff(FrozenModel):
    a: str = Field(description="The first workload.")
    b: str = Field(description="The second.")
    same_content: bool = Field(description="Whether their content hashes are equal.")
    classes: tuple[ClassDiff, ...] = Field(description="Per class of either, what differs.")
    split_differs: bool = Field(description="Whether the held-out ids differ.")


def diff_workloads(a: str, b: str) -> WorkloadDiff:
    """What differs between two workloads, class by class, by transcript id."""
    wa, wb = load_workload(a), load_workload(b)
    names = list(wa.classes) + [c for c in wb.classes if c not in wa.classes]
    classes = []
    for cls in names:
        ia = [t.id for t in wa.by_class.get(cls, ())]
        ib = [t.id for t in wb.by_class.get(cls, ())]
        classes.append(
            ClassDiff(
                name=cls,
                only_a=tuple(i for i in ia if i not in set(ib)),
                only_b=tuple(i for i in ib if i not in set(ia)),
                same=len(set(ia) & set(ib)),
            )
        )
    held_a = wa.manifest.split.held_out_ids if wa.manifest.split else ()
    held_b = wb.manifest.split.held_out_ids if wb.manifest.split else ()
    return WorkloadDiff(
        a=a,
        b=b,
        same_content=wa.manifest.content_sha256 == wb.manifest.content_sha256,
        classes=tuple(classes),
        split_differs=held_a != held_b,
    )


__all__ = ["PARTS", "ClassDiff", "WorkloadDiff", "WorkloadRow", "diff_workloads", "list_workloads", "workload_stats"]
