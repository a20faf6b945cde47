"""Calibration on the lane itself: replicates of a card through the lane's own boots and HTTP, each a card.

`card calibrate` measures a card's instrument on the embedded engine in process, where a replicate costs
milliseconds. On any other lane (real vLLM on this CPU, the box) the noise that matters is the lane's, so
`card calibrate CARD --lane` runs the same two scenarios as real cards:

- `aa`: the card with B booting the control recipe (`calibrate.aa_card`): its PASS rate is the false
  "B better" rate, its FAIL rate the false FAIL rate;
- `card`: the card as written: its PASS rate is the power against whatever B really does.

Replicate r of a scenario is the card renamed `<card>-lane-<scenario>-<r>` with the primary window's seed base
a hash of (card, seed, r), so each replicate's requests are new draws and a rerun of the same seed repeats
them. Every replicate is registered, run and scored like any card, as a receipts directory of its own under
`results/calibrations/<date>-<card>-lane-s<seed>/` (so its boots, windows and verdict are receipts, under
custody like any card's). A card that registers an extension (`design.extension`) has every INCONCLUSIVE
replicate extended as `card extend` extends it (`cards.extend`: the further looks its verdict's `more_needed`
sizes, again while it stays INCONCLUSIVE and the plan has looks left), so the rates are the whole registered
plan's; `extend=False` measures the design's own looks alone. A replicate already decided there is read, not
run again, and one whose extension was cut short is taken up where it stopped (resumable); with a time
budget, no replicate or extension starts once the budget is spent, and the rates are over the replicates that
finished, with their count (one left mid-plan is not counted: its verdict is not yet the plan's). Rates carry 95% Clopper-Pearson intervals (`cards.stats.proportion`), beside the power the
card's plan predicts from the lane's own noise (`instrument.plan.registration_plan`).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from gb300lane.cards.extend import extend_card
from gb300lane.cards.record.extensions import pending_extension
from gb300lane.cards.record.receipts import Receipts, read_verdict, register
from gb300lane.cards.record.verdicts import score
from gb300lane.cards.run import ArmOps, run_card
from gb300lane.cards.schema import Card, TestedGate, planned_stages
from gb300lane.errors import CardError, LaneError
from gb300lane.fsio import atomic_write
from gb300lane.instrument.calibrate import RateCI, aa_card, rate_ci, window_gates
from gb300lane.instrument.plan import registration_plan
from gb300lane.models import FrozenModel
from gb300lane.paths import results_dir

LaneScenario = Literal["aa", "card"]


class LaneReplicate(FrozenModel):
    """One replicate of one scenario, as its card scored it."""

    scenario: LaneScenario = Field(description="aa (B boots the control recipe) or card (as written).")
    replicate: int = Field(description="Replicate number (0-based).")
    seed_base: int = Field(description="The replicate's primary-window seed base.")
    receipts: str = Field(description="The replicate's receipts directory.")
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE"] = Field(description="Its verdict (the newest, extended).")
    seconds: float = Field(description="Wall-clock seconds it took (0 when read back from an earlier run).")
    extensions: int = Field(default=0, description="Times `card extend` extended it (verdicts after the first).")
    looks: int = Field(default=1, description="Looks (stages) it ran.")


class LaneCalibration(FrozenModel):
    """What `card calibrate --lane` measured."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    card: str = Field(description="Card name.")
    seed: int = Field(description="Calibration seed.")
    root: str = Field(description="Where the replicates' receipts are.")
    requested: int = Field(description="Replicates per scenario asked for.")
    false_better: RateCI = Field(description="A/A replicates that PASS.")
    false_fail: RateCI = Field(description="A/A replicates that FAIL.")
    power: RateCI = Field(description="As-written replicates that PASS.")
    fail_when_real: RateCI = Field(description="As-written replicates that FAIL.")
    planned_power: float | None = Field(
        description="The card's power as its plan predicts it from the lane's noise "
        "(extended: the registered plan's, by its last look)."
    )
    extended: bool = Field(
        default=False,
        description="Whether INCONCLUSIVE replicates were extended (a registered extension, and not --no-extend).",
    )
    extended_aa: int = Field(default=0, description="A/A replicates extended at least once.")
    extended_card: int = Field(default=0, description="As-written replicates extended at least once.")
    plan_source: str = Field(default="", description="Where that plan's noise came from.")
    budget_s: float | None = Field(description="Time budget (None: none).")
    stopped_by_budget: bool = Field(description="Whether the budget stopped it before every replicate ran.")
    seconds: float = Field(description="Wall-clock seconds of this run.")
    replicates: tuple[LaneReplicate, ...] = Field(description="Every replicate, in the order run.")
    notes: tuple[str, ...] = Field(
        default=(),
        description="What says the tests leave out variance this lane has: "
        "an A/A rate whose 95% lower bound lies above the deciding gates' alpha "
        "(`rate_notes`), A/A estimates spread beyond their standard errors "
        "(`spread_notes`).",
    )


