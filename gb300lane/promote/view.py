"""The lane as promotion sees it: the lane's facts with each instance's role, and what lane commands must protect.

The lane reports instances, health and hashes; roles (production, the kept
rollback pair, candidate) come from the ledger, here. `protected_instances()`
is what `up` and `down` are handed; when the ledger cannot be read it says so
instead of protecting nothing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gb300lane.errors import StateError
from gb300lane.lane import InstanceStatus, Protected, status
from gb300lane.models import FrozenModel
from gb300lane.promote.models import ProductionState
from gb300lane.promote.state import current_production, ledger_read_only

Role = Literal["production", "rollback", "candidate"]


class RoledInstance(InstanceStatus):
    """An instance's status with its role in the lane."""

    role: Role = Field(description="production, rollback (the kept pair) or candidate, per the promotion ledger.")


class LaneView(FrozenModel):
    """`gb300lane status`: what runs where, each instance's role, and the ledger's production state."""

    instances: tuple[RoledInstance, ...] = Field(description="Every instance, recorded or leftover, with its role.")
    production: ProductionState | None = Field(description="Production state from the promotion ledger, if any.")
    runtimes: dict[str, str] = Field(description="Runtime name -> reachable / the reason it is not.")
    quarantined: tuple[str, ...] = Field(
        default=(), description="Unreadable instance records moved aside: where each is now, and why."
    )
    ledger_error: str | None = Field(
        default=None, description="Why the promotion ledger cannot be read (roles are then unknown), and the fix."
    )
    ledger_read_only: str | None = Field(
        default=None, description="Why promote, rollback and prune cannot record in the (readable) ledger, and the fix."
    )

    @property
    def ok(self) -> bool:
        """False when the ledger cannot be read or written: `gb300lane status` then exits 1."""
        return self.ledger_error is None and self.ledger_read_only is None


def _roles(prod: ProductionState | None) -> dict[str, Role]:
    roles: dict[str, Role] = {}
    if prod is not None and prod.rollback_pair is not None:
        roles[prod.rollback_pair.instance] = "rollback"
    if prod is not None and prod.instance:
        roles[prod.instance] = "production"
    return roles


def lane_view() -> LaneView:
    """The lane's status with roles; an unreadable ledger is reported, never read as 'nothing promoted'."""
    facts = status()
    error: str | None = None
    prod: ProductionState | None = None
    try:
        prod = current_production()
    except StateError as exc:
        error = str(exc)
    roles = _roles(prod)
    rows = tuple(
        RoledInstance(**row.model_dump(), role=roles.get(row.info.name, "candidate")) for row in facts.instances
    )
    read_only = ledger_read_only() if error is None else None
    return LaneView(
        instances=rows,
        production=prod,
        runtimes=facts.runtimes,
        quarantined=facts.quarantined,
        ledger_error=error,
        ledger_read_only=read_only,
    )


def protected_instances() -> Protected:
    """Production and the rollback pair, which lane commands must leave alone; `unknown` when unreadable."""
    try:
        prod = current_production()
    except StateError as exc:
        return Protected(unknown=str(exc))
    held = {name: "rollback pair" if role == "rollback" else role for name, role in _roles(prod).items()}
    return Protected(instances=held)


def production_recipe() -> str | None:
    """The recipe serving production (the default baseline of a boot's flag check); None when unknown."""
    try:
        prod = current_production()
    except StateError:
        return None
    return prod.recipe if prod is not None else None
