"""`card calibrate`: measure a card's instrument on the embedded engine, A/A and as written.

Each replicate draws a fresh seed base (a stable hash of the card, the
calibration seed and the replicate number) and runs four arms on the engine
core in process (`instrument.simulate`): the controls A and A2, the candidate B
as written, and a second copy of the control recipe in B's place. The card
as written is scored on (A, B, A2) and the A/A card on (A, A-as-B, A2), with
the registered gates, the card's design (every look of a sequential card)
and the same gate code as `card score`. The rates are:

    false "B better"   A/A replicates whose verdict is PASS
    false FAIL         A/A replicates whose verdict is FAIL (B is A: nothing got worse)
    power              replicates of the card as written whose verdict is PASS
    FAIL when real     replicates of the card as written whose verdict is FAIL

each with a 95% Clopper-Pearson interval. Boot gates are not exercised (there
is no boot); the output says so. Results are receipts under
`results/calibrations/`.

What the engine measured is kept apart from what the gates made of it: every
arm-stage a replicate runs (its windows' per-transcript values, counters and
output digests) is appended to a raw file keyed by what runs (the card
without its gates, the seed and the engine's fingerprint), so a calibration
of changed gates (another alpha, margin or boot_sd) re-scores the same
replicates without running the engine again. The arms' boot shifts are
measured from the same raw data (`boot_check`): each replicate has three
boots of the control recipe (A, A2 and A-as-B), which is a check of the
boot_sd the card registered, never an input to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from gb300lane import __version__
from gb300lane.cards.decide.boots import refuse_pinned_boot_seed
from gb300lane.cards.decide.data import ArmData, BootFacts, WindowData, merge_stages
from gb300lane.cards.decide.extension import plan_extension
from gb300lane.cards.decide.gates import evaluate
from gb300lane.cards.decide.looks import decide, design_look
from gb300lane.cards.decide.results import Status
from gb300lane.cards.decide.stats import proportion
from gb300lane.cards.embedded import check_embedded, engine_fingerprint
from gb300lane.cards.record.receipts import new_run_dir, utc_now
from gb300lane.cards.run import arm_seed_base, arm_window, stage_windows
from gb300lane.cards.schema import (
    Card,
    ControlsAgreeGate,
    ControlsEquivalence,
    DecodeRatioGate,
    DecodeTest,
    Gate,
    ParityGate,
    TestedGate,
    TokensPerStepGate,
    TokensPerStepTest,
    gates_hash,
    planned_stages,
    stage_count,
)
from gb300lane.errors import CardError
from gb300lane.fsio import atomic_write, dumps_json, sha256_bytes, write_once
from gb300lane.instrument.simulate import DIFFERENCES, InProcessLane
from gb300lane.models import FrozenModel
from gb300lane.paths import results_dir

Scenario = Literal["aa", "card"]
WINDOW_GATES = (
    TokensPerStepTest,
    DecodeTest,
    ControlsEquivalence,
    ParityGate,
    TokensPerStepGate,
    DecodeRatioGate,
    ControlsAgreeGate,
)


class ReplicateOutcome(FrozenModel):
    """One replicate of one scenario."""

    replicate: int = Field(description="Replicate number (0-based).")
    scenario: Scenario = Field(description="aa: B replaced by the control recipe; card: as written.")
    seed_base: int = Field(description="The replicate's seed base (each arm derives its own from it).")
    verdict: Status = Field(description="The card's verdict over the gates exercised.")
    look: int = Field(description="The look the design stopped at.")
    requests_per_arm: int = Field(description="Primary-window requests per arm until it stopped.")
    gates: dict[str, Status] = Field(description="Gate id -> status at the stopping look.")
    estimates: dict[str, float | None] = Field(default_factory=dict, description="Aggregate tested gates: estimate.")
    statistics: dict[str, float | None] = Field(
        default_factory=dict, description="Aggregate tested gates: t at the margin."
    )
    extensions: int = Field(
        default=0,
        description="Times it was extended (`card extend`) after an INCONCLUSIVE "
        "look; 0 for a card without a registered extension.",
    )
    extended_stages: int = Field(default=0, description="Stages it ran beyond the design's own.")
    first_estimates: dict[str, float | None] = Field(
        default_factory=dict,
        description="Aggregate tested gates: estimate at look 1, where every replicate looks "
        "with the same information (the stopping look's estimate leans toward the effects that stop early).",
    )


class RateCI(FrozenModel):
    rate: float = Field(description="events / replicates.")
    low: float = Field(description="95% Clopper-Pearson lower bound.")
    high: float = Field(description="95% Clopper-Pearson upper bound.")
    events: int = Field(description="Replicates with the event.")
    replicates: int = Field(description="Replicates.")


class BootCheck(FrozenModel):
    """A gate's registered boot sd against what the calibration's control boots show."""

    registered_sd: float = Field(description="boot_sd the gate registered.")
    measured_sd: float = Field(
        description="Relative between-boot SD from the replicates' control boots (0 when the estimate is negative)."
    )
    measured_sd_signed: float = Field(description="The same, signed: sqrt(|s2|) with the sign of the estimate.")
    upper: float = Field(default=0.0, description="One-sided 95% upper confidence bound of the boot sd.")
    lower: float = Field(
        default=0.0,
        description="One-sided 95% lower confidence bound of the boot sd (above the "
        "registered one: the registered figure is too small).",
    )
    df: float | None = Field(description="Satterthwaite degrees of freedom of the estimate.")
    f_ratio: float = Field(description="Between-boot over within mean square (1 when there is no boot effect).")
    boots: int = Field(description="Control boots used.")


class Calibration(FrozenModel):
    """A calibration's record (calibration.json)."""

    schema_version: Literal[1] = Field(description="File format version.")
    card: str = Field(description="Card name.")
    gates_sha256: str = Field(description="The card's registered-gates hash (what was calibrated).")
    written_at: str = Field(description="UTC time it finished.")
    tool_version: str = Field(description="gb300lane version.")
    engine_sha256: str = Field(
        default="",
        description="sha256 of the engine and verifier files and the card's "
        "recipes (instrument.simulate.engine_fingerprint): same card hash, seed, replicates and "
        "engine give the same outcomes.",
    )
    replicates: int = Field(description="Replicates per scenario.")
    seed: int = Field(description="Calibration seed: replicate r's seed base is a hash of (card, seed, r).")
    design: str = Field(description="The card's design.")
    candidate_recipe: str = Field(description="B as written.")
    control_recipe: str = Field(description="A and A2 (and B in the A/A scenario).")
    requests_per_arm: int = Field(description="Primary-window requests per arm as written (the most, sequential).")
    mean_requests_per_arm_aa: float = Field(description="Mean primary-window requests per arm, A/A.")
    mean_requests_per_arm_card: float = Field(description="Mean primary-window requests per arm, as written.")
    false_better: RateCI = Field(description="A/A verdicts PASS.")
    false_fail: RateCI = Field(description="A/A verdicts FAIL.")
    power: RateCI = Field(description="As-written verdicts PASS.")
    fail_when_real: RateCI = Field(description="As-written verdicts FAIL.")
    gates_exercised: tuple[str, ...] = Field(description="Gates scored in the fast path.")
    gates_not_exercised: tuple[str, ...] = Field(description="Boot gates: no boot happens in the fast path.")
    fast_path: str = Field(description="How the fast path differs from a full card run.")
    boot_check: dict[str, BootCheck] = Field(
        default_factory=dict,
        description="Tested gate id -> the boot sd the control boots of the replicates show, "
        "beside the one the gate registered (a check, never an input).",
    )
    reused_arm_stages: int = Field(default=0, description="Arm-stages taken from the raw file instead of run.")
    cpu_seconds: float = Field(description="CPU seconds of the replicates (all workers).")
    workers: int = Field(description="Processes that ran replicates.")
    extended_aa: int = Field(
        default=0,
        description="A/A replicates extended (INCONCLUSIVE at the design's last "
        "look, then run as `card extend` runs them); 0 without a registered extension.",
    )
    extended_decided_aa: int = Field(default=0, description="Of those, the ones an extension took to PASS or FAIL.")
    extended_card: int = Field(default=0, description="As-written replicates extended.")
    extended: bool = Field(
        default=False,
        description="Whether INCONCLUSIVE replicates were extended as `card "
        "extend` extends them (a registered extension, not --no-extend): its rates are then the "
        "whole plan's.",
    )
    mean_estimates_card: dict[str, float] = Field(
        default_factory=dict,
        description="Aggregate tested gate id -> its mean estimate at look 1 over the "
        "as-written replicates (the effect the card as written meets on this engine; `card calibrate` plans at it).",
    )


