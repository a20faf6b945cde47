"""The local Docker engine without the SDK: the socket ping, and when `status` may skip looking for leftovers.

The ping and the 'none of ours' record are tested against a stand-in engine (a unix socket answering
`/_ping`); that a leftover from a crash is still reported once the record exists needs a real engine
(tests/runtime/test_docker.py).
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gb300lane import lane
from gb300lane.runtime import dockerhost

from fakes.dockerd import ping_only_engine


class _NotHttp(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.rfile.readline()
        self.wfile.write(b"SSH-2.0-OpenSSH_9.2\r\n")


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, list[str]]]:
    """A stand-in engine on a unix socket that answers `/_ping` (and records every request line)."""
    sock = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    with ping_only_engine(sock) as requests:
        yield sock, requests


def test_the_local_socket_comes_from_docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert dockerhost.local_socket() == Path("/var/run/docker.sock")
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/user/1000/docker.sock")
    assert dockerhost.local_socket() == Path("/run/user/1000/docker.sock")
    for other in ("tcp://127.0.0.1:2375", "ssh://box", "unix://relative.sock"):
        monkeypatch.setenv("DOCKER_HOST", other)
        assert dockerhost.local_socket() is None, other  # the SDK's business


def test_ping_answers_and_says_why_not(engine: tuple[Path, list[str]], tmp_path: Path) -> None:
    sock, requests = engine
    assert dockerhost.ping(sock) is None
    assert requests == ["GET /_ping HTTP/1.0\r\n"]
    why = dockerhost.ping(tmp_path / "dead.sock")
    assert why is not None and why.startswith(("FileNotFoundError", "ConnectionRefusedError"))
    not_docker = tmp_path / "not-docker.sock"
    with socketserver.UnixStreamServer(str(not_docker), _NotHttp) as other:
        threading.Thread(target=other.handle_request, daemon=True).start()
        assert "unexpected answer" in str(dockerhost.ping(not_docker, timeout_s=5))


def test_the_none_record_holds_until_a_container_is_created(tmp_path: Path) -> None:
    sock = tmp_path / "docker.sock"
    assert not dockerhost.known_none(sock)  # never looked
    dockerhost.record_none(dockerhost.epoch(), sock)
    assert dockerhost.known_none(sock)
    assert not dockerhost.known_none(tmp_path / "other.sock")  # another engine
    seen = dockerhost.epoch()
    dockerhost.new_epoch()  # a creation began
    assert not dockerhost.known_none(sock)
    dockerhost.record_none(seen, sock)  # a listing that started before the creation
    assert not dockerhost.known_none(sock)
    dockerhost.record_none(dockerhost.epoch(), sock)
    assert dockerhost.known_none(sock)


def test_status_skips_the_engine_only_while_the_record_holds(engine: tuple[Path, list[str]]) -> None:
    sock, requests = engine
    dockerhost.record_none(dockerhost.epoch(), sock)
    st = lane.status()
    assert st.runtimes["docker"] == "reachable" and st.instances == ()
    assert requests == ["GET /_ping HTTP/1.0\r\n"]  # pinged, not asked for containers
    dockerhost.new_epoch()
    st = lane.status()  # now the SDK asks (and this stand-in is no real engine)
    assert len(requests) > 2 and st.runtimes["docker"] != "reachable"


def test_an_engine_that_does_not_answer_is_reported_without_the_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = tmp_path / "dead.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")
    note = lane.status().runtimes["docker"]
    assert f"does not answer at DOCKER_HOST=unix://{dead}" in note and "--runtime process" in note
