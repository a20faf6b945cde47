"""The transcripts a window runs, read from its workload (`gb300lane.workloads`).

The shipped workload `builtin` holds 40 transcripts per traffic class. prose,
structured, code and shell_ops are completion prompts; tool_json are chat
requests that carry `tools` and ask for JSON. `mixed` is not a file: it
interleaves the workload's classes (prose-001, structured-001, ...,
tool_json-001, prose-002, ...) so its first N transcripts always draw evenly
from all of them. An imported workload's classes are the user's names.

Ids never change once shipped: the per-request seed is derived from the id,
so renumbering would silently change every arm's requests.
"""

from __future__ import annotations

from gb300lane.errors import BenchError
from gb300lane.workloads import BUILTIN, BUILTIN_CLASSES, MIXED, Transcript, load_workload, select

BASE_CLASSES: tuple[str, ...] = BUILTIN_CLASSES
#: The builtin workload's classes and `mixed` (an imported workload names its own).
CLASSES: tuple[str, ...] = (*BASE_CLASSES, MIXED)


def load_transcripts(cls: str, workload: str = BUILTIN, *, held_out: bool = False) -> list[Transcript]:
    """All transcripts of a class of a workload, in file order (`mixed` interleaves the classes); a split
    workload's dev part unless `held_out`."""
    if workload == BUILTIN and cls not in CLASSES:
        raise BenchError(f"unknown traffic class {cls!r}; expected one of {', '.join(CLASSES)}")
    return load_workload(workload).transcripts(cls, held_out=held_out)


def select_transcripts(cls: str, count: int, workload: str = BUILTIN, *, held_out: bool = False) -> list[Transcript]:
    """The first `count` transcripts of a class; an error names the class and what the workload holds."""
    if workload == BUILTIN and cls not in CLASSES:
        raise BenchError(f"unknown traffic class {cls!r}; expected one of {', '.join(CLASSES)}")
    return select(workload, cls, count, held_out=held_out)


__all__ = ["BASE_CLASSES", "CLASSES", "Transcript", "load_transcripts", "select_transcripts"]
