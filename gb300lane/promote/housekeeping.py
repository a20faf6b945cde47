"""History, prune and forced removals: reading the ledger's events, removing old kept instances, and recording
production or the rollback pair removed by `down --force`.

Prune is the only operation that removes a kept instance. It never touches
production or the current rollback pair, and it does not run while a
promotion or rollback is unfinished (its candidate may still be needed to
resume it).
"""

from __future__ import annotations

from collections.abc import Callable

from gb300lane.errors import StateError
from gb300lane.promote import witness
from gb300lane.promote.ledger import Ledger, read_ledger
from gb300lane.promote.live_ops import default_ops
from gb300lane.promote.lock import TransitionLock
from gb300lane.promote.models import LedgerEvent, NewEvent, PrunePlan, PruneReport
from gb300lane.promote.ops import PromotionOps
from gb300lane.promote.state import explain, open_ledger, refuse_if_running


def history() -> list[LedgerEvent]:
    """Every promotion, rollback, failure, recovery and prune, oldest first (LedgerError when unreadable)."""
    ledger = read_ledger()
    if ledger is None:
        return []
    with ledger:
        return ledger.events()


def prune(*, keep: int = 0, dry_run: bool = False, ops: PromotionOps | None = None) -> PruneReport:
    """Remove kept instances the ledger recorded, except production, the rollback pair and the newest `keep`."""
    if keep < 0:
        raise StateError(f"prune --keep {keep}: expected 0 or more kept instances to leave in place")
    ops = ops or default_ops()
    with TransitionLock("prune"), open_ledger() as ledger:
        open_tr = ledger.open_transition()
        if open_tr is not None:
            refuse_if_running(ledger, open_tr)
        if open_tr is not None and open_tr.kind != "prune":
            text, _ = explain(ledger, open_tr, crashed=True)
            raise StateError(f"{ledger.path}: not pruning while a transition is unfinished: {text}")
        prod, pair = ledger.production(), ledger.rollback_pair()
        protected = {
            **({prod.instance: "production"} if prod else {}),
            **({pair.instance: "rollback pair"} if pair else {}),
        }
        facts = {f.name: f for f in ops.instances()}
        leave: list[str] = []
        remove: list[str] = []
        gone: list[str] = []
        for row in ledger.kept():  # newest first
            name = row.instance
            if name in protected:
                leave.append(f"{name} ({protected[name]})")
            elif name not in facts:
                gone.append(name)
            elif facts[name].running:
                leave.append(f"{name} (running; stop it first)")
            elif len([x for x in leave if x.endswith("(newest kept)")]) < keep:
                leave.append(f"{name} (newest kept)")
            else:
                remove.append(name)
        if dry_run:
            return PruneReport(removed=tuple(remove), kept=tuple(leave), dry_run=True)
        for name in gone:  # removed by hand since; the ledger catches up
            ledger.mark_removed(name)
        if open_tr is None:
            tid = ledger.begin(None, None, PrunePlan(remove=tuple(remove)))
        else:
            tid = open_tr.id
        for name in remove:
            ledger.journal(tid, "remove", "intent", {"instance": name})
            ops.remove(name)
            ledger.mark_removed(name)
            ledger.journal(tid, "remove", "done", {"instance": name})
        ledger.finish(
            tid,
            "pruned",
            event=NewEvent(
                kind="prune",
                reason=f"keep {keep} beside production and the rollback pair",
                detail=f"removed {', '.join(remove) if remove else 'nothing'}",
            ),
        )
        return PruneReport(removed=tuple(remove), kept=tuple(leave), dry_run=False)


def remove_recorded(remove: Callable[[], list[str]], *, why: str) -> tuple[list[str], list[str]]:
    """Run `remove` (which takes instances down, production or the rollback pair among them) under the transition
    lock, then record in the ledger every role whose instance it removed; returns (removed, what was recorded).

    Afterwards production or the pair is none, as `status` shows; `history` says when and why, and `rollback`
    offers no plan that would start a removed instance. With no ledger there is nothing to record.
    """
    if read_ledger() is None:
        removed = remove()
        witness.forget(set(removed))
        return removed, []
    with TransitionLock(why), Ledger() as ledger:
        open_tr = ledger.open_transition()
        if open_tr is not None:
            refuse_if_running(ledger, open_tr)
        prod, pair = ledger.production(), ledger.rollback_pair()
        removed = remove()
        gone = set(removed)
        events = [
            NewEvent(kind="removed", recipe=slot.recipe, instance=slot.instance, fingerprint=slot.fingerprint,
                     previous=slot.recipe, reason=why,
                     detail=f"{role} {slot.recipe} ({slot.instance}) removed; "
                            + ("nothing serves production" if role == "production" else "no rollback pair"))
            for role, slot in (("production", prod), ("rollback pair", pair))
            if slot is not None and slot.instance in gone
        ]  # fmt: skip
        ledger.forget(gone, events)
        return removed, [e.detail or "" for e in events]
