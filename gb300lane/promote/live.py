"""The live lane behind `PromotionOps`: `gb300lane.lane` on whichever runtime the recipe names.

Boots and restarts go through the lane (`up`, `start_instance`), smoke
through `gb300lane.bench.run_smoke`, verdicts through `gb300lane.cards`; a
boot whose checks fail is a failed boot, since production must be what the
recipe says.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import JsonValue

from gb300lane import cards, lane, placement
from gb300lane.bench import run_smoke
from gb300lane.cards.record.card_custody import verify_receipts
from gb300lane.cards.record.verdicts import evidence_for
from gb300lane.errors import BootError, LaneError
from gb300lane.fsio import sha256_file
from gb300lane.lane.facts import port_holders, port_in_use
from gb300lane.lane.report import BootReport
from gb300lane.promote.models import BootInfo, KeptCandidate, SmokeInfo, VerdictInfo
from gb300lane.promote.ops import InstanceFact, Progress
from gb300lane.recipes import Recipe, content_values, diff_values, fingerprint, load_recipe, render
from gb300lane.recipes.loader import recipe_path
from gb300lane.recipes.rules import requires_acknowledgement
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
        place = placement.current()
        # An inventory lane serves on its own port; the recipe's lane.port otherwise.
        return fingerprint(r), int(place.port if place is not None and place.port else r.lane.port)

    def plan_instance(self, recipe: str, tag: str) -> str:
        # The name the boot below gives it (the lane's own naming: no doubled prefixes).
        return lane.instance_name(self._recipe(recipe), None if tag == recipe else tag)

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

    def await_ready(self, instance: str, *, progress: Progress | None = None) -> BootInfo:
        say = _throttled(progress) if progress is not None else None
        report = lane.await_instance(
            instance, timeout_s=self.timeout_s,
            progress=None if say is None else (lambda p: say(
                f"waiting for {p.instance} to become ready: {p.elapsed_s:.0f} s of a {p.timeout_s:.0f} s limit"
                + (f" (a boot of this hash takes about {p.expected_s:.0f} s)" if p.expected_s else ""))),
        )  # fmt: skip
        return boot_info(report)

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

    def start_problem(self, instance: str) -> str | None:
        return lane.start_problem(instance)

    def production_custody(self) -> str | None:
        from gb300lane.promote.production_custody import verify_production

        broken = verify_production().first_break
        return None if broken is None else f"{broken.file + ': ' if broken.file else ''}{broken.detail}"

    def verdict(self, recipe: str) -> VerdictInfo | None:
        ev = evidence_for(recipe)
        ref = ev.ref
        if ref is None:
            if not ev.breaks:
                return None
            return VerdictInfo(
                passed=False, verdict="none", reference="no verdict the evidence log knows", evidence=ev.breaks
            )
        reference = f"card {ref.card} verdict {ref.number}: {ref.verdict} ({ref.file}, sha256 {ref.sha256[:16]})"
        # The verdict counts only if its whole chain holds: manifests, seals, boots, and a re-score that agrees.
        rec = cards.Receipts(Path(ref.receipts))
        broken = verify_receipts(rec).first_break
        custody = None if broken is None else f"{rec.root / broken.file if broken.file else rec.root}: {broken.detail}"
        manifests = rec.manifests() if rec.root.is_dir() else []
        head = manifests[-1] if manifests else None
        binding = self._binding(
            recipe, ref.card, ev.registered.content if ev.registered else None, transcribed=ref.transcribed
        )
        question = "; ".join(ev.question.notes()) if ev.question is not None and ev.question.notes() else None
        return VerdictInfo(
            passed=ref.verdict == "PASS" and custody is None and not ev.breaks and binding is None,
            verdict=ref.verdict,
            reference=reference,
            rescored=ref.number > 1,
            custody=custody,
            file=ref.file,
            sha256=ref.sha256,
            receipts=ref.receipts,
            manifest=str(head) if head else None,
            manifest_sha256=sha256_file(head) if head else None,
            card=ref.card,
            evidence=ev.breaks,
            binding=binding,
            question=question,
        )

    def _binding(
        self, recipe: str, card: str, registered: dict[str, JsonValue] | None, *, transcribed: bool
    ) -> str | None:
        """Why the recipe as it is now is not what the card measured, naming the keys; None when it is."""
        run = f'run card {card} on the recipe as it is (`gb300lane card register {card} --fresh --new-question "why the recipe changed"`, then `card run`: a changed candidate is a new question)'
        if registered is None:
            what = (
                "a write-up's transcribed verdict, which measured the write-up's box"
                if transcribed
                else "its registration predates recording the candidate's resolved recipe"
            )
            return (
                f"card {card}'s verdict does not show it measured {recipe} as it is now ({what}); {run}, or "
                '--force --reason "..." to record a forced promotion'
            )
        try:
            now = content_values(self._recipe(recipe))
        except LaneError as exc:
            return f"{recipe} does not load ({str(exc).splitlines()[0]})"
        changes = diff_values(registered, now)
        if not changes:
            return None
        keys = "; ".join(f"{c.key}: {_short(c.old)} -> {_short(c.new)}" for c in changes)
        return (
            f"{recipe} differs from the candidate card {card} measured ({len(changes)} key"
            f"{'s' if len(changes) != 1 else ''}: {keys}); {run}, or restore the recipe"
        )

    def recipe_content(self, recipe: str) -> dict[str, JsonValue] | None:
        return content_values(self._recipe(recipe))

    def preflight(self, recipe: str, *, port: int, production: str | None) -> list[str]:
        try:
            r = self._recipe(recipe)
        except LaneError as exc:
            return [str(exc).splitlines()[0]]
        out = [f"{_recipe_file(r, self.recipes_dir)}: {f.message}; {f.fix}" for f in requires_acknowledgement(r)]
        if not r.smoke.gates:
            out.append(
                f"{_recipe_file(r, self.recipes_dir)}: smoke.gates is empty: promotion smoke-tests the candidate on the production "
                "port before it keeps it, and a recipe with no gates cannot pass; add smoke gates (`gb300lane "
                "recipes show local-v27` shows some)"
            )
        freed: set[int] = set()
        if production is not None:
            for f in self.instances():
                if f.name == production and f.port is not None:
                    freed.add(f.port)
            prod_recipe = next((f.recipe for f in self.instances() if f.name == production), None)
            if prod_recipe is not None:
                try:
                    freed |= {c.port for c in render(self._recipe(prod_recipe), port=port).containers}
                except LaneError:
                    pass
        try:
            rendered = render(r, port=port)
        except LaneError as exc:
            return [*out, str(exc).splitlines()[0]]
        for c in rendered.containers:
            if c.port in freed or c.port == port:
                continue
            if port_in_use(c.port):
                out.append(
                    f"port {c.port} ({c.role} of {recipe}) is in use by {port_holders(c.port)}, and stopping "
                    f"production does not free it; stop it first (`gb300lane status` shows the lane)"
                )
        return out

    def port_free(self, port: int) -> bool:
        if any(f.running and f.port == port for f in self.instances()):
            return False
        return not port_in_use(port)

    def kept_candidate(self, card: str) -> KeptCandidate:
        from gb300lane.cards.record.receipts import receipts_for
        from gb300lane.cards.record.verdicts import newest_verdict
        from gb300lane.cards.schema import stage_count

        rec = receipts_for(card)
        spec = rec.card()
        arm = spec.candidate
        newest = newest_verdict(rec)
        boot = None
        for stage in range(stage_count(spec), 0, -1):  # a sequential card's last stage booted the arm last
            n = rec.finished_attempt(arm.name, stage)
            if n is not None:
                boot = rec.read_model(rec.attempt_dir(arm.name, n, stage) / "boot.json", BootReport)
                break
        instance = None if boot is None else boot.instance
        problem = None
        if boot is not None and instance is not None:
            why = lane.kept_problem(instance, boot.run)
            if why is not None:
                problem = (
                    f"its kept candidate {instance} {why}; `gb300lane promote {arm.recipe}` boots "
                    f"{arm.recipe} afresh on the production port"
                )
        return KeptCandidate(
            card=spec.name, receipts=str(rec.root), arm=arm.name, recipe=arm.recipe,
            verdict=newest.verdict if newest is not None else None, instance=instance,
            port=port_of(boot.endpoint) if boot is not None else None,
            fingerprint=boot.fingerprint if boot is not None else None, problem=problem,
        )  # fmt: skip


def _short(value: object) -> str:
    text = "absent" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _recipe_file(r: Recipe, recipes_dir: Path | None = None) -> str:
    try:
        return str(recipe_path(r.name, recipes_dir))
    except LaneError:  # only used to name the file in a message
        return f"recipe {r.name}"


def _throttled(say: Progress, every_s: float = 2.0) -> Progress:
    """`say`, at most once every `every_s` seconds (readiness polls many times a second)."""
    last = [float("-inf")]

    def out(message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= every_s:
            last[0] = now
            say(message)

    return out


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
        report=report.path,
        report_sha256=sha256_file(report.path) if report.path and Path(report.path).is_file() else None,
    )
