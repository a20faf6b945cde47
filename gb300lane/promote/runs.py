"""What every transition shares: one run being driven (ledger, lane, journal, crash seam) and its small helpers.

`transitions` (promote, rollback, repair) and `lanetake` (a card's bracket) both drive a `Run`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import JsonValue

from gb300lane.errors import LaneError
from gb300lane.promote.ledger import Detail, Ledger, Transition
from gb300lane.promote.models import BootInfo, BootReportLink, PromotePlan, RollbackPlan, Slot, TakeLanePlan
from gb300lane.promote.ops import Progress, PromotionOps, wait_port_free
from gb300lane.promote.state import refuse_if_running

CrashHook = Callable[[str], None]


class Run:
    """One transition being driven: the ledger, the lane, the journal and the crash seam."""

    def __init__(
        self,
        ledger: Ledger,
        ops: PromotionOps,
        tr: Transition,
        hook: CrashHook | None,
        *,
        resumed: bool = False,
        progress: Progress | None = None,
    ) -> None:
        self.ledger, self.ops, self.tr, self.hook = ledger, ops, tr, hook
        # True when this process picks up a transition a killed one began.
        self.resumed = resumed
        self.progress = progress
        self.port = tr.plan.port if isinstance(tr.plan, (PromotePlan, RollbackPlan, TakeLanePlan)) else 0

    def _point(self, name: str) -> None:
        if self.hook is not None:
            self.hook(name)

    @contextmanager
    def step(self, name: str, **detail: JsonValue) -> Iterator[Detail]:
        self.ledger.journal(self.tr.id, name, "intent", detail)
        self._point(f"{self.tr.kind}.{name}")
        out: Detail = {}
        try:
            yield out
        except LaneError as exc:
            self.ledger.journal(self.tr.id, name, "failed", {"error": str(exc)})
            raise
        self._point(f"{self.tr.kind}.{name}:after")
        self.ledger.journal(self.tr.id, name, "done", out)

    def fact(self, instance: str | None) -> tuple[bool, bool]:
        return instance_fact(self.ops, instance)

    def stop_others(self, keep_running: str | None, step: str, *, also: str | None = None) -> list[str]:
        """Stop (and keep) every running instance on the production port, and `also`, except `keep_running`."""
        stopped = []
        for f in self.ops.instances():
            if f.running and (f.port == self.port or f.name == also) and f.name != keep_running:
                with self.step(step, instance=f.name):
                    self.ops.stop_keep(f.name)
                stopped.append(f.name)
        return stopped

    def free_port(self) -> None:
        with self.step("check_port", port=self.port):
            wait_port_free(self.ops, self.port)

    def bring_up(self, slot: Slot | None, step: str) -> BootInfo | None:
        """Start a kept instance, or wait for one that already runs (a start a killed process began) to be ready."""
        if slot is None:
            return None
        _, running = self.fact(slot.instance)
        if running:
            # It may still be booting: wait for readiness (and its boot checks) within the lane's boot limit.
            with self.step(step, instance=slot.instance, awaited=True):
                return self.ops.await_ready(slot.instance, progress=self.progress)
        self.free_port()
        with self.step(step, instance=slot.instance):
            return self.ops.start_kept(slot.instance)


def open_or_close_prune(ledger: Ledger) -> Transition | None:
    """The unfinished transition, closing a killed prune (its removals are idempotent) on the way."""
    tr = ledger.open_transition()
    if tr is not None:
        refuse_if_running(ledger, tr)
    if tr is not None and tr.kind == "prune":
        ledger.finish(tr.id, "interrupted")
        return None
    return tr


def report_link(boot: BootInfo | None) -> BootReportLink | None:
    """The ledger's link to the boot report a boot wrote (None without one)."""
    if boot is None or boot.report is None:
        return None
    return BootReportLink(
        file=boot.report, sha256=boot.report_sha256, instance=boot.instance, fingerprint=boot.fingerprint
    )


def instance_fact(ops: PromotionOps, instance: str | None) -> tuple[bool, bool]:
    """(exists, running) for an instance, read from the lane now."""
    if not instance:
        return False, False
    for f in ops.instances():
        if f.name == instance:
            return True, f.running
    return False, False


def first_line(exc: BaseException) -> str:
    """An error's first line, without its closing period (its type's name when it says nothing)."""
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


__all__ = ["CrashHook", "Run", "first_line", "instance_fact", "open_or_close_prune", "report_link"]
