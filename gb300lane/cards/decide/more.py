"""What a verdict adds beyond its gates: how much more would decide, and the registered boot sd checked.

An INCONCLUSIVE tested gate says how large the card would have to be to
decide: from each undecided test's observed standard error (the t statistic
at the margin, else the interval's width) and the registered effect (the
gate's mde; 0 for a non-inferiority or equivalence gate), the normal
approximation of the one-sided test gives the standard error that reaches
the target power,

    se_needed = gap / (z_alpha + z_power),   gap = mde - margin | margin (non-inferiority, equivalence)

and the observed variance splits into the requests' share, which shrinks as
requests per arm grow, and the boots' share (`factor boot_sd^2 / boots`,
`factor` 1.5 for B against two controls, 2 for A against A2), which only
more boots per arm shrink. The smallest number of boots per arm whose share
leaves room under se_needed^2 comes first, then the requests per arm.

Every verdict also checks a gate's registered `boot_sd` against what was
measured of the control recipe: the card's own A against A2 (one degree of
freedom per cell), and every boot study of the same recipe and shape under
results/pilots/ (`cards.decide.boots.registered_check`), which the caller
reads and passes in (`BootStudy`); a contradiction is a note on the verdict,
never a change of its status.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, JsonValue

from gb300lane.cards.decide.boots import (
    BootEstimate,
    boot_units,
    critical_boot_sd,
    estimate_from_units,
    registered_check,
)
from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.results import GateResult, GateTest
from gb300lane.cards.schema import Card, ControlsEquivalence, Gate, GroupSequential, TestedGate
from gb300lane.models import FrozenModel

TARGET_POWER = 0.9

#: The one-sided confidence level of the upper limit on the units' variance a size is computed at: the variance a
#: pilot observed on few degrees of freedom is as likely too small as too large, and power averaged over its
#: sampling law still left 86% where 90% was named from pilots of 8 and 16 transcripts
#: (benchmarks/calibration_suite.py, check 6); the size is the one that reaches the target if the variance is at
#: this upper limit.
VARIANCE_UPPER = 0.9

#: The most boots per arm a size is sought over.
MAX_BOOTS = 64

#: The boot studies of a card's control recipe: every boot as one arm, and a line naming them.
BootStudy = tuple[list[ArmData], str]


def boots_per_arm(card: Card) -> int:
    """Boots each arm has: one per stage of a sequential card, one for a fixed design."""
    return card.design.looks if isinstance(card.design, GroupSequential) else 1


def boot_factor(card: Card, gate: TestedGate) -> float:
    """How many boots' variances one test's estimate carries: B against the controls' mean, or A against A2."""
    return 2.0 if isinstance(gate, ControlsEquivalence) else 1.0 + 1.0 / len(card.controls)


def boot_checked(gates: Sequence[Gate]) -> list[TestedGate]:
    """The deciding tested gates that register a boot sd: the ones a verdict checks against measured boots."""
    return [g for g in gates if isinstance(g, TestedGate) and g.decides and g.boot_sd > 0]


class MoreNeeded(FrozenModel):
    """What an undecided gate would need to decide at the target power."""

    gate: str = Field(description="Gate id.")
    effect: float = Field(description="The registered effect the power is reached at (mde; 0 without one).")
    target_power: float = Field(description="Power aimed at.")
    se_observed: float = Field(description="Observed relative standard error of the worst undecided test.")
    se_needed: float = Field(description="Relative standard error that reaches the target power.")
    boot_share: float = Field(description="Variance of the estimate the boots carry now (relative, squared).")
    requests_per_arm: int | None = Field(description="Requests per arm that would reach the power (None: cannot).")
    boots_per_arm: int | None = Field(description="Boots per arm those requests need (1 for a fixed card).")
    note: str = Field(description="The same, in one line.")


def _z(p: float) -> float:
    from scipy.stats import norm

    return float(norm.isf(p))


