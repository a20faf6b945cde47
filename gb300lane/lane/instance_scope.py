"""An instance for the length of a `with` block: booted on entry, taken down on exit, even when the boot fails.

    with lane.instance("local-v27", dark=True, arm="B") as booted:
        run_window(booted.endpoint, window, model=booted.served_model)

The preconditions run first and create nothing, so a refusal (already up,
port taken, protected) leaves everything as it was. Once containers exist,
they are removed on the way out (or stopped and kept with `keep=True`, as a
card keeps its arms for the receipts and `gb300lane logs`), whether the block
finished, raised, or the boot itself failed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gb300lane.errors import LaneError
from gb300lane.lane import records as instances
from gb300lane.lane.boot import ProgressFn, boot, plan_boot, stop_all
from gb300lane.lane.protect import NOTHING, Protected
from gb300lane.lane.report import BootReport
from gb300lane.recipes import Recipe
from gb300lane.runtime import get_runtime


@contextmanager
def instance(
    recipe: str | Recipe,
    *,
    keep: bool = False,
    dark: bool = False,
    arm: str | None = None,
    runtime: str | None = None,
    port: int | None = None,
    check_keys: Sequence[str] | None = None,
    baseline: str | None = None,
    baseline_role: str | None = None,
    timeout_s: float | None = None,
    progress: ProgressFn | None = None,
    allow_outside_trained_block: bool = False,
    pull: bool = False,
    protected: Protected = NOTHING,
) -> Iterator[BootReport]:
    """Boot `recipe` (as `up` does) and yield its boot report; stop (`keep`) or remove it on exit."""
    plan = plan_boot(
        recipe, dark=dark, arm=arm, runtime=runtime, port=port, check_keys=check_keys, baseline=baseline,
        baseline_role=baseline_role, allow_outside_trained_block=allow_outside_trained_block, pull=pull,
        protected=protected,
    )  # fmt: skip
    try:
        report = boot(plan, timeout_s=timeout_s, progress=progress)
        yield report
    finally:
        _teardown(plan.instance, keep=keep)


def _teardown(name: str, *, keep: bool) -> None:
    """Stop (and keep) or remove everything an instance created; a failed boot's leftovers included."""
    rec = instances.load(name)
    if rec is None:
        return
    try:
        rt = get_runtime(rec.runtime)
    except LaneError:
        return  # the runtime went away; `gb300lane status` shows what is left
    if keep:
        stop_all(rt, rec.containers)
        if rec.phase == "up":
            instances.save(rec, phase="stopped", detail="stopped and kept")
        return
    for container in rec.containers:
        rt.remove(container)
    instances.delete(name)
