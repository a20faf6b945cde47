"""Power and size before any arm runs: `card plan`.

The noise a card's tests face is the spread of one request's tokens/step and
decode tok/s around its transcript's mean (other seeds, other batches), per
class x concurrency cell. `plan` estimates it from control data of the same
lane: earlier receipts whose control arms booted the card's control recipe
with the same temperature and forced length, or else a short pilot of arm A
(2 rounds of a few transcripts per cell). From it, for every tested gate:

    var(unit difference) = (1 + 1/controls) sigma^2 / rounds      (B against the controls' mean)
    var(A - A2)          = 2 sigma^2 / rounds                     (the controls' equivalence)

and the normal approximation of the one-sided test gives the power at the
gate's `mde` (0 where none is set: B no better, the conservative case for a
non-inferiority gate), and the requests per arm that reach the target power.

Each arm is a boot, and a boot shifts its arm's mean as a whole
(`cards.decide.boots`): that variance does not shrink with requests, so it is added
to each test's as the test adds it (`cards.decide.stats`),

    + (1 + 1/controls) sigma_b^2 / boots per arm                (2 sigma_b^2 for A against A2)

with sigma_b the gate's registered `boot_sd`, or, where it registers none,
what a boot study measured (`card plan --boots N`: N boots of the control
recipe, each its own seeds (in process on the embedded engine; real boots through the lane for any other
engine), each over what
one boot of the card's arms runs (a sequential card's one stage); receipts
under results/pilots/). Past the point where the boots dominate, more
requests buy no power: `plan` then says the target is unreachable.
A group-sequential design needs its maximum inflated by the factor that
keeps the power (`cards.decide.sequential`); its expected size at the mde is shown
beside it. A card that registers an extension (`design.extension`) is planned
as the one alpha-spending plan of K equal stages it registers: its own looks
test at their share of each alpha (the crossing probabilities of the plan's
boundaries, on the whole plan's information, the boots' share over K boots
per arm), and `CardPlan.extension` carries the power by look K with every
further look taken, the plan's most and expected requests per arm, and the
most that reaches the target. The card's power is the product over deciding gates (treated as
independent), so it is a planning figure, not a guarantee: `card calibrate`
measures the real rates on the engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from gb300lane.cards.decide.boots import (
    BootEstimate,
    critical_boot_sd,
    estimate_boot_sd,
    refuse_pinned_boot_seed,
    registered_check,
)
from gb300lane.cards.decide.data import ArmData, WindowData
from gb300lane.cards.decide.more import boot_factor, boots_per_arm
from gb300lane.cards.decide.results import CardPlan, ExtensionPlanFigures, GatePlan
from gb300lane.cards.decide.sequential import PLAN_GRID, boundaries, crossing, power_and_stop, used_fraction
from gb300lane.cards.record.models import BootStudyReceipt, PilotReceipt
from gb300lane.cards.record.noise import LedgerEstimate, for_card
from gb300lane.cards.record.receipts import new_run_dir
from gb300lane.cards.record.studies import (
    boot_provenance,
    boot_window,
    earlier_boots,
    measured_on,
    pilot_dirs,
    pilot_root,
    pilot_windows,
    same_primary,
)
from gb300lane.cards.record.verified import planning_receipts
from gb300lane.cards.schema import (
    Arm,
    Card,
    ControlsEquivalence,
    GroupSequential,
    Spending,
    TestedGate,
    TokensPerStepTest,
    plan_spending,
    planned_stages,
    stage_count,
)
from gb300lane.errors import CardError, LaneError
from gb300lane.instrument.calibrate import Calibration, RateCI, calibration_boot_notes
from gb300lane.models import FrozenModel
from gb300lane.recipes import load_recipe
from gb300lane.recipes.schema import WindowSpec

if TYPE_CHECKING:  # the run path and the in-process engine are imported when a pilot or a study runs
    from gb300lane.cards.run import ArmOps
    from gb300lane.instrument.simulate import InProcessLane

TARGET_POWER = 0.9

#: Scored cards the lane's noise ledger must rest on before a plan uses it over a boot study (each adds one df).
LEDGER_MIN_CARDS = 3
PILOT_TRANSCRIPTS = 8

Cell = tuple[str, int]


@dataclass(frozen=True)
class Sample:
    """One control request: where it ran, its transcript and round, and what it measured."""

    source: str  # the arm (or pilot) window it came from
    cls: str
    concurrency: int
    transcript: str
    round: int
    tokens_per_step: float | None
    decode_tok_s: float | None


@dataclass
class Noise:
    """Control requests of the same lane, kept one by one so each test can form its own units."""

    samples: list[Sample] = field(default_factory=list)
    _per_class: dict[tuple[str, tuple[Cell, ...]], dict[str, tuple[float, float, int]] | None] = field(
        default_factory=dict, repr=False
    )

    @property
    def requests(self) -> int:
        return len(self.samples)


def noise_from_windows(windows: list[tuple[str, WindowData]]) -> Noise:
    """Every request of the (source, window) pairs given."""
    out = Noise()
    for source, w in windows:
        for c in w.cells:
            for t in set(c.per_transcript) | set(c.per_transcript_tps):
                out.samples.append(
                    Sample(
                        source=source,
                        cls=c.cls,
                        concurrency=c.concurrency,
                        transcript=t,
                        round=c.round or 0,
                        tokens_per_step=c.per_transcript_tps.get(t),
                        decode_tok_s=c.per_transcript.get(t),
                    )
                )
    return out


def unit_noise(noise: Noise, metric: str, cells: list[Cell]) -> dict[str, tuple[float, float, int]] | None:
    """Per class: (variance, mean, degrees of freedom) of one round's unit, a transcript averaged over `cells`.

    A transcript's requests at the concurrencies of one round share a seed,
    so they are averaged into one value first; the variance is then taken
    across that transcript's rounds and arms (other seeds, other boots),
    pooled over transcripts. None when a class has no repeated transcript.
    """
    wanted: dict[str, set[int]] = {}
    for cls, conc in cells:
        wanted.setdefault(cls, set()).add(conc)
    by_round: dict[tuple[str, str, str, int], dict[int, float]] = {}
    for smp in noise.samples:
        v = smp.tokens_per_step if metric == "tokens_per_step" else smp.decode_tok_s
        if v is None or smp.concurrency not in wanted.get(smp.cls, ()):
            continue
        by_round.setdefault((smp.source, smp.cls, smp.transcript.split("#")[0], smp.round), {})[smp.concurrency] = v
    per_t: dict[tuple[str, str], list[float]] = {}
    for (_, cls, tid, _), vals in by_round.items():
        if set(vals) == wanted[cls]:
            per_t.setdefault((cls, tid), []).append(sum(vals.values()) / len(vals))
    out: dict[str, tuple[float, float, int]] = {}
    for cls in wanted:
        groups = [xs for (c, _), xs in per_t.items() if c == cls]
        df = sum(len(xs) - 1 for xs in groups)
        if df <= 0:
            return None
        ss = sum(sum((x - sum(xs) / len(xs)) ** 2 for x in xs) for xs in groups)
        allv = [x for xs in groups for x in xs]
        out[cls] = (ss / df, sum(allv) / len(allv), df)
    return out


def _norm() -> Any:
    from scipy.stats import norm

    return norm


def _window_requests(w: WindowSpec) -> int:
    return len(w.classes) * w.transcripts_per_class * len(w.concurrency) * w.rounds


def _gate_cells(card: Card, gate: TestedGate) -> list[Cell]:
    w = card.window(gate.window)
    return [
        (c, n)
        for c in w.classes
        for n in w.concurrency
        if (gate.classes is None or c in gate.classes) and (gate.concurrency is None or n in gate.concurrency)
    ]


def _tests_se(
    card: Card, gate: TestedGate, noise: Noise, scale: float, boot_sd: float = 0.0, boots: int | None = None
) -> tuple[list[float], str]:
    """The relative standard error of each of the gate's tests when the window is `scale` times as large,
    with the boots' component at `boot_sd` (relative) per arm over `boots` boots per arm (the card's own)."""
    metric = gate.metric
    w = card.window(gate.window)
    cells = _gate_cells(card, gate)
    n_ctrl = len(card.controls)
    factor = 2.0 if isinstance(gate, ControlsEquivalence) else 1.0 + 1.0 / n_ctrl
    units = w.transcripts_per_class * scale
    groups = [cells] if gate.scope == "aggregate" else [[c] for c in cells]
    out = []
    for group in groups:
        memo = (metric, tuple(group))
        if memo not in noise._per_class:  # the same for every size tried
            noise._per_class[memo] = unit_noise(noise, metric, group)
        per_cls = noise._per_class[memo]
        if per_cls is None:
            return [], f"no repeated control transcripts for {', '.join(f'{c} C{n}' for c, n in group)}"
        v = sum(units * factor * var / w.rounds for var, _, _ in per_cls.values())
        base = sum(mean for _, mean, _ in per_cls.values()) / len(per_cls)
        rel2 = v / (units * len(per_cls)) ** 2 / base**2 + factor * boot_sd**2 / (boots or boots_per_arm(card))
        out.append(math.sqrt(rel2))
    return out, ""


def _gate_power(gate: TestedGate, ses: list[float], level: float, effect: float) -> float:
    norm = _norm()
    z = norm.isf(level)
    p = 1.0
    for se in ses:
        if gate.test == "superiority":
            p *= float(norm.cdf((effect - gate.margin) / se - z))
        elif gate.test == "non_inferiority":
            p *= float(norm.cdf((effect + gate.margin) / se - z))
        else:
            p *= max(
                0.0, float(norm.cdf((gate.margin - effect) / se - z) + norm.cdf((gate.margin + effect) / se - z) - 1)
            )
    return p


def _plan_crossings(gate: TestedGate, ses: list[float], bounds: Sequence[float], effect: float) -> list[list[float]]:
    """Per test of the gate, P(the gate decides for B first at look k) of a plan with upper z `bounds` (equal
    stages), the test's se `ses` being at the plan's full information. An equivalence test's two one-sided tests
    are each a path of their own; the gate decides when both have crossed (Bonferroni's bound on the joint)."""
    out = []
    for se in ses:
        if gate.test == "equivalence":
            out.append(
                _both(
                    crossing(bounds, (gate.margin - effect) / se, PLAN_GRID),
                    crossing(bounds, (gate.margin + effect) / se, PLAN_GRID),
                )
            )
        else:
            gap = effect - gate.margin if gate.test == "superiority" else effect + gate.margin
            out.append(crossing(bounds, gap / se, PLAN_GRID))
    return out


def _both(lo: list[float], hi: list[float]) -> list[float]:
    """Per look, the increase of max(0, P(lower crossed by k) + P(upper crossed by k) - 1)."""
    prev, out, a, b = 0.0, [], 0.0, 0.0
    for x, y in zip(lo, hi):
        a, b = a + x, b + y
        now = max(0.0, a + b - 1.0)
        out.append(now - prev)
        prev = now
    return out


def _solve_scale(power_at: Callable[[float], float], target: float) -> float | None:
    lo, hi = 1e-3, 1.0
    if power_at(hi) < target:
        while power_at(hi) < target:
            hi *= 2
            if hi > 1e4:
                return None
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if power_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def plan_card(
    card: Card,
    noise: Noise,
    source: str,
    *,
    target: float = TARGET_POWER,
    effect: float | None = None,
    boots: list[ArmData] | None = None,
    boot_source: str = "",
    lane_noise: Mapping[str, LedgerEstimate] | None = None,
    effects: Mapping[str, float] | None = None,
    share: float = 1.0,
) -> CardPlan:
    """Planning figures for every tested gate and the card (see the module docstring); `boots` are a boot
    study's arms (each one boot of the control recipe), from which each gate's boot sd is measured. `share` is the
    share of each gate's alpha the run spends (its question's, `decide.question`): the plan is of that run.

    `lane_noise` is the lane's noise ledger by metric (`cards.record.noise.for_card`): where it rests on at least
    `LEDGER_MIN_CARDS` scored cards, an aggregate gate's boot sd is the ledger's; else the boot study's; else the
    registered figure. Each gate says which (`boot_sd_source`), and is checked against the figure it used."""
    if share != 1.0:  # the run's alpha: every figure below is of the run about to be registered
        card = card.model_copy(
            update={
                "gates": tuple(
                    g.model_copy(update={"alpha": g.alpha * share}) if isinstance(g, TestedGate) else g
                    for g in card.gates
                )
            }
        )
    primary = card.window(card.primary_window)
    n_arm = _window_requests(primary)
    inflation, design = 1.0, "fixed"
    seq = card.design if isinstance(card.design, GroupSequential) else None
    gates = [g for g in card.gates if isinstance(g, TestedGate)]
    if not gates:
        raise CardError(
            f"card {card.name} has no tested gates (tokens_per_step, decode_tok_s, controls_equivalence); "
            "nothing to plan"
        )

    def eff(g: TestedGate) -> float:
        if isinstance(g, ControlsEquivalence):
            return 0.0
        if effects is not None and g.id in effects:
            return effects[g.id]
        if effect is not None and isinstance(g, TokensPerStepTest):
            return effect
        return g.mde or 0.0

    own_looks, all_looks, spending = stage_count(card), planned_stages(card), plan_spending(card)
    extended = all_looks > own_looks
    if extended:  # one plan of all_looks equal stages: the design's own looks take their share of each alpha
        design = (
            f"{design if not seq else f'group_sequential, {seq.looks} looks'}, extension of "
            f"{all_looks - own_looks} looks ({own_looks} of a {all_looks}-look plan, {spending} spending)"
        )
    elif seq:
        design = f"group_sequential, {seq.looks} looks, {seq.spending} spending"
        primary_gate = next((g for g in gates if isinstance(g, TokensPerStepTest)), gates[0])
        norm = _norm()
        bounds = boundaries(primary_gate.alpha, seq.looks, seq.spending)
        drift = norm.isf(primary_gate.alpha) + norm.ppf(target)
        from scipy.optimize import brentq

        inflation = float(brentq(lambda r: power_and_stop(bounds, drift * math.sqrt(r))[0] - target, 0.5, 4.0))

    rows: list[GatePlan] = []
    per_gate_power: dict[str, Callable[..., float]] = {}  # (scale, taken=looks) -> power
    measured: dict[str, BootEstimate | None] = {}
    measured_by: dict[str, str] = {}
    for g in gates:
        led = (lane_noise or {}).get(g.metric) if g.scope == "aggregate" else None
        if led is not None and led.cards >= LEDGER_MIN_CARDS:
            measured[g.id], measured_by[g.id] = led.as_boot_estimate(), led.source()
        elif boots:
            measured[g.id], measured_by[g.id] = estimate_boot_sd(g, boots), "the boot study"
        else:
            measured[g.id] = None
        if measured[g.id] is None:
            measured_by[g.id] = "registered"

    def sd_of(g: TestedGate) -> float:
        m = measured[g.id]
        if m is not None and measured_by[g.id] != "the boot study":
            return m.sd  # the lane's own history first
        return float(g.boot_sd) if g.boot_sd > 0 else (m.sd if m is not None else 0.0)

    def boot_fields(g: TestedGate) -> dict[str, Any]:
        m = measured[g.id]
        crit = critical_boot_sd(eff(g), g.margin, g.test, g.alpha, boot_factor(card, g), boots_per_arm(card), target)
        where = measured_by[g.id]
        check = "" if m is None else registered_check(g.id, m, float(g.boot_sd), g.boot_df, where, crit)
        return {
            "boot_sd": sd_of(g),
            "boot_check": check,
            "boot_sd_source": where,
            "boot_sd_lower": None if m is None else m.lower,
            "boot_sd_registered": float(g.boot_sd),
            "boot_sd_measured": None if m is None else m.sd,
            "boot_df_measured": None if m is None or m.df is None else int(m.df),  # rounded down
            "boot_sd_upper": None if m is None else m.upper,
            "boot_f_ratio": None if m is None else m.f_ratio,
        }

    for g in gates:
        ses, why = _tests_se(card, g, noise, 1.0, sd_of(g))
        if not ses:
            rows.append(
                GatePlan(
                    gate=g.id,
                    test=g.test,
                    decides=g.decides,
                    alpha=g.alpha,
                    margin=g.margin,
                    effect=eff(g),
                    se=None,
                    power=None,
                    requests_per_arm_for_target=None,
                    note=why,
                    **boot_fields(g),
                )
            )
            continue

        def power_at(scale: float, g: TestedGate = g, taken: int = own_looks) -> float:
            if not extended:
                s, _ = _tests_se(card, g, noise, scale / inflation, sd_of(g))
                return _gate_power(g, s, g.alpha, eff(g))
            # the whole plan's information: all its stages, a boot per arm each; crossings by look `taken`
            s, _ = _tests_se(card, g, noise, scale * all_looks / own_looks, sd_of(g), boots=all_looks)
            bounds = boundaries(g.alpha, all_looks, spending)
            return math.prod(sum(c[:taken]) for c in _plan_crossings(g, s, bounds, eff(g)))

        if g.test == "superiority" and eff(g) <= g.margin:
            rows.append(
                GatePlan(
                    gate=g.id,
                    test=g.test,
                    decides=g.decides,
                    alpha=g.alpha,
                    margin=g.margin,
                    effect=eff(g),
                    se=max(ses),
                    power=None,
                    requests_per_arm_for_target=None,
                    note="no mde above the margin: give the gate an mde to plan its power",
                    **boot_fields(g),
                )
            )
            continue
        per_gate_power[g.id] = power_at
        scale = _solve_scale(power_at, target)
        rows.append(
            GatePlan(
                gate=g.id,
                test=g.test,
                decides=g.decides,
                alpha=g.alpha,
                margin=g.margin,
                effect=eff(g),
                se=max(ses),
                power_extended=power_at(1.0, g, all_looks) if extended else None,
                power=power_at(1.0),
                requests_per_arm_for_target=None if scale is None else math.ceil(n_arm * scale),
                note=""
                if scale is not None
                else "unreachable at this effect and margin"
                + (" (the boots' shift alone is too large)" if scale is None and sd_of(g) > 0 else ""),
                **boot_fields(g),
            )
        )
    deciding = [per_gate_power[r.gate] for r in rows if r.decides and r.gate in per_gate_power]
    card_power = None
    card_n = None
    planned = all(r.power is not None for r in rows if r.decides)  # a deciding gate unplanned: no card power
    if deciding and planned:

        def together(scale: float, taken: int = own_looks) -> float:
            return math.prod(f(scale, taken=taken) for f in deciding)

        card_power = together(1.0)
        s = _solve_scale(together, target)
        card_n = None if s is None else math.ceil(n_arm * s)
    ext_figures = None
    if extended:
        ext_figures = _extension_figures(
            card,
            gates,
            noise,
            n_arm,
            own_looks,
            all_looks,
            spending,
            eff,
            sd_of,
            (lambda sc: math.prod(f(sc, taken=all_looks) for f in deciding)) if deciding and planned else None,
            target,
        )
    expected = None
    if seq and card_n is not None and not extended:
        primary_gate = next((g for g in gates if isinstance(g, TokensPerStepTest)), gates[0])
        ses, _ = _tests_se(card, primary_gate, noise, 1.0, sd_of(primary_gate))
        if ses:
            norm = _norm()
            bounds = boundaries(primary_gate.alpha, seq.looks, seq.spending)
            drift = (eff(primary_gate) - primary_gate.margin) / ses[0]
            _, used = power_and_stop(bounds, drift)
            expected = used * n_arm
    return CardPlan(
        card=card.name,
        source=source,
        source_requests=noise.requests,
        requests_per_arm=n_arm,
        target_power=target,
        design=design,
        gates=tuple(rows),
        power=card_power,
        requests_per_arm_for_target=card_n,
        expected_requests_per_arm=expected,
        inflation=inflation,
        boot_source=boot_source,
        extension=ext_figures,
    )


def _extension_figures(
    card: Card,
    gates: list[TestedGate],
    noise: Noise,
    n_arm: int,
    own_looks: int,
    all_looks: int,
    spending: Spending,
    eff: Callable[[TestedGate], float],
    sd_of: Callable[[TestedGate], float],
    extended_power: Callable[[float], float] | None,
    target: float,
) -> ExtensionPlanFigures:
    """A registered extension's plan: every look's level, the power by the last look, its maximum and its expected
    size at the tokens/step effect (extended until it decides), and the maximum that reaches the target power."""
    norm = _norm()
    stage = n_arm // own_looks
    levels = {
        g.id: tuple(float(norm.sf(b)) for b in boundaries(g.alpha, all_looks, spending)) for g in gates if g.decides
    }
    expected = looks = None
    primary = next((g for g in gates if isinstance(g, TokensPerStepTest) and g.decides), None)
    if primary is not None and eff(primary) > primary.margin:
        ses, _ = _tests_se(card, primary, noise, all_looks / own_looks, sd_of(primary), boots=all_looks)
        if ses:
            first = _plan_crossings(primary, ses[:1], boundaries(primary.alpha, all_looks, spending), eff(primary))[0]
            used = used_fraction(first)
            expected, looks = round(used * stage * all_looks, 1), round(used * all_looks, 2)
    scale = None if extended_power is None else _solve_scale(extended_power, target)
    return ExtensionPlanFigures(
        looks=all_looks,
        design_looks=own_looks,
        spending=spending,
        levels=levels,
        stage_requests_per_arm=stage,
        power=None if extended_power is None else extended_power(1.0),
        requests_per_arm=stage * all_looks,
        expected_requests_per_arm=expected,
        expected_looks=looks,
        requests_per_arm_for_target=None if scale is None else math.ceil(n_arm * scale * all_looks / own_looks),
    )


# ---------------------------------------------------------------- where the noise comes from


def earlier_noise(card: Card, base: Path | None = None) -> tuple[Noise, str] | None:
    """Noise from earlier measured control arms of the same control recipe (all receipts found)."""
    found = control_windows(card, base)
    if found is None:
        return None
    windows, label = found
    noise = noise_from_windows(windows)
    if not noise.samples:
        return None
    return noise, label


def control_windows(card: Card, base: Path | None = None) -> tuple[list[tuple[str, WindowData]], str] | None:
    """The control windows `earlier_noise` reads (earlier control arms, pilots, boot studies), and where from."""
    recipe = card.controls[0].recipe
    windows: list[tuple[str, WindowData]] = []
    sources: list[str] = []
    for rec in planning_receipts(base).kept:
        try:
            other = rec.card()
            if rec.registration().transcribed or other.controls[0].recipe != recipe:
                continue
            w = other.window(other.primary_window)
            if not same_primary(card, w):
                continue
            arms = [a for a in rec.load_arms(other) if a.role == "control" and a.source == "measured"]
        except CardError:
            continue
        got = [
            (f"{rec.root.name}/{a.arm}", a.windows[other.primary_window])
            for a in arms
            if other.primary_window in a.windows
        ]
        if got:
            windows += got
            sources.append(f"{rec.root.name} ({', '.join(a.arm for a in arms)})")
    windows += pilot_windows(card, base)
    study = earlier_boots(card, base)
    if study is not None:
        windows += [(a.arm, a.windows[card.primary_window]) for a in study[0]]
        sources.append(f"boot study: {study[1]}")
    if not windows:
        return None
    label = "; ".join(sources + [f"pilot {p.name}" for p in pilot_dirs(card, base)])
    return windows, f"earlier control arms of {recipe}: {label}"


def pilot_window(card: Card, transcripts: int = PILOT_TRANSCRIPTS) -> WindowSpec:
    """The pilot: the card's primary window, a few transcripts per cell, two rounds, its own seeds; on the dev
    part of its workload (a pilot sizes the card, and no step before the verdict reads the held-out part)."""
    from gb300lane.cards.run import arm_seed_base

    p = card.window(card.primary_window)
    seed = None if p.seed_base is None else arm_seed_base(p.seed_base, "pilot", 1)
    return p.model_copy(
        update={
            "name": "pilot",
            "transcripts_per_class": min(transcripts, p.transcripts_per_class),
            "rounds": 2,
            "seed_base": seed,
            "held_out": False,
        }
    )


def run_pilot(
    card: Card,
    *,
    ops: ArmOps | None = None,
    base: Path | None = None,
    progress: Callable[[str], None] | None = None,
    transcripts: int = PILOT_TRANSCRIPTS,
) -> Path:
    """Boot arm A's recipe dark, run the pilot window, keep its receipts under results/pilots/; returns the dir."""
    from datetime import datetime

    from gb300lane.cards.run import LiveArmOps
    from gb300lane.fsio import dumps_json, write_once

    say = progress or (lambda _m: None)
    ops = ops or LiveArmOps()
    arm = card.controls[0]
    w = pilot_window(card, transcripts)
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    d = new_run_dir(pilot_root(base), f"{date}-{card.name}-pilot")
    say(
        f"pilot: booting {arm.recipe} dark ({_window_requests(w)} requests: {len(w.classes)} classes x "
        f"{w.transcripts_per_class} transcripts x C{'/C'.join(map(str, w.concurrency))} x 2 rounds)"
    )
    try:
        with ops.instance(
            arm.recipe, arm="pilot", check_keys=None, baseline=None, allow_outside_trained_block=False
        ) as report:
            write_once(d / "boot.json", dumps_json(report.model_dump(mode="json")))
            result = ops.run_window(
                report.endpoint, w, model=report.served_model, recipe=arm.recipe, fingerprint=report.fingerprint
            )
            write_once(d / "window.json", dumps_json(result.model_dump(mode="json")))
    finally:
        ops.discard(arm.recipe, "pilot")
    write_once(
        d / "pilot.json", dumps_json(PilotReceipt(card=card.name, recipe=arm.recipe, window=w).model_dump(mode="json"))
    )
    say(f"pilot: receipts in {d}")
    return d


def run_boot_study(
    card: Card,
    boots: int,
    *,
    base: Path | None = None,
    progress: Callable[[str], None] | None = None,
    lane: InProcessLane | None = None,
    ops: ArmOps | None = None,
) -> Path:
    """`boots` boots of the control recipe, each its own boot seed and seed base, over the primary window as the
    card sizes it; receipts under results/pilots/<date>-<card>-boots/.

    A card whose arms run on the embedded engine boots it in process (`lane`, the fast path). Any other card
    boots the control recipe through the lane (`ops`, a `LiveArmOps` by default): each boot a real `up` of the
    recipe dark, its boot report kept beside the window, then down, so the variance is a real engine's between
    its boots. On the real lane a boot seed is the engine's `--seed`, which the recipe sets: a real boot's shift
    is its compile, its scheduling and its machine, not a seed the study picks.
    """
    import secrets
    from datetime import datetime

    from gb300lane.cards.embedded import runs_embedded
    from gb300lane.cards.run import arm_seed_base
    from gb300lane.fsio import dumps_json, write_once
    from gb300lane.instrument.simulate import InProcessLane

    if boots < 3:
        raise CardError("--boots must be at least 3 (the between-boot variance needs boots to compare)")
    refuse_pinned_boot_seed(f"card plan {card.name} --boots {boots}")
    say = progress or (lambda _m: None)
    arm = card.controls[0]
    primary = boot_window(card)
    study = secrets.randbits(31)
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    d = new_run_dir(pilot_root(base), f"{date}-{card.name}-boots")
    in_process = runs_embedded(card)
    where = "in process" if in_process else "through the lane (real boots, dark)"
    say(
        f"boot study: {boots} boots of {arm.recipe} {where}, {_window_requests(primary)} requests each "
        f"(study seed {study})"
    )
    seconds = []
    for i in range(boots):
        w = primary.model_copy(update={"seed_base": arm_seed_base(study, f"boots:{i}", 1)})
        if in_process:
            got = (lane or InProcessLane()).run_arm(card, arm, [w], boot_seed=arm_seed_base(study, f"boot:{i}", 1))
            data = got.windows[w.name]
        else:
            data, boot_s = _real_boot(card, arm, w, i, d, ops)
            seconds.append(boot_s)
        write_once(d / f"boot-{i:03d}.json", dumps_json(data.model_dump(mode="json")))
        say(f"boot study: {i + 1} of {boots} boots" + (f" (booted in {seconds[-1]:.0f} s)" if seconds else ""))
    write_once(
        d / "boots.json",
        dumps_json(
            BootStudyReceipt(
                card=card.name,
                recipe=arm.recipe,
                boots=boots,
                study_seed=study,
                in_process=in_process,
                boot_seconds=seconds,
                window=primary,
                measured_on=measured_on(card),
            ).model_dump(mode="json")
        ),
    )
    say(f"boot study: receipts in {d}")
    return d


def require_recipes(card: Card) -> None:
    """CardError naming the arm and the recipe when an arm's recipe does not load: checked before anything boots."""
    for arm in card.arms:
        try:
            load_recipe(arm.recipe)
        except LaneError as exc:
            raise CardError(
                f"card {card.name}: arm {arm.name}'s recipe {arm.recipe} does not load "
                f"({str(exc).splitlines()[0]}); fix the card or add the recipe, then plan again"
            ) from None


def _real_boot(card: Card, arm: Arm, w: WindowSpec, i: int, d: Path, ops: ArmOps | None) -> tuple[WindowData, float]:
    """One boot of the study on the lane: up dark, the window, down; the boot report kept as report-NNN.json."""
    from gb300lane.cards.record.arms import window_data_from_result
    from gb300lane.cards.run import LiveArmOps
    from gb300lane.fsio import dumps_json, write_once

    ops = ops or LiveArmOps()
    name = f"boots{i:03d}"
    try:
        with ops.instance(
            arm.recipe,
            arm=name,
            check_keys=None,
            baseline=None,
            allow_outside_trained_block=arm.allow_outside_trained_block,
        ) as report:
            write_once(d / f"report-{i:03d}.json", dumps_json(report.model_dump(mode="json")))
            result = ops.run_window(
                report.endpoint, w, model=report.served_model, recipe=arm.recipe, fingerprint=report.fingerprint
            )
    finally:
        ops.discard(arm.recipe, name)
    data = window_data_from_result(result, card.primary_window)
    return data, float(report.boot_seconds)


def plan_for(
    card: Card,
    *,
    pilot: bool | None = None,
    ops: ArmOps | None = None,
    base: Path | None = None,
    progress: Callable[[str], None] | None = None,
    effect: float | None = None,
    target: float = TARGET_POWER,
    boots: int = 0,
    share: float = 1.0,
) -> CardPlan:
    """Plan from earlier control data, running a pilot first when there is none (or when `pilot` is True);
    with `boots`, a boot study of that many boots first (in process on the embedded engine, real boots through
    the lane otherwise). `share`: of each gate's alpha, the run spends (`plan_card`)."""
    require_recipes(card)
    if boots:
        run_boot_study(card, boots, base=base, progress=progress, ops=ops)
    found = None if pilot else earlier_noise(card, base)
    if found is None:
        if pilot is False:
            raise CardError(
                f"card {card.name}: no earlier control receipts of {card.controls[0].recipe} with the "
                "primary window's temperature and length; run `gb300lane card plan CARD` without "
                "--no-pilot to measure a short pilot of arm A"
            )
        run_pilot(card, ops=ops, base=base, progress=progress)
        found = earlier_noise(card, base)
        if found is None:
            raise CardError(f"card {card.name}: the pilot recorded no usable per-request data")
    noise, source = found
    study = earlier_boots(card, base)
    return plan_card(
        card,
        noise,
        source,
        target=target,
        effect=effect,
        boots=study[0] if study else None,
        boot_source=study[1] if study else "",
        lane_noise=lane_noise(card, base),
        share=share,
    )


def lane_noise(card: Card, base: Path | None = None) -> dict[str, LedgerEstimate]:
    """The lane's noise ledger for the card's control recipe and window shape, by metric (`cards.record.noise`)."""
    out = {}
    for metric in ("tokens_per_step", "decode_tok_s"):
        got = for_card(card, metric, base=base)
        if got is not None:
            out[metric] = got
    return out


def boot_sd_refusals(card: Card, base: Path | None = None) -> list[str]:
    """Why `card register` refuses the card's registered boot sds: a deciding aggregate tested gate whose boot sd
    lies outside the one-sided 95% bounds the lane's noise ledger puts on it (at least `LEDGER_MIN_CARDS` scored
    cards of the lane, engine and window shape), so the lane's own measurement rules the figure out."""
    ledger = lane_noise(card, base)
    out = []
    for g in card.gates:
        if not (isinstance(g, TestedGate) and g.decides and g.scope == "aggregate"):
            continue
        led = ledger.get(g.metric)
        if led is None or led.cards < LEDGER_MIN_CARDS:
            continue
        if led.lower <= g.boot_sd <= led.upper:
            continue
        side = "above its upper" if g.boot_sd > led.upper else "below its lower"
        out.append(
            f"gate {g.id} registers a boot sd of {g.boot_sd:.3%}, {side} one-sided 95% bound: "
            f"{led.describe()} puts it between {led.lower:.3%} and {led.upper:.3%}; register a boot sd "
            f"inside that range (`gb300lane card plan {card.name}` prints one), or pass "
            "--boot-sd-override REASON to register it anyway (the reason is recorded)"
        )
    return out


def check_boot_sds(card: Card, override: str | None, base: Path | None = None) -> None:
    """CardError with `boot_sd_refusals` unless `override` gives a reason (then it is recorded by `register`)."""
    refused = boot_sd_refusals(card, base)
    if refused and not (override and override.strip()):
        raise CardError(f"card {card.name}: " + "; ".join(refused))


def registration_plan(card: Card, base: Path | None = None, share: float = 1.0) -> CardPlan | None:
    """The plan `card register` records: from earlier control data only (registering never boots anything), for
    the run's `share` of each gate's alpha."""
    plans = registration_plans(card, base, share=share)
    return plans[0] if plans else None


def registration_plans(
    card: Card, base: Path | None = None, effects: Sequence[Mapping[str, float] | None] = (None,), share: float = 1.0
) -> tuple[CardPlan, ...] | None:
    """`registration_plan` once per entry of `effects` (gate id -> relative effect; None: the gates' mdes), from
    one read of the earlier receipts; None where there is nothing to plan from."""
    if not any(isinstance(g, TestedGate) for g in card.gates):
        return None
    found = earlier_noise(card, base)
    if found is None:
        return None
    study = earlier_boots(card, base)
    ledger = lane_noise(card, base)
    got = boot_provenance(card, base) if study else ()
    plans = (
        plan_card(
            card,
            found[0],
            found[1],
            boots=study[0] if study else None,
            boot_source=study[1] if study else "",
            lane_noise=ledger,
            effects=e,
            share=share,
        )
        for e in effects
    )
    return tuple(p.model_copy(update={"boot_measured_on": got}) if got else p for p in plans)


def registration_warnings(card: Card, plan: CardPlan | None) -> list[str]:
    """What `card register` warns about: point-ratio gates, and a card below the target power."""
    from gb300lane.cards.schema import POINT_RATIO_KINDS

    out = [
        f"gate {g.id} decides on a point ratio (the write-up's design), without a test: use kind "
        "tokens_per_step, decode_tok_s or controls_equivalence"
        for g in card.gates
        if g.kind in POINT_RATIO_KINDS
    ]
    tested = any(isinstance(g, TestedGate) for g in card.gates)
    if not tested:
        return out
    if plan is None:
        out.append(
            f"power not known: no earlier control receipts of {card.controls[0].recipe} with this window's "
            f"temperature and length; run `gb300lane card plan {card.name}` (it boots a short pilot of arm A)"
        )
    for g in plan.gates if plan is not None else ():
        if g.decides and g.boot_sd_registered == 0 and g.boot_sd_measured:
            out.append(
                f"gate {g.gate}: a boot study measured a boot sd of {g.boot_sd_measured:.3%} (df "
                f"{g.boot_df_measured}) and the gate registers none: its test leaves the boots' shift out; "
                "set boot_sd and boot_df as `card plan` prints them"
            )
    out += [g.boot_check for g in (plan.gates if plan is not None else ()) if g.decides and g.boot_check]
    out += calibration_boot_notes(card)
    if plan is None:
        pass
    elif plan.power is None:
        out.append("power not known: " + "; ".join(g.note for g in plan.gates if g.note))
    elif plan.extension is not None:  # the registered plan, every further look taken, is what is sized
        e = plan.extension
        if e.power is not None and e.power < plan.target_power:
            need = (
                f"at most {e.requests_per_arm_for_target} requests per arm over its {e.looks} looks"
                if e.requests_per_arm_for_target is not None
                else "a size no number of requests reaches"
            )
            out.append(
                f"underpowered: power {e.power:.1%} by look {e.looks} of the registered plan (every further "
                f"look taken; {plan.power:.1%} at the design's own), below {plan.target_power:.0%}; "
                f"`gb300lane card plan {card.name}` says {need} (the card has {e.requests_per_arm})"
            )
    elif plan.power < plan.target_power:
        out.append(
            f"underpowered: power {plan.power:.1%} at the gates' effects, below {plan.target_power:.0%}; "
            f"`gb300lane card plan {card.name}` says {plan.requests_per_arm_for_target} requests per arm "
            f"(the card has {plan.requests_per_arm})"
        )
    return out


class PlanCheck(FrozenModel):
    """The plan's power beside what a calibration measured of the same card."""

    source: str = Field(description="Where the plan's noise came from.")
    effects: dict[str, float] = Field(description="Gate id -> the mean effect the as-written replicates met.")
    planned_at_mde: float | None = Field(description="The card's power as its plan predicts at the gates' mdes.")
    planned_at_measured: float | None = Field(description="The same plan at the effects the replicates met.")
    measured: RateCI = Field(description="The calibration's measured power (as-written verdicts PASS).")
    inside: bool | None = Field(description="planned_at_measured inside the measured power's interval.")
    extended: bool = Field(
        default=False,
        description="The calibration extended INCONCLUSIVE replicates: the powers "
        "are the registered plan's by its last look (`CardPlan.extension`).",
    )


def plan_check(card: Card, cal: Calibration, base: Path | None = None) -> PlanCheck | None:
    """The plan `card register` would record, at the gates' mdes and at the effects `cal`'s as-written replicates
    met, beside the power `cal` measured; None where no earlier control data exists to plan from.

    A plan's power is at the registered effect; the card as written meets the engine's own effect, which is
    rarely the mde, so the check that the plan predicts the measured power plans at the measured effect."""
    deciding = {
        g.id for g in card.gates if isinstance(g, TestedGate) and g.decides and not isinstance(g, ControlsEquivalence)
    }
    effects = {g: e for g, e in cal.mean_estimates_card.items() if g in deciding}
    plans = registration_plans(card, base, (None, effects) if effects else (None,))
    if not plans:
        return None
    extended = cal.extended and plans[0].extension is not None

    def power(p: CardPlan) -> float | None:  # an extended calibration ran the whole plan
        return p.extension.power if extended and p.extension is not None else p.power

    planned = power(plans[1]) if len(plans) > 1 else None
    m = cal.power
    return PlanCheck(
        source=plans[0].source,
        effects=effects,
        planned_at_mde=power(plans[0]),
        planned_at_measured=planned,
        measured=m,
        extended=extended,
        inside=None if planned is None or m.replicates == 0 else m.low <= planned <= m.high,
    )
