"""What a gate decided and why: the result model verdicts, reports and calibration read.

A statistical gate's result carries one `GateTest` per thing it tested (the
window, or each class x concurrency cell): the estimate, its interval, the
registered margin and alpha, the test, the number of paired units, the
decision and the reason in words. Checks that are not statistics (boot
facts, parity, the write-up's point-ratio gates) keep the one-line
`observed` / `bar` / `noise_floor` fields, which every gate also fills.

Relative effects are fractions: +0.018 is B 1.8% above the controls' mean.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gb300lane.cards.schema import IntervalMethod, TestKind
from gb300lane.models import FrozenModel

Status = Literal["PASS", "FAIL", "INCONCLUSIVE"]
Metric = Literal["tokens_per_step", "decode_tok_s"]


class GateTest(FrozenModel):
    """One pre-registered test: estimate, interval, margin, test, alpha, n, decision and the reason."""

    metric: Metric = Field(description="What was compared, per paired unit.")
    cls: str | None = Field(default=None, description="Traffic class of the cell tested; None for the whole window.")
    concurrency: int | None = Field(default=None, description="Concurrency of the cell tested; None for several.")
    comparison: str = Field(
        description="What over what, e.g. 'B / mean(A, A2)' (superiority, non-inferiority) or 'A / A2' (equivalence)."
    )
    test: TestKind = Field(
        description="superiority: B better by more than margin; non_inferiority: B no worse than -margin; "
        "equivalence (TOST): within +-margin."
    )
    method: IntervalMethod = Field(description="t: paired t-test and its Fieller interval; bca: BCa bootstrap.")
    estimate: float | None = Field(description="Relative effect: ratio of the paired means minus 1.")
    low: float | None = Field(description="Lower end of the interval (relative); None when it cannot be computed.")
    high: float | None = Field(description="Upper end of the interval (relative); None when it cannot be computed.")
    level: float = Field(description="Two-sided coverage of the interval: 1 - 2 x the one-sided level spent here.")
    margin: float = Field(description="Registered margin, a relative effect (see test).")
    alpha: float = Field(description="Registered one-sided alpha of the gate.")
    nominal_alpha: float = Field(description="One-sided level spent at this look (alpha itself for a fixed design).")
    n: int = Field(description="Paired units (transcripts of a class x concurrency cell, rounds averaged).")
    requests_per_arm: int = Field(description="Requests per arm behind the units.")
    statistic: float | None = Field(default=None, description="t at the margin (equivalence: the weaker of the two).")
    df: int | None = Field(default=None, description="Degrees of freedom of the t statistic.")
    p_value: float | None = Field(default=None, description="One-sided p-value of the test at the margin.")
    baseline: float | None = Field(default=None, description="Mean of the reference arms over the units (absolute).")
    look: int = Field(default=1, description="The look this decision was made at (1 for a fixed design).")
    looks: int = Field(default=1, description="Looks the design plans (1 for a fixed design).")
    decision: Status = Field(description="PASS, FAIL or INCONCLUSIVE.")
    reason: str = Field(description="Why it decided, in one line.")
    # Left out of the dump when absent, so the verdicts of unadjusted gates are byte for byte what they were.
    adjustment: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The registered adjustment and what it found (cuped: theta, reliability, df); None: unadjusted.",
    )
    theta: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="cuped: B's slope on the transcripts' level (1 is what the unadjusted pairing assumes).",
    )


class CellCheck(FrozenModel):
    """A point-ratio gate's cell (the write-up's design): observed ratio or spread against a bar."""

    cls: str = Field(description="Traffic class.")
    concurrency: int = Field(description="Concurrency.")
    status: Status = Field(description="This cell's outcome.")
    observed: float | None = Field(description="The cell's observed value (a ratio or a spread).")
    bar: float | None = Field(description="The bar the cell was held to.")
    controls_spread: float | None = Field(description="1 - min/max of the controls (A vs A2).")
    rounds_spread: float | None = Field(description="Widest 1 - min/max over rounds within a control (r1 vs r2).")
    paired_ci: str | None = Field(default=None, description="Bootstrap CI of candidate - controls per transcript.")
    note: str | None = Field(default=None, description="Where a number came from when it is not measured here.")


class QualityRate(FrozenModel):
    """One arm's task-quality pass rate over a task-quality gate's paired units (one class, or all of them)."""

    arm: str = Field(description="Arm name.")
    cls: str | None = Field(description="Traffic class; None for every class the gate covers.")
    passed: int = Field(description="Paired units whose request passed its check on this arm.")
    checked: int = Field(description="Paired units (requests checked on every arm).")
    rate: float | None = Field(description="passed / checked; None without units.")


class McNemarTest(FrozenModel):
    """McNemar's exact test of one arm's pass rate against another's, over the units both checked."""

    comparison: str = Field(description="Subject against reference, e.g. 'B vs A'; 'A vs A2' is the floor.")
    n: int = Field(description="Paired units.")
    worse: int = Field(description="Discordant units the reference passed and the subject failed.")
    better: int = Field(description="Discordant units the subject passed and the reference failed.")
    drop: float | None = Field(
        description="(worse - better) / n: the subject's pass rate below the reference's "
        "(absolute); None without units."
    )
    alternative: Literal["greater", "two-sided"] = Field(
        description="binomtest's alternative on `worse` of the discordant pairs at 1/2: greater (one-sided, the "
        "subject's pass rate lower) for B against a control; two-sided for the controls' floor."
    )
    p_value: float = Field(description="McNemar's exact p-value (scipy.stats.binomtest; 1 without discordant pairs).")
    level: float = Field(description="The one-sided level it is judged at (the gate's alpha at this look).")
    drop_upper: float | None = Field(
        default=None,
        description="B against a control: one-sided upper bound of the drop at `level` (discordance "
        "and its direction each bounded exactly, Bonferroni); None for the floor.",
    )


