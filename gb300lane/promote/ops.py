"""What promotion asks of the lane, behind one seam: boot, stop-and-keep, restart, smoke, verdicts.

`PromotionOps` is the Protocol the state machine in `transitions` drives;
`lane_ops.default_ops()` is the live lane (`live.LiveOps`, over `gb300lane.lane`,
`bench`, `cards` and `recipes`). Tests and rehearsals pass another, such as
`gb300lane.testing.simlane.SimLane`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from pydantic import Field, JsonValue

from gb300lane.errors import StateError
from gb300lane.models import FrozenModel
from gb300lane.promote.models import BootInfo, KeptCandidate, SmokeInfo, VerdictInfo

#: A one-line progress message (what is being waited for, how long, against which limit).
Progress = Callable[[str], None]


class InstanceFact(FrozenModel):
    """One lane instance as the runtime sees it now."""

    name: str = Field(description="Instance name.")
    recipe: str = Field(description="Recipe it runs.")
    running: bool = Field(description="True while any of its containers runs (it holds its port).")
    port: int | None = Field(description="Port it serves on, where known.")
    endpoint: str | None = Field(default=None, description="Its endpoint, where recorded.")


class PromotionOps(Protocol):
    """What promote, rollback, repair and prune ask of the lane."""

    def describe(self, recipe: str) -> tuple[str, int]:
        """(fingerprint, the recipe's lane port); raises RecipeError for an unknown recipe."""

    def plan_instance(self, recipe: str, tag: str) -> str:
        """The instance name `boot(recipe, tag=tag)` will create, known before booting."""

    def boot(self, recipe: str, *, port: int, tag: str, baseline: str | None = None) -> BootInfo:
        """Boot the recipe on `port`, not dark, and wait until it is ready (BootError otherwise).

        `baseline` is the recipe production ran before: the boot's flag check verifies the keys that differ.
        """

    def stop_keep(self, instance: str) -> None:
        """Stop the instance's containers and keep them (a missing instance is not an error)."""

    def start_kept(self, instance: str) -> BootInfo:
        """Start a kept instance again and wait until it is ready (BootError otherwise)."""

    def start_problem(self, instance: str) -> str | None:
        """Why the kept `instance` could not be started as it stands (no readable record, a lost container), as a
        phrase about it; None when it can. Asked before a transition stops anything."""

    def production_custody(self) -> str | None:
        """Where production's chain of custody breaks (`gb300lane verify --production`), one line; None when whole."""

    def await_ready(self, instance: str, *, progress: Progress | None = None) -> BootInfo:
        """An instance that already runs (a boot a killed process began): wait until it is ready within the lane's
        boot limit, run the boot checks it may have skipped, and report (BootError otherwise)."""

    def remove(self, instance: str) -> None:
        """Remove a kept instance's containers."""

    def instances(self) -> list[InstanceFact]:
        """Every lane instance the runtimes know, running or kept."""

    def smoke(self, recipe: str, endpoint: str) -> SmokeInfo:
        """Run the recipe's smoke gates against the endpoint."""

    def verdict(self, recipe: str) -> VerdictInfo | None:
        """The newest PASS/FAIL verdict of a card whose B arm is the recipe."""

    def port_free(self, port: int) -> bool:
        """True when nothing listens on the production port."""

    def preflight(self, recipe: str, *, port: int, production: str | None) -> list[str]:
        """Every reason a boot of `recipe` on `port` would be refused that needs no engine to find (k above the
        trained block, no smoke gates to test it with, a port of its lane held by something production's own
        instance `production` does not free), each naming the file, the key and the fix; empty when none.
        Asked before a transition stops anything."""

    def recipe_content(self, recipe: str) -> dict[str, JsonValue] | None:
        """The recipe's whole resolved content (`recipes.content_values`), which a promotion records; None where the
        lane has no recipe files (a simulated lane)."""

    def kept_candidate(self, card: str) -> KeptCandidate:
        """The instance a card's candidate arm left kept on the lane, and whether it can serve production as it stands.

        `card` is a card name, file or receipts directory; CardError when it has no receipts.
        """


def wait_port_free(ops: PromotionOps, port: int, *, timeout_s: float = 15.0) -> None:
    """Block until the production port is free; StateError naming who holds it otherwise."""
    deadline = time.monotonic() + timeout_s
    while not ops.port_free(port):
        if time.monotonic() >= deadline:
            holders = [f.name for f in ops.instances() if f.running and f.port == port]
            who = ", ".join(holders) if holders else "a process that is not a lane instance"
            raise StateError(
                f"port {port} is still taken by {who} after {timeout_s:.0f} s; "
                "stop it (`gb300lane down` or the process) and run the command again"
            )
        time.sleep(0.1)