def _se(t: GateTest) -> float | None:
    """The test's relative standard error: the t statistic at the margin, else the interval's half width."""
    if t.estimate is None:
        return None
    off = t.estimate - (t.margin if t.test == "superiority" else -t.margin if t.test == "non_inferiority" else 0)
    if t.statistic and t.test != "equivalence" and abs(t.statistic) > 1e-9 and abs(off) > 1e-12:
        return abs(off / t.statistic)
    if t.low is None or t.high is None or t.high <= t.low:
        return None
    if t.df:
        from scipy.stats import t as t_dist

        return (t.high - t.low) / (2 * float(t_dist.isf((1 - t.level) / 2, t.df)))
    return (t.high - t.low) / (2 * _z((1 - t.level) / 2))


def _power_at_upper(gap: float, units_var: float, boot_var: float, df: int, tcrit: float) -> float:
    """The one-sided t test's power at effect `gap` were the units' variance at its VARIANCE_UPPER upper confidence
    limit: the observed `units_var` on `df` degrees of freedom puts the true one at units_var df / chi2(df)."""
    from scipy.special import ndtr
    from scipy.stats import chi2

    scale = df / float(chi2.ppf(1.0 - VARIANCE_UPPER, df))
    se = math.sqrt(units_var * scale + boot_var)
    # the noncentral t's tail in its normal approximation (Johnson and Welch): P(t' > c) ~ Phi((ncp - c) /
    # sqrt(1 + c^2 / 2df)), a point or two of power below scipy's nct at 7 df near 90% (so on the safe side)
    return float(ndtr((gap / se - tcrit) / math.sqrt(1.0 + tcrit * tcrit / (2.0 * df))))


def more_needed(
    card: Card, gate: Gate, result: GateResult, target: float = TARGET_POWER, controls: GateResult | None = None
) -> MoreNeeded | None:
    """For an INCONCLUSIVE tested gate, the requests and boots per arm that would reach `target` power were the card's
    own variance at its VARIANCE_UPPER upper confidence limit (module docstring); `controls` is the controls' equivalence
    result on the same metric and window, whose A against A2 is the requests' own noise."""
    if result.status != "INCONCLUSIVE" or not result.decides:
        return None
    if not isinstance(gate, TestedGate):
        return None
    open_tests = [t for t in result.tests if t.decision == "INCONCLUSIVE"]
    ses = [(s, t) for t in open_tests if (s := _se(t)) is not None]
    if not ses:
        return None
    se, t = max(ses, key=lambda x: x[0])
    effect = 0.0 if isinstance(gate, ControlsEquivalence) else float(gate.mde or 0.0)
    gap = effect - gate.margin if gate.test == "superiority" else gate.margin
    factor = 2.0 if isinstance(gate, ControlsEquivalence) else 1.0 + 1.0 / len(card.controls)
    boot1 = factor * float(gate.boot_sd) ** 2  # one boot per arm
    share = boot1 / max(1, t.look)  # at look s every arm has booted s times (one boot per stage)
    common = {"gate": gate.id, "effect": effect, "target_power": target, "se_observed": se, "boot_share": share}
    if gap <= 0:
        return MoreNeeded(
            **common,
            se_needed=0.0,
            requests_per_arm=None,
            boots_per_arm=None,
            note=f"gate {gate.id}: no registered effect above the margin (mde {effect:.1%}), so no "
            "size reaches a power; give the gate an mde to say how much more would decide",
        )
    from scipy.stats import t as t_dist

    df = max(1, int(t.df) if t.df else t.n - 1)
    # equivalence: both one-sided tests must pass, each at alpha, with (1 - power) split over the two
    beta = (1 - target) / 2 if gate.test == "equivalence" else 1 - target
    tcrit = float(t_dist.isf(t.nominal_alpha, df))
    need = gap / (tcrit + float(t_dist.isf(beta, df)))
    units_var = max(se * se - share, 1e-18)
    # the units' variance: the requests' noise (more requests per arm shrink it) and B's gain varying by
    # transcript (a fixed part over the card's transcripts); the controls' A against A2 measures the former
    gain_var = 0.0
    ctrl = _controls_request_var(card, gate, controls)
    if ctrl is not None and not isinstance(gate, ControlsEquivalence):
        gain_var = max(0.0, units_var - ctrl * factor / 2.0)
    req_var = units_var - gain_var
    # the fewest boots per arm whose share leaves the units a quarter of the variance at least
    boots = max(1, math.ceil(boot1 / (0.75 * need * need))) if boot1 > 0 else 1

    def power(mult: float, b: int) -> float:
        return _power_at_upper(gap, (req_var / mult + gain_var), boot1 / b, df, tcrit)

    while power(1e6, boots) < target and boots < MAX_BOOTS:
        boots *= 2
    if power(1e6, boots) < target:
        why = (
            "B's gain varies by transcript more than more requests can average away"
            if gain_var > 0
            else "the boots' share leaves no room"
        )
        return MoreNeeded(
            **common,
            se_needed=need,
            requests_per_arm=None,
            boots_per_arm=None,
            note=f"gate {gate.id}: no number of requests over these {t.n} transcripts reaches "
            f"{target:.0%} power at the registered effect {effect:+.1%} ({why}): run more transcripts",
        )
    lo, hi = 1e-3, 1e6
    if power(lo, boots) >= target:
        hi = lo
    while hi / lo > 1.002:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if power(mid, boots) >= target else (mid, hi)
    requests = max(1, math.ceil(t.requests_per_arm * hi))
    how = f"{requests} requests per arm" + (f" over {boots} boots per arm" if boots > 1 else " in one boot per arm")
    gain = f", B's gain varying by transcript {math.sqrt(gain_var):.2%} of it" if gain_var > 0 else ""
    note = (
        f"gate {gate.id}: to decide at {target:.0%} power (were the card's own variance at its "
        f"{VARIANCE_UPPER:.0%} upper confidence limit, t on {df} df) at the registered effect {effect:+.1%} the test needs a standard error near "
        f"{need:.2%} (observed {se:.2%}, of which the boots carry {math.sqrt(share):.2%}{gain}): "
        f"{how} (the card ran {t.requests_per_arm})"
    )
    if ctrl is not None and not isinstance(gate, ControlsEquivalence):
        # what one pilot cannot split (benchmarks/calibration_suite.py, check 6, gain sd 3%): the controls' A
        # against A2 measures the requests' noise only to within its own chi2 spread, far wider than a gain
        # variance that still matters at the size named
        note += (
            "; B's gain varying by transcript by less than this pilot can tell from its requests' noise is not "
            "counted: score again after the extension"
        )
    return MoreNeeded(**common, se_needed=need, requests_per_arm=requests, boots_per_arm=boots, note=note)


