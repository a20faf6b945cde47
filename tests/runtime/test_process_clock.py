"""Liveness that survives the clock: a running process stays running when the wall clock steps.

psutil's `create_time()` is the boot time as the wall clock sees it now plus the start in ticks, so a clock step
(NTP, a resume, `date -s`) moves it. The process runtime identifies a process by its start in clock ticks since
boot instead, and a record that has only a wall-clock start (written before) is checked against the process's
command line: it is never declared dead while the process it started still runs.
"""

from __future__ import annotations

import json
import os
import signal
import time
from types import SimpleNamespace

import psutil
import pytest

from gb300lane.runtime.process import _CHILDREN, ProcessRuntime

SCRIPT = "import time; print('up', flush=True); time.sleep(60)"


def _spec(name: str) -> SimpleNamespace:
    return SimpleNamespace(
        role="main", name=name, image="", argv=("python3", "-c", SCRIPT, "--port", "1"), env={"GREETING": "x"},
        network_mode="host", device_ids=(), ipc_mode=None, shm_size=None, ulimits={}, volumes=(),
        labels={"gb300lane.lane": "t", "gb300lane.instance": "t-a", "gb300lane.role": "main"}, port=1,
    )  # fmt: skip


@pytest.fixture
def started():  # type: ignore[no-untyped-def]
    """A running container whose in-process handle is forgotten, as a later CLI invocation sees it."""
    rt = ProcessRuntime()
    rt.create(_spec("t-a-main"))
    pid = rt.start("t-a-main").pid
    assert pid is not None
    child = _CHILDREN.pop(pid)
    yield rt, pid
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait(timeout=10)
    for info in rt.list():
        rt.remove(info.name)


def _edit(rt: ProcessRuntime, **changes: object) -> None:
    path = rt.root / "t-a-main.json"
    rec = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            rec.pop(key, None)
        else:
            rec[key] = value(rec[key]) if callable(value) else value
    path.write_text(json.dumps(rec))


@pytest.mark.parametrize("step", [1.0, -1.0, 3600.0])
def test_a_clock_step_on_the_record_leaves_the_process_running(started, step: float) -> None:  # type: ignore[no-untyped-def]
    rt, pid = started
    _edit(rt, pid_created=lambda t: t + step)
    info = ProcessRuntime().inspect("t-a-main")
    assert info.state == "running" and info.pid == pid, info.detail


def test_a_clock_step_seen_by_psutil_leaves_the_process_running(started, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    rt, pid = started
    real = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + 1.0)
    info = ProcessRuntime().inspect("t-a-main")
    assert info.state == "running" and info.pid == pid, info.detail
    # and stop still reaches it: the group and the process are ended, not left serving
    assert ProcessRuntime().stop("t-a-main", timeout_s=5).state == "exited"
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline and psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ):
        time.sleep(0.02)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_an_old_record_with_only_a_wall_clock_start_is_checked_by_its_command_line(started) -> None:  # type: ignore[no-untyped-def]
    """A record with no tick start is ambiguous after a step: the process's command line decides, not the clock."""
    rt, pid = started
    _edit(rt, pid_start_ticks=None, pid_boot_id=None, pid_created=lambda t: t + 1.0)
    assert ProcessRuntime().inspect("t-a-main").state == "running"
    # the same ambiguous record pointing at a process that is not the one it started (this test's own) is gone
    me = psutil.Process()
    _edit(rt, pid=me.pid, pid_created=me.create_time() + 1.0)
    info = ProcessRuntime().inspect("t-a-main")
    assert info.state == "exited" and me.is_running()


def test_a_record_names_the_start_in_clock_ticks(started) -> None:  # type: ignore[no-untyped-def]
    rt, pid = started
    rec = json.loads((rt.root / "t-a-main.json").read_text())
    if os.path.exists(f"/proc/{pid}/stat"):
        stat = open(f"/proc/{pid}/stat").read()
        assert rec["pid_start_ticks"] == int(stat[stat.rindex(")") + 2 :].split()[19])
