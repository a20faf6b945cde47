"""The verdict: a card's gates over its arms' data at the look the card ended on, and what it adds beside them.

Pure: `compute_verdict` takes the card, the gates it applies (the registered ones, or a re-score's) and
`VerdictInputs` (the arms' typed data and the facts a verdict's notes check), and returns the `Verdict` a
receipts directory records; `cards.record.inputs` reads those inputs from the receipts.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, JsonValue, TypeAdapter, ValidationError

from gb300lane import __version__
from gb300lane.canonical import dumps_json, sha256_bytes
from gb300lane.cards.decide.boots import BootEstimate
from gb300lane.cards.decide.data import ArmData, NoiseFloor
from gb300lane.cards.decide.gates import evaluate, overall
from gb300lane.cards.decide.looks import design_look
from gb300lane.cards.decide.more import (
    BootStudy,
    MoreNeeded,
    ProvenanceDifference,
    boot_notes,
    controls_for,
    more_needed,
    provenance_difference_notes,
    provenance_differences,
    provenance_notes,
)
from gb300lane.cards.decide.question import QuestionRun
from gb300lane.cards.decide.results import GateResult, Status
from gb300lane.cards.schema import Card, Gate, gates_payload
from gb300lane.errors import CardError
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.recipes.yamlio import parse_value


class GateChange(FrozenModel):
    gate: str = Field(description="Gate id.")
    key: str = Field(description="Dotted key inside the gate, e.g. compare or bar.mode.")
    old: Any = Field(description="Value before the re-score.")
    new: Any = Field(description="Value after the re-score.")


class PreviousVerdict(FrozenModel):
    number: int = Field(description="The verdict this one supersedes.")
    file: str = Field(description="Its path inside the receipts directory.")
    sha256: str = Field(description="Its sha256, so the pointer cannot silently move.")
    verdict: Status = Field(description="What it said.")


class WindowWorkload(FrozenModel):
    """Which traffic a window of the verdict ran: the workload, its registered content hash and the part."""

    window: str = Field(description="The card window.")
    workload: str = Field(description="The workload it names.")
    content_sha256: str = Field(description="The workload's content hash the registration froze.")
    part: Literal["all", "dev", "held_out"] = Field(
        description="held_out: transcripts no selection step read (the window registered held_out: true); dev: the "
        "split's dev part; all: the workload has no split."
    )


class Verdict(FrozenModel):
    schema_version: Literal[1] = Field(description="File format version.")
    card: str = Field(description="Card name.")
    number: int = Field(ge=1, description="1 = pre-registered; 2.. = re-scores.")
    verdict: Status = Field(description="PASS, FAIL or INCONCLUSIVE.")
    written_at: str = Field(description="UTC time the verdict was written.")
    tool_version: str = Field(description="gb300lane version that scored.")
    candidate_recipe: str = Field(description="Recipe of the candidate arm (B).")
    control_recipe: str = Field(description="Recipe of the control arms (A, A2).")
    gates_sha256: str = Field(description="sha256 of the gates this verdict applied.")
    gates: list[dict[str, Any]] = Field(description="The gates applied, as data.")
    sources: dict[str, str] = Field(description="Arm -> measured or transcribed.")
    results: tuple[GateResult, ...] = Field(description="Per gate: status, observed, bar, noise floor.")
    previous: PreviousVerdict | None = Field(default=None, description="Verdict superseded (re-scores only).")
    reason: str | None = Field(default=None, description="Why the re-score was made (re-scores only).")
    changes: tuple[GateChange, ...] = Field(default=(), description="Gate changes of the re-score.")
    look: int = Field(default=1, description="The look the verdict was decided at (1 for a fixed design).")
    looks: int = Field(default=1, description="Looks the card's design plans (1 for a fixed design).")
    notes: tuple[str, ...] = Field(
        default=(),
        description="What the verdict found beside its gates: a registered "
        "boot sd that a measurement of the lane contradicts (never a change of status). "
        "Left out of the file when empty.",
    )
    more_needed: tuple[MoreNeeded, ...] = Field(
        default=(),
        description="INCONCLUSIVE gates: the requests and boots "
        "per arm that would decide at 90% power. Left out when empty.",
    )
    workloads: tuple[WindowWorkload, ...] = Field(
        default=(),
        description="The windows that ran a workload other than builtin: which, its registered hash and "
        "the part (held-out or dev) they ran. Left out when empty (every window ran builtin).",
    )
    provenance_differs: tuple[ProvenanceDifference, ...] = Field(
        default=(),
        description="Provenance fields (image id, engine version, installed vLLM, checkpoint, host) whose "
        "values differ between the arms' boots, each with every arm's value. Left out when empty.",
    )

    def payload(self) -> dict[str, JsonValue]:
        """The verdict as written: the fields added since schema 1 only when they say something, so a verdict
        with nothing to add keeps the bytes it always had."""
        empty = {k for k in ("notes", "more_needed", "provenance_differs", "workloads") if not getattr(self, k)}
        return self.model_dump(mode="json", exclude=empty)


class VerdictInputs(FrozenModel):
    """What a verdict is computed from, besides the card and its gates: read from the receipts by `cards.record`."""

    arms: tuple[ArmData, ...] = Field(description="Every finished arm's data, its stages merged up to `stages`.")
    stages: int = Field(ge=1, description="The stage (look) the card ended on: 1 for a fixed design.")
    noise_floor: NoiseFloor | None = Field(default=None, description="A written-up card's published noise floor.")
    transcribed: bool = Field(default=False, description="A written-up card's receipts (no boot notes are made).")
    boot_study: BootStudy | None = Field(
        default=None,
        description="The boot studies of the control recipe beside the receipts (None: none, or none "
        "needed: no gate registers a boot sd).",
    )
    boot_measured_on: tuple[dict[str, Any], ...] = Field(
        default=(), description="What the registration's boot studies recorded they were measured on."
    )
    measured_now: dict[str, Any] | None = Field(
        default=None, description="What a boot study would record now (None: not needed, nothing was recorded)."
    )
    lane_noise: dict[str, tuple[BootEstimate, str]] = Field(
        default_factory=dict,
        description="The lane's noise ledger over its other scored cards, by metric: the pooled "
        "estimate and where it is from (empty: none on record, or none needed).",
    )
    question: QuestionRun | None = Field(
        default=None,
        description="Which run of its question the receipts are, and the share of each gate's alpha "
        "it spends (None: registered before runs were counted: the whole alpha).",
    )
    workloads: tuple[WindowWorkload, ...] = Field(
        default=(), description="The windows that ran a workload other than builtin, from the registration."
    )
    boot_sd_override: str | None = Field(
        default=None,
        description="Why the registration kept a boot sd the lane's noise ledger ruled out (`card register "
        "--boot-sd-override`); None when none was.",
    )


_GATE: TypeAdapter[Gate] = TypeAdapter(Gate)


def invalid_cell_notes(arms: list[ArmData]) -> list[str]:
    """One note per arm and window that left cells out: their sample is smaller than registered."""
    return [
        f"arm {a.arm}, window {name}: {len(w.invalid_cells)} cell(s) left out as invalid after every try "
        f"({'; '.join(w.invalid_cells)}); the gates over that window rest on fewer requests than registered"
        for a in arms
        for name, w in a.windows.items()
        if w.invalid_cells
    ]


def compute_verdict(
    card: Card,
    gates: tuple[Gate, ...],
    inputs: VerdictInputs,
    *,
    written_at: str,
    number: int = 1,
    previous: PreviousVerdict | None = None,
    reason: str | None = None,
    changes: tuple[GateChange, ...] = (),
) -> Verdict:
    """Score `gates` over the arms at the look the card ended on; nothing is read or written."""
    look = design_look(card, max(inputs.stages, 1), inputs.question.share if inputs.question is not None else 1.0)
    arms = list(inputs.arms)
    results = evaluate(card, gates, arms, inputs.noise_floor, look)
    by_id = {g.id: g for g in gates}
    needed = tuple(
        m
        for r in results
        if r.id in by_id
        and (m := more_needed(card, by_id[r.id], r, controls=controls_for(card, by_id[r.id], results))) is not None
    )
    notes: tuple[str, ...] = inputs.question.notes() if inputs.question is not None else ()
    if inputs.boot_sd_override is not None:
        notes += (
            "a boot sd the lane's noise ledger ruled out was registered anyway, with --boot-sd-override: "
            f"{inputs.boot_sd_override} (the deciding gates' error rates hold only if that boot sd is the lane's)",
        )
    differs = provenance_differences(arms)
    if not inputs.transcribed:
        notes += tuple(
            invalid_cell_notes(arms)
            + boot_notes(card, gates, arms, inputs.boot_study, inputs.lane_noise)
            + provenance_notes(card, gates, arms, inputs.boot_measured_on, inputs.measured_now)
            + provenance_difference_notes(differs)
        )
    payload = gates_payload(gates)
    return Verdict(
        schema_version=1,
        card=card.name,
        number=number,
        verdict=overall(results),
        written_at=written_at,
        tool_version=__version__,
        candidate_recipe=card.candidate.recipe,
        control_recipe=card.controls[0].recipe,
        gates_sha256=sha256_bytes(dumps_json(payload)),
        gates=payload,
        sources={a.arm: a.source for a in arms},
        results=tuple(results),
        previous=previous,
        reason=reason,
        changes=changes,
        look=look.number,
        looks=look.looks,
        notes=notes,
        more_needed=needed,
        provenance_differs=differs,
        workloads=inputs.workloads,
    )


def gates_of(verdict: Verdict) -> tuple[Gate, ...]:
    """The gates a verdict applied, as the card's gate models."""
    return tuple(_GATE.validate_python(g) for g in verdict.gates)


