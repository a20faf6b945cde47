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

from typing import Literal

from pydantic import Field

from gb300lane import __version__
from gb300lane.cards.evidence import Look
from gb300lane.cards.gates import evaluate, overall
from gb300lane.cards.receipts import Receipts, stage_count, utc_now
from gb300lane.cards.results import GateResult, Status
from gb300lane.cards.schema import Card, GroupSequential
from gb300lane.errors import CardError
from gb300lane.models import FrozenModel

Action = Literal["stop", "continue", "final"]


class LookRecord(FrozenModel):
    """What one look saw and decided."""

    schema_version: Literal[1] = Field(description="File format version.")
    card: str = Field(description="Card name.")
    look: int = Field(ge=1, description="This look (1-based).")
    looks: int = Field(ge=1, description="Looks the design plans.")
    spending: str = Field(description="Alpha spending function of the design.")
    written_at: str = Field(description="UTC time of the look.")
    tool_version: str = Field(description="gb300lane version that looked.")
    requests_per_arm: int = Field(description="Requests per arm in the primary window so far (candidate arm).")
    verdict: Status = Field(description="The card's verdict if it stopped here.")
    action: Action = Field(description="stop (PASS or FAIL reached), continue (run the next stage), final (last look).")
    results: tuple[GateResult, ...] = Field(description="Every gate at this look.")


def design_look(card: Card, look: int) -> Look:
    """The Look of stage `look` under the card's design (a fixed design's only look is 1 of 1)."""
    if isinstance(card.design, GroupSequential):
        return Look(number=look, looks=card.design.looks, spending=card.design.spending)
    return Look()


def primary_requests(rec: Receipts, card: Card, stages: int) -> int:
    arms = {a.arm: a for a in rec.load_arms(card, stages=stages)}
    cand = arms.get(card.candidate.name)
    w = cand.windows.get(card.primary_window) if cand else None
    return sum(len(c.per_transcript) for c in w.cells) if w else 0


def decide(results: list[GateResult], look: Look) -> tuple[Status, Action]:
    verdict = overall(results)
    if verdict in ("PASS", "FAIL"):
        return verdict, "stop"
    return verdict, "final" if look.number >= look.looks else "continue"


def take_look(rec: Receipts, card: Card, stage: int) -> LookRecord:
    """Evaluate look `stage` and record it (write-once); returns what it decided."""
    if rec.look_file(stage).is_file():
        return read_look(rec, stage)
    if rec.stages_done(card) < stage:
        raise CardError(f"{rec.root}: look {stage} needs every arm to finish stage {stage}; run the card first")
    look = design_look(card, stage)
    results = evaluate(card, card.gates, rec.load_arms(card, stages=stage), rec.noise_floor_stated(), look)
    verdict, action = decide(results, look)
    seq = card.design if isinstance(card.design, GroupSequential) else None
    record = LookRecord(schema_version=1, card=card.name, look=stage, looks=stage_count(card),
                        spending=seq.spending if seq else "none", written_at=utc_now(), tool_version=__version__,
                        requests_per_arm=primary_requests(rec, card, stage), verdict=verdict, action=action,
                        results=tuple(results))
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