class QualityResult(FrozenModel):
    """What a task-quality gate measured: per-arm rates (overall and per class) and its McNemar tests."""

    rates: tuple[QualityRate, ...] = Field(description="Per arm: every class together, then each class.")
    tests: tuple[McNemarTest, ...] = Field(description="B against each control, then A against A2 (the floor).")


class GateResult(FrozenModel):
    id: str = Field(description="Gate id.")
    kind: str = Field(description="Gate kind.")
    status: Status = Field(description="PASS, FAIL or INCONCLUSIVE.")
    observed: str = Field(description="What was observed, in one line.")
    bar: str = Field(description="The bar, in one line.")
    noise_floor: str = Field(description="The controls' noise floor for this gate, in one line.")
    reasons: tuple[str, ...] = Field(default=(), description="Why it failed or could not be decided.")
    cells: tuple[CellCheck, ...] = Field(default=(), description="Per-cell checks of point-ratio gates.")
    tests: tuple[GateTest, ...] = Field(default=(), description="The statistical tests behind a statistical gate.")
    decides: bool = Field(default=True, description="False for a diagnostic: printed, never part of the verdict.")
    # Left out of the dump when absent, so the verdicts of cards without the gate are byte for byte what they were.
    quality: QualityResult | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="A task-quality gate's rates and McNemar tests (None for every other kind).",
    )


def combine(checks: list[Status]) -> Status:
    """FAIL if any FAIL; else INCONCLUSIVE if any is undecided (or there is none); else PASS."""
    if "FAIL" in checks:
        return "FAIL"
    if not checks or "INCONCLUSIVE" in checks:
        return "INCONCLUSIVE"
    return "PASS"


