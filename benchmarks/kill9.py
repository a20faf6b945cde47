"""The kill -9 suite: the tool killed at any instant while it starts engines; each case counted refused,
repaired or lost.

Every case runs in a state directory of its own, on the process runtime with the embedded engine (time scale 0).
A case is

- repaired when, after the kill, one command (`gb300lane down INSTANCE`, or none where nothing needs it) ends
  every engine process the killed command started, `gb300lane status` explains the lane without a traceback,
  and booting the recipe again on the same port works;
- refused when that command refuses, names what is wrong and the fix, and the fix it names ends them;
- lost when an engine process is left serving that no command of the tool finds (or the rerun fails on its
  port). The suite exits 1 when any case is lost.

The cases: `gb300lane up` killed with SIGKILL at several instants (before its record, while creating, between
the engine's start and its pid's record, while waiting for readiness, after the checks); the process runtime
killed the instant the engine's `Popen` returns (before its pid is written); the client self-test killed while
its mock server runs.

Prints the table and writes benchmarks/results/kill9.json.

    python benchmarks/kill9.py
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "kill9.json"
UP_DELAYS_S = (0.5, 1.5, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 12.0)


def _env(base: Path) -> dict[str, str]:
    return {**os.environ, "GB300LANE_STATE_DIR": str(base / "state"), "GB300LANE_RESULTS_DIR": str(base / "results"),
            "GB300LANE_CONFIG_DIR": str(base / "config"), "GB300LANE_RECIPES_DIR": str(base / "recipes"),
            "VLLM_CACHE_ROOT": str(base / "cache"), "COLUMNS": "300"}  # fmt: skip


def _recipes(base: Path) -> None:
    from gb300lane.paths import shipped
    from gb300lane.testing.free_ports import free_port

    folder = base / "recipes"
    folder.mkdir(parents=True)
    for name in ("local-v26", "local-v27"):
        (folder / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    (folder / "k9.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "k9", "extends": "local-v27", "description": "kill -9 suite",
        "lane": {"port": free_port()}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0},
    }))  # fmt: skip


def _engines(state: Path) -> list[int]:
    """Live processes writing a log under `state` (every engine and sidecar the process runtime starts)."""
    import psutil

    out = []
    for proc in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{proc.pid}/fd/1").startswith(str(state)) and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return out


def _cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _settle(state: Path, before: list[int] | None = None) -> None:
    deadline = time.monotonic() + 10
    while _engines(state) and time.monotonic() < deadline:
        time.sleep(0.05)


def _judge(base: Path, env: dict[str, str], repair: list[str] | None) -> tuple[str, str]:
    state = base / "state"
    status = _cli(env, "status")
    if "Traceback" in status.stderr:
        return "lost", "status: traceback"
    said = ""
    if repair is not None:
        res = _cli(env, *repair)
        said = " ".join((res.stdout + res.stderr).split())
        _settle(state)
        if res.returncode != 0 and _engines(state):
            if "--force" not in said:
                return "lost", f"{' '.join(repair)} refused without a fix: {said[:160]}"
            _cli(env, *repair, "--force")
            _settle(state)
            if _engines(state):
                return "lost", f"engines {_engines(state)} left after the named fix"
            return "refused", said[:120]
    _settle(state)
    left = _engines(state)
    if left:
        return "lost", f"engine processes {left} left serving after `{' '.join(repair or [])}`"
    rerun = _cli(env, "up", "k9", "--dark", "--runtime", "process")
    ok = rerun.returncode == 0
    _cli(env, "down", "--all", "--yes")
    _settle(state)
    if not ok:
        return "lost", "the rerun failed: " + " ".join(rerun.stderr.split())[:160]
    return "repaired", (said or "nothing needed")[:120]


def case_up_killed(delay_s: float) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="kill9-") as tmp:
        base = Path(tmp)
        _recipes(base)
        env = _env(base)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gb300lane", "up", "k9", "--dark", "--runtime", "process"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay_s)
        finished = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        outcome, detail = _judge(base, env, ["down", "k9"])
        if finished:
            detail = "(up had finished) " + detail
        for pid in _engines(base / "state"):
            os.kill(pid, signal.SIGKILL)
        return outcome, detail


PROCESS_START_KILLED = textwrap.dedent("""
    import os, subprocess
    from gb300lane import lane
    real = subprocess.Popen
    def popen_then_die(*a, **k):
        p = real(*a, **k)
        if "gb300lane.engine" in " ".join(map(str, a[0])) and "serve" in a[0]:
            os._exit(137)
        return p
    subprocess.Popen = popen_then_die
    lane.up("k9", dark=True, runtime="process")
""")


def case_process_start_killed() -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="kill9-") as tmp:
        base = Path(tmp)
        _recipes(base)
        env = _env(base)
        done = subprocess.run(
            [sys.executable, "-c", PROCESS_START_KILLED], env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 137:
            return "lost", f"the kill point was not reached (exit {done.returncode}): {done.stderr[-200:]}"
        outcome, detail = _judge(base, env, ["down", "k9"])
        for pid in _engines(base / "state"):
            os.kill(pid, signal.SIGKILL)
        return outcome, detail


MOCK_HELD = textwrap.dedent("""
    import time
    from gb300lane.bench.selftest import MockTiming, mock_process
    with mock_process(MockTiming(ttft_s=0.01, itl_s=0.001, events=4, events_per_write=1)) as url:
        print(url, flush=True)
        time.sleep(120)
""")


def case_selftest_killed() -> tuple[str, str]:
    import psutil

    holder = subprocess.Popen([sys.executable, "-c", MOCK_HELD], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    holder.stdout.readline()
    children = psutil.Process(holder.pid).children()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    gone, alive = psutil.wait_procs(children, timeout=10)
    for proc in alive:
        proc.kill()
    if alive:
        return "lost", f"the mock server {[p.pid for p in alive]} outlived the killed self-test"
    return "repaired", "the mock server ended with it (no command needed)"


def main() -> int:
    rows = []
    for delay in UP_DELAYS_S:
        outcome, detail = case_up_killed(delay)
        rows.append({"case": f"up killed at {delay:.2f} s", "outcome": outcome, "detail": detail})
        print(f"  {rows[-1]['case']}: {outcome}: {detail}", flush=True)
    outcome, detail = case_process_start_killed()
    rows.append(
        {"case": "killed between the engine's start and its pid's record", "outcome": outcome, "detail": detail}
    )
    print(f"  {rows[-1]['case']}: {outcome}: {detail}", flush=True)
    outcome, detail = case_selftest_killed()
    rows.append({"case": "client self-test killed while its mock server runs", "outcome": outcome, "detail": detail})
    print(f"  {rows[-1]['case']}: {outcome}: {detail}", flush=True)
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("refused", "repaired", "lost")}
    print("kill -9 suite: the tool killed while it starts engines (process runtime, embedded engine)")
    print(f"{'case':<58} {'outcome':<9} detail")
    for r in rows:
        print(f"{r['case']:<58} {r['outcome']:<9} {r['detail'][:90]}")
    print(f"refused {counts['refused']}, repaired {counts['repaired']}, lost {counts['lost']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cases": rows,
                "counts": counts,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {OUT}")
    return 1 if counts["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
