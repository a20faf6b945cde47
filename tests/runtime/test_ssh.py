"""A lane on a remote Docker host, reached over SSH: an sshd on a loopback port fronts this machine's engine.

`up --host ssh-test --dark` boots through the forwarded engine socket; the
dark lane binds the box's loopback and the tool reaches it through an SSH
forward it opens and closes; `smoke`, `status --fleet --json`, `down`, and a
promotion and rollback all go the same way. A wrong key is one line naming
the host and the fix.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane.errors import RuntimeUnavailable
from gb300lane.lane.inventory import placement
from gb300lane.runtime import get_runtime, ssh
from gb300lane.testing.free_ports import free_port
from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair

import sshd

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _free_port() -> int:
    return free_port()  # below the ephemeral range: an ssh forward's own port can never take it


def write_recipes(dest: Path, runtime: str = "docker") -> None:
    write_quick_pair(dest, quick_local_v26(runtime=runtime, own_ports=False))


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args],
        capture_output=True,
        text=True,
        timeout=420,
        env={**os.environ, "COLUMNS": "400", **env},
    )


def test_a_lane_on_the_ssh_host(tmp_path: Path, ssh_server: sshd.SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    write_recipes(recipes)
    port, sidecar = _free_port(), _free_port()
    inv = tmp_path / "lanes.yaml"
    wrong = tmp_path / "wrong_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    inv.write_text(yaml.safe_dump({"schema_version": 1, "hosts": {
        "ssh-test": sshd.inventory_host(ssh_server, [{"name": "remote", "runtime": "docker", "port": port,
                                                       "sidecar_port": sidecar}]),
        "wrong-key": {**sshd.inventory_host(ssh_server, [{"name": "nope", "runtime": "docker"}]),
                      "ssh_key": str(wrong)},
    }}, sort_keys=False))  # fmt: skip
    env = {"GB300LANE_RECIPES_DIR": str(recipes), "GB300LANE_INVENTORY": str(inv)}
    monkeypatch.setenv("GB300LANE_INVENTORY", str(inv))
    try:
        # The engine answers through the forwarded socket, and only while the lane's scope lasts.
        with lane.on_lane(placement("ssh-test")):
            assert get_runtime("docker").client.ping()
            assert any("docker.sock" in f and "ssh-test" in f for f in ssh.open_forwards())
        assert ssh.open_forwards() == []
        with lane.on_lane(placement("wrong-key")), pytest.raises(RuntimeUnavailable) as err:
            get_runtime("docker")
        text = str(err.value)
        assert (
            "\n" not in text
            and text.startswith("host wrong-key (root@127.0.0.1)")
            and "hosts.wrong-key.ssh_key" in text
        )

        up = cli("up", "local-v27", "--host", "ssh-test", "--dark", "--json", env=env)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        report = json.loads(up.stdout)
        checks = {c["name"]: c["status"] for c in report["checks"]}
        assert report["endpoint"] == f"http://127.0.0.1:{port}" and report["instance"] == "remote-local-v27"
        assert checks["dark_bind"] == "pass" and checks["foreign_clients"] == "pass", checks
        # The dark lane is reached through a forward to the box's loopback: another local port, the same server.
        with lane.on_lane(placement("ssh-test")):
            reached = ssh.reach(f"http://127.0.0.1:{port}/health")
            assert reached != f"http://127.0.0.1:{port}/health"
            assert lane.status().instances[0].health == "healthy"
        smoke = cli("smoke", "local-v27", "--host", "ssh-test", env=env)
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
        st = cli("status", "--fleet", "--json", env=env)
        rows = {r["lane"]: r for r in json.loads(st.stdout)["lanes"]}
        assert rows["remote"]["health"] == "healthy" and rows["remote"]["docker"] == ssh_server.url, st.stdout
        assert "hosts.wrong-key.ssh_key" in (rows["nope"]["error"] or ""), rows["nope"]
        down = cli("down", "local-v27", "--host", "ssh-test", env=env)
        assert down.returncode == 0 and "remote-local-v27" in down.stdout, down.stdout + down.stderr

        # A promotion and a rollback through the same path.
        first = cli("promote", "local-v26", "--host", "ssh-test", "--force", "--reason", "first production", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        second = cli("promote", "local-v27", "--host", "ssh-test", "--force", "--reason", "block verification", env=env)
        assert second.returncode == 0, second.stdout + second.stderr
        back = cli("rollback", "--host", "ssh-test", env=env)
        assert back.returncode == 0 and "rolled back to local-v26" in back.stdout, back.stdout + back.stderr
        hist = json.loads(cli("history", "--host", "ssh-test", "--json", env=env).stdout)
        assert [e["kind"] for e in hist] == ["promote", "promote", "rollback"]
        rows = {r["lane"]: r for r in json.loads(cli("status", "--fleet", "--json", env=env).stdout)["lanes"]}
        assert rows["remote"]["production"] == "local-v26" and rows["remote"]["rollback_pair"] == "local-v27"
        assert rows["remote"]["health"] == "healthy"
    finally:
        cli("down", "--all", "--force", "--host", "ssh-test", env=env)


def test_an_image_goes_to_the_box_with_docker_save_and_load(ssh_server: sshd.SshServer, tmp_path: Path) -> None:
    """What `ensure_engine_image` does for a box without the image: this engine's `docker save`, the box's `load`."""
    from gb300lane.placement import placed
    from gb300lane.runtime.image import ENGINE_IMAGE, ensure_engine_image

    inv = tmp_path / "lanes.yaml"
    inv.write_text(yaml.safe_dump({"schema_version": 1, "hosts": {
        "ssh-test": sshd.inventory_host(ssh_server, [{"name": "remote", "runtime": "docker"}])}}))  # fmt: skip
    tag = f"gb300lane-fleet-send:{os.getpid()}"
    with placed(None):
        ensure_engine_image()
        local = get_runtime("docker")
        local.client.images.get(ENGINE_IMAGE).tag(tag)
        stream = local.save_image(tag)
        first = next(stream)  # the engine has begun writing the archive
        local.client.images.remove(tag)
        assert local.image_present(tag) is False
    try:
        with lane.on_lane(placement("ssh-test", path=inv)):
            remote = get_runtime("docker")
            assert tag in remote.load_image(itertools.chain([first], stream))
            assert remote.image_present(tag) is True
    finally:
        with placed(None):
            get_runtime("docker").client.images.remove(tag)
