"""Running a registered card: each arm in turn, dark, with receipts written as it goes.

For every arm in bracket order: boot it through the lane (dark, named after
the arm), count foreign clients, run every window through bench, count
foreign clients again, stop the arm keeping its containers, then mark the arm
done. The receipts on disk are the resume state: a finished arm has
`done.json` and is skipped; an interrupted arm leaves its attempt directory
behind and the next run boots it again as a new attempt.

Seeds: with `seeds: per_arm` (the default) each arm sends its own seed base,
a stable hash of (the window's seed base, the arm, the stage), so A2 is a
second sample of production and not a copy of A; the seed base an arm used
is recorded in its window receipt. A group-sequential card runs the bracket
once per stage (the primary window's rounds split evenly; the other windows
run in stage 1 only) and takes a look after each (`cards.record.look_receipts`), stopping
as soon as a look reaches PASS or FAIL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from gb300lane import lane
from gb300lane.bench import WindowResult, run_window
from gb300lane.bench.models import load_label
from gb300lane.bench.referee import referee_window
from gb300lane.bench.selftest import SelftestResult, levels_for, run_selftest
from gb300lane.cards.record.models import AttemptReceipt, DoneReceipt, ForeignCount, ForeignReceipt, SelftestReceipt
from gb300lane.cards.record.receipts import Receipts, utc_now
from gb300lane.cards.schema import (
    Arm,
    Card,
    FlagGate,
    GroupSequential,
    LosslessGate,
    planned_stages,
    stage_count,
)
from gb300lane.errors import CardError, LaneError
from gb300lane.lane import BootReport, Protected
from gb300lane.recipes import WindowSpec, load_recipe

Progress = Callable[[str], None]


class ArmOps(Protocol):
    """What a card run asks of the lane and bench: an arm's instance for a block, foreign clients, windows."""

    def instance(
        self,
        recipe: str,
        *,
        arm: str,
        check_keys: Sequence[str] | None,
        baseline: str | None,
        allow_outside_trained_block: bool,
    ) -> AbstractContextManager[BootReport]:
        """The arm booted dark for the length of a `with` block, stopped and kept after it."""

    def discard(self, recipe: str, arm: str) -> None:
        """Remove a half-run arm's leftovers (nothing left over is not an error)."""

    def foreign(self, endpoint: str, sent_by_tool: float) -> ForeignCount:
        """Requests the lane counted that the bench did not send."""

    def run_window(
        self, endpoint: str, window: WindowSpec, *, model: str, recipe: str, fingerprint: str | None
    ) -> WindowResult:
        """Run one window against the arm.

        Ops whose windows go through the bench client also offer `selftest(concurrencies) -> SelftestResult`;
        a card runs it before its first window and refuses to go on when it fails.
        """


#: Tries of a cell after one that came back invalid (a loaded host's burst, foreign traffic): its
#: window runs it again at once, with the same seeds, and keeps every discarded try in the receipt.
CELL_RETRIES = 2


class LiveArmOps:
    """The real lane and bench; `protected` instances (production, the rollback pair) are never replaced.

    `port` boots every arm on that port instead of its recipe's (one at a time, so they never collide).
    """

    def __init__(self, protected: Protected = lane.NOTHING, *, port: int | None = None) -> None:
        self.protected = protected
        self.port = port

    def preflight(self, card: Card) -> None:
        """Before any arm boots: refuse when production or the rollback pair serves the port the arms would use."""
        lane_taken_by_protected(card, self.protected, self.port)

    def instance(
        self,
        recipe: str,
        *,
        arm: str,
        check_keys: Sequence[str] | None,
        baseline: str | None,
        allow_outside_trained_block: bool,
    ) -> AbstractContextManager[BootReport]:
        return lane.instance(
            recipe, keep=True, dark=True, arm=arm, port=self.port, check_keys=check_keys, baseline=baseline,
            baseline_role="control", allow_outside_trained_block=allow_outside_trained_block,
            protected=self.protected,
        )  # fmt: skip

    def discard(self, recipe: str, arm: str) -> None:
        try:
            lane.down(recipe, arm=arm, protected=self.protected)
        except LaneError:
            pass  # nothing left over is the usual case

    def foreign(self, endpoint: str, sent_by_tool: float) -> ForeignCount:
        # Around every window: the bind check again (boot checked it once; a listener opened since is a leak the
        # windows' numbers cannot be trusted past), then the foreign request count.
        for info in lane.list_instances():
            if info.endpoint == endpoint and info.dark and info.state == "running":
                bind = lane.dark_bind(info.name)
                if bind is not None and bind.status == "fail":
                    raise LaneError(
                        f"{info.name} is dark but {bind.summary}; the card stops here (its receipts so "
                        "far are kept): stop what opened it and run the card again"
                    )
        check = lane.foreign_clients(endpoint, sent_by_tool=sent_by_tool)
        seen = check.evidence.get("foreign_requests")
        return ForeignCount(
            foreign_clients=None if seen is None else max(0, int(seen)), check=check.model_dump(mode="json")
        )

    def run_window(
        self, endpoint: str, window: WindowSpec, *, model: str, recipe: str, fingerprint: str | None
    ) -> WindowResult:
        return run_window(
            endpoint, window, model=model, recipe=recipe, fingerprint=fingerprint, invalid_retries=CELL_RETRIES
        )

    def selftest(self, concurrencies: list[int]) -> SelftestResult:
        """The bench client's self-test at the card's concurrency levels (see bench/selftest.py)."""
        return run_selftest(levels_for(concurrencies), agreement=False)