def replicate_seed(card: Card, seed: int, replicate: int) -> int:
    digest = hashlib.sha256(f"calibrate:{card.name}:{seed}:{replicate}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def with_seed(card: Card, seed_base: int) -> Card:
    """The card with every seeded window's seed base replaced (fresh seeds for one replicate)."""
    windows = tuple(
        w.model_copy(update={"seed_base": seed_base}) if w.seed_base is not None else w for w in card.windows
    )
    return card.model_copy(update={"windows": windows})


def aa_card(card: Card) -> Card:
    """The A/A card: B boots the control recipe."""
    ctrl = card.controls[0].recipe
    arms = tuple(
        a.model_copy(update={"recipe": ctrl, "allow_outside_trained_block": False}) if a.role == "candidate" else a
        for a in card.arms
    )
    return card.model_copy(update={"arms": arms})


def window_gates(card: Card) -> tuple[Gate, ...]:
    return tuple(g for g in card.gates if isinstance(g, WINDOW_GATES))


class ArmStage(FrozenModel):
    """What one arm measured in one stage of one replicate (a line of the raw file)."""

    replicate: int = Field(description="Replicate number.")
    key: str = Field(description="A, A2 (controls), B:card (B as written) or B:aa (the control recipe as B).")
    stage: int = Field(description="Stage (1 for a fixed design).")
    recipe: str = Field(description="Recipe the arm booted.")
    boot_seed: int = Field(description="The arm's boot seed (its numerics).")
    cpu_s: float = Field(description="CPU seconds it took.")
    windows: dict[str, WindowData] = Field(description="Window name -> what the arm measured in this stage.")


#: (replicate, key, stage) -> a raw line (parsed only when used)
RawStore = dict[tuple[int, str, int], str]
_HEAD = re.compile(
    r'^\{"boot_seed": (\d+), "cpu_s": [^,]+, "key": "([^"]+)", "recipe": "[^"]*", '
    r'"replicate": (\d+), "stage": (\d+), "windows": '
)


def run_hash(card: Card) -> str:
    """sha256 of what a replicate runs, not how it is judged: the card without its gates."""
    payload = card.model_dump(mode="json", exclude={"gates", "name", "title", "description"})
    return sha256_bytes(dumps_json(payload))


def raw_file(card: Card, seed: int, base: Path | None = None) -> Path:
    """Where the arm-stages of a card's runs (any gates) are kept, keyed by what runs, the seed and the engine."""
    key = f"{card.name}-seed{seed}-{run_hash(card)[:12]}-{engine_fingerprint(card)[:12]}"
    return (base or results_dir()) / "calibrations" / "raw" / f"{key}.jsonl"


def load_raw(path: Path | None) -> RawStore:
    """The arm-stages kept, by (replicate, key, stage); a line torn by a kill (no newline) is left out."""
    out: RawStore = {}
    if path is None or not path.is_file():
        return out
    with path.open(encoding="utf-8") as f:
        for line in f:
            m = _HEAD.match(line)
            if m is None or not line.endswith("}\n"):
                continue
            out[(int(m.group(3)), m.group(2), int(m.group(4)))] = line
    return out


def _raw_line(a: ArmStage) -> str:
    d = a.model_dump(mode="json")
    windows = d.pop("windows")
    head = json.dumps(d, sort_keys=True)
    return head[:-1] + ', "windows": ' + json.dumps(windows, sort_keys=True, separators=(",", ":")) + "}\n"


def _append_lines(path: Path, lines: list[str]) -> None:
    """Append whole lines and fsync; after a line a kill tore, the new ones start on a line of their own."""
    if not lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:  # a line torn by a kill: start on a line of our own
            f.seek(f.tell() - 1)
            if f.read(1) != "\n":
                f.write("\n")
        f.write("".join(lines))
        f.flush()
        os.fsync(f.fileno())


def run_replicate(
    lane: InProcessLane | None,
    card: Card,
    seed: int,
    replicate: int,
    raw: RawStore | None = None,
    new: list[str] | None = None,
    *,
    extend: bool = True,
) -> list[ReplicateOutcome]:
    """Both scenarios of one replicate; a sequential card stops each scenario at its own look.

    A card that registers an extension (`design.extension`) is extended as
    `card extend` extends it (`extend`, the default): a scenario INCONCLUSIVE at
    the design's last look runs the stages `cards.decide.extension.plan_extension`
    sizes, a look after each, and again while it stays INCONCLUSIVE and the plan
    has looks left. Arm-stages found in `raw` are not run again; those run are
    added to it and to `new` (as raw lines). `lane` may be None when `raw` holds
    every arm-stage the scoring reads (one is started otherwise).
    """
    raw = raw if raw is not None else {}
    seed_base = replicate_seed(card, seed, replicate)
    base = with_seed(card, seed_base)
    scenarios: dict[Scenario, Card] = {"card": base, "aa": aa_card(base)}
    gates = window_gates(card)
    cand = card.candidate
    data: dict[str, dict[str, Any]] = {}  # run key -> window name -> WindowData
    open_: dict[Scenario, bool] = {"card": True, "aa": True}
    first: dict[Scenario, dict[str, float | None]] = {}
    # the last stage each scenario runs: the design's, then what each extension plans
    limit: dict[Scenario, int] = {"card": stage_count(card), "aa": stage_count(card)}
    extensions: dict[Scenario, int] = {"card": 0, "aa": 0}
    total = planned_stages(card) if extend else stage_count(card)
    out: list[ReplicateOutcome] = []
    stage = 0
    while any(open_.values()):
        stage += 1
        runs = {a.name: (a, a.recipe) for a in base.controls}
        if open_["card"]:
            runs["B:card"] = (cand, cand.recipe)
        if open_["aa"]:
            runs["B:aa"] = (cand, base.controls[0].recipe)
        for key, (arm, recipe) in runs.items():
            boot = arm_seed_base(seed_base, f"boot:{key}", stage)
            line = raw.get((replicate, key, stage))
            if line is not None:
                got = ArmStage.model_validate_json(line).windows
            else:
                if lane is None:
                    lane = InProcessLane()
                windows = [arm_window(base, w, arm, stage) for w in stage_windows(base, stage)]
                c0 = time.process_time()
                got = lane.run_arm(base, arm, windows, recipe=recipe, boot_seed=boot).windows
                line = _raw_line(
                    ArmStage(
                        replicate=replicate,
                        key=key,
                        stage=stage,
                        recipe=recipe,
                        boot_seed=boot,
                        cpu_s=round(time.process_time() - c0, 3),
                        windows=got,
                    )
                )
                raw[(replicate, key, stage)] = line
                if new is not None:
                    new.append(line)
            prev = data.get(key) or {}
            data[key] = {**prev, **{n: merge_stages([prev[n], w]) if n in prev else w for n, w in got.items()}}
        look = design_look(card, stage)
        for scenario, sc in scenarios.items():
            if not open_[scenario]:
                continue
            arms = [
                ArmData(
                    arm=a.name,
                    recipe=a.recipe,
                    role=a.role,
                    source="measured",
                    boot=BootFacts(),
                    windows=data[a.name if a.role == "control" else f"B:{scenario}"],
                )
                for a in sc.arms
            ]
            results = evaluate(sc, gates, arms, None, look)
            if stage == 1:
                first[scenario] = {r.id: r.tests[0].estimate for r in results if len(r.tests) == 1}
            verdict, action = decide(results, look, final_at=limit[scenario])
            if action == "final" and verdict == "INCONCLUSIVE" and stage < total:
                limit[scenario] = plan_extension(sc, gates, results, stage).last_stage  # as `card extend` would
                extensions[scenario] += 1
                continue
            if action == "continue":
                continue
            open_[scenario] = False
            primary = data[f"B:{scenario}"].get(card.primary_window)
            requests = sum(len(c.per_transcript) for c in primary.cells) if primary else 0
            out.append(
                ReplicateOutcome(
                    replicate=replicate,
                    scenario=scenario,
                    seed_base=seed_base,
                    verdict=verdict,
                    look=stage,
                    requests_per_arm=requests,
                    gates={r.id: r.status for r in results},
                    estimates={r.id: r.tests[0].estimate for r in results if len(r.tests) == 1},
                    statistics={r.id: r.tests[0].statistic for r in results if len(r.tests) == 1},
                    extensions=extensions[scenario],
                    extended_stages=max(0, stage - stage_count(card)),
                    first_estimates=first.get(scenario, {}),
                )
            )
    return out


_LANE: InProcessLane | None = None


def _worker_init() -> None:
    global _LANE
    _LANE = InProcessLane()


def _worker(args: tuple[Card, int, list[int], RawStore, bool]) -> tuple[list[ReplicateOutcome], float, list[str]]:
    card, seed, reps, raw, extend = args
    assert _LANE is not None
    t0 = time.process_time()
    new: list[str] = []
    out = [o for r in reps for o in run_replicate(_LANE, card, seed, r, dict(raw), new, extend=extend)]
    return out, time.process_time() - t0, new


def boot_check(card: Card, raw: RawStore, replicates: int) -> dict[str, BootCheck]:
    """Per tested gate: the boot sd the replicates' control boots show (stage 1 of A, A2 and A-as-B)."""
    from gb300lane.cards.decide.boots import BootUnits, boot_units, estimate_from_units

    tested = [g for g in card.gates if isinstance(g, TestedGate)]
    units: dict[str, list[BootUnits]] = {g.id: [] for g in tested}
    for (r, key, stage), line in sorted(raw.items()):
        if r < replicates and stage == 1 and key in ("A", "A2", "B:aa"):
            a = ArmStage.model_validate_json(line)  # one at a time: only each boot's units are kept
            arm = ArmData(arm=key, recipe=a.recipe, role="control", source="measured", windows=a.windows)
            for g in tested:
                units[g.id].append(boot_units(g, arm))
    out: dict[str, BootCheck] = {}
    for g in tested:
        est = estimate_from_units(units[g.id])
        if est is not None:
            out[g.id] = BootCheck(
                registered_sd=g.boot_sd,
                measured_sd=est.sd,
                measured_sd_signed=est.signed,
                upper=est.upper,
                lower=est.lower,
                df=None if est.df is None else round(est.df, 1),
                f_ratio=round(est.f_ratio, 4),
                boots=est.boots,
            )
    return out


def rate_ci(events: int, n: int) -> RateCI:
    """events / n with its 95% Clopper-Pearson interval."""
    r = proportion(events, n)
    return RateCI(rate=r.rate, low=r.low, high=r.high, events=events, replicates=n)


def summarize(
    card: Card,
    outcomes: list[ReplicateOutcome],
    *,
    seed: int,
    replicates: int,
    cpu: float,
    workers: int,
    boots: dict[str, BootCheck] | None = None,
    reused: int = 0,
    extend: bool = True,
) -> Calibration:
    by: dict[str, list[ReplicateOutcome]] = {"aa": [], "card": []}
    for o in outcomes:
        by[o.scenario].append(o)
    aa, real = by["aa"], by["card"]

    def count(xs: list[ReplicateOutcome], v: Status) -> int:
        return sum(1 for o in xs if o.verdict == v)

    primary = card.window(card.primary_window)
    n_arm = len(primary.classes) * primary.transcripts_per_class * len(primary.concurrency) * primary.rounds
    exercised = window_gates(card)
    design = (
        "fixed"
        if stage_count(card) == 1
        else (f"group_sequential, {stage_count(card)} looks, {getattr(card.design, 'spending', '')} spending")
    )
    ext = card.design.extension
    if ext is not None:
        design += f", extension of up to {ext.looks} looks ({planned_stages(card)} in the plan, {ext.spending} " + (
            "spending; INCONCLUSIVE replicates extended as `card extend` extends them)"
            if extend
            else "spending; never extended: the design's own looks alone)"
        )
    return Calibration(
        schema_version=1,
        card=card.name,
        gates_sha256=gates_hash(card),
        written_at=utc_now(),
        tool_version=__version__,
        engine_sha256=engine_fingerprint(card),
        replicates=replicates,
        seed=seed,
        design=design,
        candidate_recipe=card.candidate.recipe,
        control_recipe=card.controls[0].recipe,
        requests_per_arm=n_arm,
        mean_requests_per_arm_aa=sum(o.requests_per_arm for o in aa) / max(1, len(aa)),
        mean_requests_per_arm_card=sum(o.requests_per_arm for o in real) / max(1, len(real)),
        false_better=rate_ci(count(aa, "PASS"), len(aa)),
        false_fail=rate_ci(count(aa, "FAIL"), len(aa)),
        power=rate_ci(count(real, "PASS"), len(real)),
        fail_when_real=rate_ci(count(real, "FAIL"), len(real)),
        gates_exercised=tuple(g.id for g in exercised),
        gates_not_exercised=tuple(g.id for g in card.gates if g not in exercised),
        fast_path=DIFFERENCES,
        boot_check=boots or {},
        reused_arm_stages=reused,
        cpu_seconds=round(cpu, 1),
        workers=workers,
        extended_aa=sum(1 for o in aa if o.extensions),
        extended_card=sum(1 for o in real if o.extensions),
        extended_decided_aa=sum(1 for o in aa if o.extensions and o.verdict != "INCONCLUSIVE"),
        mean_estimates_card=_mean_estimates(real),
        extended=extend and card.design.extension is not None,
    )


def _mean_estimates(outcomes: list[ReplicateOutcome]) -> dict[str, float]:
    """Gate id -> the mean of its estimates over `outcomes` (gates with an estimate in every one)."""

    def at(o: ReplicateOutcome) -> dict[str, float | None]:
        return o.first_estimates or o.estimates  # look 1 where recorded: the same information in every replicate

    ids = sorted({g for o in outcomes for g in at(o)})
    got = {g: [e for o in outcomes if (e := at(o).get(g)) is not None] for g in ids}
    return {g: sum(v) / len(v) for g, v in got.items() if v and len(v) == len(outcomes)}


def _so_far(outcomes: list[ReplicateOutcome]) -> str:
    aa = [o.verdict for o in outcomes if o.scenario == "aa"]
    real = [o.verdict for o in outcomes if o.scenario == "card"]
    return (
        f"so far: false 'B better' {aa.count('PASS')}/{len(aa)}, false FAIL {aa.count('FAIL')}/{len(aa)}, "
        f"power {real.count('PASS')}/{len(real)}"
    )


def progress_file(card: Card, seed: int, base: Path | None = None, *, extend: bool = True) -> Path:
    """Where a calibration keeps the replicates it has finished, so an interrupted one resumes (same engine only).

    Replicate r does not depend on how many replicates were asked for, so a
    run of N replicates takes the first N kept by any run of the same card
    gates, seed and engine.
    """
    key = f"{card.name}-seed{seed}-{gates_hash(card)[:12]}-{engine_fingerprint(card)[:12]}"
    if card.design.extension is not None and not extend:
        key += "-unextended"
    return (base or results_dir()) / "calibrations" / "in-progress" / f"{key}.jsonl"


def _load_progress(path: Path) -> tuple[list[ReplicateOutcome], float]:
    """Finished replicates and their CPU seconds. A line torn by a kill is dropped and the file rewritten
    without it, so what is appended next starts on a line of its own."""
    if not path.is_file():
        return [], 0.0
    rows: dict[int, list[ReplicateOutcome]] = {}
    cpu: dict[int, float] = {}
    good: list[str] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        try:
            rec = json.loads(line)
            got = [ReplicateOutcome.model_validate(o) for o in rec["outcomes"]]
            c = float(rec["cpu_s"])
        except (ValueError, KeyError, TypeError):
            continue
        for r in {o.replicate for o in got}:
            rows[r] = [o for o in got if o.replicate == r]
            cpu[r] = c / len({o.replicate for o in got})
        good.append(line)
    if len(good) < len(lines):
        atomic_write(path, "".join(x + "\n" for x in good))
    return [o for r in sorted(rows) for o in rows[r]], sum(cpu.values())


def _append_progress(path: Path, outcomes: list[ReplicateOutcome], cpu: float) -> None:
    line = json.dumps(
        {"cpu_s": round(cpu, 3), "outcomes": [o.model_dump(mode="json") for o in outcomes]}, sort_keys=True
    )
    _append_lines(path, [line + "\n"])


def calibrate(
    card: Card,
    replicates: int,
    *,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
    lane: InProcessLane | None = None,
    resume: Path | None = None,
    raw: Path | None = None,
    extend: bool = True,
) -> tuple[Calibration, list[ReplicateOutcome]]:
    """Run `replicates` replicates of both scenarios; returns the summary and every outcome.

    With `resume` (a `progress_file`), each finished batch of replicates is
    appended there and replicates already there are not run again: they are
    the same computation (a replicate's seeds derive from the card, the seed
    and its number, and the file is keyed by the engine's fingerprint).
    With `raw` (a `raw_file`), every arm-stage run is kept there, and one
    kept there (by a run of any gates) is scored instead of run again.
    """
    if replicates < 1:
        raise CardError("--replicates must be at least 1")
    if not window_gates(card):
        raise CardError(f"card {card.name} has no gates the fast path can score (tested, parity or ratio gates)")
    say = progress or (lambda _m: None)
    check_embedded(card)
    refuse_pinned_boot_seed(f"card calibrate {card.name}")
    kept, cpu = _load_progress(resume) if resume is not None else ([], 0.0)
    outcomes = [o for o in kept if o.replicate < replicates]
    if kept and len(outcomes) < len(kept):  # CPU seconds of the replicates used, pro rata
        cpu *= len(outcomes) / len(kept)
    done = {o.replicate for o in outcomes}
    if done:
        say(f"resuming: {len(done)} of {replicates} replicates already run ({resume}); {_so_far(outcomes)}")
    store = load_raw(raw)
    had = set(store)
    keys = ("A", "A2", "B:card", "B:aa")
    todo = [r for r in range(replicates) if r not in done]
    # replicates whose arms are all kept are scored here; the others run, one replicate per task (each is
    # seconds to tens of CPU seconds, and every finished one is kept at once)
    kept_here = [r for r in todo if all((r, k, 1) in store for k in keys)]
    batches = [[r] for r in todo if r not in kept_here]
    if kept_here:
        say(f"scoring {len(kept_here)} replicates from the arms kept in {raw}")
    t0 = time.perf_counter()

    def finished(got: list[ReplicateOutcome], c: float, new: list[str]) -> None:
        nonlocal cpu
        if raw is not None:
            _append_lines(raw, new)
        outcomes.extend(got)
        cpu += c
        if resume is not None:
            _append_progress(resume, got, c)
        say(f"{len(outcomes) // 2} of {replicates} replicates ({time.perf_counter() - t0:.0f} s); {_so_far(outcomes)}")

    own = lane
    for r in kept_here:
        c0 = time.process_time()
        new: list[str] = []
        got = run_replicate(own, card, seed, r, store, new, extend=extend)
        finished(got, time.process_time() - c0, new)
    if workers <= 1:
        if batches and own is None:
            own = InProcessLane()
        for b in batches:
            c0 = time.process_time()
            new = []
            got = [o for r in b for o in run_replicate(own, card, seed, r, store, new, extend=extend)]
            finished(got, time.process_time() - c0, new)
    elif batches:
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init) as pool:
            tasks = [(card, seed, b, {k: v for k, v in store.items() if k[0] in b}, extend) for b in batches]
            for got, c, new in pool.map(_worker, tasks):
                for line in new:
                    head = _HEAD.match(line)
                    if head is not None:
                        store[(int(head.group(3)), head.group(2), int(head.group(4)))] = line
                finished(got, c, new)
    outcomes.sort(key=lambda o: (o.replicate, o.scenario))
    boots = boot_check(card, store, replicates) if store else {}
    reused = sum(1 for k in had if k[0] < replicates)
    return summarize(
        card,
        outcomes,
        seed=seed,
        replicates=replicates,
        cpu=cpu,
        workers=max(1, workers),
        boots=boots,
        reused=reused,
        extend=extend,
    ), outcomes


