"""The card file: arms of a bracket, the windows they run, and the pre-registered gates.

A card is the write-up's method as data: A (production) -> B (one key changed)
-> A2 (production again), the windows every arm runs, and gates written down
before any arm boots. `gates_hash` is what registration freezes; a gate
change after registration is only possible as a re-score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, JsonValue, ValidationError, model_validator

from gb300lane.canonical import dumps_json, sha256_bytes
from gb300lane.errors import CardError
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.names import CARD_SLUG_RE, MAX_NAME
from gb300lane.recipes.schema import TranscriptClass, WindowSpec
from gb300lane.recipes.yamlio import parse_mapping

TestKind = Literal["superiority", "non_inferiority", "equivalence"]
IntervalMethod = Literal["t", "bca"]
#: How a tested gate's units are adjusted before the test: none (the paired test), or cuped (the controls'
#: per-transcript level as a covariate of the log ratio; `cards.decide.cuped`).
Adjust = Literal["none", "cuped"]
#: The alpha spending functions of a group-sequential design (`cards.decide.sequential`).
Spending = Literal["obrien_fleming", "pocock"]

#: An arm name is letters and digits as the write-up spells it (A, B, A2, K9): it names receipt folders.
ARM_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*", re.ASCII)


class Arm(FrozenModel):
    name: str = Field(description="Arm name as the write-up spells it: A, B, A2, K9.")
    recipe: str = Field(description="Recipe the arm boots (a name in recipes/).")
    role: Literal["control", "candidate"] = Field(description="control (production) or candidate (the change).")
    allow_outside_trained_block: bool = Field(
        default=False, description="Boot a k past the checkpoint's trained block (BR2's K9 arm does, on purpose)."
    )


class Bar(FrozenModel):
    """How far a gate tolerates noise.

    `fixed`: the bar is `value`. `spread`: the bar is `multiplier` times a
    spread measured on the card itself (the controls A vs A2, or the class's
    rounds r1 vs r2, widest over the arms), never below `value`.
    """

    mode: Literal["fixed", "spread"] = Field(
        description="fixed: a number written in advance; spread: from the noise floor."
    )
    value: float = Field(ge=0, description="fixed: the bar; spread: the least the bar may be.")
    source: Literal["controls", "rounds"] | None = Field(
        default=None,
        description="spread only: controls = A vs A2 of the cell; rounds = the cell's r1 vs r2, widest over the arms.",
    )
    multiplier: float = Field(default=1.0, gt=0, description="spread only: bar = multiplier x spread.")

    @model_validator(mode="after")
    def _source_for_spread(self) -> Bar:
        if self.mode == "spread" and self.source is None:
            raise ValueError("a spread bar needs source: controls or rounds")
        if self.mode == "fixed" and self.source is not None:
            raise ValueError("a fixed bar takes no source; use mode: spread to honour a measured spread")
        return self

    def describe(self) -> str:
        if self.mode == "fixed":
            return f"fixed ±{self.value:.1%}"
        mult = "" if self.multiplier == 1.0 else f"{self.multiplier:g} x "
        return f"{mult}{self.source} spread (at least {self.value:.1%})"


class _Gate(FrozenModel):
    id: str = Field(description="Gate id, unique within the card; verdicts and re-scores name it.")
    description: str = Field(default="", description="What the gate protects, in one line.")


class _WindowGate(_Gate):
    window: str = Field(description="Name of the card window the gate reads.")
    classes: tuple[TranscriptClass, ...] | None = Field(
        default=None, description="Classes it covers (all when absent)."
    )
    concurrency: tuple[int, ...] | None = Field(
        default=None, description="Concurrency levels it covers (all when absent)."
    )


class _TestedGate(_WindowGate):
    """A gate decided by a pre-registered paired test (see `cards.decide.stats`); alpha and margin are frozen with it."""

    margin: float = Field(
        ge=0,
        lt=1,
        description="Relative margin: superiority needs B better by more than it; "
        "non-inferiority B no worse than minus it; equivalence within plus or minus it.",
    )
    alpha: float = Field(gt=0, lt=0.5, description="One-sided alpha of the test (each side, for equivalence).")
    interval: IntervalMethod = Field(
        default="t", description="t: paired t-test with Fieller's interval; bca: BCa bootstrap."
    )
    mde: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Planning only: the smallest relative effect the card is sized to detect (card plan's power).",
    )
    decides: bool = Field(
        default=True, description="false: a diagnostic, printed with its test but never part of the verdict."
    )
    boot_sd: float = Field(
        default=0.0,
        ge=0,
        lt=0.5,
        description="Relative SD of one boot's mean of the metric beyond its requests' own noise (a boot's "
        "numerics shift a whole arm): added to the test's variance for every arm (cards.stats). Measure it with "
        "`gb300lane card plan CARD --boots N`, which prints the value and its df; registered and hashed with the gate.",
    )
    boot_df: int | None = Field(
        default=None,
        ge=1,
        description="Degrees of freedom of boot_sd's estimate (card plan prints them); the test's df is then "
        "Welch-Satterthwaite's. Absent: boot_sd is taken as known.",
    )
    # Left out of the dump when none, so the receipts of cards without it are byte for byte what they were.
    adjust: Adjust = Field(
        default="none",
        exclude_if=lambda v: v == "none",
        description="none: the paired test; cuped: the transcripts' level (what the controls measure, their own "
        "noise removed) is a covariate of B's log ratio, theta estimated on n - 2 df (cards.decide.cuped); the "
        "claim is then about the card's transcripts. Registered and hashed with the gate; needs interval t.",
    )

    @model_validator(mode="after")
    def _boot(self) -> _TestedGate:
        if self.adjust == "cuped" and self.interval == "bca":
            raise ValueError(
                f"gate {self.id}: adjust: cuped is a t-test on the adjusted log ratios; set interval: t or drop adjust"
            )
        if self.adjust == "cuped" and getattr(self, "kind", None) == "controls_equivalence":
            raise ValueError(
                f"gate {self.id}: adjust: cuped adjusts B against the controls; the controls' "
                "equivalence test takes none (drop adjust)"
            )
        if self.boot_sd > 0 and self.interval == "bca":
            raise ValueError(
                f"gate {self.id}: boot_sd needs interval t (the BCa bootstrap resamples requests, "
                "never boots); set interval: t or drop boot_sd"
            )
        if self.boot_df is not None and self.boot_sd <= 0:
            raise ValueError(
                f"gate {self.id}: boot_df is set without boot_sd; set boot_sd (card plan --boots "
                "measures it) or drop boot_df"
            )
        return self


class TokensPerStepTest(_TestedGate):
    kind: Literal["tokens_per_step"] = Field(
        description="Tokens per verify step per transcript, B against the controls' mean, paired by transcript."
    )
    test: Literal["superiority", "non_inferiority"] = Field(description="What B must show.")
    scope: Literal["aggregate", "per_cell"] = Field(
        default="aggregate",
        description="aggregate: one test over the window's units; per_cell: one per class x concurrency.",
    )

    @property
    def metric(self) -> Literal["tokens_per_step"]:
        """What the test compares, per paired unit (every tested gate has one)."""
        return "tokens_per_step"


class DecodeTest(_TestedGate):
    kind: Literal["decode_tok_s"] = Field(
        description="Per-request decode tok/s per transcript, B against the controls' mean, paired by transcript."
    )
    test: Literal["superiority", "non_inferiority"] = Field(description="What B must show.")
    scope: Literal["aggregate", "per_cell"] = Field(
        default="per_cell", description="per_cell: one test per class x concurrency (all must pass); aggregate: one."
    )

    @property
    def metric(self) -> Literal["decode_tok_s"]:
        """What the test compares, per paired unit (every tested gate has one)."""
        return "decode_tok_s"


class ControlsEquivalence(_TestedGate):
    kind: Literal["controls_equivalence"] = Field(
        description="TOST of A against A2: the two controls agree within the margin, so the bracket measures the lane."
    )
    test: Literal["equivalence"] = Field(default="equivalence", description="Always equivalence (two one-sided tests).")
    metric: Literal["decode_tok_s", "tokens_per_step"] = Field(default="decode_tok_s", description="What is compared.")
    scope: Literal["aggregate", "per_cell"] = Field(default="aggregate", description="One test, or one per cell.")


#: A gate decided by a pre-registered paired test (its `metric` is what it compares).
TestedGate = TokensPerStepTest | DecodeTest | ControlsEquivalence


class TokensPerStepGate(_WindowGate):
    kind: Literal["tokens_per_step_ratio"] = Field(
        description="Point ratio (the write-up's design): candidate tokens/step over the controls' mean, no test."
    )
    scope: Literal["aggregate", "per_cell"] = Field(
        default="aggregate", description="aggregate: the window's tokens/step; per_cell: every class x concurrency."
    )
    min_ratio: float = Field(gt=0, description="Lowest passing ratio candidate / mean(controls).")


class DecodeRatioGate(_WindowGate):
    kind: Literal["decode_ratio"] = Field(
        description="Point ratio (the write-up's design): per-cell decode tok/s, candidate over the controls' mean."
    )
    bar: Bar = Field(description="The ratio must be at least 1 - bar.")


class ControlsAgreeGate(_WindowGate):
    kind: Literal["controls_agree"] = Field(
        description="The controls' decode tok/s agree per cell: 1 - min/max <= bar."
    )
    bar: Bar = Field(description="Largest tolerated disagreement of the controls.")


class ParityGate(_WindowGate):
    kind: Literal["parity"] = Field(
        description="Outputs of the candidate equal the first control's, request by request, up to the controls' own flips."
    )
    max_extra_flips: int = Field(default=0, ge=0, description="Flips tolerated beyond those between A and A2.")
    decides: bool = Field(
        default=True,
        description="false: a diagnostic, printed but never part of the verdict (where greedy outputs "
        "depend on the boot, three boots cannot tell a change from a reboot).",
    )


#: The values beyond its quantile every arm of a latency-tail gate needs (benchmarks/calibration_suite.py, check 3).
TAIL_VALUES_BEYOND = 10


class LatencyTailGate(_WindowGate):
    """B's latency tail (p99 TTFT or inter-token latency) against the controls', resampled by transcript."""

    kind: Literal["latency_tail"] = Field(
        description="A quantile of TTFT or ITL, B against each control at equal counts: no worse than `margin` "
        "(lower is better), with a cluster bootstrap over transcripts and the registered boot sd (cards.decide.tails)."
    )
    metric: Literal["ttft", "itl"] = Field(
        description="ttft: one value per request; itl: every gap between a request's successive chunks "
        "(vLLM's ITL), on the clock the window's cells lead with."
    )
    quantile: float = Field(default=0.99, gt=0.5, lt=1.0, description="The quantile compared (0.99: p99).")
    margin: float = Field(ge=0, lt=1, description="B's quantile may exceed the controls' by at most this, relative.")
    alpha: float = Field(default=0.025, gt=0, lt=0.5, description="One-sided alpha of the test.")
    boot_sd: float = Field(
        default=0.0,
        ge=0,
        lt=0.5,
        description="Relative SD one boot shifts the quantile by, beyond its requests' noise (every arm is a boot): "
        "added to the bootstrap's variance, as the tested gates add theirs.",
    )
    decides: bool = Field(default=True, description="false: a diagnostic, printed but never part of the verdict.")

    def min_values(self) -> int:
        """The sample guard: a quantile q needs n (1 - q) >= TAIL_VALUES_BEYOND (10) values beyond it per arm, n >=
        10 / (1 - q) (1,000 for p99, 200 for p95); with 4 beyond it the resampled interval ran above alpha."""
        return math.ceil(TAIL_VALUES_BEYOND / (1 - self.quantile) - 1e-9)


class TaskQualityGate(_WindowGate):
    """B's task quality against the controls': McNemar's exact test on the paired outcomes (cards.decide.quality_gate)."""

    kind: Literal["task_quality"] = Field(
        description="Outputs checked without a model (a tool call valid against its tool's schema, data that "
        "parses as the JSON / YAML / CSV asked for, Python that compiles: bench.quality), B against each control "
        "request by request: FAIL when McNemar's exact test shows B's pass rate lower than both controls' (beyond "
        "the controls' own difference), PASS when B's drop is shown below `margin`.",
    )
    margin: float = Field(
        ge=0,
        lt=1,
        description="The drop in pass rate (absolute: 0.05 is five points) B may have against a "
        "control: PASS needs the one-sided upper bound of B's drop below it against each control.",
    )
    alpha: float = Field(
        default=0.025,
        gt=0,
        lt=0.5,
        description="One-sided alpha of McNemar's exact test (FAIL) and of the drop's "
        "upper bound (PASS); at a look of a sequential design, the level the design's spending allows there.",
    )
    decides: bool = Field(default=True, description="false: a diagnostic, printed but never part of the verdict.")


