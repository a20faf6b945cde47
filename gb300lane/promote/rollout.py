"""A fleet rollout: one recipe promoted on several lanes of the inventory, one lane at a time.

    gb300lane promote local-v27 --lanes a,b,c      (a is the canary)
    gb300lane promote local-v27 --fleet            (every lane, inventory order)

Each lane is promoted inside its own scope with its own ledger, boot checks
and smoke gates, exactly as `promote --host` would. The first failure stops
the rollout and the lanes already moved are rolled back (newest first), so
the fleet ends all-old or all-new; `--keep-going` moves the others anyway and
says which lanes differ.

The rollout is journaled as one fleet transition (`fleet/rollouts/<id>.json`
under the state root, rewritten atomically after every step) while each lane
journals its own promotion or rollback in its ledger. A rollout killed at any
point is found by `status --fleet` (its lock is free, its journal unfinished)
and `gb300lane rollback --fleet` repairs it: each lane's interrupted
transition is repaired, each lane already moved is rolled back, and the
journal is closed as rolled back.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from gb300lane import paths
from gb300lane.errors import LaneError, StateError
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.lane import on_lane
from gb300lane.lane.inventory import placements
from gb300lane.locks import is_locked
from gb300lane.models import FrozenModel
from gb300lane.placement import Placement
from gb300lane.promote.ledger import utcnow
from gb300lane.promote.lock import TransitionLock
from gb300lane.promote.models import TransitionReport
from gb300lane.promote.ops import Progress, PromotionOps
from gb300lane.promote.runs import CrashHook
from gb300lane.promote.state import current_production
from gb300lane.promote.transitions import promote, rollback

LaneStatus = Literal[
    "pending", "moving", "moved", "already", "failed", "reverting", "reverted", "revert_failed", "skipped"
]
Outcome = Literal["running", "promoted", "rolled_back", "mixed"]

#: Where rollouts are journaled, under the state root.
FLEET_DIR = "fleet"


class LaneMove(FrozenModel):
    """One lane's part of a rollout."""

    lane: str = Field(description="Inventory lane.")
    host: str = Field(description="Its host.")
    selector: str = Field(description="What names it after --host.")
    previous: str | None = Field(description="Its production recipe when the rollout began.")
    status: LaneStatus = Field(description="Where this lane is in the rollout.")
    detail: str | None = Field(default=None, description="What happened (the lane's report, or why it failed).")


class Rollout(FrozenModel):
    """The fleet transition's journal."""

    schema_version: Literal[1] = Field(default=1, description="Journal schema version.")
    id: str = Field(description="Rollout id (UTC time and a random suffix).")
    recipe: str = Field(description="The recipe rolled out.")
    keep_going: bool = Field(description="True when a failed lane did not stop the rollout.")
    pid: int = Field(description="Process that ran it.")
    started_at: str = Field(description="UTC time it began.")
    finished_at: str | None = Field(default=None, description="UTC time it ended (None while running or interrupted).")
    outcome: Outcome = Field(description="running, promoted (all new), rolled_back (all old) or mixed (--keep-going).")
    why: str | None = Field(default=None, description="Why it stopped or was rolled back.")
    lanes: tuple[LaneMove, ...] = Field(description="The lanes in rollout order; the first is the canary.")


class FleetInFlight(FrozenModel):
    """An unfinished rollout, as `status --fleet` explains it."""

    id: str = Field(description="Rollout id.")
    recipe: str = Field(description="The recipe it was rolling out.")
    crashed: bool = Field(description="True when no process drives it any more.")
    explanation: str = Field(description="One sentence: where it stopped.")
    command: str = Field(description="The one command that repairs it.")
    lanes: tuple[LaneMove, ...] = Field(description="Each lane's state in it.")


class FleetReport(FrozenModel):
    """What a fleet rollout (or its repair) did."""

    ok: bool = Field(description="True when every lane ended on the recipe (or, for a repair, on its old recipe).")
    outcome: Outcome = Field(description="promoted, rolled_back or mixed.")
    message: str = Field(description="One paragraph: what moved, what failed, where the fleet stands.")
    journal: str = Field(description="The rollout journal file.")
    lanes: tuple[LaneMove, ...] = Field(description="Each lane's final state.")


