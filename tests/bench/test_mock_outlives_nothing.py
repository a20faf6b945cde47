"""The self-test's mock server ends with the process that started it, even one killed with SIGKILL (a killed
`card run` leaves no mock server serving)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

HOLD_A_MOCK = textwrap.dedent("""
    from gb300lane.bench.selftest import MockTiming, mock_process
    import time
    with mock_process(MockTiming(ttft_s=0.01, itl_s=0.001, events=4, events_per_write=1)) as url:
        print(url, flush=True)
        time.sleep(120)
""")


@pytest.mark.slow
def test_the_mock_server_ends_when_its_starter_is_killed() -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_A_MOCK], stdout=subprocess.PIPE, text=True)
    mock = None
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("http://")
        (mock,) = psutil.Process(holder.pid).children()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        try:
            mock.wait(timeout=10)
        except psutil.TimeoutExpired:
            raise AssertionError("the mock server outlived the process that started it") from None
    finally:
        if mock is not None and mock.is_running():
            mock.kill()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