class LosslessGate(_WindowGate):
    """Each arm's text against its target's distribution at the served temperature (spec.lossless)."""

    kind: Literal["lossless"] = Field(
        description="Each arm judged absolutely: its window's outputs, scored after the window by the arm's own "
        "prefill (prompt_logprobs; a prefill never reaches the rejection sampler), must be distributed as the target "
        "samples them (randomized PIT, mean / dispersion / top-1 tests, Bonferroni at `alpha`). FAIL when any arm "
        "FAILs; B's effective temperature against the controls' is reported beside it.",
    )
    margin: float = Field(
        gt=0,
        lt=1,
        description="The deviation of an arm's effective temperature from the served one (relative: "
        "0.05 is 5%), and of its top-1 rate from the expected, tolerated where a deviation is detected: a referee "
        "in other numerics differs from the sampler by that much.",
    )
    alpha: float = Field(default=0.01, gt=0, lt=0.5, description="The false-FAIL rate per arm under exact sampling.")
    min_tokens: int = Field(default=200, ge=50, description="Fewest scored tokens per arm; below it INCONCLUSIVE.")
    decides: bool = Field(default=True, description="false: a diagnostic, printed but never part of the verdict.")


class HashHitGate(_Gate):
    kind: Literal["hash_hit"] = Field(
        description="Every arm (or the arms listed) booted as a compile/autotune hash hit."
    )
    arms: tuple[str, ...] | None = Field(
        default=None, description="Arms it covers (all when absent); the first control may compile on a fresh cache."
    )


