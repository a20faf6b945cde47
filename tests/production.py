"""A production lane for tests: local-v26 made quick (process runtime, embedded engine at time scale 0, a
one-transcript smoke, free ports) beside the shipped local-v27, promoted with the tool's own `promote`.

`in_production(folder, monkeypatch, recipes)` writes both recipes into `folder`, points GB300LANE_RECIPES_DIR
at it, promotes `recipes` in order and yields local-v26's port; every lane is taken down after.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.testing.crash import CRASH_ENV
from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair


def write_recipes(folder: Path) -> int:
    """local-v26 (quick, on free ports) and the shipped local-v27 in `folder`; returns local-v26's port."""
    base = quick_local_v26()
    write_quick_pair(folder, base)
    return int(base["lane"]["port"])


@contextmanager
def in_production(folder: Path, monkeypatch: pytest.MonkeyPatch, recipes: Sequence[str], *,
                  reason: str = "test lane") -> Iterator[int]:  # fmt: skip
    """`recipes` promoted in order from `folder` (the last one serves production); yields local-v26's port."""
    port = write_recipes(folder)
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(folder))
    monkeypatch.delenv("GB300LANE_LANE_OPS", raising=False)
    monkeypatch.delenv(CRASH_ENV, raising=False)
    try:
        for recipe in recipes:
            report = pm.promote(recipe, force=True, reason=reason)
            assert report.ok, report.message
        yield port
    finally:
        lane.down(all=True, yes=True)
