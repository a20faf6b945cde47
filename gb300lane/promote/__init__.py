"""Promotion: which recipe serves production, the kept rollback pair, and the ledger of every change.

`promote(recipe)` moves production to a recipe with a PASS verdict, keeping the
old production stopped as the rollback pair; `rollback()` restores that pair
(or repairs an interrupted transition); `history()` and `prune()` read and tidy
the ledger; `current_production()` is the ledger's production state, and
`view` (imported on its own: it loads the lane) adds roles to the lane's facts
and says which instances lane commands must protect.

Each name loads its submodule when first used (`gb300lane.lazy`): `status`
reads the ledger without loading the transitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gb300lane.lazy import attach

if TYPE_CHECKING:
    from gb300lane.promote.housekeeping import history, prune, remove_recorded
    from gb300lane.promote.ledger import Ledger, ledger_path
    from gb300lane.promote.live_ops import default_ops
    from gb300lane.promote.lock import TransitionLock
    from gb300lane.promote.models import (
        BootInfo,
        InFlight,
        KeptCandidate,
        LedgerEvent,
        ProductionState,
        PruneReport,
        Slot,
        SmokeInfo,
        TransitionReport,
        VerdictInfo,
    )
    from gb300lane.promote.ops import InstanceFact, PromotionOps
    from gb300lane.promote.runs import CrashHook
    from gb300lane.promote.state import current_production
    from gb300lane.promote.transitions import crash_points, promote, rollback

__getattr__, __dir__ = attach(
    __name__,
    {
        "history": "housekeeping",
        "prune": "housekeeping",
        "remove_recorded": "housekeeping",
        "Ledger": "ledger",
        "ledger_path": "ledger",
        "TransitionLock": "lock",
        "BootInfo": "models",
        "InFlight": "models",
        "KeptCandidate": "models",
        "LedgerEvent": "models",
        "ProductionState": "models",
        "PruneReport": "models",
        "Slot": "models",
        "SmokeInfo": "models",
        "TransitionReport": "models",
        "VerdictInfo": "models",
        "InstanceFact": "ops",
        "PromotionOps": "ops",
        "default_ops": "live_ops",
        "current_production": "state",
        "CrashHook": "runs",
        "crash_points": "transitions",
        "promote": "transitions",
        "rollback": "transitions",
    },
)

__all__ = [
    "BootInfo",
    "CrashHook",
    "InFlight",
    "InstanceFact",
    "KeptCandidate",
    "Ledger",
    "LedgerEvent",
    "ProductionState",
    "PromotionOps",
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
    "remove_recorded",
    "rollback",
]