class FlagGate(_Gate):
    kind: Literal["flag_on_candidate_only"] = Field(
        description="The changed key is in the candidate's container args only."
    )
    key: str = Field(description="Dotted recipe key that must differ, e.g. speculative.rejection_sample_method.")
    value: Any = Field(description="The candidate's value of that key.")


class EnvEqualGate(_Gate):
    kind: Literal["env_equal"] = Field(description="Every arm's container environment is the same.")
    compare: Literal["ordered", "set"] = Field(
        description="ordered: as lists (the runtime's order matters); set: as sets of NAME=VALUE."
    )


class KvPoolGate(_Gate):
    kind: Literal["kv_pool_equal"] = Field(description="Every arm reported the same KV pool in tokens.")


class FeatureLiveGate(_Gate):
    kind: Literal["feature_live"] = Field(
        description="What each arm's recipe asks for runs in the engine's code path (the boot's feature_live check): "
        "a flag that is present and does nothing fails the card."
    )


class ForeignClientsGate(_Gate):
    kind: Literal["foreign_clients_zero"] = Field(description="No client but the bench touched any arm.")


Gate = Annotated[
    TokensPerStepTest
    | DecodeTest
    | ControlsEquivalence
    | TokensPerStepGate
    | DecodeRatioGate
    | ControlsAgreeGate
    | ParityGate
    | LatencyTailGate
    | TaskQualityGate
    | LosslessGate
    | HashHitGate
    | FlagGate
    | EnvEqualGate
    | KvPoolGate
    | ForeignClientsGate
    | FeatureLiveGate,
    Field(discriminator="kind"),
]


