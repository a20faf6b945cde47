"""A fleet rollout over three real lanes: this machine's process runtime, its Docker engine, and the SSH host.

Each lane serves local-v26 on its own ports. Rolling out local-v27 with the
second lane taking traffic from a client the tool does not know (its smoke
gates see foreign traffic and fail) leaves all three lanes on local-v26, and
each lane's history says why. A rollout killed on its second lane is
explained by `status --fleet` and repaired by `rollback --fleet`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import requests
import yaml
from runtime.test_ssh import cli, write_recipes

from gb300lane.testing.free_ports import free_port

import sshd

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _free_port() -> int:
    return free_port()  # below the ephemeral range: an ssh forward's own port can never take it


def _hammer(port: int, stop: threading.Event) -> None:
    """A client the tool does not know: completions sent to the lane until told to stop."""
    body = {"model": "deepseek-v4.1-flash", "prompt": "hello", "max_tokens": 4}
    while not stop.is_set():
        try:
            requests.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=2)
        except requests.RequestException:
            stop.wait(0.05)


def _lanes(env: dict[str, str]) -> dict[str, dict]:
    st = cli("status", "--fleet", "--json", env=env)
    return {r["lane"]: r for r in json.loads(st.stdout)["lanes"]} | {"_rollout": json.loads(st.stdout)["rollout"],
                                                                      "_rc": st.returncode}  # fmt: skip


def test_a_failing_second_lane_leaves_the_fleet_on_the_old_recipe(tmp_path: Path, ssh_server: sshd.SshServer) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    write_recipes(recipes, runtime="process")
    ports = {name: (_free_port(), _free_port()) for name in "abc"}

    def entry(name: str, runtime: str) -> dict:
        return {"name": name, "runtime": runtime, "port": ports[name][0], "sidecar_port": ports[name][1]}

    inv = tmp_path / "lanes.yaml"
    inv.write_text(yaml.safe_dump({"schema_version": 1, "hosts": {
        "here": {"docker": "local", "lanes": [entry("a", "process")]},
        "engine": {"docker": "local", "lanes": [entry("b", "docker")]},
        "ssh-test": sshd.inventory_host(ssh_server, [entry("c", "docker")]),
    }}, sort_keys=False))  # fmt: skip
    env = {"GB300LANE_RECIPES_DIR": str(recipes), "GB300LANE_INVENTORY": str(inv)}
    hosts = {"a": "here", "b": "engine", "c": "ssh-test"}
    try:
        for name, host in hosts.items():
            first = cli("promote", "local-v26", "--host", host, "--force", "--reason", "first production", env=env)
            assert first.returncode == 0, first.stdout + first.stderr

        stop = threading.Event()
        client = threading.Thread(target=_hammer, args=(ports["b"][0], stop), daemon=True)
        client.start()
        try:
            out = cli("promote", "local-v27", "--lanes", "a,b,c", "--force", "--reason", "block verification", env=env)
        finally:
            stop.set()
            client.join(timeout=10)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "lane b (host engine) failed" in out.stdout and "every lane is on its old recipe" in out.stdout, (
            out.stdout
        )
        rows = _lanes(env)
        assert rows["_rc"] == 0 and rows["_rollout"] is None
        assert {n: rows[n]["production"] for n in "abc"} == {"a": "local-v26", "b": "local-v26", "c": "local-v26"}
        assert all(rows[n]["health"] == "healthy" for n in "abc"), rows
        why_b = json.loads(cli("history", "--host", "engine", "--json", env=env).stdout)[-1]
        assert why_b["kind"] == "promote_failed" and "foreign traffic" in why_b["reason"], why_b
        why_a = json.loads(cli("history", "--host", "here", "--json", env=env).stdout)[-1]
        assert why_a["kind"] == "rollback" and "lane b (host engine) failed" in why_a["reason"], why_a
        assert [e["kind"] for e in json.loads(cli("history", "--host", "ssh-test", "--json", env=env).stdout)] == [
            "promote"
        ]

        # Killed while booting the second lane's candidate: explained, then repaired by one command.
        killed = cli(
            "promote",
            "local-v27",
            "--lanes",
            "a,c",
            "--force",
            "--reason",
            "again",
            env={**env, "GB300LANE_CRASH_AT": "c:promote.boot_candidate:after"},
        )
        assert killed.returncode == 137, killed.stdout + killed.stderr
        rows = _lanes(env)
        assert rows["_rc"] == 1 and rows["_rollout"]["crashed"], rows["_rollout"]
        assert "interrupted while moving lane c" in rows["_rollout"]["explanation"]
        assert "gb300lane rollback --fleet" in rows["_rollout"]["explanation"]
        assert rows["a"]["production"] == "local-v27" and rows["c"]["in_flight"], rows["c"]
        table = cli("status", "--fleet", env=env)
        assert "rollback --fleet" in table.stdout, table.stdout
        repaired = cli("rollback", "--fleet", env=env)
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        rows = _lanes(env)
        assert rows["_rc"] == 0 and rows["_rollout"] is None
        assert {n: rows[n]["production"] for n in "abc"} == {"a": "local-v26", "b": "local-v26", "c": "local-v26"}
        assert all(rows[n]["in_flight"] is None and rows[n]["health"] == "healthy" for n in "abc"), rows
    finally:
        for host in hosts.values():
            cli("down", "--all", "--force", "--host", host, env=env)
