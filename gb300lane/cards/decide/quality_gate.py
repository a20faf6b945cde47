"""The task-quality gate: B's pass rate against the controls', McNemar's exact test on the paired outcomes.

An outcome is one request's check without a model (`bench.quality`: a tool
call valid against its tool's schema, data that parses as asked, Python that
compiles), pass or fail. A unit is one transcript in one round (and pass, at
a concurrency above the transcript count) at the gate's one concurrency:
every arm sent it, each with its own seed (or the same one, `seeds:
shared`), so units pair across arms; different rounds carry different seeds,
so their outcomes are separate samples of the transcript. Only units checked
on every arm count (n).

Against each control c, the discordant units are `worse` (c passed, B
failed) and `better` (B passed, c failed). Under the null that B's pass rate
equals c's, a discordant unit is `worse` with probability 1/2 whatever each
transcript's own rate is: McNemar's exact test is the binomial test of
`worse` among the discordant units (`scipy.stats.binomtest`, p = 1/2,
alternative `greater`: B's pass rate lower), at the gate's one-sided alpha
(at a look of a sequential design, the level its spending allows there).

- FAIL: the test rejects against every control (an intersection-union test,
  so the false-FAIL rate stays within alpha) and B's drop against each,
  (worse - better) / n, exceeds the controls' own, |A vs A2| (the floor: a
  difference no larger than two boots of production show is no change).
- PASS: B's drop is shown below `margin` against every control: its
  one-sided upper bound, drop <= psi (2 pi - 1) with psi the discordant
  fraction and pi the share of them that went against B, each bounded by
  Clopper-Pearson (psi at alpha/4 each side, pi at alpha/2, so the bound
  holds with probability at least 1 - alpha), lies below the margin.
- INCONCLUSIVE otherwise, and when no unit was checked on every arm, or no
  control passed any unit (a check that sees no quality cannot vouch for it).

`benchmarks/task_quality.py` measures the false-FAIL rate (A/A), the power
against known drops and the false-PASS rate at the margin by simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.evidence import Look
from gb300lane.cards.decide.results import GateResult, McNemarTest, QualityRate, QualityResult, Status
from gb300lane.cards.schema import TaskQualityGate

#: Unit -> (class, passed).
Outcomes = dict[str, tuple[str, bool]]

__all__ = ["decide", "drop_upper", "eval_quality", "mcnemar", "mcnemar_counts", "unit_outcomes"]


def unit_outcomes(arm: ArmData, gate: TaskQualityGate) -> Outcomes:
    """Per unit (`class/transcript[#pass]/rRound`), the class and whether the arm's request passed its check."""
    w = arm.windows.get(gate.window)
    out: Outcomes = {}
    for c in w.cells if w is not None else ():
        if (gate.classes is None or c.cls in gate.classes) and (
            gate.concurrency is None or c.concurrency in gate.concurrency
        ):
            for t, ok in c.quality.items():
                out[f"{c.cls}/{t}/r{c.round}"] = (c.cls, ok)
    return out


def _ci(k: int, n: int, one_sided: float) -> tuple[float, float]:
    """Clopper-Pearson bounds of k / n, each side at `one_sided` ([0, 1] without trials)."""
    from scipy.stats import binomtest

    if n == 0:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(confidence_level=1.0 - 2.0 * one_sided, method="exact")
    return float(ci.low), float(ci.high)


def drop_upper(worse: int, better: int, n: int, level: float) -> float:
    """One-sided upper bound at `level` of the drop p(worse) - p(better), from `worse` and `better` of n units.

    drop = psi (2 pi - 1): psi the discordant probability, pi the share of discordant units that go against the
    subject. pi's Clopper-Pearson upper bound at level / 2, psi's two-sided interval at level / 4 each side (the
    side used depends on the sign of 2 pi - 1), so the bound holds with probability at least 1 - level.
    """
    m = worse + better
    _, pi_hi = _ci(worse, m, level / 2.0)
    psi_lo, psi_hi = _ci(m, n, level / 4.0)
    g = 2.0 * pi_hi - 1.0
    return psi_hi * g if g >= 0 else psi_lo * g


def mcnemar(
    subject: Sequence[bool], reference: Sequence[bool], *, comparison: str, level: float, two_sided: bool = False
) -> McNemarTest:
    """McNemar's exact test of `subject`'s pass rate against `reference`'s over paired outcomes."""
    worse = sum(1 for s, r in zip(subject, reference) if r and not s)
    better = sum(1 for s, r in zip(subject, reference) if s and not r)
    return mcnemar_counts(worse, better, len(subject), comparison=comparison, level=level, two_sided=two_sided)


def mcnemar_counts(
    worse: int, better: int, n: int, *, comparison: str, level: float, two_sided: bool = False
) -> McNemarTest:
    """McNemar's exact test from its counts: `worse` and `better` discordant units of n."""
    from scipy.stats import binomtest

    m = worse + better
    alternative: Literal["greater", "two-sided"] = "two-sided" if two_sided else "greater"
    p = float(binomtest(worse, m, 0.5, alternative=alternative).pvalue) if m else 1.0
    return McNemarTest(
        comparison=comparison,
        n=n,
        worse=worse,
        better=better,
        drop=(worse - better) / n if n else None,
        alternative=alternative,
        p_value=p,
        level=level,
        drop_upper=None if two_sided else drop_upper(worse, better, n, level),
    )


