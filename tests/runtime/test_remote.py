"""Remote hosts without a Docker engine: the box's facts parsed from recorded text, ssh's failures as one line
naming the host and the fix, an unreachable box, and GPUs the inventory says a host does not have."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane.errors import BootError, LaneError, RuntimeUnavailable
from gb300lane.lane.facts import parse_proc_net_tcp
from gb300lane.lane.inventory import placement
from gb300lane.placement import Placement, SshAccess
from gb300lane.runtime import get_runtime, ssh

# /proc/net/tcp then /proc/net/tcp6 of a box, read together: a dark lane on 127.0.0.1:30106, sshd on 0.0.0.0:22,
# a dual-stack server on [::]:30107, and an established connection (not a listener).
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:759A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0100007F:759A 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when
   0: 00000000000000000000000000000000:759B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000
"""


def test_a_boxs_listening_sockets_from_its_proc_net_tcp() -> None:
    found = {(x.address, x.port, x.loopback_only) for x in parse_proc_net_tcp(PROC_NET_TCP)}
    assert found == {("127.0.0.1", 30106, True), ("0.0.0.0", 22, False), ("::", 30107, False)}


ACCESS = SshAccess(user="ops", host="station-a", port=2222, identity="/keys/id", known_hosts="/keys/known")


@pytest.mark.parametrize(("stderr", "fix"), [
    ("ops@station-a: Permission denied (publickey).", "the key was refused: put the key the box accepts in hosts.box.ssh_key"),
    ("Host key verification failed.", "add it to hosts.box.known_hosts"),
    ("ssh: Could not resolve hostname station-a: Name or service not known", "fix hosts.box.docker"),
    ("ssh: connect to host station-a port 2222: Connection refused", "the box does not answer"),
])  # fmt: skip
def test_ssh_failures_name_the_host_and_the_fix(stderr: str, fix: str) -> None:
    text = ssh._fix("box", ACCESS, stderr)
    assert text.startswith("host box (ops@station-a): ") and fix in text and "\n" not in text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _place(**over: object) -> Placement:
    base: dict[str, object] = dict(
        host="box", lane="l1", docker=f"ssh://root@127.0.0.1:{_closed_port()}", address="127.0.0.1",
        ssh=SshAccess(user="root", host="127.0.0.1", port=_closed_port()), inventory="lanes.yaml", selector="box",
    )  # fmt: skip
    base.update(over)
    return Placement.model_validate(base)


def test_an_unreachable_box_is_one_line_naming_the_host() -> None:
    with lane.on_lane(_place()), pytest.raises(RuntimeUnavailable) as err:
        get_runtime("docker")
    text = str(err.value)
    assert text.startswith("host box (root@127.0.0.1): ") and "Connection refused" in text and "\n" not in text
    assert ssh.open_forwards() == []


def test_the_process_runtime_is_refused_on_a_remote_box() -> None:
    with lane.on_lane(_place()), pytest.raises(LaneError, match="process runtime runs on this machine only"):
        get_runtime("process")


def test_a_host_without_the_recipes_gpus(tmp_path: Path, recipes: Path) -> None:
    inv = tmp_path / "lanes.yaml"
    inv.write_text(yaml.safe_dump({"schema_version": 1, "hosts": {"gpu-box": {
        "docker": "local", "gpus": [{"product": "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition", "ids": ["0"]}],
        "lanes": [{"name": "g", "runtime": "process", "port": _closed_port(), "sidecar_port": _closed_port()}],
    }}}))  # fmt: skip
    with lane.on_lane(placement("gpu-box", path=inv)), pytest.raises(BootError) as err:
        lane.plan_boot("v26")
    text = str(err.value)
    assert "host gpu-box has no GPU 1 for the sidecar container" in text
    assert (
        "host gpu-box: GPU 0 is NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition and the recipe's main needs NVIDIA-GB300"
        in text
    )


_KILLED_CLIENT = """
import os, signal, sys
from gb300lane.placement import Placement, SshAccess
from gb300lane.runtime import ssh
place = Placement(host="box", lane="l1", docker="ssh://root@127.0.0.1", address="127.0.0.1", inventory="-",
                  selector="box", ssh=SshAccess(user="root", host="127.0.0.1", port=int(sys.argv[1]),
                                                identity=sys.argv[2], known_hosts=sys.argv[3]))
ssh.forward_port(place, int(sys.argv[4]))
print(ssh._OPEN[("box", "tcp:" + sys.argv[4])][0].proc.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_forward_ends_with_a_killed_tool(ssh_server, tmp_path: Path) -> None:
    """kill -9 of the tool (a crash mid-rollout) leaves no `ssh -N` forward behind."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        done = subprocess.run(
            [sys.executable, "-c", _KILLED_CLIENT, str(ssh_server.port), str(ssh_server.key),
             str(ssh_server.known_hosts), str(held.getsockname()[1])],
            capture_output=True, text=True, timeout=60, env={**os.environ},
        )  # fmt: skip
    assert done.returncode == -9, done.stderr
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"ssh forward {pid} outlived the killed tool"
        time.sleep(0.1)


def test_a_tcp_engine_with_tls_that_does_not_answer(tmp_path: Path) -> None:
    """tcp:// is spoken only with the inventory's TLS files (relative to the inventory); a closed port is one line."""
    import subprocess

    certs = tmp_path / "certs"
    certs.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(certs / "key.pem"),
                    "-out", str(certs / "cert.pem"), "-days", "1", "-subj", "/CN=gb300lane-test"],
                   check=True, capture_output=True)  # fmt: skip
    port = _closed_port()
    inv = tmp_path / "lanes.yaml"
    inv.write_text(yaml.safe_dump({"schema_version": 1, "hosts": {"tls-box": {
        "docker": f"tcp://127.0.0.1:{port}", "tls": {"ca": "certs/cert.pem", "cert": "certs/cert.pem", "key": "certs/key.pem"},
        "lanes": [{"name": "t", "runtime": "docker"}]}}}))  # fmt: skip
    place = placement("tls-box", path=inv)
    assert place.tls is not None and place.tls.key == str(certs / "key.pem")
    with lane.on_lane(place), pytest.raises(RuntimeUnavailable) as err:
        get_runtime("docker")
    text = str(err.value)
    assert text.startswith(f"host tls-box: the Docker engine at tcp://127.0.0.1:{port} does not answer")
    assert f"fix hosts.tls-box.docker in {inv}" in text and "\n" not in text
