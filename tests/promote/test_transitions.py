"""Promote, rollback, history and prune on a simulated lane: the gate, the round trip, the failure paths, the lock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gb300lane import promote as pm
from gb300lane.errors import StateError
from gb300lane.testing.simlane import SimLane

PORT = 30106


@pytest.fixture
def lane(tmp_path: Path) -> SimLane:
    return SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}, "local-k9": {}},
        {
            "local-v27": {"verdict": "PASS", "reference": "card BR1 verdict 2 (re-scored)", "rescored": True},
            "local-k9": {"verdict": "FAIL", "reference": "card BR2 verdict 1"},
        },
    )


def _production_v26(lane: SimLane) -> None:
    report = pm.promote("local-v26", force=True, reason="the lane as it runs today", ops=lane)
    assert report.ok


def _running(lane: SimLane) -> list[str]:
    return lane.running_on(PORT)


def test_first_promotion_is_forced_and_has_no_pair(lane: SimLane) -> None:
    _production_v26(lane)
    state = pm.current_production()
    assert state is not None
    assert (state.recipe, state.instance, state.port) == ("local-v26", "lane-local-v26", PORT)
    assert state.rollback_pair is None and state.in_flight is None
    [event] = pm.history()
    assert event.kind == "promote" and event.forced and event.reason == "the lane as it runs today"
    assert _running(lane) == ["lane-local-v26"]


def test_promote_without_a_verdict_is_refused_and_touches_nothing(lane: SimLane) -> None:
    with pytest.raises(StateError, match=r"local-v26: no card has it as its B arm.*--force --reason"):
        pm.promote("local-v26", ops=lane)
    assert lane.operations() == []
    assert pm.current_production() is None


def test_promote_with_a_fail_verdict_is_refused(lane: SimLane) -> None:
    _production_v26(lane)
    before = lane.operations()
    with pytest.raises(StateError, match=r"newest verdict is FAIL \(card BR2 verdict 1\)"):
        pm.promote("local-k9", ops=lane)
    assert lane.operations() == before
    assert pm.current_production().recipe == "local-v26"


def test_force_needs_a_reason(lane: SimLane) -> None:
    with pytest.raises(StateError, match="--force needs --reason"):
        pm.promote("local-k9", force=True, reason="  ", ops=lane)


def test_promote_then_rollback_round_trip(lane: SimLane) -> None:
    _production_v26(lane)
    report = pm.promote("local-v27", ops=lane)
    assert report.ok and report.production == "local-v27" and report.rollback_pair == "local-v26"
    # Production was stopped before the candidate booted: never two on the port.
    ops = [op for op in lane.operations() if op[0] in ("stop", "boot")]
    assert ops[-2:] == [["stop", "lane-local-v26"], ["boot", "lane-local-v27"]]
    assert _running(lane) == ["lane-local-v27"]
    state = pm.current_production()
    assert state.recipe == "local-v27" and state.rollback_pair.instance == "lane-local-v26"
    assert {f.name: f.running for f in lane.instances()} == {"lane-local-v26": False, "lane-local-v27": True}

    back = pm.rollback(ops=lane)
    assert back.ok and back.production == "local-v26" and back.rollback_pair == "local-v27"
    assert back.restore_seconds is not None and back.restore_seconds >= 0
    assert back.tool_seconds is not None and back.tool_seconds <= back.restore_seconds
    assert _running(lane) == ["lane-local-v26"]
    # The kept pair was restarted, not booted anew.
    assert ["start", "lane-local-v26"] in lane.operations()
    kinds = [(e.kind, e.recipe, e.previous) for e in pm.history()]
    assert kinds == [
        ("promote", "local-v26", None),
        ("promote", "local-v27", "local-v26"),
        ("rollback", "local-v26", "local-v27"),
    ]
    assert pm.history()[1].verdict == "card BR1 verdict 2 (re-scored)"

    # Rolling back again returns to v27: the pair swaps each time.
    again = pm.rollback(ops=lane)
    assert again.production == "local-v27" and _running(lane) == ["lane-local-v27"]


def test_a_failed_smoke_restores_the_previous_pair(lane: SimLane) -> None:
    _production_v26(lane)
    lane.set_recipe("local-v27", fail_smoke=True)
    report = pm.promote("local-v27", ops=lane)
    assert not report.ok
    assert "local-v27 failed smoke: failing gates: parity-t0" in report.message
    assert "restored local-v26" in report.message
    assert _running(lane) == ["lane-local-v26"]
    # The failed candidate is stopped and kept, not removed.
    assert {f.name: f.running for f in lane.instances()}["lane-local-v27"] is False
    state = pm.current_production()
    assert state.recipe == "local-v26" and state.rollback_pair is None and state.in_flight is None
    event = pm.history()[-1]
    assert event.kind == "promote_failed" and "failed smoke" in event.reason
    assert (event.recipe, event.previous, event.instance) == ("local-v27", "local-v26", "lane-local-v27")
    assert event.restore_seconds is not None


def test_a_failed_boot_restores_the_previous_pair(lane: SimLane) -> None:
    _production_v26(lane)
    lane.set_recipe("local-v27", fail_boot=True)
    report = pm.promote("local-v27", ops=lane)
    assert not report.ok and "local-v27 failed to boot" in report.message
    assert _running(lane) == ["lane-local-v26"]
    assert pm.current_production().recipe == "local-v26"


def test_a_second_promotion_of_a_kept_recipe_boots_a_new_instance(lane: SimLane) -> None:
    _production_v26(lane)
    pm.promote("local-v27", ops=lane)
    pm.rollback(ops=lane)
    report = pm.promote("local-v27", ops=lane)
    assert report.ok
    assert pm.current_production().instance == "lane-local-v27-2"
    assert _running(lane) == ["lane-local-v27-2"]


def test_promoting_production_again_is_a_no_op(lane: SimLane) -> None:
    _production_v26(lane)
    pm.promote("local-v27", ops=lane)
    before = lane.operations()
    report = pm.promote("local-v27", ops=lane)
    assert report.ok and "already production" in report.message
    assert lane.operations() == before


def test_rollback_without_a_pair_is_refused(lane: SimLane) -> None:
    with pytest.raises(StateError, match="no rollback pair"):
        pm.rollback(ops=lane)
    _production_v26(lane)
    with pytest.raises(StateError, match=r"no rollback pair in the ledger \(production: local-v26\)"):
        pm.rollback(ops=lane)


def test_a_pair_that_will_not_start_leaves_production_as_it_was(lane: SimLane) -> None:
    _production_v26(lane)
    pm.promote("local-v27", ops=lane)
    lane.set_recipe("local-v26", fail_start=True)
    report = pm.rollback(ops=lane)
    assert not report.ok and "failed to start" in report.message and "local-v27 restored" in report.message
    assert _running(lane) == ["lane-local-v27"]
    state = pm.current_production()
    assert state.recipe == "local-v27" and state.rollback_pair.recipe == "local-v26"
    failed = pm.history()[-1]
    assert (failed.kind, failed.recipe, failed.previous) == ("rollback_failed", "local-v26", "local-v27")


@pytest.mark.slow
def test_a_concurrent_promotion_is_refused(lane: SimLane) -> None:
    _production_v26(lane)
    lane.set_recipe("local-v27", hold=True)  # its boot lasts until released below, however loaded the machine
    errors: list[BaseException] = []
    first = threading.Thread(target=lambda: pm.promote("local-v27", ops=lane))
    first.start()
    try:
        # Wait until the first one is inside its transition.
        for _ in range(200):
            state = pm.current_production()
            if state and state.in_flight:
                break
            threading.Event().wait(0.01)
        assert state.in_flight is not None and not state.in_flight.crashed
        assert state.in_flight.commands == ()
        for call in (
            lambda: pm.promote("local-v27", ops=lane),
            lambda: pm.rollback(ops=lane),
            lambda: pm.prune(ops=lane),
        ):
            try:
                call()
            except StateError as exc:
                errors.append(exc)
    finally:
        for _ in range(2000):  # the first promotion reaches its boot, then the boot ends
            if ["boot", "lane-local-v27"] in lane.operations():
                break
            threading.Event().wait(0.01)
        lane.release("lane-local-v27")
        first.join(timeout=60)
    assert not first.is_alive()
    assert len(errors) == 3
    assert all("locked by pid" in str(e) and "promote local-v27" in str(e) for e in errors)
    assert _running(lane) == ["lane-local-v27"]


def test_prune_never_removes_production_or_the_pair(lane: SimLane) -> None:
    _production_v26(lane)
    pm.promote("local-v27", ops=lane)
    pm.rollback(ops=lane)
    pm.promote("local-v27", ops=lane)  # lane-local-v27-2; the first v27 instance is now just kept
    dry = pm.prune(dry_run=True, ops=lane)
    assert dry.removed == ("lane-local-v27",) and dry.dry_run
    assert {f.name for f in lane.instances()} == {"lane-local-v26", "lane-local-v27", "lane-local-v27-2"}
    kept_one = pm.prune(keep=1, ops=lane)
    assert kept_one.removed == () and "lane-local-v27 (newest kept)" in kept_one.kept
    report = pm.prune(ops=lane)
    assert report.removed == ("lane-local-v27",)
    assert {f.name for f in lane.instances()} == {"lane-local-v26", "lane-local-v27-2"}
    assert pm.current_production().rollback_pair.instance == "lane-local-v26"
    assert pm.history()[-1].kind == "prune" and "lane-local-v27" in pm.history()[-1].detail
    # Nothing left to prune: production and the pair stay.
    assert pm.prune(ops=lane).removed == ()
    removed = [op for op in lane.operations() if op[0] == "remove"]
    assert removed == [["remove", "lane-local-v27"]]


def test_resume_without_an_interrupted_promotion_is_refused(lane: SimLane) -> None:
    with pytest.raises(StateError, match="no interrupted promotion of local-v27 to resume"):
        pm.promote("local-v27", resume=True, ops=lane)


def test_public_api_is_sorted_and_pinned() -> None:
    assert pm.__all__ == sorted(pm.__all__)
    assert {"promote", "rollback", "history", "prune", "current_production", "ProductionState"} <= set(pm.__all__)


def test_the_production_port_is_set_by_the_first_promotion(lane: SimLane) -> None:
    assert pm.promote("local-v26", force=True, reason="first", port=31000, ops=lane).ok
    assert lane.running_on(31000) == ["lane-local-v26"]
    with pytest.raises(StateError, match="the production port is 31000; --port only sets it on a first promotion"):
        pm.promote("local-v27", port=31001, ops=lane)
    assert pm.promote("local-v27", ops=lane).ok  # the recipe says 30106; production stays on 31000
    assert lane.running_on(31000) == ["lane-local-v27"] and lane.running_on(PORT) == []


def test_when_the_previous_pair_will_not_restart_either_rollback_brings_it_back_later(lane: SimLane) -> None:
    _production_v26(lane)
    lane.set_recipe("local-v27", fail_smoke=True)
    lane.set_recipe("local-v26", fail_start=True)
    report = pm.promote("local-v27", ops=lane)
    assert not report.ok and report.production is None
    assert "restoring local-v26 failed too" in report.message and "run `gb300lane rollback`" in report.message
    assert _running(lane) == []
    state = pm.current_production()
    assert state.recipe is None and state.rollback_pair.recipe == "local-v26" and state.in_flight is None
    lane.set_recipe("local-v26", fail_start=False)
    back = pm.rollback(ops=lane)
    assert back.ok and back.production == "local-v26" and back.rollback_pair is None
    assert _running(lane) == ["lane-local-v26"]
