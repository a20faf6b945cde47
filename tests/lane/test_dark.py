"""Dark means every port of the lane: the bind check covers main, the sidecar and whatever else the lane's
processes listen on, and a dark boot whose check fails is stopped before `up` returns (nothing left listening)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane.lane import checks, facts
from gb300lane.paths import shipped
from gb300lane.testing.free_ports import free_port


@pytest.fixture
def quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, int]]:
    base = yaml.safe_load((shipped("recipes") / "local-v26.yaml").read_text())
    port, side = free_port(), free_port()
    base["lane"]["port"], base["sidecar"]["port"] = port, side
    base["engine_args"]["time_scale"] = 0.0
    (tmp_path / "local-v26.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(tmp_path))
    try:
        yield port, side
    finally:
        lane.down(all=True, yes=True)


def test_the_bind_check_names_every_port_of_the_lane() -> None:
    main, side = facts.Listener(address="127.0.0.1", port=30106), facts.Listener(address="0.0.0.0", port=30107)
    result = checks.check_bind([main, side], [30106, 30107])
    assert result.status == "fail" and "0.0.0.0:30107" in result.summary
    assert checks.check_bind([main], [30106, 30107]).status == "fail"  # the sidecar is not listening at all
    stray = facts.Listener(address="0.0.0.0", port=40000, pid=1)
    assert (
        checks.check_bind([main, side.model_copy(update={"address": "127.0.0.1"}), stray], [30106, 30107]).status
        == "fail"
    )


@pytest.mark.slow
def test_a_dark_boot_checks_the_sidecar_port_too(quick: tuple[int, int]) -> None:
    port, side = quick
    report = lane.up("local-v26", dark=True)
    bind = report.check("dark_bind")
    assert bind is not None and bind.status == "pass", report.to_text()
    assert bind.evidence["ports"] == sorted([port, side])


@pytest.mark.slow
def test_a_failed_dark_check_leaves_nothing_listening(quick: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    port, side = quick
    real = facts.listeners

    def seen(p: int | None = None) -> list[facts.Listener] | None:
        found = real(p)
        if found is None:
            return None
        # what a sidecar bound to every interface would show
        return [l.model_copy(update={"address": "0.0.0.0"}) if l.port == side else l for l in found]

    monkeypatch.setattr(facts, "listeners", seen)
    report = lane.up("local-v26", dark=True)
    bind = report.check("dark_bind")
    assert bind is not None and bind.status == "fail" and not report.ok
    assert all(i.state != "running" for i in lane.list_instances()), lane.list_instances()
    assert not real(port) and not real(side)
