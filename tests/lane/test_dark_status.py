"""Dark is checked while the lane runs: `status` runs the bind check again on every running dark instance, so a
listener opened after boot (beyond loopback, by one of the lane's processes) is seen, not only at boot.

A real dark boot (process runtime, embedded engine at time scale 0); the later listener is added to what the
socket table reads (`facts.listeners`), held by the engine's own pid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane.lane import facts
from gb300lane.paths import shipped
from gb300lane.runtime.process import ProcessRuntime
from gb300lane.testing.free_ports import free_port

from clirun import cli

pytestmark = pytest.mark.slow


def test_status_sees_a_listener_a_dark_lane_opened_after_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("local-v26", "local-v27"):
        (tmp_path / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    (tmp_path / "t-dark.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "t-dark", "extends": "local-v27", "description": "dark while it runs",
        "lane": {"port": free_port()}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0},
    }))  # fmt: skip
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(tmp_path))
    try:
        assert lane.up("t-dark", dark=True, runtime="process").ok
        clean = cli("status", "--json")
        assert clean.returncode == 0, clean.stderr
        assert [r["dark_bind"] for r in json.loads(clean.stdout)["instances"]] == [None]
        pid = ProcessRuntime().inspect("local-t-dark-main").pid
        assert pid is not None
        real = facts.listeners
        late = free_port()
        monkeypatch.setattr(
            facts, "listeners", lambda: [*(real() or []), facts.Listener(address="0.0.0.0", port=late, pid=pid)]
        )
        seen = cli("status")
        said = " ".join((seen.stdout + seen.stderr).split())
        assert f"0.0.0.0:{late}: reachable beyond loopback while dark" in said and "is dark but" in said, said
    finally:
        lane.down(all=True, yes=True)


def test_a_card_window_stops_on_a_listener_a_dark_arm_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The card's check around every window runs the bind check too: a dark arm reachable beyond loopback stops
    the card, naming the socket, instead of measuring on."""
    from gb300lane.cards.run import LiveArmOps
    from gb300lane.errors import LaneError

    for name in ("local-v26", "local-v27"):
        (tmp_path / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    (tmp_path / "t-dark.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "t-dark", "extends": "local-v27", "description": "dark while it runs",
        "lane": {"port": free_port()}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0},
    }))  # fmt: skip
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(tmp_path))
    try:
        report = lane.up("t-dark", dark=True, runtime="process")
        ops = LiveArmOps()
        assert ops.foreign(report.endpoint, 0).foreign_clients == 0
        pid = ProcessRuntime().inspect("local-t-dark-main").pid
        real = facts.listeners
        late = free_port()
        monkeypatch.setattr(
            facts, "listeners", lambda: [*(real() or []), facts.Listener(address="0.0.0.0", port=late, pid=pid)]
        )
        with pytest.raises(LaneError, match=f"0.0.0.0:{late}: reachable beyond loopback"):
            ops.foreign(report.endpoint, 0)
    finally:
        lane.down(all=True, yes=True)
