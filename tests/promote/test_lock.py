"""The transition lock cannot be deleted from under a running transition, and a live holder is never 'interrupted'.

A real CLI promotion runs in the background on a simulated lane whose boot
lasts until the test releases it; meanwhile the test deletes `promote.lock`,
asks `status` and tries a `rollback` (in this process: the lock is held by
another).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gb300lane import paths
from gb300lane import promote as pm
from gb300lane.errors import StateError
from gb300lane.promote.ledger import Ledger
from gb300lane.promote.lock import HOLDER_FILE, holder
from gb300lane.testing.simlane import SimLane

from clirun import Ran, cli


@pytest.fixture
def lane(tmp_path: Path) -> SimLane:
    sim = SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}},
        {"local-v27": {"verdict": "PASS", "reference": "card BR1 verdict 2", "rescored": True}},
    )
    assert pm.promote("local-v26", force=True, reason="first production", ops=sim).ok
    return sim


@pytest.fixture
def env(lane: SimLane) -> dict[str, str]:
    return {**os.environ, "GB300LANE_LANE_OPS": f"sim:{lane.path}", "COLUMNS": "400"}


def _cli(args: list[str], env: dict[str, str]) -> Ran:
    return cli(*args, env=env)


def _wait_for(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _booting(lane: SimLane) -> bool:
    return ["boot", "lane-local-v27"] in lane.operations()


@pytest.mark.slow
def test_deleting_the_holder_file_neither_interrupts_nor_unlocks(lane: SimLane, env: dict[str, str]) -> None:
    lane.set_recipe("local-v27", hold=True)  # its boot lasts until released below
    running = subprocess.Popen([sys.executable, "-m", "gb300lane", "promote", "local-v27"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_for(lambda: _booting(lane))
        holder_file = paths.state_dir() / HOLDER_FILE
        assert f"pid {running.pid} (promote local-v27" in holder_file.read_text()
        holder_file.unlink()
        state = json.loads(_cli(["status", "--json"], env).stdout)
        flight = state["production"]["in_flight"]
        assert flight["kind"] == "promote" and flight["crashed"] is False, flight
        assert "in progress" in flight["explanation"] and flight["commands"] == []
        raced = _cli(["rollback"], env)
        assert raced.returncode == 1 and "the lane is locked by another process" in raced.stderr, raced.stderr
        assert "Traceback" not in raced.stderr
        lane.release("lane-local-v27")  # the candidate's boot ends only now, however slow the commands above were
        out, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait(timeout=10)
    assert running.returncode == 0, err
    assert "promoted local-v27" in out
    assert pm.current_production().recipe == "local-v27" and pm.current_production().in_flight is None
    assert lane.running_on(30106) == ["lane-local-v27"]


def test_a_live_process_without_the_lock_is_not_called_interrupted(lane: SimLane, env: dict[str, str]) -> None:
    # A transition begun by a process that is alive but holds no lock (as if the lock were defeated).
    begin = (
        "import time; from gb300lane.promote.ledger import Ledger\n"
        "from gb300lane.promote.models import RollbackPlan\n"
        "with Ledger() as l:\n"
        "    l.begin('local-v26', None, RollbackPlan(target=l.production(), previous=None, port=30106))\n"
        "print('begun', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", begin], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "begun"
        assert holder() is None
        flight = pm.current_production().in_flight
        assert flight is not None and not flight.crashed and flight.pid == proc.pid
        with pytest.raises(StateError, match=rf"begun by pid {proc.pid} is still running"):
            pm.rollback(ops=lane)
        refused = _cli(["rollback"], env)
        assert refused.returncode == 1 and "is still running" in refused.stderr
    finally:
        proc.kill()
        proc.wait(timeout=10)
    flight = pm.current_production().in_flight
    assert flight is not None and flight.crashed  # now it really was interrupted


def test_a_holder_file_that_is_a_directory_is_a_clear_error(lane: SimLane, env: dict[str, str]) -> None:
    (paths.state_dir() / HOLDER_FILE).mkdir()
    refused = _cli(["promote", "local-v27"], env)
    assert refused.returncode == 1, refused.stderr
    assert "promote.lock is a directory" in refused.stderr and "rmdir" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) <= 2
    status = _cli(["status"], env)
    assert status.returncode == 0 and "production: local-v26" in status.stdout
    (paths.state_dir() / HOLDER_FILE).rmdir()
    assert _cli(["promote", "local-v27"], env).returncode == 0
    with Ledger() as ledger:
        assert ledger.production().recipe == "local-v27"
