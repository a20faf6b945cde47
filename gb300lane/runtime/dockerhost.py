"""The local Docker engine without the SDK: where it listens, whether it answers, and whether to look.

`gb300lane status` (and `down`, `logs`) look for leftover containers, those
labelled with this state directory that no instance record names. Importing
the `docker` SDK to ask costs more than the rest of `status` together, so the
lane asks it only when there can be something to find:

- the engine is pinged over its unix socket with the standard library; an
  engine that does not answer has nothing to list (the note is the SDK's);
- `DockerRuntime.create` writes a new *epoch* into the state directory before
  it creates any container, and a listing that found no container with this
  state directory's label records the epoch it started under. While that
  record matches the current epoch and engine, no container of this state
  directory can exist on the engine, so none is looked for.

A crash at any point leaves a container only after a new epoch was written,
so the next `status` asks the engine and reports it. Engines reached over TCP,
SSH or TLS, and remote hosts, always go through the SDK.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path

from gb300lane import paths, placement
from gb300lane.errors import StorageError
from gb300lane.fsio import atomic_write

DEFAULT_HOST = "unix:///var/run/docker.sock"

#: In the state directory: the epoch `create` writes, and the last listing that found none of our containers.
EPOCH_FILE = "docker-epoch"
NONE_FILE = "docker-none.json"


def docker_host() -> str:
    """The engine the SDK's `from_env` talks to on this machine."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def unavailable_message(detail: str) -> str:
    """Why this machine's engine cannot be used, and the fix (the same words with or without the SDK)."""
    return (
        f"the Docker engine does not answer at DOCKER_HOST={docker_host()} ({detail}); "
        "start it (systemctl start docker), point DOCKER_HOST at a running engine, or pass --runtime process"
    )


def local_socket() -> Path | None:
    """The unix socket of this machine's engine; None when the lane's engine is reached another way."""
    place = placement.current()
    if place is not None and place.remote:
        return None
    host = docker_host()
    if not host.startswith("unix://") or not host.removeprefix("unix://").startswith("/"):
        return None
    return Path(host.removeprefix("unix://"))


def ping(sock: Path, *, timeout_s: float = 30.0) -> str | None:
    """None when the engine at `sock` answers `GET /_ping` with 200; else why not (`Type: detail`)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(sock))
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            head = b""
            while b"\r\n" not in head and len(head) < 1024:
                chunk = conn.recv(1024)
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    status = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status) < 2 or not status[0].startswith(b"HTTP/") or status[1] != b"200":
        return f"unexpected answer to /_ping: {head[:80]!r}"
    return None


def _state_file(name: str) -> Path:
    return paths.state_dir() / name


def epoch() -> str | None:
    """The epoch the last container creation wrote (None: this state directory never created one)."""
    try:
        return _state_file(EPOCH_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def new_epoch() -> None:
    """Called before a Docker container is created: any record of 'none of ours on the engine' stops holding."""
    atomic_write(_state_file(EPOCH_FILE), secrets.token_hex(8) + "\n")


def _key(seen_epoch: str | None, sock: Path) -> dict[str, str | None]:
    from gb300lane.runtime.base import state_label

    return {"epoch": seen_epoch, "engine": str(sock), "state": state_label()}


def record_none(seen_epoch: str | None, sock: Path) -> None:
    """A listing started under `seen_epoch` found no container of this state directory on the engine at `sock`.

    Best effort: a state directory that cannot be written only means the next listing asks again.
    """
    try:
        atomic_write(_state_file(NONE_FILE), json.dumps(_key(seen_epoch, sock), sort_keys=True) + "\n")
    except (StorageError, OSError):
        pass


def known_none(sock: Path) -> bool:
    """True while the last listing's 'none of ours' still holds: same engine, same state, no creation since."""
    try:
        recorded = json.loads(_state_file(NONE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded == _key(epoch(), sock)
