"""The two test seams the promote commands honour, chosen here at the top so no library layer knows of them.

`GB300LANE_LANE_OPS=sim:<file>` drives a simulated lane instead of the live
one, and `GB300LANE_CRASH_AT=<point>` kills the process at a journal point;
the doubles themselves live in `gb300lane.testing`, imported only when asked
for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from gb300lane.errors import StateError

if TYPE_CHECKING:
    from gb300lane.promote import CrashHook, PromotionOps

#: Environment variable selecting the lane operations (`sim:<path>` for a simulated lane).
OPS_ENV = "GB300LANE_LANE_OPS"


def promotion_ops() -> PromotionOps | None:
    """The simulated lane GB300LANE_LANE_OPS names, or None for the library's live one."""
    choice = os.environ.get(OPS_ENV, "").strip()
    if not choice or choice == "live":
        return None
    if choice.startswith("sim:"):
        from gb300lane.testing.simlane import SimLane

        return SimLane(Path(choice[4:]))
    raise StateError(f"{OPS_ENV}={choice!r}: expected 'live' or 'sim:<path to a simulated lane file>'")


def crash_hook() -> CrashHook | None:
    """The kill-at-a-point hook GB300LANE_CRASH_AT asks for, if any."""
    from gb300lane.testing.crash import hook_from_env

    return hook_from_env()
