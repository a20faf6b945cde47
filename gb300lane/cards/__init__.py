"""Cards: bracketed A -> B -> A2 experiments with pre-registered gates, receipts and verdicts.

A card file declares the arms, the windows and the gates; `register` freezes
the gates; `run_card` boots each arm dark and measures it, writing receipts as
it goes; `score` writes the pre-registered verdict, `rescore` a later one that
points back at it; `render_report` draws the card. The write-up's own cards
(BR1, BR2) ship as transcribed receipts and are re-derived by
`reproduce_writeup`. Tested gates decide by pre-registered paired tests
(`GateResult.tests`). Sizing, timing and calibrating a card are `gb300lane.instrument`'s.
"""

from gb300lane.cards.cardfile import load_card
from gb300lane.cards.decide.results import CardPlan, GateResult, GateTest
from gb300lane.cards.decide.verdict import Verdict
from gb300lane.cards.present.report import render_html, render_report
from gb300lane.cards.present.writeup import reproduce_writeup
from gb300lane.cards.record.models import ForeignCount
from gb300lane.cards.record.receipts import Receipts, Registration, all_receipts, find_receipts, register
from gb300lane.cards.record.verdicts import VerdictRef, compute_rescore, latest_verdict_for, rescore, score
from gb300lane.cards.run import ArmOps, LiveArmOps, run_card
from gb300lane.cards.schema import Card, parse_card

__all__ = [
    "ArmOps",
    "Card",
    "CardPlan",
    "ForeignCount",
    "GateResult",
    "GateTest",
    "LiveArmOps",
    "Receipts",
    "Registration",
    "Verdict",
    "VerdictRef",
    "all_receipts",
    "compute_rescore",
    "find_receipts",
    "latest_verdict_for",
    "load_card",
    "parse_card",
    "register",
    "render_html",
    "render_report",
    "reproduce_writeup",
    "rescore",
    "run_card",
    "score",
]