#: The gate kinds decided by a test; the others are checks (boot facts, parity) or the write-up's point ratios.
TESTED_KINDS = ("tokens_per_step", "decode_tok_s", "controls_equivalence")
POINT_RATIO_KINDS = ("tokens_per_step_ratio", "decode_ratio", "controls_agree")


class Extension(FrozenModel):
    """Further looks `card extend` may take after an INCONCLUSIVE verdict, registered (and hashed) with the design.

    The design's own looks become the first looks of one alpha-spending plan of
    `looks` more: every look, the design's and the extension's, spends its share
    of each gate's registered alpha by the plan's spending function, so the error
    rates stay the registered ones however many of the further looks are taken.
    Each further look is one more stage of A -> B -> A2 (new boots, own seeds),
    the size of one of the design's stages.
    """

    looks: int = Field(ge=1, le=9, description="Further looks (stages) `card extend` may run, at most.")
    spending: Spending = Field(
        default="pocock",
        description="Alpha spending over the whole plan (a fixed design's look is its first look; "
        "a group-sequential design spends by its own spending and this must match it).",
    )


class FixedDesign(FrozenModel):
    kind: Literal["fixed"] = Field(default="fixed", description="Every arm runs the whole window once; one look.")
    extension: Extension | None = Field(
        default=None,
        description="Further looks `card extend` may take after an INCONCLUSIVE verdict (none when "
        "absent): the one look becomes the first of a plan of 1 + extension.looks.",
    )
    runs: int = Field(
        default=1,
        ge=1,
        le=9,
        description="Runs the card's question (its name and the candidate's resolved recipe) "
        "may take, sharing each gate's alpha: run r spends the Pocock share ln(1 + (e-1) r/runs) - ln(1 + (e-1) "
        "(r-1)/runs) of it, so re-registering after a final verdict keeps the error rates the registered ones. 1 "
        "(default): one run spends all; another then asks a new question and needs `card register --new-question`.",
    )


