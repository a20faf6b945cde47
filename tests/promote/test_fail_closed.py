"""Fail closed on the ledger: a ledger that cannot be read protects production; it is never 'nothing recorded'.

A real lane (process runtime, embedded engine) with production local-v27 and
the rollback pair local-v26; then the ledger is damaged three ways (garbage
pages, 0 bytes, unreadable) and every command that could touch production or
the pair must refuse, naming the ledger and the fix, while `status` exits 1.
A read-only state directory is read (status, history) but refuses
transitions without advising to move the healthy ledger aside.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.cli.main import app
from gb300lane.errors import LedgerError
from gb300lane.promote.ledger import Ledger, ledger_path
from gb300lane.promote.view import protected_instances
from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair
from gb300lane.testing.simlane import SimLane


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def production(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """local-v27 in production and local-v26 kept as the pair, booted for real on free ports."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    base = quick_local_v26(name="fc{port}", forced_tokens=8)
    port = int(base["lane"]["port"])
    write_quick_pair(recipes, base)
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(recipes))
    monkeypatch.delenv("GB300LANE_LANE_OPS", raising=False)
    assert pm.promote("local-v26", force=True, reason="first production").ok
    assert pm.promote("local-v27", force=True, reason="the change").ok
    names = {"production": f"fc{port}-local-v27", "pair": f"fc{port}-local-v26"}
    try:
        yield names
    finally:
        lane.down(all=True)


def _states() -> dict[str, str]:
    return {i.name: i.state for i in lane.list_instances()}


def _damage(how: str) -> None:
    path = ledger_path()
    data = bytearray(path.read_bytes())
    if how == "garbage pages":
        page = 4096
        assert len(data) >= 5 * page, len(data)
        for n in (1, 2, 3):  # three pages past the header: the tables' b-trees
            data[n * page : (n + 1) * page] = os.urandom(page)
        path.write_bytes(bytes(data))
    elif how == "0 bytes":
        path.write_bytes(b"")
    else:
        raise AssertionError(how)


@pytest.mark.slow
@pytest.mark.parametrize(("how", "kind", "says"), [
    ("garbage pages", "corrupt", "the promotion ledger is corrupt"),
    ("0 bytes", "empty", "the promotion ledger is empty (0 bytes)"),
])  # fmt: skip
def test_a_damaged_ledger_refuses_everything_that_could_touch_production(
    production: dict[str, str], how: str, kind: str, says: str
) -> None:
    prod, pair = production["production"], production["pair"]
    assert _states() == {prod: "running", pair: "stopped"}
    backup = ledger_path().read_bytes()
    _damage(how)
    path = str(ledger_path())

    with pytest.raises(LedgerError) as exc:
        pm.current_production()
    assert exc.value.kind == kind and exc.value.path == path
    assert protected_instances().unknown is not None

    code, out = _cli("status")
    assert code == 1 and path in out and says in out
    assert "production: unknown" in out and "production: none recorded" not in out
    assert prod in out and "unknown" in out  # the lane's facts are still shown, roles as unknown
    code, out = _cli("status", "--json")
    assert code == 1 and says in out

    for args in (["down", "local-v27"], ["down", "--all"], ["down", "local-v26"]):
        code, out = _cli(*args)
        assert code == 1 and says in out and "refusing to take down" in out and "--force" in out, (args, out)
    assert _states() == {prod: "running", pair: "stopped"}  # nothing was taken down

    for args in (["promote", "local-v26", "--force", "--reason", "x"], ["rollback"], ["prune"], ["history"]):
        code, out = _cli(*args)
        assert code == 1 and says in out and "Traceback" not in out, (args, out)
    code, out = _cli("up", "local-v26")  # would replace the kept pair
    assert code == 1 and says in out
    assert _states() == {prod: "running", pair: "stopped"}

    ledger_path().write_bytes(backup)  # the fix the message names: restore it
    code, out = _cli("status")
    assert code == 0 and "production: local-v27" in out and "rollback pair: local-v26" in out
    code, out = _cli("down", "--all")
    assert code == 0 and f"kept {prod} (production" in out and f"kept {pair} (rollback pair" in out


def _as_nobody(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user for whom file modes apply.

    Root ignores file modes through its capabilities: as root, the CLI runs
    with an empty capability set, so the modes apply to it as the owner while
    the Python environment (perhaps below a directory only root can enter)
    stays reachable.
    """
    cmd = [sys.executable, "-m", "gb300lane", *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root needs setpriv (util-linux) to test file permissions without capabilities")
        cmd = [setpriv, "--bounding-set=-all", "--inh-caps=-all", *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd="/")


@pytest.fixture
def shared_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, str]]]:
    """A state directory another user can reach, with production local-v27 and the pair local-v26 (simulated lane)."""
    top = Path(tempfile.mkdtemp(prefix="gb300lane-ro-", dir="/tmp"))
    top.chmod(0o755)
    state = top / "state"
    monkeypatch.setenv("GB300LANE_STATE_DIR", str(state))
    sim = SimLane.create(top / "lane.json", {"local-v26": {}, "local-v27": {}})
    assert pm.promote("local-v26", force=True, reason="first", ops=sim).ok
    assert pm.promote("local-v27", force=True, reason="second", ops=sim).ok
    env = {**os.environ, "GB300LANE_STATE_DIR": str(state), "GB300LANE_LANE_OPS": f"sim:{top / 'lane.json'}",
           "COLUMNS": "400", "HOME": str(top)}  # fmt: skip
    try:
        yield state, env
    finally:
        for p in [top, *top.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(top)


@pytest.mark.slow
def test_a_read_only_state_directory_is_read_but_refuses_transitions(shared_state: tuple[Path, dict[str, str]]) -> None:
    state, env = shared_state
    state.chmod(0o555)
    status = _as_nobody(["status"], env)
    text = " ".join((status.stdout + status.stderr).split())
    assert status.returncode == 1, text
    assert "production: local-v27" in text and "rollback pair: local-v26" in text  # read, not "none recorded"
    assert "can be read but not written" in text and "chmod u+w" in text and "mv " not in text
    history = _as_nobody(["history"], env)
    assert history.returncode == 0 and "local-v26 -> local-v27" in history.stdout, history.stderr
    for args in (["rollback"], ["promote", "local-v26", "--force", "--reason", "x"], ["prune"]):
        refused = _as_nobody(args, env)
        text = " ".join(refused.stderr.split())
        assert refused.returncode == 1 and "Traceback" not in text, (args, text)
        assert (
            "can be read but not written" in text
            or "cannot create the state directory" in text
            or "cannot write the lock holder" in text
        ), (args, text)
        assert "corrupt" not in text and "mv " not in text, (args, text)
    state.chmod(0o755)
    with Ledger() as ledger:
        assert ledger.production() is not None and ledger.production().recipe == "local-v27"  # untouched


@pytest.mark.slow
def test_an_unreadable_ledger_names_the_permissions(shared_state: tuple[Path, dict[str, str]]) -> None:
    _, env = shared_state
    ledger_path().chmod(0o000)
    status = _as_nobody(["status"], env)
    text = " ".join(status.stderr.split())
    assert status.returncode == 1 and "the promotion ledger cannot be read" in text and "ls -ld" in text, text
    for args in (["rollback"], ["history"]):
        refused = _as_nobody(args, env)
        assert refused.returncode == 1 and "the promotion ledger cannot be read" in refused.stderr, refused.stderr
    ledger_path().chmod(0o644)
    assert _as_nobody(["status"], env).returncode == 0