def fleet_dir() -> Path:
    return paths.state_root() / FLEET_DIR


def _journal_path(rollout_id: str) -> Path:
    return fleet_dir() / "rollouts" / f"{rollout_id}.json"


def _save(r: Rollout) -> Rollout:
    atomic_write(_journal_path(r.id), dumps_json(r.model_dump(mode="json")))
    return r


def _set(r: Rollout, lane: str, status: LaneStatus, detail: str | None = None) -> Rollout:
    moves = tuple(m.model_copy(update={"status": status, "detail": detail}) if m.lane == lane else m for m in r.lanes)
    return _save(r.model_copy(update={"lanes": moves}))


def _load_all() -> list[tuple[Path, Rollout]]:
    folder = fleet_dir() / "rollouts"
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.append((path, Rollout.model_validate_json(path.read_bytes())))
        except (OSError, ValidationError) as exc:
            # Fail closed: an unreadable journal may be an unfinished rollout.
            raise StateError(
                f"{path}: the fleet rollout journal cannot be read ({str(exc).splitlines()[0]}); "
                "read it, repair or move it aside, then run the command again"
            ) from None
    return out


def _unfinished() -> Rollout | None:
    open_ = [r for _, r in _load_all() if r.finished_at is None]
    return open_[-1] if open_ else None


def _running() -> bool:
    return is_locked(fleet_dir())


def fleet_in_flight() -> FleetInFlight | None:
    """The unfinished rollout, if any, with where it stopped and the command that repairs it."""
    r = _unfinished()
    if r is None:
        return None
    crashed = not _running()
    moved = [m.lane for m in r.lanes if m.status in ("moved", "moving", "reverting")]
    at = next((m for m in r.lanes if m.status in ("moving", "reverting")), None)
    where = f"while {'moving' if at.status == 'moving' else 'reverting'} lane {at.lane}" if at else "between lanes"
    if not crashed:
        text = f"fleet rollout {r.id} of {r.recipe} in progress (pid {r.pid}, {where})"
    else:
        text = (
            f"fleet rollout {r.id} of {r.recipe} interrupted {where}; lanes touched: {', '.join(moved) or 'none'}; "
            "run `gb300lane rollback --fleet` to put every lane back on its old recipe"
        )
    return FleetInFlight(
        id=r.id, recipe=r.recipe, crashed=crashed, explanation=text, command="gb300lane rollback --fleet", lanes=r.lanes
    )


def _lane_hook(hook: CrashHook | None, lane: str) -> CrashHook | None:
    """The crash seam per lane: point `LANE:promote.boot_candidate` fires on that lane only."""
    if hook is None:
        return None
    return lambda point: hook(f"{lane}:{point}")


OpsFor = Callable[[Placement], PromotionOps | None]


class LanePlan(FrozenModel):
    """One lane's part in a planned fleet rollout: its promotion planned as `promote --dry-run` plans it."""

    lane: str = Field(description="Inventory lane.")
    host: str = Field(description="Its host.")
    previous: str | None = Field(description="The recipe serving the lane now (None: none).")
    ok: bool = Field(description="True when this lane's promotion would run (or the lane already serves the recipe).")
    steps: tuple[str, ...] = Field(description="The steps on this lane, in order.")
    refusals: tuple[str, ...] = Field(default=(), description="Why this lane's promotion would be refused.")


class FleetPlan(FrozenModel):
    """What `promote --lanes/--fleet --dry-run` prints: every lane's steps, in order; nothing changed."""

    recipe: str = Field(description="The recipe being rolled out.")
    ok: bool = Field(description="True when every lane's promotion would run.")
    lanes: tuple[LanePlan, ...] = Field(description="Each lane, canary first.")