class GroupSequential(FrozenModel):
    """Stages of A -> B -> A2, a look after each, alpha spent over the looks."""

    kind: Literal["group_sequential"] = Field(description="Group-sequential with Lan-DeMets alpha spending.")
    looks: int = Field(
        ge=2, le=10, description="Looks (stages); the primary window's rounds are split evenly over them."
    )
    spending: Spending = Field(
        default="obrien_fleming", description="obrien_fleming (spends little early) or pocock (spends evenly)."
    )
    extension: Extension | None = Field(
        default=None,
        description="Further looks `card extend` may take after an INCONCLUSIVE last look (none when "
        "absent): the looks become the first of a plan of looks + extension.looks.",
    )
    runs: int = Field(
        default=1,
        ge=1,
        le=9,
        description="Runs the card's question (its name and the candidate's resolved recipe) "
        "may take, sharing each gate's alpha: run r spends the Pocock share ln(1 + (e-1) r/runs) - ln(1 + (e-1) "
        "(r-1)/runs) of it, so re-registering after a final verdict keeps the error rates the registered ones. 1 "
        "(default): one run spends all; another then asks a new question and needs `card register --new-question`.",
    )

    @model_validator(mode="after")
    def _same_spending(self) -> GroupSequential:
        if self.extension is not None and self.extension.spending != self.spending:
            raise ValueError(
                f"extension.spending {self.extension.spending} differs from the design's spending "
                f"{self.spending}: one plan spends alpha by one function; set both the same"
            )
        if self.extension is not None and self.looks + self.extension.looks > 10:
            raise ValueError(f"looks {self.looks} + extension.looks {self.extension.looks} exceed 10 looks in all")
        return self


Design = Annotated[FixedDesign | GroupSequential, Field(discriminator="kind")]


