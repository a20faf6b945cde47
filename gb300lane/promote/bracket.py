"""`card run --take-lane`: a card's bracket run on the production lane, inside `lanetake.take_lane`.

Production is stopped (kept) for the bracket and restarted after it, also when an arm fails or on Ctrl-C; what
the give-back did is said even then (the error goes on up).
"""

from __future__ import annotations

from collections.abc import Callable

from gb300lane.cards import LiveArmOps, Receipts, run_card
from gb300lane.promote.models import TransitionReport
from gb300lane.promote.ops import Progress, PromotionOps
from gb300lane.promote.runs import CrashHook
from gb300lane.promote.take_lane import LaneTake, take_lane
from gb300lane.promote.view import protected_instances


def run_card_taking_the_lane(
    rec: Receipts,
    *,
    ops: PromotionOps | None = None,
    crash_hook: CrashHook | None = None,
    progress: Progress | None = None,
    failed: Callable[[str], None] | None = None,
) -> tuple[list[str], TransitionReport | None]:
    """Run the card's unfinished arms with the lane taken from production; returns the run's lines and how
    production was given back (None when nothing was taken). `progress` hears what happens, `failed` a give-back
    that could not restart production."""
    say = progress or (lambda _msg: None)
    holder: list[LaneTake] = []
    lines: list[str] = []
    try:
        with take_lane(rec.registration().card, ops=ops, crash_hook=crash_hook, progress=say) as taken:
            holder.append(taken)
            prod = taken.production
            say(
                f"took the lane: production {prod.recipe} ({prod.instance}) stopped and kept; it is restarted when "
                "the bracket ends"
                if prod
                else "no production recorded: nothing to take; the arms run on the lane"
            )
            protected = protected_instances()
            lines = run_card(rec, ops=LiveArmOps(protected), progress=say, protected=protected)
    finally:
        given = holder[0].report if holder else None
        if given is not None and given.ok:
            say(given.message)
            card = rec.card()
            say(
                f"the arms are kept on the lane; after a PASS (`gb300lane card score {card.name}`), "
                f"`gb300lane promote {card.candidate.recipe} --from-card {card.name}` starts the kept "
                f"{card.candidate.name} arm as production without a fresh boot"
            )
        elif given is not None and failed is not None:
            failed(given.message)
    return lines, given


__all__ = ["run_card_taking_the_lane"]
