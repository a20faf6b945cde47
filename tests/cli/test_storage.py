"""A full or read-only disk: every command says so in one line (file, cause, fix), never a traceback.

The state directory is a small tmpfs in a private mount namespace (`unshare -m`), filled to the last byte,
then seen through a read-only bind mount. A real lane (process runtime, embedded engine) runs on it for
`smoke` and `down`; promote, rollback and prune run on a simulated lane whose file lives elsewhere.
A promotion whose smoke cannot be recorded puts production back (in process, the smoke's write refused).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gb300lane import paths
from gb300lane import promote as pm
from gb300lane.errors import StorageError
from gb300lane.promote.models import SmokeInfo
from gb300lane.testing.free_ports import free_port
from gb300lane.testing.simlane import SimLane

COMMANDS = {
    "smoke": ["smoke", "t-disk"],
    "rollback": ["rollback"],
    "promote": ["promote", "local-v26", "--force", "--reason", "x"],
    "prune": ["prune"],
    "down": ["down", "t-disk"],
    "status": ["status"],
    "history": ["history"],
}
#: Commands that only read may succeed on a full or read-only disk; the others must refuse in one line.
READERS = {"status", "history"}

SCRIPT = r"""
set -u
mount -t tmpfs -o size=24m tmpfs "$STATE"
sim() { GB300LANE_LANE_OPS="sim:$SIM" "$@"; }
sim "$PY" -m gb300lane promote local-v26 --force --reason first >/dev/null
sim "$PY" -m gb300lane promote local-v27 >/dev/null
"$PY" -m gb300lane up t-disk --dark --runtime process >/dev/null || exit 3
run() {  # run NAME [sim] ARGS...
    name=$1; shift
    if [ "$1" = sim ]; then shift; GB300LANE_LANE_OPS="sim:$SIM" "$PY" -m gb300lane "$@"; else "$PY" -m gb300lane "$@"; fi \
        >"$OUT/$PHASE-$name.out" 2>"$OUT/$PHASE-$name.err"
    echo $? >"$OUT/$PHASE-$name.rc"
}
suite() {
    run smoke smoke t-disk
    run rollback sim rollback
    run promote sim promote local-v26 --force --reason x
    run prune sim prune
    run down down t-disk
    run status status
    run history history
}
dd if=/dev/zero of="$STATE/fill" bs=64k >/dev/null 2>&1
PHASE=full suite
rm -f "$STATE/fill"
mkdir -p "$RO" && mount --bind "$STATE" "$RO" && mount -o remount,bind,ro "$RO"
GB300LANE_STATE_DIR="$RO" PHASE=readonly suite
GB300LANE_STATE_DIR="$STATE" "$PY" -m gb300lane down --all --force >/dev/null 2>&1
exit 0
"""


@pytest.mark.mounts
@pytest.mark.slow
def test_full_and_read_only_disks_give_one_line_errors(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for f in paths.shipped("recipes").glob("*.yaml"):
        (recipes / f.name).write_text(f.read_text())
    (recipes / "t-disk.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "t-disk", "extends": "local-v27", "description": "disk test",
        "lane": {"port": free_port()}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0},
    }))  # fmt: skip
    sim = SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}},
        {"local-v27": {"verdict": "PASS", "reference": "card x verdict 1"}},
    )
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "state").mkdir()
    env = {**os.environ, "STATE": str(tmp_path / "state"), "RO": str(tmp_path / "ro"), "SIM": str(sim.path),
           "OUT": str(out), "PY": sys.executable, "GB300LANE_STATE_DIR": str(tmp_path / "state"),
           "GB300LANE_RECIPES_DIR": str(recipes), "GB300LANE_RESULTS_DIR": str(tmp_path / "results"),
           "COLUMNS": "400"}  # fmt: skip
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = {}
    for phase in ("full", "readonly"):
        for name in COMMANDS:
            rc = int((out / f"{phase}-{name}.rc").read_text())
            err = (out / f"{phase}-{name}.err").read_text()
            seen[f"{phase} {name}"] = (rc, err.strip())
            assert "Traceback" not in err, f"{phase} {name}: {err}"
            assert "OSError" not in err and "Errno" not in err.replace("[Errno 111]", ""), f"{phase} {name}: {err}"
            if name not in READERS:
                assert rc == 1, f"{phase} {name}: exit {rc}: {err}"
                lines = [line for line in err.splitlines() if line.strip()]
                assert len(lines) == 1 and lines[0].startswith("error: "), f"{phase} {name}: {err}"
    print(json.dumps(seen, indent=1))
    assert "No space left on device" in seen["full smoke"][1] and "free space" in seen["full smoke"][1]
    assert "Read-only file system" in seen["readonly rollback"][1] and "remount" in seen["readonly rollback"][1]


# -- a promotion that cannot record its smoke --------------------------------------------------


class _DiskFullSmoke:
    """A simulated lane whose smoke of one recipe cannot write its report."""

    def __init__(self, sim: SimLane, recipe: str) -> None:
        self.sim, self.recipe = sim, recipe

    def __getattr__(self, name: str):
        return getattr(self.sim, name)

    def smoke(self, recipe: str, endpoint: str) -> SmokeInfo:
        if recipe == self.recipe:
            raise StorageError("/state/smoke/x-report.json: cannot write (No space left on device); free space")
        return self.sim.smoke(recipe, endpoint)


def test_a_promotion_that_cannot_record_its_smoke_restores_production(tmp_path: Path) -> None:
    sim = SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}},
        {"local-v27": {"verdict": "PASS", "reference": "card x verdict 1"}},
    )
    assert pm.promote("local-v26", force=True, reason="first", ops=sim).ok
    report = pm.promote("local-v27", ops=_DiskFullSmoke(sim, "local-v27"))
    assert not report.ok and report.production == "local-v26"
    assert "smoke could not be run or recorded" in report.message and "No space left" in report.message
    state = pm.current_production()
    assert state.in_flight is None and state.recipe == "local-v26"
    assert sim.running_on(30106) == [state.instance]


def test_a_transition_refuses_to_start_without_free_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from gb300lane import fsio

    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}}, {})
    real = shutil.disk_usage
    monkeypatch.setattr(fsio.shutil, "disk_usage", lambda p: real(p)._replace(free=fsio.MIN_FREE_BYTES - 1))
    with pytest.raises(StorageError, match=r"MiB free where it writes, 16 MiB needed.*nothing was changed"):
        pm.promote("local-v26", force=True, reason="first", ops=sim)
    assert sim.operations() == [] and pm.history() == []
