"""Promotion: which recipe serves production, the kept rollback pair, and the ledger of every change.

`promote(recipe)` moves production to a recipe with a PASS verdict, keeping the
old production stopped as the rollback pair; `rollback()` restores that pair
(or repairs an interrupted transition); `history()` and `prune()` read and tidy
the ledger; `current_production()` is what `gb300lane status` shows.
"""

from gb300lane.promote.housekeeping import history, prune
from gb300lane.promote.ledger import Ledger, ledger_path
from gb300lane.promote.lock import TransitionLock
from gb300lane.promote.models import (
    BootInfo,
    InFlight,
    LedgerEvent,
    ProductionState,
    PruneReport,
    SmokeInfo,
    Slot,
    TransitionReport,
    VerdictInfo,
)
from gb300lane.promote.ops import InstanceFact, LaneOps, LiveLaneOps, default_ops
from gb300lane.promote.state import current_production
from gb300lane.promote.transitions import CRASH_ENV, crash_points, promote, rollback

__all__ = [
    "BootInfo",
    "CRASH_ENV",
    "InFlight",
    "InstanceFact",
    "LaneOps",
    "Ledger",
    "LedgerEvent",
    "LiveLaneOps",
    "ProductionState",
    "PruneReport",
    "Slot",
    "SmokeInfo",
    "TransitionLock",
    "TransitionReport",
    "VerdictInfo",
    "crash_points",
    "current_production",
    "default_ops",
    "history",
    "ledger_path",
    "promote",
    "prune",
    "rollback",
]
