"""A wall-clock step on a running production: `status`, `rollback` and `down` still act on the live engines.

A real lane (process runtime, embedded engine at time scale 0): local-v27 in production over local-v26 (kept).
Then the clock steps by a second, as NTP, a resume or `date -s` do: every process record's wall-clock start
moves by 1 s, or psutil's `create_time()` reads 1 s later. The commands run as a later invocation would (no
in-process handle on the engines). Production still reads as running, `rollback` stops the live local-v27 and
restarts local-v26, and `down --all --force` ends every engine process: none is left serving unmanaged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gb300lane import paths
from gb300lane.runtime.process import _CHILDREN

from clirun import cli
from production import in_production

pytestmark = pytest.mark.slow


@pytest.fixture
def promoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    with in_production(tmp_path / "recipes", monkeypatch, ["local-v26", "local-v27"]) as port:
        yield port


def _step_the_clock(monkeypatch: pytest.MonkeyPatch, seconds: float, seen_by: str) -> None:
    """The wall clock steps between the start and now: the records' starts read `seconds` off, or psutil's."""
    if seen_by == "psutil":
        real = psutil.Process.create_time
        monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + seconds)
        return
    for path in (paths.state_dir() / "runtime" / "process").glob("*.json"):
        rec = json.loads(path.read_text())
        for key in ("pid_created", "started_at"):
            if rec.get(key) is not None:
                rec[key] += seconds
        path.write_text(json.dumps(rec))


def _engine_pids() -> dict[str, int]:
    out = {}
    for path in (paths.state_dir() / "runtime" / "process").glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("pid"):
            out[rec["name"]] = rec["pid"]
    return out


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("seen_by", ["records", "psutil"])
def test_status_rollback_and_down_act_on_the_live_engines_after_a_clock_step(
    promoted: int, monkeypatch: pytest.MonkeyPatch, seen_by: str
) -> None:
    before = _engine_pids()
    assert before and all(_running(p) for p in before.values())
    handles = dict(_CHILDREN)
    _CHILDREN.clear()  # a later invocation has no handle on the engines: only the records and the kernel
    try:
        _step_the_clock(monkeypatch, 1.0, seen_by)

        st = cli("status", "--json")
        assert st.returncode == 0, st.stderr
        seen = json.loads(st.stdout)
        states = {i["info"]["name"]: i["info"]["state"] for i in seen["instances"]}
        assert states == {"local-v27": "running", "local-v26": "stopped"}, states
        assert seen["production"]["recipe"] == "local-v27"
        text = " ".join(cli("status").stdout.split())
        print(text)
        assert "stopped" not in text.split("production")[1][:80], text

        rb = cli("rollback")
        print(" ".join(rb.stdout.split()), " ".join(rb.stderr.split()))
        assert rb.returncode == 0, rb.stdout + rb.stderr
        assert not any(_running(p) for n, p in before.items() if n.startswith("local-v27")), "v27 still serves"
        seen = json.loads(cli("status", "--json").stdout)
        assert seen["production"]["recipe"] == "local-v26"
        assert {i["info"]["name"]: i["info"]["state"] for i in seen["instances"]} == {
            "local-v26": "running",
            "local-v27": "stopped",
        }

        after = _engine_pids()
        dn = cli("down", "--all", "--force")
        print(" ".join(dn.stdout.split()))
        assert dn.returncode == 0, dn.stderr
        left = [p for p in {*before.values(), *after.values()} if _running(p)]
        assert left == [], f"engines left serving with nothing managing them: {left}"
    finally:
        for child in handles.values():
            try:
                child.wait(timeout=10)
            except Exception:  # noqa: BLE001 - reaping only
                pass
