"""What a verdict is computed from, read from a receipts directory (and the boot studies beside it).

`verdict_inputs` gathers the typed arm data and the facts the verdict's notes check; `verdict_over` hands
them, with the card and the gates, to the pure `cards.decide.verdict.compute_verdict`.
"""

from __future__ import annotations

from typing import Literal

from gb300lane.cards.decide.boots import BootEstimate
from gb300lane.cards.decide.more import boot_checked
from gb300lane.cards.decide.verdict import (
    GateChange,
    PreviousVerdict,
    Verdict,
    VerdictInputs,
    WindowWorkload,
    compute_verdict,
)
from gb300lane.cards.record.noise import for_card
from gb300lane.cards.record.receipts import Receipts, Registration, utc_now
from gb300lane.cards.record.studies import earlier_boots, measured_on
from gb300lane.cards.schema import Card, Gate, planned_stages


def verdict_inputs(rec: Receipts, card: Card, gates: tuple[Gate, ...], stages: int | None = None) -> VerdictInputs:
    """The receipts' arms at the look the card ended on (or at look `stages`: a verdict re-scored at its own
    look), and (for gates that register a boot sd) the boot studies and what they would be measured on now."""
    if stages is None:
        stages = rec.stages_done(card) if planned_stages(card) > 1 else 1
    arms = rec.load_arms(card, stages=stages)
    reg = rec.registration()
    checked = bool(boot_checked(gates)) and not reg.transcribed
    recorded = reg.plan.boot_measured_on if reg.plan is not None and not reg.transcribed else ()
    return VerdictInputs(
        arms=tuple(arms),
        stages=max(stages, 1),
        noise_floor=rec.noise_floor_stated(),
        transcribed=reg.transcribed,
        boot_study=earlier_boots(card, rec.root.parent) if checked else None,
        boot_measured_on=recorded,
        measured_now=measured_on(card) if checked and recorded else None,
        lane_noise=_lane_noise(rec, card, gates) if checked else {},
        question=reg.question,
        workloads=window_workloads(card, reg),
        boot_sd_override=reg.boot_sd_override,
    )


def window_workloads(card: Card, reg: Registration) -> tuple[WindowWorkload, ...]:
    """Which workload and part each window that names one (not builtin) ran, as the registration froze it."""
    out = []
    for w in card.windows:
        ref = (reg.workloads or {}).get(w.workload)
        if ref is None:
            continue
        part: Literal["all", "dev", "held_out"] = "held_out" if w.held_out else "dev" if ref.held_out_ids else "all"
        out.append(WindowWorkload(window=w.name, workload=w.workload, content_sha256=ref.content_sha256, part=part))
    return tuple(out)


def _lane_noise(rec: Receipts, card: Card, gates: tuple[Gate, ...]) -> dict[str, tuple[BootEstimate, str]]:
    """The lane's noise ledger for the metrics of the gates that register a boot sd, this card's receipts left out."""
    out: dict[str, tuple[BootEstimate, str]] = {}
    for metric in sorted({g.metric for g in boot_checked(gates)}):
        led = for_card(card, metric, base=rec.root.parent, exclude=rec.root.name)
        if led is not None:
            out[metric] = (led.as_boot_estimate(), led.source())
    return out


def verdict_over(
    rec: Receipts,
    card: Card,
    gates: tuple[Gate, ...],
    *,
    number: int = 1,
    previous: PreviousVerdict | None = None,
    reason: str | None = None,
    changes: tuple[GateChange, ...] = (),
    stages: int | None = None,
) -> Verdict:
    """Score `gates` over the receipts without writing anything, at the look the card ended on (or at look
    `stages`)."""
    return compute_verdict(
        card,
        gates,
        verdict_inputs(rec, card, gates, stages),
        written_at=utc_now(),
        number=number,
        previous=previous,
        reason=reason,
        changes=changes,
    )


__all__ = ["verdict_inputs", "verdict_over"]