def plan_rollout(
    recipe: str,
    *,
    lanes: list[str] | None = None,
    keep_going: bool = False,
    force: bool = False,
    reason: str | None = None,
    ops_for: OpsFor | None = None,
) -> FleetPlan:
    """The steps `rollout` would take on each lane and every refusal, found without changing anything."""
    ops_for = ops_for or (lambda _p: None)
    planned = []
    for p in placements(lanes=lanes):
        with on_lane(p):
            prod = current_production()
            previous = prod.recipe if prod else None
            if previous == recipe:
                planned.append(
                    LanePlan(
                        lane=p.lane,
                        host=p.host,
                        previous=previous,
                        ok=True,
                        steps=(f"{recipe} already serves lane {p.lane}: nothing to do",),
                    )
                )
                continue
            refusals: list[str] = []
            if previous is None and not keep_going:
                refusals.append(
                    f"lane {p.lane} (host {p.host}) has no production recipe to go back to, so the "
                    "rollout could not end all-old; promote it on its own first or pass --keep-going"
                )
            if prod is not None and prod.in_flight is not None:
                refusals.append(f"lane {p.lane}: {prod.in_flight.explanation}; repair it before a fleet rollout")
            why = f"fleet rollout of {recipe}" + (f": {reason}" if reason else "")
            rep = promote(recipe, force=force, reason=why if force else None, ops=ops_for(p), dry_run=True)
            refusals.extend(rep.refusals)
            planned.append(LanePlan(lane=p.lane, host=p.host, previous=previous, ok=rep.ok and not refusals,
                                    steps=rep.steps, refusals=tuple(refusals)))  # fmt: skip
    return FleetPlan(recipe=recipe, ok=all(lp.ok for lp in planned), lanes=tuple(planned))


def rollout(
    recipe: str,
    *,
    lanes: list[str] | None = None,
    keep_going: bool = False,
    force: bool = False,
    reason: str | None = None,
    ops_for: OpsFor | None = None,
    crash_hook: CrashHook | None = None,
    progress: Progress | None = None,
) -> FleetReport:
    """Promote `recipe` on `lanes` (every lane of the inventory when None) in order; see the module docstring."""
    places = placements(lanes=lanes)
    say = progress or (lambda _m: None)
    ops_for = ops_for or (lambda _p: None)
    with TransitionLock(f"fleet rollout of {recipe}", state_dir=fleet_dir()):
        open_ = _unfinished()
        if open_ is not None:
            raise StateError(
                f"{_journal_path(open_.id)}: fleet rollout {open_.id} of {open_.recipe} is unfinished; "
                "run `gb300lane rollback --fleet` first (`gb300lane status --fleet` shows where it stopped)"
            )
        moves = []
        for p in places:
            with on_lane(p):
                prod = current_production()
            if prod is not None and prod.in_flight is not None:
                raise StateError(f"lane {p.lane}: {prod.in_flight.explanation}; repair it before a fleet rollout")
            if (prod is None or prod.recipe is None) and not keep_going:
                raise StateError(
                    f"lane {p.lane} (host {p.host}) has no production recipe to go back to, so the rollout could not "
                    f"end all-old; promote it on its own first (`gb300lane promote RECIPE --host {p.selector}`) "
                    "or pass --keep-going"
                )
            moves.append(LaneMove(lane=p.lane, host=p.host, selector=p.selector,
                                  previous=prod.recipe if prod else None, status="pending"))  # fmt: skip
        rid = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
        r = _save(Rollout(
            id=rid, recipe=recipe, keep_going=keep_going, pid=os.getpid(), started_at=utcnow(), outcome="running",
            lanes=tuple(moves),
        ))  # fmt: skip
        failed: str | None = None
        for p, move in zip(places, moves, strict=True):
            if move.previous == recipe:
                r = _set(r, p.lane, "already", f"{recipe} already serves lane {p.lane}")
                continue
            say(f"lane {p.lane} (host {p.host}): promoting {recipe}" + (" (canary)" if move is moves[0] else ""))
            r = _set(r, p.lane, "moving")
            why = f"fleet rollout {rid} of {recipe}" + (f": {reason}" if reason else "")
            try:
                with on_lane(p):
                    rep = promote(recipe, force=force, reason=why if force else None, ops=ops_for(p),
                                  crash_hook=_lane_hook(crash_hook, p.lane), progress=progress)  # fmt: skip
                ok, detail = rep.ok, rep.message
            except LaneError as exc:
                ok, detail = False, str(exc)
            r = _set(r, p.lane, "moved" if ok else "failed", detail)
            say(f"lane {p.lane}: {'moved' if ok else 'FAILED'}: {detail}")
            if not ok:
                failed = f"lane {p.lane} (host {p.host}) failed: {detail}"
                if not keep_going:
                    break
        if failed is None:
            r = _save(r.model_copy(update={"finished_at": utcnow(), "outcome": "promoted"}))
            return _report(r, True, f"{recipe} serves every lane ({', '.join(m.lane for m in r.lanes)})")
        if keep_going:
            r = _save(r.model_copy(update={"finished_at": utcnow(), "outcome": "mixed", "why": failed}))
            old = [m.lane for m in r.lanes if m.status == "failed"]
            return _report(r, False, f"{failed}; --keep-going: lanes {', '.join(old)} stay on their old recipe")
        r = r.model_copy(update={"why": failed})
        r = _revert(r, places, failed, ops_for, crash_hook, progress)
        return _report(r, False, f"{failed}; " + _summary(r))


