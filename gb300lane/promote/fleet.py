"""`gb300lane status --fleet`: every lane of the hosts inventory in one view.

Each lane is read inside its own scope (its state folder, its host's engine):
production recipe and fingerprint, the health of what serves it, the kept
rollback pair, the verdict production rests on (or the last failure), and an
unfinished transition with the command that repairs it. A lane that cannot be
read (its host does not answer, its ledger is unreadable) is a row that says
why, never a missing row; an unfinished fleet rollout is shown above them.
"""

from __future__ import annotations

from pydantic import Field

from gb300lane.errors import LaneError
from gb300lane.lane import on_lane
from gb300lane.lane.inventory import load_inventory, placements
from gb300lane.models import FrozenModel
from gb300lane.placement import Placement
from gb300lane.promote.housekeeping import history
from gb300lane.promote.models import LedgerEvent
from gb300lane.promote.rollout import FleetInFlight, fleet_in_flight
from gb300lane.promote.view import lane_view
from gb300lane.runtime import reaches_remote_hosts


class FleetInstance(FrozenModel):
    """One instance of a lane, as `status --fleet --json` lists it."""

    name: str = Field(description="Instance name.")
    recipe: str = Field(description="Its recipe.")
    role: str = Field(description="production, rollback or candidate.")
    state: str = Field(description="running, stopped, partial, missing or failed.")
    health: str = Field(description="healthy, unhealthy (HTTP n), unreachable, or not running.")
    endpoint: str | None = Field(description="Where it serves, as its host sees it.")


class FleetRow(FrozenModel):
    """One lane of the inventory."""

    host: str = Field(description="Inventory host.")
    lane: str = Field(description="Inventory lane.")
    docker: str = Field(description="The host's Docker URL (local, ssh://, tcp://).")
    production: str | None = Field(description="Recipe serving production (None: nothing promoted).")
    fingerprint: str | None = Field(description="Its recipe fingerprint.")
    health: str = Field(description="Health of production, else of the lane's running instances, else why unknown.")
    rollback_pair: str | None = Field(description="The kept rollback pair's recipe.")
    last_verdict: str | None = Field(
        description="The verdict (or forced reason) production rests on, or the last failure."
    )
    in_flight: str | None = Field(description="An unfinished transition on this lane and the command that repairs it.")
    instances: tuple[FleetInstance, ...] = Field(description="The lane's instances.")
    error: str | None = Field(default=None, description="Why the lane could not be read (host, ledger), and the fix.")


class FleetView(FrozenModel):
    """Every lane of the inventory, and any unfinished fleet rollout."""

    inventory: str = Field(description="The inventory file read.")
    lanes: tuple[FleetRow, ...] = Field(description="One row per lane, in inventory order.")
    rollout: FleetInFlight | None = Field(
        description="An unfinished fleet rollout and the one command that repairs it."
    )

    @property
    def ok(self) -> bool:
        """False when a lane could not be read or a rollout is unfinished: `status --fleet` then exits 1."""
        return all(r.error is None for r in self.lanes) and (self.rollout is None or not self.rollout.crashed)


def _last_verdict(events: list[LedgerEvent]) -> str | None:
    for e in reversed(events):
        if e.kind == "promote":
            return f"forced: {e.reason}" if e.forced else e.verdict
        if e.kind in ("promote_failed", "rollback_failed"):
            return f"{e.kind} {e.recipe}: {e.reason or e.detail or ''}".rstrip(": ")
    return None


def _row(place: Placement) -> FleetRow:
    base = {"host": place.host, "lane": place.lane, "docker": place.docker}
    try:
        with on_lane(place):
            view = lane_view()
            events = history() if view.ledger_error is None else []
    except LaneError as exc:
        return FleetRow(
            **base, production=None, fingerprint=None, health="unknown", rollback_pair=None, last_verdict=None,
            in_flight=None, instances=(), error=str(exc),
        )  # fmt: skip
    prod = view.production
    rows = tuple(
        FleetInstance(
            name=r.info.name, recipe=r.info.recipe, role=r.role, state=r.info.state, health=r.health,
            endpoint=r.info.endpoint,
        )
        for r in view.instances
    )  # fmt: skip
    serving = [r for r in rows if r.role == "production"] or [r for r in rows if r.state == "running"]
    if serving:
        health = "; ".join(f"{r.name} {r.health}" for r in serving) if len(serving) > 1 else serving[0].health
    else:
        health = "nothing running"
    problems = [
        note
        for rt, note in view.runtimes.items()
        if note != "reachable" and (reaches_remote_hosts(rt) or not place.remote)
    ]
    error = view.ledger_error or view.ledger_read_only
    if error is None and place.remote and problems:
        error = problems[0]
    flight = prod.in_flight if prod is not None else None
    return FleetRow(
        **base,
        production=prod.recipe if prod else None,
        fingerprint=prod.fingerprint if prod else None,
        health=health,
        rollback_pair=prod.rollback_pair.recipe if prod and prod.rollback_pair else None,
        last_verdict=_last_verdict(events),
        in_flight=flight.explanation if flight is not None else None,
        instances=rows,
        error=error,
    )


def fleet_view() -> FleetView:
    """Every lane of the inventory, each read on its own host; InventoryError when there is no inventory."""
    loaded = load_inventory()
    return FleetView(inventory=loaded.path, lanes=tuple(_row(p) for p in placements()), rollout=fleet_in_flight())
