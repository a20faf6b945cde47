"""The lane operations promotion needs, behind one seam: boot, stop-and-keep, restart, smoke, verdicts.

`LaneOps` is the Protocol the state machine in `transitions` drives. `LiveLaneOps`
wires it to `gb300lane.lane`, `gb300lane.bench.run_smoke`, `gb300lane.cards` and
`gb300lane.recipes` (imported lazily, so the ledger works without them).
`SimLane` (in `simlane`) is a lane simulated in one JSON file, for tests and
dry rehearsals. `default_ops()` picks the live one unless `GB300LANE_LANE_OPS=sim:<file>`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gb300lane.errors import BootError, StateError
from gb300lane.promote.models import BootInfo, SmokeInfo, VerdictInfo

#: Environment variable selecting the lane operations (`sim:<path>` for a simulated lane).
OPS_ENV = "GB300LANE_LANE_OPS"


@dataclass(frozen=True)
class InstanceFact:
    """One lane instance as the runtime sees it now."""

    name: str
    recipe: str
    running: bool
    port: int | None
    endpoint: str | None = None


class LaneOps(Protocol):
    """What promote, rollback, repair and prune ask of the lane."""

    def describe(self, recipe: str) -> tuple[str, int]:
        """(fingerprint, the recipe's lane port); raises RecipeError for an unknown recipe."""

    def plan_instance(self, recipe: str, tag: str) -> str:
        """The instance name `boot(recipe, tag=tag)` will create, known before booting."""

    def boot(self, recipe: str, *, port: int, tag: str) -> BootInfo:
        """Boot the recipe on `port`, not dark, and wait until it is ready (BootError otherwise)."""

    def stop_keep(self, instance: str) -> None:
        """Stop the instance's containers and keep them (a missing instance is not an error)."""

    def start_kept(self, instance: str) -> BootInfo:
        """Start a kept instance again and wait until it is ready (BootError otherwise)."""

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


class LiveLaneOps:
    """The real lane: `gb300lane.lane` on whichever runtime the recipe names."""

    def __init__(self, *, recipes_dir: Path | None = None, timeout_s: float | None = None) -> None:
        self.recipes_dir = recipes_dir
        self.timeout_s = timeout_s

    def _recipe(self, name: str) -> Any:
        from gb300lane.recipes import load_recipe

        return load_recipe(name, self.recipes_dir)

    def describe(self, recipe: str) -> tuple[str, int]:
        from gb300lane.recipes import fingerprint

        r = self._recipe(recipe)
        return fingerprint(r), int(r.lane.port)

    def plan_instance(self, recipe: str, tag: str) -> str:
        r = self._recipe(recipe)
        return f"{r.lane.name}-{tag}"

    def boot(self, recipe: str, *, port: int, tag: str) -> BootInfo:
        from gb300lane import lane

        # The first production instance of a recipe carries the recipe's own name (no arm).
        arm = None if tag == recipe else tag
        report = lane.up(self._recipe(recipe), dark=False, arm=arm, port=port, timeout_s=self.timeout_s)
        return _boot_info(report)

    def stop_keep(self, instance: str) -> None:
        from gb300lane import lane

        if any(f.name == instance for f in self.instances()):
            lane.stop_instance(instance)

    def start_kept(self, instance: str) -> BootInfo:
        from gb300lane import lane

        return _boot_info(lane.start_instance(instance, timeout_s=self.timeout_s))

    def remove(self, instance: str) -> None:
        from gb300lane import lane

        lane.remove_instance(instance)

    def instances(self) -> list[InstanceFact]:
        from gb300lane import lane

        facts = []
        for info in lane.list_instances():
            # A partial instance (one container still up) holds a port as surely as a running one.
            running = info.state in ("running", "partial")
            port = _port_of(info.endpoint) or _int(info.labels.get("gb300lane.port"))
            facts.append(
                InstanceFact(name=info.name, recipe=info.recipe, running=running, port=port, endpoint=info.endpoint)
            )
        return facts

    def smoke(self, recipe: str, endpoint: str) -> SmokeInfo:
        from gb300lane.bench import run_smoke

        t0 = time.monotonic()
        report = run_smoke(self._recipe(recipe), endpoint)
        seconds = time.monotonic() - t0
        if report.passed:
            summary = f"all {len(report.gates)} gates passed"
        else:
            failing = [f"{g.name} {g.status}: {g.reason}" for g in report.gates if g.status != "PASS"]
            summary = "; ".join(failing) or "no smoke gates in the recipe"
        if report.report_path:
            summary += f" (report {report.report_path})"
        return SmokeInfo(passed=report.passed, summary=summary, seconds=seconds)

    def verdict(self, recipe: str) -> VerdictInfo | None:
        try:
            from gb300lane.cards import latest_verdict_for
        except ImportError:  # the package's re-export is optional; the function lives here
            from gb300lane.cards.verdicts import latest_verdict_for

        ref = latest_verdict_for(recipe)
        if ref is None:
            return None
        reference = f"card {ref.card} verdict {ref.number}: {ref.verdict} ({ref.file}, sha256 {ref.sha256[:16]})"
        return VerdictInfo(passed=ref.verdict == "PASS", verdict=ref.verdict, reference=reference,
                           rescored=ref.number > 1)

    def port_free(self, port: int) -> bool:
        from gb300lane.lane.facts import port_in_use

        if any(f.running and f.port == port for f in self.instances()):
            return False
        return not port_in_use(port)


def _port_of(endpoint: str | None) -> int | None:
    if not endpoint:
        return None
    tail = endpoint.rstrip("/").rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _boot_info(report: Any) -> BootInfo:
    """A `gb300lane.lane.BootReport` as promotion records it; a failed boot check is a failed boot.

    An autotune surprise (a miss where a hit was expected) only costs time, so
    it does not stop a promotion; args, env or KV pool that differ from the
    recipe do: production must be what the recipe says.
    """
    failed = [c for c in report.checks if c.status == "fail" and c.name != "autotune"]
    if failed:
        what = "; ".join(f"{c.name}: {c.summary}" for c in failed)
        raise BootError(f"{report.instance} booted but its checks failed ({what}); report {report.path}")
    return BootInfo(
        instance=report.instance,
        endpoint=report.endpoint,
        fingerprint=report.fingerprint,
        boot_seconds=float(report.boot_seconds),
        engine_seconds=report.engine_boot_seconds,
    )


def wait_port_free(ops: LaneOps, port: int, *, timeout_s: float = 15.0) -> None:
    """Block until the production port is free; StateError naming who holds it otherwise."""
    deadline = time.monotonic() + timeout_s
    while not ops.port_free(port):
        if time.monotonic() >= deadline:
            holders = [f.name for f in ops.instances() if f.running and f.port == port]
            who = ", ".join(holders) if holders else "a process that is not a lane instance"
            raise StateError(
                f"port {port} is still taken by {who} after {timeout_s:.0f} s; "
                "stop it (`gb300lane lane down` or the process) and run the command again"
            )
        time.sleep(0.1)


def default_ops() -> LaneOps:
    """The live lane, or the simulated one named by GB300LANE_LANE_OPS=sim:<file>."""
    choice = os.environ.get(OPS_ENV, "").strip()
    if not choice or choice == "live":
        return LiveLaneOps()
    if choice.startswith("sim:"):
        from gb300lane.promote.simlane import SimLane

        return SimLane(Path(choice[4:]))
    raise StateError(f"{OPS_ENV}={choice!r}: expected 'live' or 'sim:<path to a simulated lane file>'")