def write_calibration(
    card: Card, card_text: str, cal: Calibration, outcomes: list[ReplicateOutcome], base: Path | None = None
) -> Path:
    """Write the calibration's receipts (write-once) and return their directory."""
    root = (base or results_dir()) / "calibrations"
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    d = new_run_dir(root, f"{date}-{card.name}-calibrate")
    write_once(d / "card.yaml", card_text)
    write_once(
        d / "replicates.jsonl", "".join(json.dumps(o.model_dump(mode="json"), sort_keys=True) + "\n" for o in outcomes)
    )
    write_once(d / "calibration.json", dumps_json(cal.model_dump(mode="json")))
    return d


def find_calibration(
    card: Card, replicates: int, seed: int, base: Path | None = None
) -> tuple[Calibration, Path] | None:
    """The newest calibration receipts of this card's registered gates, seed, replicates and engine, if any.

    A calibration repeats from its seed, so such receipts are the run itself
    (`benchmarks/verdicts.py` reuses them rather than spending the CPU again).
    """
    root = (base or results_dir()) / "calibrations"
    if not root.is_dir():
        return None
    want = (gates_hash(card), engine_fingerprint(card), __version__)
    for d in sorted(root.glob(f"*-{card.name}-calibrate*"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            cal = Calibration.model_validate_json((d / "calibration.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (
            cal.card == card.name
            and cal.replicates == replicates
            and cal.seed == seed
            and (cal.gates_sha256, cal.engine_sha256, cal.tool_version) == want
        ):
            return cal, d
    return None


def calibration_boot_notes(card: Card, base: Path | None = None) -> list[str]:
    """What the newest calibration of the card's gates on this engine measured of each registered boot sd, where
    its control boots put the boot sd above the registered figure beyond their 95% lower bound."""
    root = (base or results_dir()) / "calibrations"
    if not root.is_dir():
        return []
    want = (gates_hash(card), engine_fingerprint(card))
    by_id = {g.id: g for g in card.gates}
    for d in sorted(root.glob(f"*-{card.name}-calibrate*"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            cal = Calibration.model_validate_json((d / "calibration.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if cal.card != card.name or (cal.gates_sha256, cal.engine_sha256) != want:
            continue
        out = []
        for gid, b in cal.boot_check.items():
            g = by_id.get(gid)
            if g is not None and getattr(g, "decides", True) and b.registered_sd > 0 and b.lower > b.registered_sd:
                out.append(
                    f"gate {gid}: calibration {d.name} ({b.boots} control boots) measured a boot sd of "
                    f"{b.measured_sd:.3%} (95% lower bound {b.lower:.3%}, upper {b.upper:.3%}) above the "
                    f"registered {b.registered_sd:.3%}: the test leaves out between-boot variance the lane "
                    f"shows; register boot_sd {b.measured_sd:.4f}"
                )
        return out
    return []


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


__all__ = [
    "ArmStage",
    "BootCheck",
    "Calibration",
    "ReplicateOutcome",
    "aa_card",
    "boot_check",
    "calibrate",
    "calibration_boot_notes",
    "default_workers",
    "find_calibration",
    "load_raw",
    "progress_file",
    "raw_file",
    "run_hash",
    "run_replicate",
    "summarize",
    "with_seed",
    "write_calibration",
]