def _controls_request_var(card: Card, gate: TestedGate, controls: GateResult | None) -> float | None:
    """The variance of A / A2 that the requests carry (relative, squared), from the controls' equivalence result."""
    if controls is None:
        return None
    got = [s for c in controls.tests if c.n > 1 and (s := _se(c)) is not None]
    if not got:
        return None
    c_gate = next((g for g in card.gates if g.id == controls.id and isinstance(g, ControlsEquivalence)), None)
    boot = 2.0 * float(c_gate.boot_sd) ** 2 / max(1, controls.tests[0].look) if c_gate is not None else 0.0
    return max(0.0, max(got) ** 2 - boot)


def controls_for(card: Card, gate: Gate, results: Sequence[GateResult]) -> GateResult | None:
    """The controls' equivalence result on `gate`'s metric and window, where the card has one."""
    if not isinstance(gate, TestedGate) or isinstance(gate, ControlsEquivalence):
        return None
    ids = {
        g.id
        for g in card.gates
        if isinstance(g, ControlsEquivalence) and g.metric == gate.metric and g.window == gate.window
    }
    return next((r for r in results if r.id in ids), None)


def boot_notes(
    card: Card,
    gates: Sequence[Gate],
    arms: list[ArmData],
    study: BootStudy | None,
    lane_noise: Mapping[str, tuple[BootEstimate, str]] | None = None,
) -> list[str]:
    """A registered boot sd checked against the card's own controls (A against A2), the lane's noise ledger
    (`lane_noise`: metric -> its pooled estimate over the lane's other scored cards, and where it is from) and
    the recipe's boot studies."""
    tested = boot_checked(gates)
    if not tested:
        return []
    ctrls = [a for a in arms if a.role == "control" and card.primary_window in a.windows]
    out = []
    for g in tested:
        measured = []
        if len(ctrls) >= 2:
            est = estimate_from_units([boot_units(g, a) for a in ctrls], min_boots=2)
            if est is not None:
                measured.append((est, "the card's own controls (A against A2)"))
        led = (lane_noise or {}).get(g.metric) if g.scope == "aggregate" else None
        if led is not None:
            measured.append(led)
        if study is not None:
            est = estimate_from_units([boot_units(g, a) for a in study[0]])
            if est is not None:
                measured.append((est, f"a boot study ({study[1]})"))
        effect = 0.0 if isinstance(g, ControlsEquivalence) else float(g.mde or 0.0)
        crit = critical_boot_sd(
            effect, g.margin, g.test, g.alpha, boot_factor(card, g), boots_per_arm(card), TARGET_POWER
        )
        for est, where in measured:
            # the card's own two boots can rule a figure out, never show a study too small: that is the studies' job
            line = registered_check(g.id, est, float(g.boot_sd), g.boot_df, where, crit if est.boots > 2 else None)
            if line:
                out.append(line)
    return out


