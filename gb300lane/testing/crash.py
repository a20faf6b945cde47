"""The crash seam: die like kill -9 at a named point of a promote or rollback.

`GB300LANE_CRASH_AT=<kind>.<step>` kills the process (exit 137, no cleanup,
no `finally`) after the step's intent is journalled and before its side
effect; `<kind>.<step>:after` kills it after the side effect, before `done`.
The points are `gb300lane.promote.crash_points()`. In-process tests pass their
own `crash_hook` instead.
"""

from __future__ import annotations

import os

from gb300lane.promote import CrashHook

#: Environment variable naming the point at which the CLI process dies.
CRASH_ENV = "GB300LANE_CRASH_AT"


def exit_at(point: str) -> CrashHook:
    """A crash hook that ends the process with exit status 137 at `point`."""

    def hook(name: str) -> None:
        if name == point:
            os._exit(137)

    return hook


def hook_from_env() -> CrashHook | None:
    """The hook GB300LANE_CRASH_AT asks for, if any."""
    point = os.environ.get(CRASH_ENV, "").strip()
    return exit_at(point) if point else None
