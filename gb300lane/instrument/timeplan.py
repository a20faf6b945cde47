"""Plans in time: what each design of a card costs in wall-clock on the lane it runs on.

A card's arms are booted one after another (A, B, A2), so its time is

    looks x sum over the arms (one boot + the requests of one stage)

A fixed design boots each arm once for all its requests; a group-sequential
design boots every arm again at each look, so it pays the boots as many times
as it takes looks, for the requests its early stop saves. Two sequential
shapes are costed: the card's looks (a reboot per look), and half as many
looks of twice the requests per boot. Each needs its maximum size inflated by
the factor that keeps the power (`cards.decide.sequential`); it is expected to stop
at the fraction of that maximum its boundaries give at the registered effect,
and at worst runs every look. A card that registers an extension
(`design.extension`) is costed as its registered plan: its K looks (the
design's and the extension's) are the first sequential shape, and a last row
is the card at its own stage size, extended look by look until it decides
(`CardPlan.extension`: its maximum, its expected looks at the registered
effect); the fixed row is the one-look design of the same power.

The boot seconds come from the lane's own boot reports: earlier cards' arms
(their boot facts: seconds, compile-cache hit or miss) and the boot studies'
reports of the same recipes. The expected time books every boot at the median
hit; the worst case books every boot as the slowest miss seen (or the median
boot when no miss is on record). On the embedded engine a boot also has a
modelled length (`engine.modelled_boot`: the GB300's weights, compile, autotune and
graph capture), which the table shows beside the wall clock, each labelled.
The requests' seconds come from measured throughput per cell: the control
windows `card plan` reads its noise from, each cell's requests x forced tokens
over its aggregate decode rate, on that window's clock (TTFT left out: a
lower bound on the requests' time).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from pydantic import Field

from gb300lane.cards.decide.data import WindowData
from gb300lane.cards.decide.results import CardPlan
from gb300lane.cards.decide.sequential import boundaries, power_and_stop
from gb300lane.cards.schema import Card, GroupSequential, TokensPerStepTest, plan_spending
from gb300lane.errors import CardError
from gb300lane.models import FrozenModel

DEFAULT_LOOKS = 4  # a fixed card is costed against the sequential shape the shipped sequential card uses


class BootTimes(FrozenModel):
    """Boot seconds of one clock: median hit and slowest miss, and how many boots they rest on."""

    clock: str = Field(description="wall (the lane measured it) or modelled (the embedded engine's GB300 model).")
    hit_s: float | None = Field(description="Median seconds of a compile-cache hit boot (None: none on record).")
    miss_s: float | None = Field(description="Slowest compile-cache miss on record (None: none on record).")
    boots: int = Field(description="Boots the figures rest on (0 for the modelled clock).")
    misses: int | None = Field(
        default=None,
        description="Compile-cache misses among them (None: the modelled clock); "
        "with none, miss_s is the median boot, as the worst case books it.",
    )


class DesignTime(FrozenModel):
    """One design's size and wall-clock."""

    design: str = Field(description="fixed, or group_sequential with its looks.")
    looks: int = Field(description="Looks (boots per arm at worst).")
    requests_per_arm: int | None = Field(description="Maximum requests per arm that reach the target power.")
    expected_requests_per_arm: float | None = Field(description="Expected requests per arm at the registered effect.")
    expected_looks: float = Field(description="Expected looks at the registered effect.")
    request_s: float | None = Field(description="Seconds of requests per arm at the maximum size.")
    expected_s: dict[str, float | None] = Field(description="Clock -> expected seconds for the whole card.")
    worst_s: dict[str, float | None] = Field(description="Clock -> worst-case seconds (every look, every boot a miss).")


class TimePlan(FrozenModel):
    """What `card plan` prints as the designs' wall-clock."""

    card: str = Field(description="Card name.")
    target_power: float = Field(description="The power every design is sized for.")
    boots: tuple[BootTimes, ...] = Field(description="Boot seconds per clock.")
    request_clock: str | None = Field(description="Clock the requests' seconds are on (wall or modelled).")
    request_source: str = Field(description="Where the throughput per cell came from.")
    designs: tuple[DesignTime, ...] = Field(description="Fixed and sequential designs.")
    cheapest: dict[str, str] = Field(
        default_factory=dict,
        description="Boot clock -> the design with the smallest expected time reaching the target power on it.",
    )
    note: str = Field(default="", description="Why a figure is missing, when it is.")