_COMPARED = ("lane", "recipe_fingerprint", "image", "vllm_version", "hash_inputs", "engine_fingerprint")


def provenance_notes(
    card: Card,
    gates: Sequence[Gate],
    arms: list[ArmData],
    recorded: Sequence[Mapping[str, JsonValue]],
    measured_now: Mapping[str, JsonValue] | None,
) -> list[str]:
    """A registered boot sd measured on another lane, recipe fingerprint, image or engine than the card scored
    on (`measured_now`: what a boot study would record now): one note per boot study the registration recorded
    (nothing when none was recorded)."""
    ids = [g.id for g in boot_checked(gates)]
    if not ids or not recorded:
        return []
    now = dict(measured_now or {})
    booted = {a.boot.fingerprint for a in arms if a.role == "control" and a.boot is not None and a.boot.fingerprint}
    if len(booted) == 1:  # what the control arms actually booted, over the recipe as it loads now
        now["recipe_fingerprint"] = booted.pop()
    out = []
    for rec in recorded:
        moved = [f"{k} {rec.get(k)} -> {now.get(k)}" for k in _COMPARED if rec.get(k) != now.get(k)]
        if moved:
            out.append(
                f"gates {', '.join(ids)}: the boot sd the registration rests on was measured by boot study "
                f"{rec.get('study')} on another lane or engine than the card scored on ({'; '.join(moved)}); "
                f"measure it again on this one (`gb300lane card plan {card.name} --boots N`)"
            )
    return out


__all__ = [
    "BootStudy",
    "MoreNeeded",
    "ProvenanceDifference",
    "boot_checked",
    "boot_factor",
    "boot_notes",
    "boots_per_arm",
    "controls_for",
    "more_needed",
    "provenance_difference_notes",
    "provenance_differences",
    "provenance_notes",
]


class ProvenanceDifference(FrozenModel):
    """A provenance field whose value differs between a card's arms."""

    field: str = Field(description="Dotted provenance field (`image.id`, `installed.vllm`, `host.gpus`, ...).")
    values: dict[str, Any] = Field(description="Arm -> the value its boot recorded.")


def provenance_differences(arms: Sequence[ArmData]) -> tuple[ProvenanceDifference, ...]:
    """The provenance fields that differ between the arms that recorded one (an arm without a record is left out:
    absence is not a value). `runtime` and `host.*` are compared like every other field."""
    have = {a.arm: a.boot.provenance for a in arms if a.boot is not None and a.boot.provenance is not None}
    if len(have) < 2:
        return ()
    out = []
    for key in sorted({k for rec in have.values() for k in rec}):
        values = {arm: rec.get(key) for arm, rec in have.items()}
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            out.append(ProvenanceDifference(field=key, values=values))
    return tuple(out)


def provenance_difference_notes(diffs: Sequence[ProvenanceDifference]) -> list[str]:
    """One note naming every provenance field the arms differ in (the arms did not run the same thing)."""
    if not diffs:
        return []
    parts = [f"{d.field} ({', '.join(f'{arm} {_short(v)}' for arm, v in d.values.items())})" for d in diffs]
    return [
        f"the arms did not run the same thing: provenance differs in {len(diffs)} field(s): {'; '.join(parts)}; "
        "a difference the card does not test for is a difference it may be measuring"
    ]


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."