def _revert(
    r: Rollout,
    places: list[Placement],
    why: str,
    ops_for: OpsFor,
    crash_hook: CrashHook | None,
    progress: Progress | None,
) -> Rollout:
    """Roll back every lane the rollout moved (newest first) and close the journal."""
    say = progress or (lambda _m: None)
    by_lane = {p.lane: p for p in places}
    for move in reversed(r.lanes):
        if move.status not in ("moved", "moving", "reverting", "revert_failed"):
            continue
        p = by_lane[move.lane]
        r = _set(r, move.lane, "reverting", move.detail)
        try:
            with on_lane(p):
                prod = current_production()
                needs = prod is not None and (
                    prod.in_flight is not None or (prod.recipe == r.recipe and move.previous != r.recipe)
                )
                rep: TransitionReport | None = None
                if needs:
                    rep = rollback(ops=ops_for(p), crash_hook=_lane_hook(crash_hook, p.lane), progress=progress,
                                   reason=f"fleet rollout {r.id} of {r.recipe} rolled back: {why}")  # fmt: skip
            if rep is None:
                r = _set(r, move.lane, "reverted", f"{move.previous} still serves; nothing to roll back")
            else:
                r = _set(r, move.lane, "reverted" if rep.ok else "revert_failed", rep.message)
        except LaneError as exc:
            r = _set(r, move.lane, "revert_failed", str(exc))
        say(f"lane {move.lane}: {r.lanes[[m.lane for m in r.lanes].index(move.lane)].status}")
    bad = [m.lane for m in r.lanes if m.status == "revert_failed"]
    return _save(r.model_copy(update={
        "finished_at": None if bad else utcnow(), "outcome": "running" if bad else "rolled_back", "why": why,
    }))  # fmt: skip


def _summary(r: Rollout) -> str:
    bad = [m for m in r.lanes if m.status == "revert_failed"]
    if bad:
        return (
            "rolling back failed on "
            + ", ".join(f"{m.lane} ({m.detail})" for m in bad)
            + "; fix that lane and run `gb300lane rollback --fleet` again"
        )
    back = [m.lane for m in r.lanes if m.status == "reverted"]
    return (f"rolled back {', '.join(back)}; " if back else "") + "every lane is on its old recipe"


def _report(r: Rollout, ok: bool, message: str) -> FleetReport:
    return FleetReport(ok=ok, outcome=r.outcome, message=message, journal=str(_journal_path(r.id)), lanes=r.lanes)


def repair(
    *, ops_for: OpsFor | None = None, crash_hook: CrashHook | None = None, progress: Progress | None = None
) -> FleetReport:
    """`rollback --fleet`: put every lane an unfinished rollout touched back on its old recipe, and close it."""
    ops_for = ops_for or (lambda _p: None)
    with TransitionLock("fleet rollback", state_dir=fleet_dir()):
        r = _unfinished()
        if r is None:
            raise StateError(
                f"{fleet_dir() / 'rollouts'}: no unfinished fleet rollout to roll back; "
                "to roll one lane back run `gb300lane rollback --host HOST`"
            )
        places = placements(lanes=[m.lane for m in r.lanes])
        why = r.why or f"fleet rollout {r.id} was interrupted"
        r = _revert(r, places, why, ops_for, crash_hook, progress)
        return _report(r, r.outcome == "rolled_back", _summary(r))