def lane_taken_by_protected(card: Card, protected: Protected, port: int | None) -> None:
    """Refuse, naming `--take-lane`, when production or the rollback pair serves the port an arm would boot on.

    Without this the first arm's boot would fail on a busy port with the lane's own advice (`--port N`), and the
    card's way to share one lane with production (`card run --take-lane`) would go unsaid.
    """
    if port is not None or not protected.instances:
        return
    from gb300lane.lane import records as instances

    wanted = {p: a for a in card.arms for p in lane.ports_of([load_recipe(a.recipe)])}
    for name, role in sorted(protected.instances.items()):
        record = instances.load(name)
        if record is None or record.port not in wanted or not lane.busy_ports([record.port]):
            continue
        arm = wanted[record.port]
        raise CardError(
            f"card {card.name}: port {record.port}, where arm {arm.name} ({arm.recipe}) boots, is served by "
            f"{name}, the lane's {role}; `gb300lane card run {card.name} --take-lane` stops it for the bracket and "
            f"restarts it afterwards, or `gb300lane card run {card.name} --port P` runs the arms beside it"
        )


def _flag_keys(card: Card) -> list[str]:
    return sorted({g.key for g in card.gates if isinstance(g, FlagGate)})


def arm_seed_base(seed_base: int, arm: str, stage: int) -> int:
    """An arm's own seed base for a stage: a stable 31-bit hash of (window seed base, arm, stage)."""
    digest = hashlib.sha256(f"{seed_base}:{arm}:{stage}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def arm_window(card: Card, window: WindowSpec, arm: Arm, stage: int) -> WindowSpec:
    """The window as `arm` runs it in `stage`: its own seed base, and its share of the rounds."""
    update: dict[str, Any] = {}
    if window.seed_base is not None and (card.seeds == "per_arm" or stage > 1):
        update["seed_base"] = arm_seed_base(window.seed_base, arm.name if card.seeds == "per_arm" else "*", stage)
    if isinstance(card.design, GroupSequential) and window.name == card.primary_window:
        update["rounds"] = window.rounds // card.design.looks
    return window.model_copy(update=update) if update else window


def stage_windows(card: Card, stage: int) -> list[WindowSpec]:
    """Windows a stage runs: all of them in stage 1, the primary window in later stages."""
    return [w for w in card.windows if stage == 1 or w.name == card.primary_window]


def lossless_gate(card: Card, window: str) -> LosslessGate | None:
    """The card's lossless gate on `window` (the referee scores the window's outputs for it), or None."""
    return next((g for g in card.gates if isinstance(g, LosslessGate) and g.window == window), None)


def run_arm(rec: Receipts, card: Card, arm_index: int, ops: ArmOps, progress: Progress, stage: int = 1) -> int:
    """Boot, measure and stop one arm as a new attempt; returns the attempt number."""
    arm = card.arms[arm_index]
    n = rec.next_attempt(arm.name, stage)
    adir = rec.attempt_dir(arm.name, n, stage)
    label = arm.name if stage_count(card) == 1 and stage == 1 else f"{arm.name} (stage {stage})"
    if n > 1:
        progress(f"{label}: attempt {n - 1} did not finish; removing its leftovers and booting again")
        ops.discard(arm.recipe, arm.name)
    rec.write_model(
        adir / "attempt.json",
        AttemptReceipt(arm=arm.name, recipe=arm.recipe, attempt=n, stage=stage, started_at=utc_now()),
    )
    progress(f"{label}: booting {arm.recipe} dark")
    # The flag check compares every arm with the control (production): B shows its changed keys.
    baseline = card.controls[0].recipe if card.controls else None
    booted = ops.instance(
        arm.recipe,
        arm=arm.name,
        check_keys=_flag_keys(card) or None,
        baseline=baseline,
        allow_outside_trained_block=arm.allow_outside_trained_block,
    )
    with booted as report:
        try:
            rec.write_model(adir / "boot.json", report)
            before = ops.foreign(report.endpoint, 0)
            sent = 0
            for w in (arm_window(card, x, arm, stage) for x in stage_windows(card, stage)):
                seeds = "" if w.seed_base is None else f", seed base {w.seed_base}"
                progress(
                    f"{label}: window {w.name} ({len(w.classes)} classes x C{'/C'.join(map(str, w.concurrency))}"
                    f" x {w.rounds} rounds, {w.transcripts_per_class} transcripts, {w.length_label()}"
                    f"{seeds})"
                )
                result = ops.run_window(
                    report.endpoint, w, model=report.served_model, recipe=arm.recipe, fingerprint=report.fingerprint
                )
                sent += len(result.records) + sum(len(t.records) for t in result.retried)
                gate = lossless_gate(card, w.name)
                if gate is not None:
                    progress(
                        f"{label}: window {w.name}: scoring its outputs by the arm's own prefill "
                        "(prompt_logprobs) for the lossless gate"
                    )
                    result = result.model_copy(
                        update={
                            "lossless": referee_window(
                                result,
                                report.endpoint,
                                model=report.served_model,
                                alpha=gate.alpha,
                                margin=gate.margin,
                                min_tokens=gate.min_tokens,
                            )
                        }
                    )
                    sent += result.lossless.referee_requests if result.lossless is not None else 0
                rec.write_model(adir / "windows" / f"{w.name}.json", result)
                for t in result.retried:
                    c = t.cell
                    progress(
                        f"{label}: window {w.name}: cell {c.cls} {load_label(c)} r{c.round} was invalid "
                        f"({'; '.join(c.invalid_reasons)}); it ran again"
                    )
                for c in (c for c in result.cells if not c.valid):
                    progress(
                        f"{label}: window {w.name}: cell {c.cls} {load_label(c)} r{c.round} is still invalid "
                        f"after {CELL_RETRIES + 1} tries ({'; '.join(c.invalid_reasons)}); the verdict leaves it "
                        "out and says so"
                    )
            after = ops.foreign(report.endpoint, sent)
            counts = [x.foreign_clients for x in (before, after)]
            rec.write_model(
                adir / "foreign.json",
                ForeignReceipt(
                    before_windows=before,
                    after_windows=after,
                    sent_by_bench=sent,
                    foreign_clients=None if None in counts else max(c for c in counts if c is not None),
                ),
            )
        finally:
            progress(f"{label}: stopping {report.instance} (containers kept)")
    rec.write_model(
        rec.arm_dir(arm.name, stage) / "done.json", DoneReceipt(attempt=n, stage=stage, finished_at=utc_now())
    )
    return n


#: Self-test runs before a card refuses: a host's noise is often a passing burst, a client's error is not.
SELFTEST_ATTEMPTS = 2


def _wall_clock_figures(card: Card) -> bool:
    """Whether the card's figures are the client's own timing: any arm on a real vLLM lane (no modelled clock)."""
    from gb300lane.recipes import load_recipe

    return any(load_recipe(arm.recipe).engine != "embedded" for arm in card.arms)


def _selftest(rec: Receipts, card: Card, check: Callable[[list[int]], SelftestResult]) -> str:
    """Run the client's self-test before any window, record it (selftest-N.json), refuse on a missed bound.

    A failed self-test is run once more (both are recorded); the card refuses when the last one fails too
    and its figures are on the client's wall clock (an arm on a real vLLM lane). Where every arm is the
    embedded engine, the cells lead with the engine's modelled clock, which no client timing enters, so a
    miss is recorded and said, not binding.
    """
    levels = sorted({c for w in card.windows for c in w.concurrency})
    results = []
    for _ in range(SELFTEST_ATTEMPTS):
        results.append(check(levels))
        if results[-1].passed:
            break
    result = results[-1]
    n = 1
    while (rec.root / f"selftest-{n}.json").exists():
        n += 1
    path = rec.root / f"selftest-{n}.json"
    rec.write_model(path, SelftestReceipt(concurrency=levels, passed=result.passed, attempts=results))
    binding = _wall_clock_figures(card)
    if not result.passed and not binding:
        return (
            f"client self-test at C{'/C'.join(map(str, levels))} missed its registered bounds "
            f"({'; '.join(result.failures())}); recorded in selftest-{n}.json. Not binding here: every arm "
            "runs on the embedded engine, whose cells lead with its modelled clock, which the client does not "
            "time"
        )
    if not result.passed:
        raise CardError(
            f"the bench client's self-test missed its registered bounds {len(results)} times (last: "
            f"{'; '.join(result.failures())}); its figures would carry that error, so no window was run. Recorded "
            f"in {path}. Run `gb300lane bench selftest` when the host is quieter (load average "
            f"{result.load_average or 0:.1f}), then run the card again"
        )
    worst = max((lv.ttft_error_ms_p99 or 0.0 for lv in result.levels), default=0.0)
    sigma = max((lv.itl_error_sigma_ms or 0.0 for lv in result.levels), default=0.0)
    again = "" if len(results) == 1 else f" on attempt {len(results)}"
    return (
        f"client self-test at C{'/C'.join(map(str, levels))}: TTFT error p99 <= {worst:.2f} ms, ITL error "
        f"sigma <= {sigma:.3f} ms, within the registered bounds{again} (selftest-{n}.json)"
    )


def run_stages(rec: Receipts, card: Card, ops: ArmOps, say: Progress, first: int, last: int) -> list[str]:
    """Run stages first..last of the card's plan (each arm in bracket order; finished arms are skipped), taking a
    look after each where the plan has more than one, and stopping at the look that decides (`last` is final).

    `card run` runs the design's stages, `card extend` an extension's; the lane's preflight and the client's
    self-test (when `ops` offers them) come first whenever an arm is left to run.
    """
    from gb300lane.cards.record.look_receipts import take_look

    lines: list[str] = []
    stages = stage_count(card)
    unfinished = any(
        rec.finished_attempt(arm.name, stage) is None for stage in range(first, last + 1) for arm in card.arms
    )
    preflight = getattr(ops, "preflight", None)  # the live lane's; doubles that boot nothing have none
    if preflight is not None:
        preflight(card)
    check = getattr(ops, "selftest", None)
    if unfinished and check is not None:
        lines.append(_selftest(rec, card, check))
        say(lines[-1])
    for stage in range(first, last + 1):
        for i, arm in enumerate(card.arms):
            label = arm.name if stages == 1 and last == 1 else f"{arm.name} (stage {stage})"
            done = rec.finished_attempt(arm.name, stage)
            if done is not None:
                lines.append(f"{label}: finished earlier (attempt {done}); skipped")
                say(lines[-1])
                continue
            n = run_arm(rec, card, i, ops, say, stage)
            lines.append(f"{label}: finished (attempt {n})")
            say(lines[-1])
        if planned_stages(card) > 1:
            look = take_look(rec, card, stage, final_at=last)
            lines.append(
                f"look {look.look} of {look.looks}: {look.verdict} with {look.requests_per_arm} requests "
                f"per arm -> {look.action}"
            )
            say(lines[-1])
            if look.action != "continue":
                break
    return lines


def run_card(
    rec: Receipts, *, ops: ArmOps | None = None, progress: Progress | None = None, protected: Protected = lane.NOTHING
) -> list[str]:
    """Run every unfinished arm (and stage) in bracket order; returns one line per arm saying what happened.

    `protected` (production and the rollback pair, from the layer above) is
    never replaced by an arm's boot nor removed by a discard.
    """
    card = rec.card()
    rec.check_frozen(card)
    if rec.registration().transcribed:
        raise CardError(
            f"{rec.root}: these receipts were transcribed from a write-up; they cannot be run. "
            "Run the local card instead (e.g. `gb300lane card run local-br1`)"
        )
    ops = ops or LiveArmOps(protected)
    lines = run_stages(rec, card, ops, progress or (lambda _msg: None), 1, stage_count(card))
    if not (rec.root / "manifest.json").exists():
        rec.write_manifest("run")
    return lines