class Card(FrozenModel):
    schema_version: Literal[1] = Field(description="Card file format version.")
    name: str = Field(description="Card slug; receipts go to results/<date>-<name>/.")
    title: str = Field(description="One line: the change under test.")
    description: str = Field(default="", description="Why the card exists; what a reader should know.")
    arms: tuple[Arm, ...] = Field(min_length=3, description="Arms in boot order: control, candidate, control.")
    windows: tuple[WindowSpec, ...] = Field(min_length=1, description="Windows every arm runs, in order.")
    primary_window: str = Field(description="The window that is evidence (the others are gates only).")
    gates: tuple[Gate, ...] = Field(min_length=1, description="Pre-registered gates; frozen by registration.")
    design: Design = Field(
        default_factory=FixedDesign, description="fixed, or group_sequential with looks and spending."
    )
    seeds: Literal["per_arm", "shared"] = Field(
        default="per_arm",
        description="per_arm: each arm (and stage) draws its own seed base from the window's, so A2 is not a copy "
        "of A; shared: every arm sends the same seeds (requests identical across arms).",
    )

    @model_validator(mode="after")
    def _bracket(self) -> Card:
        if not CARD_SLUG_RE.fullmatch(self.name) or len(self.name) > MAX_NAME:
            raise ValueError(
                f"name {self.name!r} must be a slug (lowercase letters, digits, dashes; at most {MAX_NAME})"
            )
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique: {names}")
        for a in self.arms:
            if not ARM_RE.fullmatch(a.name) or len(a.name) > MAX_NAME:
                raise ValueError(f"arm name {a.name!r} must be letters and digits (it names receipt folders)")
        roles = [a.role for a in self.arms]
        if roles.count("candidate") != 1:
            raise ValueError("a card brackets exactly one candidate arm (role: candidate)")
        if roles[0] != "control" or roles[-1] != "control":
            raise ValueError("the bracket must open and close with a control arm (A -> B -> A2)")
        controls = {a.recipe for a in self.arms if a.role == "control"}
        if len(controls) != 1:
            raise ValueError(f"every control arm must boot the same recipe, found {sorted(controls)}")
        wnames = [w.name for w in self.windows]
        if len(set(wnames)) != len(wnames):
            raise ValueError(f"window names must be unique: {wnames}")
        if self.primary_window not in wnames:
            raise ValueError(f"primary_window {self.primary_window!r} is not one of the windows {wnames}")
        ids = [g.id for g in self.gates]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"gate ids must be unique: {dupes}")
        for g in self.gates:
            for a in getattr(g, "arms", None) or ():
                if a not in names:
                    raise ValueError(f"gate {g.id}: arm {a!r} is not one of the arms {names}")
            w = getattr(g, "window", None)
            if w is not None and w not in wnames:
                raise ValueError(f"gate {g.id}: window {w!r} is not one of the windows {wnames}")
        for g in self.gates:
            if isinstance(g, TaskQualityGate):
                problem = task_quality_problem(g, self.window(g.window))
                if problem:
                    raise ValueError(problem)
            if isinstance(g, LosslessGate):
                w = self.window(g.window)
                if w.temperature <= 0:
                    raise ValueError(
                        f"gate {g.id}: window {w.name} is greedy (temperature {w.temperature}); the "
                        "lossless gate reads a window at the served temperature (the parity gate "
                        "checks temperature 0)"
                    )
        cuped = [g.id for g in self.gates if getattr(g, "adjust", "none") == "cuped"]
        if cuped and self.seeds == "shared":
            raise ValueError(
                f"gates {cuped}: adjust: cuped measures the controls' noise from A against A2, which "
                "shared seeds make copies of each other; set seeds: per_arm or drop adjust"
            )
        if isinstance(self.design, GroupSequential):
            primary = next(w for w in self.windows if w.name == self.primary_window)
            if primary.rounds % self.design.looks:
                raise ValueError(
                    f"design.looks = {self.design.looks} must divide the primary window's rounds ({primary.rounds}): "
                    "each look adds the same number of rounds; change rounds or looks"
                )
            legacy = [g.id for g in self.gates if g.kind in POINT_RATIO_KINDS]
            if legacy:
                raise ValueError(
                    f"a group-sequential design needs tested gates; {legacy} are point ratios "
                    "(use kind tokens_per_step, decode_tok_s, controls_equivalence)"
                )
        return self

    @property
    def candidate(self) -> Arm:
        return next(a for a in self.arms if a.role == "candidate")

    @property
    def controls(self) -> tuple[Arm, ...]:
        return tuple(a for a in self.arms if a.role == "control")

    def window(self, name: str) -> WindowSpec:
        for w in self.windows:
            if w.name == name:
                return w
        raise CardError(f"card {self.name}: no window named {name!r}; windows are {[w.name for w in self.windows]}")

    def gate(self, gate_id: str) -> Gate:
        for g in self.gates:
            if g.id == gate_id:
                return g
        raise CardError(f"card {self.name}: no gate {gate_id!r}; gates are {[g.id for g in self.gates]}")


def task_quality_problem(gate: TaskQualityGate, w: WindowSpec) -> str | None:
    """Why a task-quality gate cannot read its window, or None: outputs cut at a forced length are no outcome,
    and a round's requests at several concurrencies share their seeds, so they are not independent pairs."""
    if not w.stops_at_eos:
        return (
            f"gate {gate.id}: window {w.name} forces {w.forced_tokens} tokens, which cuts tool calls and "
            "documents off; give the gate a window of its own with forced_tokens: null and max_tokens"
        )
    levels = [c for c in w.concurrency if gate.concurrency is None or c in gate.concurrency]
    if len(levels) != 1:
        return (
            f"gate {gate.id}: it covers concurrency {levels or 'none'} of window {w.name}; a round's requests "
            "share their seeds at every concurrency, so they are one paired unit, not several: name one level "
            "(concurrency: [8]) or give the window one"
        )
    return None


