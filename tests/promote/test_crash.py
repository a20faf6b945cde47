"""Crash safety: a kill at every step of promote and rollback is explained and repaired by one command.

In-process, a crash hook raises at each named point (the journal is what a
killed process leaves). Through the real CLI, GB300LANE_CRASH_AT makes the
process exit 137 at a point, and one test sends a real SIGKILL mid-boot.
After every crash: the state explains it, at most one instance serves the
production port, and the named command leaves a finished, consistent ledger.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gb300lane import promote as pm
from gb300lane.errors import StateError
from gb300lane.testing.crash import CRASH_ENV
from gb300lane.testing.simlane import SimLane

from clirun import cli

PORT = 30106
POINTS = pm.crash_points()


class Killed(BaseException):
    """Raised by the crash hook; a BaseException so no handler in the library catches it."""


def _killer(point: str):
    def hook(name: str) -> None:
        if name == point:
            raise Killed(name)

    return hook


@pytest.fixture
def lane(tmp_path: Path) -> SimLane:
    sim = SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}},
        {"local-v27": {"verdict": "PASS", "reference": "card BR1 verdict 2", "rescored": True}},
    )
    assert pm.promote("local-v26", force=True, reason="production before the change", ops=sim).ok
    return sim


def _assert_consistent(lane: SimLane, production: str) -> None:
    state = pm.current_production()
    assert state.in_flight is None
    assert state.recipe == production
    assert lane.running_on(PORT) == [state.instance]


def _explained(kind: str, recipe: str) -> pm.InFlight:
    state = pm.current_production()
    flight = state.in_flight
    assert flight is not None and flight.crashed and flight.kind == kind and flight.recipe == recipe
    assert "interrupted" in flight.explanation
    assert any(flight.explanation in line for line in state.summary_lines())
    return flight


@pytest.mark.parametrize("recovery", ["rollback", "resume"])
@pytest.mark.parametrize("point", POINTS["promote"])
def test_a_crashed_promotion_is_explained_and_repaired(lane: SimLane, point: str, recovery: str) -> None:
    with pytest.raises(Killed):
        pm.promote("local-v27", ops=lane, crash_hook=_killer(point))
    assert len(lane.running_on(PORT)) <= 1
    flight = _explained("promote", "local-v27")
    assert flight.commands == ("gb300lane rollback", "gb300lane promote local-v27 --resume")
    assert "restore local-v26" in flight.explanation
    # Nothing else may start while it is unfinished.
    with pytest.raises(StateError, match="interrupted"):
        pm.promote("local-v26", force=True, reason="x", ops=lane)
    if recovery == "rollback":
        plan = pm.rollback(dry_run=True, ops=lane)
        assert (
            plan.message.startswith("plan: promotion of local-v27 interrupted") and "restore local-v26" in plan.message
        )
        assert pm.current_production().in_flight is not None  # a dry run repairs nothing
        report = pm.rollback(ops=lane)
        assert report.ok and report.kind == "recover" and report.production == "local-v26"
        _assert_consistent(lane, "local-v26")
        assert pm.current_production().rollback_pair is None
        assert pm.history()[-1].kind == "recover"
    else:
        report = pm.promote("local-v27", resume=True, ops=lane)
        assert report.ok and report.production == "local-v27"
        _assert_consistent(lane, "local-v27")
        assert pm.current_production().rollback_pair.recipe == "local-v26"
    # The lane is usable again: the next transition runs.
    assert (pm.promote("local-v27", ops=lane) if recovery == "rollback" else pm.rollback(ops=lane)).ok


@pytest.mark.parametrize("point", POINTS["promote_failure"])
def test_a_crash_while_restoring_after_a_failed_smoke_is_repaired(lane: SimLane, point: str) -> None:
    lane.set_recipe("local-v27", fail_smoke=True)
    with pytest.raises(Killed):
        pm.promote("local-v27", ops=lane, crash_hook=_killer(point))
    assert len(lane.running_on(PORT)) <= 1
    _explained("promote", "local-v27")
    assert pm.rollback(ops=lane).ok
    _assert_consistent(lane, "local-v26")


@pytest.mark.parametrize("point", POINTS["rollback"])
def test_a_crashed_rollback_is_completed_by_rollback(lane: SimLane, point: str) -> None:
    assert pm.promote("local-v27", ops=lane).ok
    with pytest.raises(Killed):
        pm.rollback(ops=lane, crash_hook=_killer(point))
    assert len(lane.running_on(PORT)) <= 1
    flight = _explained("rollback", "local-v26")
    assert flight.commands == ("gb300lane rollback",)
    report = pm.rollback(ops=lane)
    assert report.ok and report.production == "local-v26"
    _assert_consistent(lane, "local-v26")
    assert pm.current_production().rollback_pair.recipe == "local-v27"


@pytest.mark.parametrize("point", POINTS["rollback_failure"])
def test_a_crash_while_undoing_a_failed_rollback_is_repaired(lane: SimLane, point: str) -> None:
    assert pm.promote("local-v27", ops=lane).ok
    lane.set_recipe("local-v26", fail_smoke=True)
    with pytest.raises(Killed):
        pm.rollback(ops=lane, crash_hook=_killer(point))
    assert len(lane.running_on(PORT)) <= 1
    _explained("rollback", "local-v26")
    report = pm.rollback(ops=lane)  # the pair still fails smoke, so v27 is put back
    assert not report.ok and "local-v27 restored" in report.message
    _assert_consistent(lane, "local-v27")


def test_a_crashed_first_promotion_can_be_undone(tmp_path: Path) -> None:
    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}}, {})
    with pytest.raises(Killed):
        pm.promote("local-v26", force=True, reason="first", ops=sim, crash_hook=_killer("promote.smoke_candidate"))
    flight = _explained("promote", "local-v26")
    assert "stop local-v26 (there was no production before it)" in flight.explanation
    state = pm.current_production()
    assert state.recipe is None and state.summary_lines()[0] == "production: none recorded"
    report = pm.rollback(ops=sim)
    assert report.ok and report.production is None
    assert sim.running_on(PORT) == []
    assert pm.current_production() is None  # nothing serves, nothing unfinished
    assert pm.history()[-1].kind == "recover"


# -- the real CLI, killed ------------------------------------------------------------------


def _cli(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess[str]:
    """The CLI as a process of its own, for the runs a crash point kills (the others run in this process)."""
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args], env=env, capture_output=True, text=True, timeout=60, **kw
    )


@pytest.fixture
def cli_env(lane: SimLane) -> dict[str, str]:
    env = dict(os.environ)
    env["GB300LANE_LANE_OPS"] = f"sim:{lane.path}"
    env["COLUMNS"] = "400"
    return env


@pytest.mark.parametrize(
    ("point", "recovery"),
    [
        ("promote.stop_production:after", ["rollback"]),
        ("promote.boot_candidate", ["promote", "local-v27", "--resume"]),
        ("promote.record", ["rollback"]),
    ],
)
@pytest.mark.slow
def test_cli_killed_during_promote_recovers_with_one_command(
    lane: SimLane, cli_env: dict[str, str], point: str, recovery: list[str]
) -> None:
    killed = _cli(["promote", "local-v27"], {**cli_env, CRASH_ENV: point})
    assert killed.returncode == 137, killed.stderr
    assert len(lane.running_on(PORT)) <= 1
    _explained("promote", "local-v27")
    blocked = cli("promote", "local-v27", env=cli_env)
    assert blocked.returncode == 1 and "promotion of local-v27 interrupted" in blocked.stderr
    fixed = cli(*recovery, env=cli_env)
    assert fixed.returncode == 0, fixed.stderr
    _assert_consistent(lane, "local-v26" if recovery == ["rollback"] else "local-v27")


@pytest.mark.parametrize("point", ["rollback.start_pair"])
def test_cli_killed_during_rollback_recovers_with_rollback(lane: SimLane, cli_env: dict[str, str], point: str) -> None:
    assert cli("promote", "local-v27", env=cli_env).returncode == 0
    killed = _cli(["rollback"], {**cli_env, CRASH_ENV: point})
    assert killed.returncode == 137, killed.stderr
    _explained("rollback", "local-v26")
    fixed = cli("rollback", env=cli_env)
    assert fixed.returncode == 0 and "rolled back to local-v26" in fixed.stdout
    _assert_consistent(lane, "local-v26")


def test_sigkill_mid_boot_is_explained_and_reverted(lane: SimLane, cli_env: dict[str, str]) -> None:
    lane.set_recipe("local-v27", boot_seconds=30)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gb300lane", "promote", "local-v27"],
        env=cli_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if ["boot", "lane-local-v27"] in lane.operations():
                break
            time.sleep(0.05)
        flight = pm.current_production().in_flight
        assert flight is not None and not flight.crashed  # the lock is held: in progress, not crashed
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    flight = _explained("promote", "local-v27")
    assert "while booting local-v27" in flight.explanation
    lane.set_recipe("local-v27", boot_seconds=0)
    fixed = cli("rollback", env=cli_env)
    assert fixed.returncode == 0, fixed.stderr
    _assert_consistent(lane, "local-v26")


# -- repairs that wait for a booting instance ------------------------------------------------


def _kill_when(proc: subprocess.Popen[bytes], lane: SimLane, op: list[str]) -> None:
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and op not in lane.operations():
            time.sleep(0.05)
        assert op in lane.operations(), f"never saw {op}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def _release_when(lane: SimLane, op: list[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and op not in lane.operations():
        time.sleep(0.05)
    lane.release(op[1])


@pytest.mark.slow
def test_a_rollback_killed_while_the_pair_boots_is_completed_by_waiting(lane: SimLane, cli_env: dict[str, str]) -> None:
    assert cli("promote", "local-v27", env=cli_env).returncode == 0
    lane.set_recipe("local-v26", hold=True)  # the pair boots until the test releases it
    proc = subprocess.Popen(
        [sys.executable, "-m", "gb300lane", "rollback"],
        env=cli_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _kill_when(proc, lane, ["start", "lane-local-v26"])
    _explained("rollback", "local-v26")
    # The pair is still booting. The repair waits for it instead of failing its smoke on a 503.
    repair = subprocess.Popen(
        [sys.executable, "-m", "gb300lane", "rollback"],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert repair.stderr is not None
        waiting = ""
        while "waiting for lane-local-v26 to become ready" not in waiting:
            line = repair.stderr.readline()
            assert line, f"the repair never said it waits: {waiting}"
            waiting += line
        lane.release("lane-local-v26")
        out, err = repair.communicate(timeout=120)
    finally:
        if repair.poll() is None:
            repair.kill()
            repair.wait(timeout=10)
    assert repair.returncode == 0, waiting + err
    assert "rolled back to local-v26" in out
    assert ["await", "lane-local-v26"] in lane.operations()
    _assert_consistent(lane, "local-v26")


def test_a_resumed_promotion_waits_for_its_candidate_and_runs_the_boot_checks_it_skipped(
    lane: SimLane, cli_env: dict[str, str]
) -> None:
    lane.set_recipe("local-v27", hold=True)  # the kill lands mid-boot however loaded the machine
    proc = subprocess.Popen(
        [sys.executable, "-m", "gb300lane", "promote", "local-v27"],
        env=cli_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _kill_when(proc, lane, ["boot", "lane-local-v27"])
    # The candidate's boot ends once the resumed promotion waits for it.
    releaser = threading.Thread(target=_release_when, args=(lane, ["await", "lane-local-v27"]), daemon=True)
    releaser.start()
    fixed = cli("promote", "local-v27", "--resume", env=cli_env)
    releaser.join(timeout=60)
    assert fixed.returncode == 0, fixed.stderr
    ops = lane.operations()
    # waited for the candidate (with its boot checks) before its smoke, never a smoke on a booting instance
    assert ops.index(["await", "lane-local-v27"]) < ops.index(["smoke", "local-v27"])
    _assert_consistent(lane, "local-v27")
