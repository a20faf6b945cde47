"""The looks of a group-sequential card (the decision at each): after each stage, decide to stop (PASS or FAIL) or to go on.

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

from gb300lane.cards.decide.evidence import Look
from gb300lane.cards.decide.gates import overall
from gb300lane.cards.decide.results import GateResult, Status
from gb300lane.cards.schema import Card, plan_spending, planned_stages
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


def design_look(card: Card, look: int, share: float = 1.0) -> Look:
    """The Look of stage `look` under the card's plan: the design's looks and the registered extension's, one
    alpha-spending plan (a fixed design without an extension has one look, 1 of 1), over `share` of each gate's
    alpha (the run's share of its question's, `decide.question`)."""
    total = planned_stages(card)
    if total > 1:
        return Look(number=look, looks=total, spending=plan_spending(card), share=share)
    return Look(share=share)


def decide(results: list[GateResult], look: Look, final_at: int | None = None) -> tuple[Status, Action]:
    """PASS or FAIL stops; INCONCLUSIVE continues, up to look `final_at` (default: the plan's last look), where it
    is final: `card run` ends at the design's last look, `card extend` at the last look its receipt planned."""
    verdict = overall(results)
    if verdict in ("PASS", "FAIL"):
        return verdict, "stop"
    return verdict, "final" if look.number >= (final_at or look.looks) else "continue"


__all__ = ["Action", "LookRecord", "decide", "design_look"]
