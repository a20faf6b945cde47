"""The live lane as promotion's default `PromotionOps`, imported only when a command first asks for it."""

from __future__ import annotations

from gb300lane.promote.ops import PromotionOps


def default_ops() -> PromotionOps:
    """The live lane."""
    # Imported here, not at the top: the live lane pulls in lane, bench and cards, which
    # `history`, `status` and the ledger alone never need (CLI start-up time).
    from gb300lane.promote.live import LiveOps

    return LiveOps()


__all__ = ["default_ops"]