def _modelled_boot(card: Card) -> BootTimes | None:
    """The embedded engine's modelled boot of the control recipe (hit and miss), when the card runs on it."""
    from gb300lane.cards.embedded import runs_embedded
    from gb300lane.engine import modelled_boot as eb
    from gb300lane.engine.config import default_capture_sizes
    from gb300lane.recipes import load_recipe

    if not runs_embedded(card):
        return None
    r = load_recipe(card.controls[0].recipe)
    sizes = r.engine_args.compilation_config.get("cudagraph_capture_sizes") or default_capture_sizes(
        r.engine_args.max_num_seqs, r.speculative.num_speculative_tokens or 0
    )
    capture = eb.CAPTURE_S_PER_SIZE * len(sizes)
    hit = eb.WEIGHTS_S + eb.COMPILE_HIT_S + eb.PROFILE_HIT_S + eb.INIT_REST_S + capture
    miss = eb.WEIGHTS_S + eb.COMPILE_MISS_S + eb.PROFILE_MISS_S + eb.INIT_REST_S + capture
    return BootTimes(clock="modelled", hit_s=round(hit, 1), miss_s=round(miss, 1), boots=0)


def lane_boots(card: Card, base: Path | None = None) -> BootTimes | None:
    """Wall seconds of the boots on record for the card's recipes: earlier cards' arms and boot studies."""
    from gb300lane.cards.record.arms import boot_facts_from_report
    from gb300lane.cards.record.studies import boot_dirs, pilot_dirs
    from gb300lane.cards.record.verified import planning_receipts
    from gb300lane.lane.report import BootReport

    recipes = {a.recipe for a in card.arms}
    hits: list[float] = []
    misses: list[float] = []
    other: list[float] = []
    for rec in planning_receipts(base).kept:
        try:
            if rec.registration().transcribed:
                continue
            arms = rec.load_arms(rec.card())
        except CardError:
            continue
        for a in arms:
            b = a.boot
            if a.recipe in recipes and a.source == "measured" and b is not None and b.boot_seconds is not None:
                (hits if b.hash_hit else misses if b.hash_hit is False else other).append(b.boot_seconds)
    # the boot reports a pilot and a real boot study keep (an in-process study boots nothing on the lane)
    reports = [d / "boot.json" for d in pilot_dirs(card, base)]
    reports += [f for d in boot_dirs(card, base) for f in sorted(d.glob("report-*.json"))]
    for f in reports:
        if not f.is_file():
            continue
        facts = boot_facts_from_report(BootReport.model_validate_json(f.read_bytes()), None)
        if facts.boot_seconds is not None:
            hit = facts.hash_hit
            (hits if hit else misses if hit is False else other).append(float(facts.boot_seconds))
    seen = hits + misses + other
    if not seen:
        return None
    hit_s = statistics.median(hits or other or misses)
    miss_s = max(misses) if misses else statistics.median(seen)
    return BootTimes(clock="wall", hit_s=round(hit_s, 3), miss_s=round(miss_s, 3), boots=len(seen), misses=len(misses))


def _request_seconds(card: Card, windows: list[tuple[str, WindowData]]) -> tuple[float | None, str | None]:
    """Seconds of one arm's primary window as written, from the control windows' throughput per cell."""
    w = card.window(card.primary_window)
    per: dict[tuple[str, int], list[float]] = {}
    clocks = set()
    for _, data in windows:
        for c in data.cells:
            if c.decode_tok_s and c.decode_tok_s > 0:
                per.setdefault((c.cls, c.concurrency), []).append(w.token_cap / c.decode_tok_s)
                clocks.add(data.clock or "modelled")
    total = 0.0
    for cls in w.classes:
        for conc in w.concurrency:
            got = per.get((cls, conc))
            if not got:
                return None, None
            total += statistics.median(got) * w.transcripts_per_class * w.rounds
    return total, "/".join(sorted(clocks))