def parse_change(text: str) -> tuple[str, str, object]:
    """`GATE.KEY=VALUE` (VALUE as YAML, so `0.03`, `set`, `{mode: spread, source: rounds, value: 0.02}`)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise CardError(f"gate change {text!r}: write it as GATE.KEY=VALUE, e.g. env-equal.compare=set")
    lhs, raw = text.split("=", 1)
    gate, key = lhs.split(".", 1)
    value = parse_value(raw, f"gate change {text!r}: the value", error=CardError)
    return gate, key, value


def apply_changes(
    card: Card, gates: Sequence[Gate], changes: list[str]
) -> tuple[tuple[Gate, ...], tuple[GateChange, ...]]:
    """Apply GATE.KEY=VALUE changes to gates; every change names an existing gate and key."""
    data = [g.model_dump(mode="json") for g in gates]
    by_id = {d["id"]: d for d in data}
    recorded = []
    for text in changes:
        gid, key, value = parse_change(text)
        if gid not in by_id:
            raise CardError(f"gate change {text!r}: card {card.name} has no gate {gid!r}; gates are {sorted(by_id)}")
        node = by_id[gid]
        parts = key.split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                raise CardError(f"gate change {text!r}: gate {gid} has no mapping {p!r}")
            node = node[p]
        if parts[-1] in ("id", "kind"):
            raise CardError(f"gate change {text!r}: a re-score may not rename a gate or change its kind")
        old = copy.deepcopy(node.get(parts[-1]))
        node[parts[-1]] = value
        recorded.append(GateChange(gate=gid, key=key, old=old, new=value))
    out = []
    for d in data:
        try:
            out.append(_GATE.validate_python(d))
        except ValidationError as exc:
            msg = format_validation_error(exc)
            raise CardError(f"re-score of gate {d['id']}: the changed gate is invalid ({msg})") from exc
    return tuple(out), tuple(recorded)


__all__ = [
    "GateChange",
    "PreviousVerdict",
    "Verdict",
    "VerdictInputs",
    "apply_changes",
    "compute_verdict",
    "gates_of",
    "parse_change",
]