class GatePlan(FrozenModel):
    """One tested gate's planning figures."""

    gate: str = Field(description="Gate id.")
    test: str = Field(description="superiority, non_inferiority or equivalence.")
    decides: bool = Field(description="Whether the gate is part of the verdict.")
    alpha: float = Field(description="Registered one-sided alpha.")
    margin: float = Field(description="Registered relative margin.")
    effect: float = Field(description="The relative effect the power is computed at (the gate's mde, else 0).")
    se: float | None = Field(
        description="Planned standard error of the relative estimate (of one test; the worst cell)."
    )
    power: float | None = Field(description="Power of the gate as written at `effect` (all of its cells).")
    requests_per_arm_for_target: int | None = Field(description="Requests per arm for the target power at `effect`.")
    note: str = Field(default="", description="Why a figure is missing, when it is.")
    boot_sd: float = Field(
        default=0.0,
        description="Boot sd (relative) the figures include: the lane's noise "
        "ledger's (from enough scored cards), else the registered one, else the boot study's.",
    )
    boot_sd_source: str = Field(
        default="",
        description="Where the boot sd the figures include comes from: the "
        "lane's noise ledger, the boot study, or registered (neither is on record).",
    )
    boot_sd_registered: float = Field(default=0.0, description="boot_sd the gate registers.")
    boot_sd_measured: float | None = Field(default=None, description="What the ledger or a boot study measured.")
    boot_df_measured: int | None = Field(default=None, description="Satterthwaite df of the measured boot sd.")
    boot_sd_upper: float | None = Field(default=None, description="One-sided 95% upper bound of the measured boot sd.")
    boot_f_ratio: float | None = Field(default=None, description="Between-boot over within mean square of the study.")
    boot_sd_lower: float | None = Field(default=None, description="One-sided 95% lower bound of the measured boot sd.")
    boot_check: str = Field(
        default="",
        description="Why the measured boot sd puts the registered one in doubt (above "
        "it beyond its lower bound, or a study too small to see the boot sd that matters).",
    )
    power_extended: float | None = Field(
        default=None,
        description="A card with a registered extension: the gate's "
        "power by the plan's last look, every further look taken (None: none).",
    )


class ExtensionPlanFigures(FrozenModel):
    """A card with a registered extension (`design.extension`), planned over its whole alpha-spending plan."""

    looks: int = Field(description="Looks in the plan: the design's and the extension's.")
    design_looks: int = Field(description="Of them, the design's own (1 for a fixed design).")
    spending: str = Field(description="The plan's alpha spending function.")
    levels: dict[str, tuple[float, ...]] = Field(
        description="Deciding tested gate -> its one-sided nominal level at "
        "each look of the plan (alpha spent from its registered budget)."
    )
    stage_requests_per_arm: int = Field(description="Requests per arm per stage (one boot per arm each).")
    power: float | None = Field(description="The card's power by the plan's last look, every further look taken.")
    requests_per_arm: int = Field(description="Requests per arm at the plan's last look (the maximum).")
    expected_requests_per_arm: float | None = Field(
        description="Expected requests per arm at the tokens/step effect, extended until it decides or the plan ends."
    )
    expected_looks: float | None = Field(description="Expected looks, the same way.")
    requests_per_arm_for_target: int | None = Field(
        description="The plan's maximum size (all its looks) whose power by the last look reaches the target power."
    )


class CardPlan(FrozenModel):
    """What `card plan` found."""

    schema_version: int = Field(default=1, description="Format version.")
    card: str = Field(description="Card name.")
    source: str = Field(description="Where the noise estimate came from.")
    source_requests: int = Field(description="Control requests the estimate rests on.")
    requests_per_arm: int = Field(
        description="Requests per arm in the primary window as written (the maximum, sequential)."
    )
    target_power: float = Field(description="The power the sizes aim at.")
    design: str = Field(description="fixed, or group_sequential with its looks and spending.")
    gates: tuple[GatePlan, ...] = Field(description="Per tested gate.")
    power: float | None = Field(description="The card's power as written: product over deciding gates.")
    requests_per_arm_for_target: int | None = Field(description="Requests per arm for the card's target power.")
    expected_requests_per_arm: float | None = Field(
        default=None, description="Sequential designs: expected requests per arm at the mde if the design stops early."
    )
    inflation: float = Field(
        default=1.0, description="Sequential designs: maximum size over the fixed size at equal power."
    )
    boot_source: str = Field(default="", description="The boot study the measured boot sds come from, if any.")
    extension: ExtensionPlanFigures | None = Field(
        default=None,
        description="A registered extension's plan: power by the last look, its sizes (None: none); "
        "`power` and `requests_per_arm_for_target` are then the design's own looks at their share of alpha.",
    )
    boot_measured_on: tuple[dict[str, Any], ...] = Field(
        default=(),
        description="What each boot study behind the boot sds was measured on: lane, recipe and its "
        "fingerprint, image and its hash inputs, the embedded engine's fingerprint (card plan --boots records it).",
    )
