"""The tested gates: paired per-transcript tests of B against the controls, and of A against A2.

A unit is one transcript, its requests averaged over the rounds and the
concurrencies the test covers: within an arm a transcript's requests at
every concurrency of a round share one seed, so only transcripts are
independent. Every arm ran the same transcripts, so units pair across arms. B's
unit is compared with the mean of the controls' units (A, A2). The test,
margin and alpha are the gate's, registered before any arm ran; nothing here
is derived from the data it judges. At a look of a group-sequential design,
the one-sided level is the one the design's alpha spending allows there.

A gate's registered `boot_sd` adds each arm's boot-to-boot shift to the
test's variance (`cards.decide.stats`): an arm boots once per stage, so at look s
its data spans s boots, and the component is divided by s.

Verdict mapping: a superiority or non-inferiority test decides the gate
(PASS, FAIL, or INCONCLUSIVE when the interval straddles the margin). The
controls' equivalence test never makes a card FAIL: controls that are not
shown equivalent mean the bracket could not separate B from the hour, so the
gate is INCONCLUSIVE (or, with `decides: false`, only reported).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gb300lane.cards.decide.cuped import cuped_test, describe
from gb300lane.cards.decide.data import ArmData, merged_cells
from gb300lane.cards.decide.results import GateResult, GateTest, Metric, Status, combine
from gb300lane.cards.decide.sequential import nominal_level
from gb300lane.cards.decide.stats import BootVariance, bootstrap_seed, paired_units, ratio_test
from gb300lane.cards.schema import Card, ControlsEquivalence, Spending, TestedGate

NO_TPS = (
    "no per-request tokens/step recorded: the lane must report each request's spec-decode counters "
    "(engine_args.extra_args.per_request_spec_decode_metrics: summary in the recipe)"
)


@dataclass(frozen=True)
class Look:
    """Which look of the design a decision is made at (a fixed design has one)."""

    number: int = 1
    looks: int = 1
    spending: Spending = "obrien_fleming"
    #: The share of each gate's alpha the run may spend (its question's Pocock share; 1.0 for one run).
    share: float = 1.0

    def level(self, alpha: float) -> float:
        """The one-sided level this look may spend for a gate of one-sided `alpha` (the run's share of it)."""
        if self.looks == 1:
            return alpha * self.share
        return nominal_level(alpha * self.share, self.number, self.looks, self.spending)


Units = dict[tuple[str, int], dict[str, float]]
METRIC_LABEL = {"tokens_per_step": "tokens/step", "decode_tok_s": "decode tok/s"}


def units_of(arm: ArmData, gate: TestedGate, metric: str) -> tuple[Units, dict[tuple[str, int], int]]:
    """Per cell, transcript -> value (rounds averaged); and per cell the requests behind them."""
    w = arm.windows.get(gate.window)
    out: Units = {}
    requests: dict[tuple[str, int], int] = {}
    if w is None:
        return out, requests

    def covered(cls: str, conc: int) -> bool:
        return (gate.classes is None or cls in gate.classes) and (gate.concurrency is None or conc in gate.concurrency)

    for c in w.cells:
        if covered(c.cls, c.concurrency):
            n = len(c.per_transcript_tps if metric == "tokens_per_step" else c.per_transcript)
            requests[(c.cls, c.concurrency)] = requests.get((c.cls, c.concurrency), 0) + n
    for key, agg in merged_cells(w).items():
        if covered(*key):
            vals = agg.per_transcript_tps if metric == "tokens_per_step" else agg.per_transcript
            if vals:
                out[key] = dict(vals)
    return out, requests


def by_transcript(units: Units, keys: list[tuple[str, int]]) -> dict[str, tuple[float, int]]:
    """Transcript -> (mean over the cells `keys`, cells averaged).

    A transcript is the independent unit: within an arm its requests at
    every concurrency of a round carry the same seed, so they share their
    random streams (identical where k is the same, correlated where it is
    not), and counting them as separate units would understate the noise.
    """
    acc: dict[str, list[float]] = {}
    for k in keys:
        for t, v in units.get(k, {}).items():
            acc.setdefault(f"{k[0]}/{t.split('#')[0]}", []).append(v)
    return {u: (sum(vs) / len(vs), len(vs)) for u, vs in acc.items()}


def _paired(
    subject: dict[str, tuple[float, int]], refs: list[dict[str, tuple[float, int]]]
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Keep the units every arm measured in the same cells, so each pair compares like with like."""
    common = [u for u in subject if all(u in r and r[u][1] == subject[u][1] for r in refs)]
    return {u: subject[u][0] for u in common}, [{u: r[u][0] for u in common} for r in refs]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2%}"


def _describe(t: GateTest) -> str:
    where = "" if t.cls is None else f"{t.cls} C{t.concurrency}: "
    return f"{where}{t.comparison} {_pct(t.estimate)} [{_pct(t.low)}, {_pct(t.high)}] ({t.level:.1%}), n {t.n}"


def eval_tested(card: Card, gate: TestedGate, cand: ArmData | None, ctrls: list[ArmData], look: Look) -> GateResult:
    """Run a tested gate's test(s) and fold them into one GateResult."""
    equivalence = isinstance(gate, ControlsEquivalence)
    metric: Metric = gate.metric
    if equivalence:
        if len(ctrls) < 2:
            return GateResult(
                id=gate.id,
                kind=gate.kind,
                status="INCONCLUSIVE",
                observed="one control",
                bar=f"A / A2 within +-{gate.margin:.2%}",
                noise_floor="-",
                reasons=("an equivalence test of the controls needs two control arms",),
                decides=gate.decides,
            )
        subject, refs = ctrls[0], [ctrls[1]]
        comparison = f"{ctrls[0].arm} / {ctrls[1].arm}"
    else:
        assert cand is not None
        subject, refs = cand, ctrls
        comparison = f"{cand.arm} / mean({', '.join(a.arm for a in ctrls)})"
    s_units, requests = units_of(subject, gate, metric)
    r_units = [units_of(r, gate, metric)[0] for r in refs]
    keys = sorted(
        set(s_units).intersection(*[set(r) for r in r_units]) if r_units else set(), key=lambda k: (k[1], k[0])
    )
    level = look.level(gate.alpha)
    groups = [(None, keys)] if gate.scope == "aggregate" else [(k, [k]) for k in keys]
    tests: list[GateTest] = []
    for cell, ks in groups:
        sub, ref = _paired(by_transcript(s_units, ks), [by_transcript(r, ks) for r in r_units])
        b, c = paired_units(sub, ref)
        boot = BootVariance(sd=gate.boot_sd, df=gate.boot_df, refs=len(refs), boots=look.number)
        adjustment: str | None = None
        theta: float | None = None
        if gate.adjust == "cuped" and gate.test != "equivalence":
            units = sorted(sub)
            ctrl = np.array([[r[u] for u in units] for r in ref], dtype=np.float64)
            rt, adj = cuped_test(
                np.array([sub[u] for u in units], dtype=np.float64),
                ctrl,
                test=gate.test,
                margin=gate.margin,
                level_one_sided=level,
                who=subject.arm,
                boot=boot,
            )
            if adj is not None:
                adjustment, theta = describe(adj), adj.theta
        else:
            rt = ratio_test(
                b,
                c,
                test=gate.test,
                margin=gate.margin,
                level_one_sided=level,
                method=gate.interval,
                seed=bootstrap_seed(gate.id, cell, look.number),
                who=subject.arm,
                boot=boot,
            )
        tests.append(
            GateTest(
                metric=metric,
                cls=cell[0] if cell else None,
                concurrency=cell[1] if cell else None,
                comparison=comparison,
                test=gate.test,
                method=gate.interval,
                estimate=rt.estimate,
                low=rt.low,
                high=rt.high,
                level=1.0 - 2.0 * level,
                margin=gate.margin,
                alpha=gate.alpha,
                nominal_alpha=level,
                n=rt.n,
                requests_per_arm=sum(requests.get(k, 0) for k in ks),
                statistic=rt.statistic,
                df=rt.df,
                p_value=rt.p_value,
                baseline=rt.baseline,
                look=look.number,
                looks=look.looks,
                decision=rt.decision,
                reason=rt.reason,
                adjustment=adjustment,
                theta=theta,
            )
        )
    what = {
        "superiority": f"{subject.arm} better than the controls by more than {gate.margin:.2%}",
        "non_inferiority": f"{subject.arm} no worse than the controls by more than {gate.margin:.2%}",
        "equivalence": f"{comparison} within +-{gate.margin:.2%} (TOST)",
    }[gate.test]
    seq = "" if look.looks == 1 else f"; look {look.number} of {look.looks} ({look.spending} spending)"
    bar = f"{gate.test.replace('_', '-')}: {what}; one-sided alpha {gate.alpha:.2%}{seq}"
    if not tests:
        reason = (
            NO_TPS
            if metric == "tokens_per_step" and not any(requests.values())
            else "no paired units: the arms share no transcripts"
        )
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status="INCONCLUSIVE",
            observed="no paired units",
            bar=bar,
            noise_floor="-",
            reasons=(reason,),
            decides=gate.decides,
        )
    decisions: list[Status] = [t.decision for t in tests]
    if equivalence:
        status: Status = "PASS" if all(d == "PASS" for d in decisions) else "INCONCLUSIVE"
    else:
        status = combine(decisions)
    if len(tests) == 1:
        observed = _describe(tests[0])
    else:
        worst = min(tests, key=lambda t: t.low if t.low is not None else float("-inf"))
        ests = [t.estimate for t in tests if t.estimate is not None]
        span = f"{_pct(min(ests))}..{_pct(max(ests))}" if ests else "n/a"
        observed = f"{len(tests)} cells, {comparison} {span}; lowest bound {_describe(worst)}"
    noise = f"paired by transcript, {METRIC_LABEL[metric]}; {sum(requests.get(k, 0) for k in keys)} requests per arm"
    if gate.boot_sd > 0:
        noise += (
            f"; plus a boot sd of {gate.boot_sd:.2%} per arm ("
            + ("taken as known" if gate.boot_df is None else f"df {gate.boot_df}")
            + f", {look.number} boot(s) each)"
        )
    if gate.adjust == "cuped":
        thetas = [t.theta for t in tests if t.theta is not None]
        noise += (
            "; cuped: the controls' per-transcript level a covariate of the log ratio (geometric-mean ratio, "
            "about the card's transcripts)"
            + (
                f", theta {thetas[0]:.3f}"
                if len(thetas) == 1
                else f", theta {min(thetas):.3f}..{max(thetas):.3f}"
                if thetas
                else ""
            )
        )
    if status == "PASS":
        reasons = tuple(
            [tests[0].reason] if len(tests) == 1 else [f"all {len(tests)} cells: {tests[0].reason.split(':')[0]}"]
        )
    else:
        reasons = tuple(
            f"{'' if t.cls is None else f'{t.cls} C{t.concurrency}: '}{t.reason}" for t in tests if t.decision != "PASS"
        )
        if equivalence:
            reasons = (
                "the controls are not shown to agree, so the bracket cannot separate "
                f"{card.candidate.name} from the hour",
            ) + reasons
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status=status,
        observed=observed,
        bar=bar,
        noise_floor=noise,
        reasons=reasons,
        tests=tuple(tests),
        decides=gate.decides,
    )