def _seq_shape(card: Card, looks: int, target: float) -> tuple[float, float]:
    """(inflation of the maximum size, expected fraction used at the registered effect) for `looks` looks."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    gate = next((g for g in card.gates if isinstance(g, TokensPerStepTest)), None)
    alpha = gate.alpha if gate is not None else 0.025
    spending = (
        plan_spending(card)
        if card.design.extension is not None
        else card.design.spending
        if isinstance(card.design, GroupSequential)
        else "pocock"
    )
    bounds = boundaries(alpha, looks, spending)
    drift = float(norm.isf(alpha) + norm.ppf(target))
    infl = float(brentq(lambda r: power_and_stop(bounds, drift * math.sqrt(r))[0] - target, 0.5, 4.0))
    _, used = power_and_stop(bounds, drift * math.sqrt(infl))
    return infl, used


def time_plan(card: Card, plan: CardPlan, windows: list[tuple[str, WindowData]], base: Path | None = None) -> TimePlan:
    """Each design's expected and worst-case wall-clock (module docstring), sized for the plan's target power."""
    boots = [b for b in (lane_boots(card, base), _modelled_boot(card)) if b is not None]
    window_s, clock = _request_seconds(card, windows)
    arms = len(card.arms)
    ext = plan.extension
    fixed_n = plan.requests_per_arm_for_target
    if ext is not None:  # the registered plan's maximum at the target is a K-look design's: take its inflation out
        looks = ext.looks
        infl_k, _ = _seq_shape(card, looks, plan.target_power)
        got = ext.requests_per_arm_for_target
        fixed_n = None if got is None else math.ceil(got / infl_k)
    elif fixed_n is not None and isinstance(card.design, GroupSequential):
        # the fixed size at the target: a sequential card's plan sizes the maximum, so take its inflation back out
        fixed_n = math.ceil(fixed_n / plan.inflation) if plan.inflation > 0 else fixed_n
    if ext is None:
        looks = card.design.looks if isinstance(card.design, GroupSequential) else DEFAULT_LOOKS
    # (label, looks, maximum requests per arm or None, expected fraction of it used, reaches the target power)
    shapes: list[tuple[str, int, int | None, float, bool]] = [("fixed", 1, fixed_n, 1.0, True)]
    for k in sorted({looks, max(2, looks // 2)}, reverse=True):
        infl, used = _seq_shape(card, k, plan.target_power)
        if k == looks and ext is not None:
            label = f"registered plan, {ext.design_looks} + {ext.looks - ext.design_looks} looks (a reboot per look)"
        else:
            label = f"group_sequential, {k} looks" + (
                " (a reboot per look)" if k == looks else f" ({looks // k} x the requests per boot)"
            )
        shapes.append((label, k, None if fixed_n is None else math.ceil(fixed_n * infl), used, True))
    if ext is not None:  # the card at its own stage size, extended look by look until it decides
        used = (ext.expected_looks / ext.looks) if ext.expected_looks is not None else 1.0
        shapes.append(
            (
                f"as written, extended ({ext.stage_requests_per_arm} per stage)",
                ext.looks,
                ext.requests_per_arm,
                used,
                (ext.power or 0.0) >= plan.target_power,
            )
        )
    designs = []
    note = "" if fixed_n is not None else "the plan reaches no target size: times are for the card as written"
    n0 = plan.requests_per_arm
    for label, k, n_target, used, _ in shapes:
        n_max = n_target
        size = n_max if n_max is not None else n0
        req_s = None if window_s is None else window_s * size / n0
        exp_looks = used * k
        expected: dict[str, float | None] = {}
        worst: dict[str, float | None] = {}
        for b in boots:
            hit = b.hit_s if b.hit_s is not None else b.miss_s
            miss = b.miss_s if b.miss_s is not None else b.hit_s
            expected[b.clock] = (
                None if req_s is None or hit is None else round(arms * (exp_looks * hit + used * req_s), 1)
            )
            worst[b.clock] = None if req_s is None or miss is None else round(arms * (k * miss + req_s), 1)
        designs.append(
            DesignTime(
                design=label,
                looks=k,
                requests_per_arm=n_max,
                expected_requests_per_arm=None if n_max is None else round(used * n_max, 1),
                expected_looks=round(exp_looks, 2),
                request_s=None if req_s is None else round(req_s, 2),
                expected_s=expected,
                worst_s=worst,
            )
        )
    cheapest: dict[str, str] = {}
    for b in boots if fixed_n is not None else ():
        timed = [
            (t, d.design)
            for d, shape in zip(designs, shapes)
            if shape[4] and (t := d.expected_s.get(b.clock)) is not None
        ]
        if timed:
            cheapest[b.clock] = min(timed)[1]
    if window_s is None:
        note = (note + "; " if note else "") + "no measured throughput for every cell of the primary window"
    if not boots:
        note = (note + "; " if note else "") + "no boot reports of the card's recipes on this lane"
    return TimePlan(
        card=card.name,
        target_power=plan.target_power,
        boots=tuple(boots),
        request_clock=clock,
        request_source=plan.source,
        designs=tuple(designs),
        cheapest=cheapest,
        note=note,
    )


__all__ = ["BootTimes", "DesignTime", "TimePlan", "lane_boots", "time_plan"]
