"""A card's bracket on a box that serves production: take the lane, run the arms dark, give it back.

On the real box there is one GPU set, so a card's arms cannot run beside
production: `take_lane(card)` stops production and keeps it, lets the card run
its arms on the lane, and restarts production afterwards, when the arms
finish, when one fails, and on Ctrl-C. It is a transition like a promotion:
it holds the transition lock for the whole bracket (no promote, rollback or
prune meanwhile), writes its plan to the ledger, journals every step, and
`gb300lane status` shows it while it runs. A process killed mid-bracket leaves
the transition open: `status` explains it and `gb300lane rollback` restores
production. `history` records each take with the time production was away.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gb300lane import paths
from gb300lane.errors import LaneError, StateError
from gb300lane.fsio import require_free
from gb300lane.promote.live_ops import default_ops
from gb300lane.promote.lock import TransitionLock
from gb300lane.promote.models import CustodyLinks, NewEvent, Slot, TakeLanePlan, TransitionReport
from gb300lane.promote.ops import Progress, PromotionOps
from gb300lane.promote.runs import CrashHook, Run, first_line, open_or_close_prune, report_link
from gb300lane.promote.state import explain, open_ledger


@dataclass
class LaneTake:
    """What `take_lane` yields: production as taken (None when nothing is production), then how it was given back."""

    production: Slot | None
    report: TransitionReport | None = None


@contextmanager
def take_lane(
    card: str,
    *,
    ops: PromotionOps | None = None,
    crash_hook: CrashHook | None = None,
    progress: Progress | None = None,
) -> Iterator[LaneTake]:
    """Stop production (kept) for the length of the `with` block and restore it on the way out, whatever happened.

    With nothing in production there is nothing to take: the block runs and `production` is None. A restore that
    fails leaves the transition open (the ledger still names production): `gb300lane rollback` restarts it.
    """
    ops = ops or default_ops()
    with TransitionLock(f"card {card} --take-lane"), open_ledger() as ledger:
        open_tr = open_or_close_prune(ledger)
        if open_tr is not None:
            text, _ = explain(ledger, open_tr, crashed=True)
            raise StateError(f"{ledger.path}: cannot take the lane: {text}")
        prod = ledger.production()
        if prod is None:
            yield LaneTake(production=None)
            return
        require_free(paths.state_dir(), action=f"take the lane for card {card}")
        plan = TakeLanePlan(card=card, production=prod, port=ledger.port() or ops.describe(prod.recipe)[1])
        tid = ledger.begin(prod.recipe, prod.recipe, plan)
        run = Run(ledger, ops, ledger.transition(tid), crash_hook, progress=progress)
        _, running = run.fact(prod.instance)
        if running:
            with run.step("stop_production", instance=prod.instance):
                ops.stop_keep(prod.instance)
        taken = LaneTake(production=prod)
        t0 = time.monotonic()
        try:
            yield taken
        finally:
            taken.report = give_back(run, plan, held_s=time.monotonic() - t0)


def give_back(run: Run, plan: TakeLanePlan, *, held_s: float | None) -> TransitionReport:
    """Stop any arm left on the production port, restart production, record it; a failed restart stays open."""
    prod = plan.production
    t0 = time.monotonic()
    run.stop_others(prod.instance, "stop_arm")
    try:
        boot = run.bring_up(prod, "restore_production")
    except LaneError as exc:
        why = first_line(exc)
        return TransitionReport(
            kind="take_lane", ok=False, production=None, rollback_pair=None,
            message=f"card {plan.card}: restarting production {prod.recipe} ({prod.instance}) failed: {why}; "
                    f"nothing serves production: fix it and run `gb300lane rollback` to start {prod.recipe} again",
        )  # fmt: skip
    restore_s = time.monotonic() - t0
    with run.step("record"):
        pass
    away = f"stopped for {held_s:.1f} s, " if held_s is not None else ""
    resumed = "; completed by a repair" if run.resumed else ""
    endpoint = boot.endpoint if boot else prod.endpoint
    event_id = run.ledger.finish(
        run.tr.id, "restored",
        production=prod.model_copy(update={"endpoint": endpoint}),
        links=CustodyLinks(recipe=prod.recipe, fingerprint=prod.fingerprint, boot_report=report_link(boot)),
        event=NewEvent(
            kind="take_lane", recipe=prod.recipe, instance=prod.instance, fingerprint=prod.fingerprint,
            previous=prod.recipe, reason=f"card {plan.card} ran its arms on the lane",
            restore_seconds=restore_s, detail=f"production {prod.recipe} {away}restarted in {restore_s:.1f} s{resumed}",
        ),
    )  # fmt: skip
    return TransitionReport(
        kind="take_lane", ok=True, production=prod.recipe, rollback_pair=None,
        message=f"production {prod.recipe} ({prod.instance}) restored on {endpoint} in {restore_s:.1f} s"
                + (f" after the card held the lane for {held_s:.1f} s" if held_s is not None else ""),
        restore_seconds=restore_s, boot_seconds=boot.boot_seconds if boot else None, event_id=event_id,
    )  # fmt: skip