#: The fewest paired units at which a BCa gate is let register. A/A with no engine (benchmarks/bca_small_n.py:
#: normal per-transcript values, 10% request noise, one-sided 2.5%, 1,000 replicates per n) measured the BCa
#: superiority test's false PASS / false FAIL at 4.3% / 4.9% for n = 16 and 3.6% / 3.8% for n = 40, above
#: nominal, and 2.6% [1.7%, 3.8%] / 3.0% [2.0%, 4.3%] at n = 100, whose intervals hold 2.5%; below this n a
#: gate must use interval t.
BCA_MIN_UNITS = 100


def stage_count(card: Card) -> int:
    """Stages of the card's design: its looks, or 1 for a fixed design (`card run` runs these)."""
    return card.design.looks if isinstance(card.design, GroupSequential) else 1


def extension_looks(card: Card) -> int:
    """Further looks the card registered for `card extend` (0: none)."""
    return card.design.extension.looks if card.design.extension is not None else 0


def planned_stages(card: Card) -> int:
    """Stages of the whole alpha-spending plan: the design's, and the extension's `card extend` may add."""
    return stage_count(card) + extension_looks(card)


def question_runs(card: Card) -> int:
    """Runs the card's question may take, sharing its alpha (`design.runs`; 1: one run spends all)."""
    return card.design.runs


def plan_spending(card: Card) -> Spending:
    """The spending function of the card's plan (a fixed design without an extension spends all at its look)."""
    if isinstance(card.design, GroupSequential):
        return card.design.spending
    return card.design.extension.spending if card.design.extension is not None else "obrien_fleming"


def units_per_test(card: Card, gate: TestedGate) -> int:
    """Paired units of each of a tested gate's tests: transcripts of a cell (per cell), of all its classes
    (aggregate)."""
    w = card.window(gate.window)
    classes = [c for c in w.classes if gate.classes is None or c in gate.classes]
    return w.transcripts_per_class * (1 if gate.scope == "per_cell" else len(classes))


def small_sample_refusals(card: Card) -> list[str]:
    """Gates whose interval method is not calibrated at the card's sample size (BCa below BCA_MIN_UNITS)."""
    out = []
    for g in card.gates:
        if isinstance(g, TestedGate) and g.interval == "bca" and (n := units_per_test(card, g)) < BCA_MIN_UNITS:
            out.append(
                f"card {card.name}: gate {g.id}.interval = bca at {n} paired units per test, below the "
                f"{BCA_MIN_UNITS} its calibration holds at (BCa's false PASS and false FAIL run above the "
                f"nominal alpha at small n); set interval: t, or give the window at least {BCA_MIN_UNITS} "
                "units per test"
            )
    return out


def gates_payload(gates: Sequence[Gate]) -> list[dict[str, JsonValue]]:
    return [g.model_dump(mode="json") for g in gates]


def gates_hash(card: Card) -> str:
    """sha256 over the gates, the windows they read and the arms: what registration freezes.

    Defaults are left out, so a field added to the schema later (with a
    default) does not unfreeze every card registered before it.
    """

    def dump(m: BaseModel) -> dict[str, Any]:
        return m.model_dump(mode="json", exclude_defaults=True)

    payload: dict[str, Any] = {
        "gates": [dump(g) for g in card.gates],
        "windows": [dump(w) for w in card.windows],
        "arms": [dump(a) for a in card.arms],
        "primary_window": card.primary_window,
    }
    # the design and the seed policy are frozen too; the defaults stay out so earlier registrations still match
    if not isinstance(card.design, FixedDesign) or card.design.extension is not None or card.design.runs != 1:
        design = card.design.model_dump(mode="json")
        if design.get("extension") is None:  # a design without an extension hashes as it did before there were any
            design.pop("extension", None)
        if design.get("runs") == 1:  # ... and one run, as before runs were counted
            design.pop("runs", None)
        payload["design"] = design
    if card.seeds != "per_arm":
        payload["seeds"] = card.seeds
    return sha256_bytes(dumps_json(payload))


def parse_card(text: str, source: str) -> Card:
    """Validate card YAML text through the strict loader recipes use; errors name the file, the line or the key."""
    data = parse_mapping(
        text, source, error=CardError, what="a card file is a mapping with schema_version, name, arms, windows, gates"
    )
    try:
        return Card.model_validate(data)
    except ValidationError as exc:
        raise CardError(format_validation_error(exc, source=source)) from None
