"""Running a registered card: each arm in turn, dark, with receipts written as it goes.

For every arm in bracket order: boot it through the lane (dark, named after
the arm), count foreign clients, run every window through bench, count
foreign clients again, stop the arm keeping its containers, then mark the arm
done. The receipts on disk are the resume state: a finished arm has
`done.json` and is skipped; an interrupted arm leaves its attempt directory
behind and the next run boots it again as a new attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gb300lane.cards.receipts import Receipts, utc_now
from gb300lane.cards.schema import Card, FlagGate
from gb300lane.errors import CardError, LaneError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LaneOps:
    """The seam between a card run and the lane/bench packages (tests pass fakes)."""

    up: Callable[..., Any]  # (recipe, *, dark, arm, check_keys[, allow_outside_trained_block]) -> BootReport
    stop: Callable[[str], None]  # (instance) -> None: stop, keep the containers
    discard: Callable[[str, str], None]  # (recipe, arm) -> None: remove a half-run arm's leftovers
    foreign: Callable[[str, float], dict[str, Any]]  # (endpoint, sent_by_tool) -> {"foreign_clients", "check"}
    run_window: Callable[..., Any]  # (endpoint, window, *, model, recipe, fingerprint) -> WindowResult


def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj


def default_ops() -> LaneOps:
    """The real lane and bench."""
    from gb300lane import lane
    from gb300lane.bench import run_window

    def foreign(endpoint: str, sent: float) -> dict[str, Any]:
        check = lane.foreign_clients(endpoint, sent_by_tool=sent)
        seen = check.evidence.get("foreign_requests")
        return {"foreign_clients": None if seen is None else max(0, int(seen)), "check": _dump(check)}

    def discard(recipe: str, arm: str) -> None:
        try:
            lane.down(recipe, arm=arm)
        except LaneError:
            pass  # nothing left over is the usual case

    return LaneOps(up=lane.up, stop=lane.stop_instance, discard=discard, foreign=foreign, run_window=run_window)


def _flag_keys(card: Card) -> list[str]:
    return sorted({g.key for g in card.gates if isinstance(g, FlagGate)})


def run_arm(rec: Receipts, card: Card, arm_index: int, ops: LaneOps, progress: Progress) -> int:
    """Boot, measure and stop one arm as a new attempt; returns the attempt number."""
    arm = card.arms[arm_index]
    n = rec.next_attempt(arm.name)
    adir = rec.attempt_dir(arm.name, n)
    if n > 1:
        progress(f"{arm.name}: attempt {n - 1} did not finish; removing its leftovers and booting again")
        ops.discard(arm.recipe, arm.name)
    rec.write_json(adir / "attempt.json", {"schema_version": 1, "arm": arm.name, "recipe": arm.recipe,
                                           "attempt": n, "started_at": utc_now()})
    progress(f"{arm.name}: booting {arm.recipe} dark")
    kwargs: dict[str, Any] = {"allow_outside_trained_block": True} if arm.allow_outside_trained_block else {}
    report = ops.up(arm.recipe, dark=True, arm=arm.name, check_keys=_flag_keys(card) or None, **kwargs)
    rec.write_json(adir / "boot.json", _dump(report))
    instance, endpoint = report.instance, report.endpoint
    try:
        before = ops.foreign(endpoint, 0)
        sent = 0
        for w in card.windows:
            progress(f"{arm.name}: window {w.name} ({len(w.classes)} classes x C{'/C'.join(map(str, w.concurrency))}"
                     f" x {w.rounds} rounds, {w.transcripts_per_class} transcripts, {w.forced_tokens} tokens)")
            result = ops.run_window(endpoint, w, model=report.served_model, recipe=arm.recipe,
                                    fingerprint=getattr(report, "fingerprint", None))
            data = _dump(result)
            sent += len(data.get("records", []))
            rec.write_json(adir / "windows" / f"{w.name}.json", data)
        after = ops.foreign(endpoint, sent)
        counts = [x.get("foreign_clients") for x in (before, after)]
        rec.write_json(adir / "foreign.json", {
            "schema_version": 1, "before_windows": before, "after_windows": after, "sent_by_bench": sent,
            "foreign_clients": None if None in counts else max(counts)})
    finally:
        progress(f"{arm.name}: stopping {instance} (containers kept)")
        ops.stop(instance)
    rec.write_json(rec.arm_dir(arm.name) / "done.json", {"schema_version": 1, "attempt": n, "finished_at": utc_now()})
    return n


def run_card(rec: Receipts, *, ops: LaneOps | None = None, progress: Progress | None = None) -> list[str]:
    """Run every unfinished arm in bracket order; returns one line per arm saying what happened."""
    card = rec.card()
    rec.check_frozen(card)
    if rec.registration().transcribed:
        raise CardError(f"{rec.root}: these receipts were transcribed from a write-up; they cannot be run. "
                        "Run the local card instead (e.g. `gb300lane card run local-br1`)")
    ops = ops or default_ops()
    say = progress or (lambda _msg: None)
    lines = []
    for i, arm in enumerate(card.arms):
        done = rec.finished_attempt(arm.name)
        if done is not None:
            lines.append(f"{arm.name}: finished earlier (attempt {done}); skipped")
            say(lines[-1])
            continue
        n = run_arm(rec, card, i, ops, say)
        lines.append(f"{arm.name}: finished (attempt {n})")
        say(lines[-1])
    if not (rec.root / "manifest.json").exists():
        rec.write_manifest("run")
    return lines