def calibration_root(card: Card, seed: int, date: str | None = None) -> Path:
    day = date or datetime.now(UTC).strftime("%Y-%m-%d")
    return results_dir() / "calibrations" / f"{day}-{card.name}-lane-s{seed}"


def replicate_seed(card: Card, seed: int, r: int) -> int:
    return int(hashlib.sha256(f"{card.name}|lane|{seed}|{r}".encode()).hexdigest()[:8], 16)


def replicate_card(card: Card, scenario: LaneScenario, seed: int, r: int) -> Card:
    """The card replicate r of `scenario` runs: renamed, its primary window given the replicate's seed base, and
    only its window gates (the tests whose error rates are calibrated, as `card calibrate` scores them): a boot
    gate is a fact of one boot, and in the A/A scenario the changed-flag gate fails by construction."""
    base = aa_card(card) if scenario == "aa" else card
    seed_base = replicate_seed(card, seed, r)
    windows = tuple(
        w.model_copy(update={"seed_base": seed_base}) if w.name == card.primary_window else w for w in base.windows
    )
    return base.model_copy(
        update={"name": f"{card.name}-lane-{scenario}-{r:03d}", "windows": windows, "gates": window_gates(base)}
    )


def card_payload(card: Card) -> dict[str, object]:
    """The card as its file says it: defaults left out, except the design's, whose kind tells its type apart."""
    out = card.model_dump(mode="json", exclude_defaults=True)
    if card.design.extension is not None or "design" in out:
        out["design"] = card.design.model_dump(mode="json", exclude_none=True)
    return out


def calibrate_lane(
    card: Card,
    replicates: int,
    *,
    ops: ArmOps,
    seed: int = 0,
    budget_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    date: str | None = None,
    extend: bool = True,
) -> LaneCalibration:
    """Run (or read back) `replicates` replicates of both scenarios through `ops`, A/A first in each pair, each
    extended to a decision where the card registers an extension (and `extend`)."""
    if replicates < 1:
        raise CardError("--replicates must be at least 1")
    say = progress or (lambda _m: None)
    extend = extend and card.design.extension is not None
    root = calibration_root(card, seed, date)
    if card.design.extension is not None and not extend:  # the design's own looks alone: replicates of their own
        root = root.with_name(root.name + "-unextended")
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    done: list[LaneReplicate] = []
    stopped = False
    for r in range(replicates):
        scenarios: tuple[LaneScenario, ...] = ("aa", "card")
        for scenario in scenarios:
            rep = replicate_card(card, scenario, seed, r)
            text = yaml.safe_dump(card_payload(rep), sort_keys=False)
            rec = register(
                rep,
                text,
                base=root,
                date=(date or datetime.now(UTC).strftime("%Y-%m-%d")),
                aside="a replicate of `card calibrate --lane`",
            )
            ran = False
            started = time.monotonic()
            if not rec.verdict_numbers():
                if budget_s is not None and time.monotonic() - t0 > budget_s:
                    stopped = True
                    break
                say(f"replicate {r + 1}/{replicates} {scenario}: {rec.root.name}")
                try:
                    run_card(rec, ops=ops, progress=say)
                except (CardError, LaneError) as exc:
                    say(f"replicate {r + 1} {scenario} did not finish ({exc}); a later run of the same seed resumes it")
                    continue
                say(f"replicate {r + 1}/{replicates} {scenario}: {score(rec).verdict}")
                ran = True
            while extend and _extendable(rec, rep):
                if budget_s is not None and time.monotonic() - t0 > budget_s:
                    stopped = True
                    break
                try:
                    got = extend_card(rec, ops=ops, progress=say)
                except (CardError, LaneError) as exc:
                    say(
                        f"replicate {r + 1} {scenario}: its extension did not finish ({exc}); a later run of the "
                        "same seed resumes it"
                    )
                    break
                say(
                    f"replicate {r + 1}/{replicates} {scenario}: extended to look {got.verdict.look}: "
                    f"{got.verdict.verdict}"
                )
                ran = True
            if stopped:
                break
            if extend and _extendable(rec, rep):
                continue  # mid-plan: not yet the plan's verdict
            numbers = rec.verdict_numbers()
            done.append(
                _replicate(
                    scenario,
                    r,
                    rep,
                    rec,
                    read_verdict(rec, numbers[-1]).verdict,
                    time.monotonic() - started if ran else 0.0,
                )
            )
        if stopped:
            break
    aa = [d for d in done if d.scenario == "aa"]
    written = [d for d in done if d.scenario == "card"]
    plan = registration_plan(card)
    planned = None if plan is None else plan.extension.power if extend and plan.extension is not None else plan.power
    cal = LaneCalibration(
        card=card.name, seed=seed, root=str(root), requested=replicates,
        false_better=rate_ci(sum(d.verdict == "PASS" for d in aa), len(aa)),
        false_fail=rate_ci(sum(d.verdict == "FAIL" for d in aa), len(aa)),
        power=rate_ci(sum(d.verdict == "PASS" for d in written), len(written)),
        fail_when_real=rate_ci(sum(d.verdict == "FAIL" for d in written), len(written)),
        planned_power=planned, plan_source=plan.source if plan is not None else "", extended=extend,
        extended_aa=sum(1 for d in aa if d.extensions), extended_card=sum(1 for d in written if d.extensions),
        budget_s=budget_s, stopped_by_budget=stopped, seconds=round(time.monotonic() - t0, 1), replicates=tuple(done),
    )  # fmt: skip
    cal = cal.model_copy(update={"notes": rate_notes(card, cal) + spread_notes(card, aa)})
    atomic_write(root / "calibration.json", cal.model_dump_json(indent=2) + "\n")
    return cal


