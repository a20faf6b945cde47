"""Engines the process runtime starts stay its own: a kill -9 between the engine's start and the pid's record
leaves a record that `inspect`, `stop` and `remove` act on, so nothing is left serving unowned.

The creating process is a real one, ended with `os._exit(137)` (no cleanup, no `finally`) the instant the
engine's `Popen` returns, before the runtime writes the pid.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gb300lane.runtime.process import ProcessRuntime

CREATE_AND_DIE = textwrap.dedent("""
    import os, subprocess, sys
    from types import SimpleNamespace
    from gb300lane.runtime.process import ProcessRuntime

    real = subprocess.Popen
    def popen_then_die(*a, **k):
        real(*a, **k)
        os._exit(137)
    rt = ProcessRuntime()
    rt.create(SimpleNamespace(
        role="main", name="t-k-main", image="", argv=("python3", "-c", "import time; time.sleep(120)"), env={},
        network_mode="host", device_ids=(), ipc_mode=None, shm_size=None, ulimits={}, volumes=(),
        labels={"gb300lane.lane": "t", "gb300lane.instance": "t-k", "gb300lane.role": "main"}, port=1))
    subprocess.Popen = popen_then_die
    rt.start("t-k-main")
""")


def _writers_of(log: Path) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{proc.pid}/fd/1") == str(log) and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (OSError, psutil.Error):
            continue
    return out


def test_a_kill_between_start_and_record_leaves_an_engine_the_runtime_still_owns() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CREATE_AND_DIE], capture_output=True, text=True, timeout=60, env=os.environ.copy()
    )
    assert done.returncode == 137, done.stderr
    rt = ProcessRuntime()
    log = rt.root / "t-k-main.log"
    deadline = time.monotonic() + 10
    while not _writers_of(log) and time.monotonic() < deadline:
        time.sleep(0.02)
    (engine,) = _writers_of(log)
    try:
        info = ProcessRuntime().inspect("t-k-main")
        assert info.state == "running" and info.pid == engine.pid, info
        ProcessRuntime().remove("t-k-main")
        engine.wait(timeout=10) if engine.ppid() == os.getpid() else None
        deadline = time.monotonic() + 10
        while _writers_of(log) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _writers_of(log) == [], "the engine outlived its record"
    finally:
        for proc in _writers_of(log):
            proc.kill()


ORPHAN = (
    "import subprocess, sys, time\n"
    'code = \'import subprocess, sys; p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], '
    'start_new_session=True); print("orphan", p.pid, flush=True)\'\n'
    "subprocess.run([sys.executable, '-c', code])\n"
    "time.sleep(120)\n"
)


@pytest.mark.slow
def test_down_ends_a_setsid_child_that_left_the_tree() -> None:
    """A child in a session of its own whose parent exited (adopted by init: no longer a descendant) still writes
    the container's log: stop finds it by that and ends it with the rest."""
    from types import SimpleNamespace

    rt = ProcessRuntime()
    rt.create(SimpleNamespace(
        role="main", name="t-o-main", image="", argv=("python3", "-c", ORPHAN), env={}, network_mode="host",
        device_ids=(), ipc_mode=None, shm_size=None, ulimits={}, volumes=(),
        labels={"gb300lane.lane": "t", "gb300lane.instance": "t-o", "gb300lane.role": "main"}, port=1,
    ))  # fmt: skip
    rt.start("t-o-main")
    deadline = time.monotonic() + 20
    while "orphan " not in rt.logs("t-o-main") and time.monotonic() < deadline:
        time.sleep(0.02)
    orphan = psutil.Process(int(rt.logs("t-o-main").split("orphan ")[1].split()[0]))
    try:
        main = rt.inspect("t-o-main").pid
        assert orphan.ppid() != main and os.getpgid(orphan.pid) != main, (
            orphan.ppid(),
            main,
        )  # out of the tree and group
        rt.remove("t-o-main")
        try:
            orphan.wait(timeout=10)
        except psutil.TimeoutExpired:
            raise AssertionError("a setsid child outlived down") from None
    finally:
        if orphan.is_running():
            orphan.kill()
