"""The hosts inventory (lanes.yaml), per-lane state, `--host` and `status --fleet` on this machine's process runtime.

Two lanes of one inventory, each on its own host entry and ports, boot the same
recipe side by side; each keeps its own instances and ledger, and
`status --fleet --json` lists both with their health.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gb300lane import lane, paths, placement
from gb300lane.errors import InventoryError
from gb300lane.lane.inventory import load_inventory, placements
from gb300lane.lane.inventory import placement as resolve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False) if not isinstance(data, str) else data)
    return path


def _inventory(tmp_path: Path, **hosts: dict) -> Path:
    return _write(tmp_path / "lanes.yaml", {"schema_version": 1, "hosts": hosts})


BAD = [
    ({"docker": "local", "lanes": [{"name": "a", "colour": "red"}]}, "hosts.h.lanes.0.colour: unknown key"),
    ({"docker": "http://box", "lanes": [{"name": "a"}]}, "is not a Docker host URL"),
    ({"docker": "tcp://box:2376", "lanes": [{"name": "a", "runtime": "docker"}]}, "needs tls"),
    ({"docker": "local", "ssh_key": "k", "lanes": [{"name": "a"}]}, "ssh_key and known_hosts go with an ssh://"),
    (
        {"docker": "ssh://root@box", "lanes": [{"name": "a", "runtime": "process"}]},
        "process runtime runs on this machine",
    ),
    (
        {"docker": "local", "lanes": [{"name": "a", "port": 9000}, {"name": "b", "sidecar_port": 9000}]},
        "give each lane of a host its own ports",
    ),
    ({"docker": "local", "lanes": [{"name": "../x"}]}, "is not a lane name"),
    ({"docker": "local", "lanes": []}, "hosts.h.lanes"),
]


@pytest.mark.parametrize(("host", "message"), BAD)
def test_a_bad_inventory_is_one_line_naming_the_file_and_key(tmp_path: Path, host: dict, message: str) -> None:
    path = _inventory(tmp_path, h=host)
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    text = str(err.value)
    assert str(path) in text and message in text and "\n" not in text


def test_duplicate_keys_lane_names_and_a_missing_file(tmp_path: Path) -> None:
    dup = _write(
        tmp_path / "dup.yaml",
        "schema_version: 1\nhosts:\n  a: {docker: local, lanes: [{name: x}]}\n"
        "  a: {docker: local, lanes: [{name: y}]}\n",
    )
    with pytest.raises(InventoryError, match="duplicate key"):
        load_inventory(dup)
    twice = _inventory(
        tmp_path, a={"docker": "local", "lanes": [{"name": "x"}]}, b={"docker": "local", "lanes": [{"name": "x"}]}
    )
    with pytest.raises(InventoryError, match="lane x is named on hosts a and b"):
        load_inventory(twice)
    with pytest.raises(InventoryError, match="no hosts inventory there.*GB300LANE_INVENTORY"):
        load_inventory(tmp_path / "none.yaml")


def test_host_and_lane_selectors(tmp_path: Path) -> None:
    path = _inventory(
        tmp_path,
        one={"docker": "local", "lanes": [{"name": "solo", "runtime": "process", "port": 31000}]},
        box={
            "docker": "ssh://ops@station:2222",
            "ssh_key": "keys/id",
            "gpus": [{"product": "NVIDIA-GB300", "ids": [0]}],
            "lanes": [{"name": "b1", "runtime": "docker"}, {"name": "b2", "runtime": "docker", "port": 30200}],
        },
    )
    solo = resolve("one", path=path)
    assert (solo.host, solo.lane, solo.port, solo.remote, solo.address, solo.scope_args) == (
        "one",
        "solo",
        31000,
        False,
        "127.0.0.1",
        "--host one",
    )
    b2 = resolve("box/b2", path=path)
    assert b2.remote and b2.ssh is not None and (b2.ssh.user, b2.ssh.host, b2.ssh.port) == ("ops", "station", 2222)
    assert b2.ssh.identity == str((tmp_path / "keys" / "id").resolve())
    assert b2.address == "station" and b2.gpu_ids == ("0",) and b2.scope_args == "--host box/b2"
    with pytest.raises(InventoryError, match=r"host box carries 2 lanes \(b1, b2\); name one as --host box/LANE"):
        resolve("box", path=path)
    with pytest.raises(InventoryError, match="no host named nope; the inventory has one, box"):
        resolve("nope", path=path)
    assert [p.lane for p in placements(path, lanes=["b2", "solo"])] == ["b2", "solo"]
    with pytest.raises(InventoryError, match="no lane named zz"):
        placements(path, lanes=["zz"])


def test_each_lane_has_its_own_state_folder(tmp_path: Path) -> None:
    path = _inventory(
        tmp_path, a={"docker": "local", "lanes": [{"name": "la"}]}, b={"docker": "local", "lanes": [{"name": "lb"}]}
    )
    root = paths.state_dir()
    with lane.on_lane(resolve("a", path=path)):
        a = paths.state_dir()
        assert paths.state_root() == root
    with lane.on_lane(resolve("b", path=path)):
        b = paths.state_dir()
    assert a == root / "hosts" / "a" / "la" and b == root / "hosts" / "b" / "lb"
    assert placement.current() is None and paths.state_dir() == root


def _recipes(dest: Path) -> None:
    from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair

    write_quick_pair(dest, quick_local_v26(runtime="process", own_ports=False))


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "400", **env},
    )


@pytest.mark.slow
def test_two_lanes_side_by_side_and_status_fleet(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    _recipes(recipes)
    inv = _inventory(
        tmp_path,
        **{
            "box-a": {
                "docker": "local",
                "lanes": [{"name": "a", "runtime": "process", "port": _free_port(), "sidecar_port": _free_port()}],
            },
            "box-b": {
                "docker": "local",
                "lanes": [{"name": "b", "runtime": "process", "port": _free_port(), "sidecar_port": _free_port()}],
            },
        },
    )
    env = {"GB300LANE_RECIPES_DIR": str(recipes), "GB300LANE_INVENTORY": str(inv)}
    try:
        for host in ("box-a", "box-b"):
            up = _cli("up", "local-v26", "--host", host, "--json", env=env)
            assert up.returncode == 0, up.stderr[-2000:]
            report = json.loads(up.stdout)
            assert report["instance"] == f"{host[-1]}-local-v26"
        forced = _cli("promote", "local-v26", "--host", "box-a", "--force", "--reason", "first production", env=env)
        assert forced.returncode == 0, forced.stdout + forced.stderr
        st = _cli("status", "--fleet", "--json", env=env)
        assert st.returncode == 0, st.stdout + st.stderr
        view = json.loads(st.stdout)
        rows = {r["lane"]: r for r in view["lanes"]}
        assert rows["a"]["production"] == "local-v26" and rows["a"]["health"] == "healthy"
        assert rows["a"]["last_verdict"] == "forced: first production"
        assert rows["b"]["production"] is None and rows["b"]["health"] == "healthy"
        assert [i["name"] for i in rows["b"]["instances"]] == ["b-local-v26"]
        # Each lane sees only its own instances; this machine's own lane sees none of them.
        only_b = _cli("status", "--host", "box-b", "--json", env=env)
        assert [i["info"]["name"] for i in json.loads(only_b.stdout)["instances"]] == ["b-local-v26"]
        assert json.loads(_cli("status", "--json", env=env).stdout)["instances"] == []
        table = _cli("status", "--fleet", env=env)
        assert "box-a" in table.stdout and "forced: first production" in table.stdout
    finally:
        for host in ("box-a", "box-b"):
            _cli("down", "--all", "--force", "--host", host, env=env)