def _rates(arms: Sequence[ArmData], per: Sequence[Outcomes], units: list[str]) -> tuple[QualityRate, ...]:
    classes = list(dict.fromkeys(per[0][u][0] for u in units))
    out = []
    for arm, outcomes in zip(arms, per):
        for cls in (None, *classes):
            mine = [outcomes[u][1] for u in units if cls is None or outcomes[u][0] == cls]
            out.append(
                QualityRate(
                    arm=arm.arm,
                    cls=cls,
                    passed=sum(mine),
                    checked=len(mine),
                    rate=sum(mine) / len(mine) if mine else None,
                )
            )
    return tuple(out)


def _pp(x: float | None) -> str:
    """An absolute difference of rates in points, signed."""
    return "n/a" if x is None else f"{x * 100:+.1f} pts"


def _describe(t: McNemarTest) -> str:
    bound = "" if t.drop_upper is None else f", drop <= {t.drop_upper * 100:.1f} pts"
    side = "one-sided" if t.alternative == "greater" else "two-sided"
    return (
        f"{t.comparison}: {t.worse} worse / {t.better} better of {t.n} (drop {_pp(t.drop)}, "
        f"McNemar exact {side} p = {t.p_value:.3g}{bound})"
    )


def decide(
    tests: Sequence[McNemarTest],
    floor: McNemarTest | None,
    *,
    margin: float,
    level: float,
    controls_passed: int,
    who: str = "B",
) -> tuple[Status, tuple[str, ...]]:
    """The gate's decision from B's tests against the controls, the controls' floor and how many units the
    controls passed between them (module docstring)."""
    if controls_passed == 0:
        n = tests[0].n if tests else 0
        return "INCONCLUSIVE", (
            f"no control passed any of the {n} checked requests: the check sees no quality to "
            "lose; choose classes the lane's model can do (or tool_choice: required)",
        )
    floor_drop = abs(floor.drop or 0.0) if floor else 0.0
    shown_worse = all(t.p_value < level for t in tests)
    if shown_worse and all((t.drop or 0.0) > floor_drop for t in tests):
        return "FAIL", (
            f"{who}'s pass rate is shown lower than every control's (p < {level:.2%} each) by more "
            f"than the controls differ ({_pp(floor_drop)})",
        )
    if all(t.drop_upper is not None and t.drop_upper < margin for t in tests):
        return "PASS", ()
    if shown_worse:
        return "INCONCLUSIVE", (
            f"{who} is shown worse than every control, but by no more than the controls differ "
            f"from each other ({_pp(floor_drop)}): the bracket cannot tell the change from a "
            "reboot",
        )
    bounds = ", ".join(f"{t.comparison} {(t.drop_upper or 0.0) * 100:.1f}" for t in tests)
    return "INCONCLUSIVE", (
        f"neither shown: the drop's upper bounds ({bounds} pts) are not all below the margin "
        f"{margin * 100:.1f} pts, and no drop is shown against every control; more units narrow "
        "the bound",
    )


def eval_quality(gate: TaskQualityGate, cand: ArmData, ctrls: Sequence[ArmData], look: Look) -> GateResult:
    """Decide `gate` over the candidate's and the controls' per-request outcomes (module docstring)."""
    level = look.level(gate.alpha)
    names = [cand.arm, *(c.arm for c in ctrls)]
    bar = (
        f"task quality, {cand.arm} against each control: FAIL when McNemar's exact test (one-sided, "
        f"{cand.arm}'s pass rate lower) rejects at {level:.2%} against every control and the drop exceeds the "
        f"controls' own; PASS when the drop's one-sided {1 - level:.1%} upper bound is below "
        f"{gate.margin * 100:.1f} pts against every control"
    )

    def undecided(observed: str, reason: str, result: QualityResult | None = None) -> GateResult:
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status="INCONCLUSIVE",
            observed=observed,
            bar=bar,
            noise_floor="-",
            reasons=(reason,),
            decides=gate.decides,
            quality=result,
        )

    per = [unit_outcomes(a, gate) for a in (cand, *ctrls)]
    units = sorted(set(per[0]).intersection(*[set(p) for p in per[1:]]))
    if not units:
        counts = ", ".join(f"{n} {len(p)}" for n, p in zip(names, per))
        return undecided(
            f"no paired units ({counts} outcomes)",
            f"no request of window {gate.window} was checked on every arm: the window must let requests "
            "stop at EOS (forced_tokens: null) and run transcripts that ask for something checkable "
            "(tool_json, structured JSON/YAML/CSV, code in Python)",
        )
    arms = [cand, *ctrls]
    outcome = [[p[u][1] for u in units] for p in per]
    tests = [
        mcnemar(outcome[0], outcome[i], comparison=f"{cand.arm} vs {c.arm}", level=level)
        for i, c in enumerate(ctrls, 1)
    ]
    floor = (
        mcnemar(outcome[1], outcome[2], comparison=f"{ctrls[0].arm} vs {ctrls[1].arm}", level=level, two_sided=True)
        if len(ctrls) > 1
        else None
    )
    result = QualityResult(rates=_rates(arms, per, units), tests=tuple(tests) + ((floor,) if floor else ()))
    whole = {r.arm: r for r in result.rates if r.cls is None}
    rates = ", ".join(f"{n} {whole[n].rate:.1%} ({whole[n].passed}/{whole[n].checked})" for n in names)
    observed = f"pass rate {rates}; " + "; ".join(_describe(t) for t in tests)
    noise = _describe(floor) if floor else "no floor: one control"
    status, reasons = decide(
        tests, floor, margin=gate.margin, level=level, controls_passed=sum(sum(o) for o in outcome[1:]), who=cand.arm
    )
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status=status,
        observed=observed,
        bar=bar,
        noise_floor=noise,
        reasons=reasons,
        decides=gate.decides,
        quality=result,
    )