def rate_notes(card: Card, cal: LaneCalibration) -> tuple[str, ...]:
    """Where the lane's A/A replicates decide more often than the card's tests allow: a rate's 95%
    Clopper-Pearson lower bound above the largest alpha among its deciding superiority and non-inferiority
    gates (each tail of an A/A card is one such gate's one-sided error)."""
    alphas = [g.alpha for g in card.gates if isinstance(g, TestedGate) and g.decides and g.test != "equivalence"]
    if not alphas:
        return ()
    alpha = max(alphas)
    out = []
    for what, r in (("false 'B better'", cal.false_better), ("false FAIL", cal.false_fail)):
        if r.replicates and r.low > alpha:
            out.append(
                f"{what} on this lane is {r.events}/{r.replicates} ({r.rate:.1%}, 95% interval "
                f"[{r.low:.1%}, {r.high:.1%}]), above the gates' one-sided {alpha:.1%} beyond doubt: the "
                "tests leave out variance this lane has (between boots, or between the bracket's positions); "
                "register a boot sd that covers it (`gb300lane card noise` for A against A2, the A/A "
                "estimates' spread for B against the controls) and calibrate again"
            )
    return tuple(out)


def spread_notes(card: Card, aa: list[LaneReplicate]) -> tuple[str, ...]:
    """What the A/A replicates' estimates say of the variance the tests carry: per aggregate deciding gate that
    tests B against the controls, the spread of its estimates over the replicates beside the root mean square of
    their standard errors (each test's own, from its interval's half-width). A spread well above the se is a
    shift of whole arms the test leaves out; its size is sqrt(spread^2 - se^2)."""
    import statistics

    from scipy.stats import chi2, norm

    gates = {
        g.id
        for g in card.gates
        if isinstance(g, TestedGate) and g.decides and g.scope == "aggregate" and g.test != "equivalence"
    }
    per: dict[str, list[tuple[float, float]]] = {}
    for d in aa:
        rec = Receipts(Path(d.receipts))
        v = read_verdict(rec, rec.verdict_numbers()[0])  # look 1: the same information in every replicate
        for r in v.results:
            t = r.tests[0] if r.id in gates and len(r.tests) == 1 else None
            if t is not None and t.estimate is not None and t.low is not None and t.high is not None:
                se = (t.high - t.low) / 2 / float(norm.isf((1 - t.level) / 2))
                per.setdefault(r.id, []).append((t.estimate, se))
    out = []
    for gid, got in sorted(per.items()):
        if len(got) < 4:
            continue
        sd = statistics.stdev(e for e, _ in got)
        se = math.sqrt(sum(x * x for _, x in got) / len(got))
        # one-sided 5% test of sd <= se: (n - 1) sd^2 / se^2 against chi2(n - 1)
        if (len(got) - 1) * sd * sd / (se * se) > float(chi2.ppf(0.95, len(got) - 1)):
            extra = math.sqrt(sd * sd - se * se)
            per_arm = extra / math.sqrt(1.0 + 1.0 / len(card.controls))  # B against the controls' mean
            out.append(
                f"gate {gid}: its {len(got)} A/A estimates spread with an sd of {sd:.2%} where each test's "
                f"standard error is {se:.2%} (a chi-square test, 5% level, says more than chance): the "
                f"comparison carries about {extra:.2%} beyond its requests' noise, a boot sd of about "
                f"{per_arm:.2%} per arm, a share the test leaves out"
            )
    return tuple(out)


def _extendable(rec: Receipts, rep: Card) -> bool:
    """Whether `card extend` would take the replicate further: its newest verdict INCONCLUSIVE with looks left
    in the registered plan, or an extension begun and not yet scored."""
    if pending_extension(rec) is not None:
        return True
    numbers = rec.verdict_numbers()
    return (
        bool(numbers)
        and read_verdict(rec, numbers[-1]).verdict == "INCONCLUSIVE"
        and rec.stages_done(rep) < planned_stages(rep)
    )


def _replicate(
    scenario: LaneScenario,
    r: int,
    rep: Card,
    rec: Receipts,
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE"],
    seconds: float,
) -> LaneReplicate:
    w = rep.window(rep.primary_window)
    return LaneReplicate(
        scenario=scenario,
        replicate=r,
        seed_base=int(w.seed_base or 0),
        receipts=str(rec.root),
        verdict=verdict,
        seconds=round(seconds, 1),
        extensions=len(rec.verdict_numbers()) - 1,
        looks=rec.stages_done(rep),
    )
