"""The live lane behind `PromotionOps`: `gb300lane.lane` on whichever runtime the recipe names.

Boots and restarts go through the lane (`up`, `start_instance`), smoke
through `gb300lane.bench.run_smoke`, verdicts through `gb300lane.cards`; a
boot whose checks fail is a failed boot, since production must be what the
recipe says.
"""

from __future__ import annotations

import time
from pathlib import Path

from gb300lane import cards, lane
from gb300lane.bench import run_smoke
from gb300lane.errors import BootError
from gb300lane.lane.facts import port_in_use
from gb300lane.promote.models import BootInfo, SmokeInfo, VerdictInfo
from gb300lane.promote.ops import InstanceFact
from gb300lane.recipes import Recipe, fingerprint, load_recipe
from gb300lane.runtime import LABEL_PORT


class LiveOps:
    """`PromotionOps` over the real lane."""

    def __init__(self, *, recipes_dir: Path | None = None, timeout_s: float | None = None) -> None:
        self.recipes_dir = recipes_dir
        self.timeout_s = timeout_s

    def _recipe(self, name: str) -> Recipe:
        return load_recipe(name, self.recipes_dir)

    def describe(self, recipe: str) -> tuple[str, int]:
        r = self._recipe(recipe)
        return fingerprint(r), int(r.lane.port)

    def plan_instance(self, recipe: str, tag: str) -> str:
        return f"{self._recipe(recipe).lane.name}-{tag}"

    def boot(self, recipe: str, *, port: int, tag: str, baseline: str | None = None) -> BootInfo:
        # The first production instance of a recipe carries the recipe's own name (no arm).
        arm = None if tag == recipe else tag
        report = lane.up(
            self._recipe(recipe), dark=False, arm=arm, port=port, baseline=baseline, timeout_s=self.timeout_s
        )
        return boot_info(report)

    def stop_keep(self, instance: str) -> None:
        if any(f.name == instance for f in self.instances()):
            lane.stop_instance(instance)

    def start_kept(self, instance: str) -> BootInfo:
        return boot_info(lane.start_instance(instance, timeout_s=self.timeout_s))

    def remove(self, instance: str) -> None:
        lane.remove_instance(instance)

    def instances(self) -> list[InstanceFact]:
        facts = []
        for info in lane.list_instances():
            # A partial instance (one container still up) holds a port as surely as a running one.
            running = info.state in ("running", "partial")
            port = port_of(info.endpoint) or _int(info.labels.get(LABEL_PORT))
            facts.append(
                InstanceFact(name=info.name, recipe=info.recipe, running=running, port=port, endpoint=info.endpoint)
            )
        return facts

    def smoke(self, recipe: str, endpoint: str) -> SmokeInfo:
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
        ref = cards.latest_verdict_for(recipe)
        if ref is None:
            return None
        reference = f"card {ref.card} verdict {ref.number}: {ref.verdict} ({ref.file}, sha256 {ref.sha256[:16]})"
        return VerdictInfo(
            passed=ref.verdict == "PASS", verdict=ref.verdict, reference=reference, rescored=ref.number > 1
        )

    def port_free(self, port: int) -> bool:
        if any(f.running and f.port == port for f in self.instances()):
            return False
        return not port_in_use(port)


def port_of(endpoint: str | None) -> int | None:
    """The port of `http://host:port`, None when it has none."""
    if not endpoint:
        return None
    tail = endpoint.rstrip("/").rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def boot_info(report: lane.BootReport) -> BootInfo:
    """A boot report as promotion records it; a failed boot check is a failed boot.

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
