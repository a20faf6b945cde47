"""The looks of a group-sequential card: after each stage, decide to stop (PASS or FAIL) or to go on.

Look s evaluates the registered gates over stages 1..s at the one-sided
levels the design's alpha spending allows at look s. A verdict of PASS or
FAIL there stops the card; INCONCLUSIVE runs the next stage, and at the last
look it is the answer. Every look is a write-once receipt
(`looks/look-<s>.json`), so a resumed card continues the same design from
the last look on record, and `card score` writes the verdict of the look the
card stopped at.
"""

from __future__ import annotations

from gb300lane import __version__
from gb300lane.cards.decide.gates import evaluate
from gb300lane.cards.decide.looks import LookRecord, decide, design_look
from gb300lane.cards.record.receipts import Receipts, utc_now
from gb300lane.cards.schema import Card, stage_count
from gb300lane.errors import CardError


def primary_requests(rec: Receipts, card: Card, stages: int) -> int:
    arms = {a.arm: a for a in rec.load_arms(card, stages=stages)}
    cand = arms.get(card.candidate.name)
    w = cand.windows.get(card.primary_window) if cand else None
    return sum(len(c.per_transcript) for c in w.cells) if w else 0


def take_look(rec: Receipts, card: Card, stage: int, final_at: int | None = None) -> LookRecord:
    """Evaluate look `stage` and record it (write-once); returns what it decided. INCONCLUSIVE is final at look
    `final_at` (default: the design's last, where `card run` ends; `card extend` passes its extension's last)."""
    if rec.look_file(stage).is_file():
        return read_look(rec, stage)
    if rec.stages_done(card) < stage:
        raise CardError(f"{rec.root}: look {stage} needs every arm to finish stage {stage}; run the card first")
    look = design_look(card, stage, rec.registration().alpha_share())
    results = evaluate(card, card.gates, rec.load_arms(card, stages=stage), rec.noise_floor_stated(), look)
    verdict, action = decide(results, look, final_at=final_at or stage_count(card))
    record = LookRecord(
        schema_version=1,
        card=card.name,
        look=stage,
        looks=look.looks,
        spending=look.spending if look.looks > 1 else "none",
        written_at=utc_now(),
        tool_version=__version__,
        requests_per_arm=primary_requests(rec, card, stage),
        verdict=verdict,
        action=action,
        results=tuple(results),
    )
    rec.write_json(rec.look_file(stage), record.model_dump(mode="json"))
    return record


def read_look(rec: Receipts, look: int) -> LookRecord:
    return rec.read_model(rec.look_file(look), LookRecord)


def stopped_at(rec: Receipts) -> LookRecord | None:
    """The look that ended the card (stop or final), if one is on record."""
    for n in rec.look_numbers():
        record = read_look(rec, n)
        if record.action in ("stop", "final"):
            return record
    return None
