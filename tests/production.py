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
import yaml

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.paths import shipped
from gb300lane.testing.crash import CRASH_ENV
from gb300lane.testing.free_ports import free_port


def write_recipes(folder: Path) -> int:
    """local-v26 (quick, on free ports) and the shipped local-v27 in `folder`; returns local-v26's port."""
    folder.mkdir(exist_ok=True)
    base = yaml.safe_load((shipped("recipes") / "local-v26.yaml").read_text())
    port = free_port()
    base["lane"]["port"] = port
    base["sidecar"]["port"] = free_port()
    base["engine_args"]["time_scale"] = 0.0
    for gate in base["smoke"]["gates"]:
        gate.pop("lossless", None)  # a window this short scores too few tokens for the losslessness check
        gate["window"].update(classes=["prose"], transcripts_per_class=1, concurrency=[1], forced_tokens=16)
    (folder / "local-v26.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (folder / "local-v27.yaml").write_text((shipped("recipes") / "local-v27.yaml").read_text())
    return port


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
