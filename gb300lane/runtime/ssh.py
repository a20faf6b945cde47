"""Reaching another box over SSH with the `ssh` program: commands, port forwards, and the Docker socket.

A remote host in the inventory (`ssh://user@box[:port]`) is reached with the
operator's own OpenSSH client, its key and known-hosts file, in batch mode (no
prompt ever waits for a password). Three things go through it:

- a command on the box (`run`): the lane's facts there, listening sockets and
  GPUs, are read on the box, never on this machine;
- the box's Docker engine socket, forwarded to a socket in a private temp
  folder (`docker_socket`), which the Docker SDK then talks to: the image
  builds, container creates and logs are the box's engine's own;
- a port on the box's loopback (`reach`): a dark lane binds 127.0.0.1 there,
  so the tool reaches it through `ssh -N -L`, opened when first needed and
  closed when the command's lane scope ends (`close_all`).

The Docker SDK's own `ssh://` transport runs a bare `ssh -l USER -p PORT`
(no key, no known-hosts file) and needs paramiko even then; forwarding the
socket with the ssh the inventory describes keeps the key and host-key check
the operator chose. Failures become one line naming the host and the fix.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from gb300lane import placement as placement_mod
from gb300lane.errors import RuntimeUnavailable
from gb300lane.placement import Placement, SshAccess

#: Seconds ssh may take to connect and authenticate.
CONNECT_TIMEOUT_S = 10
_PR_SET_PDEATHSIG = 1
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def ssh_argv(access: SshAccess, *options: str) -> list[str]:
    """The ssh command line for `access`, batch mode, with `options` before the destination."""
    exe = shutil.which("ssh")
    if exe is None:
        raise RuntimeUnavailable("the ssh program is not installed; install openssh-client to reach remote hosts")
    argv = [
        exe, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "ServerAliveInterval=15",
        "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR",
    ]  # fmt: skip
    if access.identity:
        argv += ["-i", os.path.expanduser(access.identity), "-o", "IdentitiesOnly=yes"]
    if access.known_hosts:
        argv += [
            "-o",
            f"UserKnownHostsFile={os.path.expanduser(access.known_hosts)}",
            "-o",
            "StrictHostKeyChecking=yes",
        ]
    if access.port:
        argv += ["-p", str(access.port)]
    if access.user:
        argv += ["-l", access.user]
    return [*argv, *options, access.host]


def _fix(host: str, access: SshAccess, stderr: str) -> str:
    """One line: what ssh said for `host`, and what to do about it."""
    said = " ".join(stderr.split())[-300:] or "ssh exited without a message"
    where = f"ssh {access.destination}" + (f" -p {access.port}" if access.port else "")
    low = stderr.lower()
    if "permission denied" in low or "too many authentication failures" in low:
        fix = (
            f"the key was refused: put the key the box accepts in hosts.{host}.ssh_key "
            f"(now {access.identity or 'the ssh agent and ~/.ssh'}) and check `{where} true`"
        )
    elif "host key verification failed" in low or "remote host identification has changed" in low:
        fix = (
            f"the box's host key is not the one known: add it to hosts.{host}.known_hosts "
            f"(now {access.known_hosts or '~/.ssh/known_hosts'}), e.g. ssh-keyscan, after checking it"
        )
    elif "could not resolve" in low or "name or service not known" in low:
        fix = f"the host name does not resolve: fix hosts.{host}.docker in the inventory"
    elif "no such file" in low and "sock" in low or "connect to" in low and ".sock" in low:
        fix = f"the Docker engine's socket is not there: start Docker on the box or set hosts.{host}.docker_socket"
    elif "docker: not found" in low or "command not found" in low:
        fix = "a command the tool needs is missing on the box; install it there"
    else:
        fix = f"the box does not answer: check that it is up, that sshd listens, and `{where} true`"
    return f"host {host} ({access.destination}): {said}; {fix}"


def _access(place: Placement) -> SshAccess:
    if place.ssh is None:
        raise RuntimeUnavailable(
            f"host {place.host} ({place.docker}) has no SSH access, which this needs; "
            f"give it an ssh:// docker URL in {place.inventory}"
        )
    return place.ssh


def run(place: Placement, command: str, *, timeout_s: float = 30.0) -> tuple[int, str]:
    """Run `command` on the box: (exit status, stdout). An ssh failure (status 255) raises, naming the host and fix."""
    access = _access(place)
    try:
        done = subprocess.run(
            [*ssh_argv(access, "-T"), command], capture_output=True, text=True, timeout=timeout_s, env=_env()
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeUnavailable(
            f"host {place.host} ({access.destination}): `{command}` did not finish in {timeout_s:.0f} s; "
            "check that the box answers"
        ) from exc
    if done.returncode == 255:
        raise RuntimeUnavailable(_fix(place.host, access, done.stderr))
    return done.returncode, done.stdout


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    return env


def _die_with_parent() -> None:
    """In the forward's ssh, before exec: end when the tool's process ends, even by kill -9 (Linux PR_SET_PDEATHSIG).

    Without it a killed command (a crash mid-rollout) would leave `ssh -N` forwards behind for good.
    """
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # no prctl: the forward then ends when the box drops the connection


class Forward:
    """One `ssh -N -L LOCAL:REMOTE` to a box, up until `close`."""

    def __init__(self, place: Placement, local: str, remote: str, ready: socket.AddressFamily) -> None:
        self.place = place
        self.local = local
        self.remote = remote
        access = _access(place)
        argv = ssh_argv(access, "-N", "-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes",
                        "-L", f"{local}:{remote}")  # fmt: skip
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err, env=_env(),
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        try:
            self._wait(access, ready)
        except BaseException:
            self.close()
            raise

    def _target(self, family: socket.AddressFamily) -> tuple[str, int] | str:
        if family == socket.AF_UNIX:
            return self.local
        host, _, port = self.local.rpartition(":")
        return host, int(port)

    def _wait(self, access: SshAccess, family: socket.AddressFamily) -> None:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S + 5
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._err.seek(0)
                raise RuntimeUnavailable(_fix(self.place.host, access, self._err.read().decode("utf-8", "replace")))
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.settimeout(1.0)
                try:
                    probe.connect(self._target(family))
                    return
                except OSError:
                    time.sleep(0.05)
        raise RuntimeUnavailable(
            f"host {self.place.host} ({access.destination}): the SSH forward to {self.remote} did not open "
            f"within {CONNECT_TIMEOUT_S + 5} s; check that the box answers"
        )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._err.close()


# Open forwards, keyed by (host, what is forwarded): a command reuses one forward for every request it sends.
_OPEN: dict[tuple[str, str], tuple[Forward, str]] = {}
_LOCK = threading.Lock()
_SOCKET_DIRS: list[tempfile.TemporaryDirectory[str]] = []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def forward_port(place: Placement, port: int) -> int:
    """A local port forwarded to `127.0.0.1:port` on the box (opened on first use, kept for the command)."""
    key = (place.host, f"tcp:{port}")
    with _LOCK:
        held = _OPEN.get(key)
        if held is not None and held[0].alive:
            return int(held[1])
        local = _free_port()
        fwd = Forward(place, f"127.0.0.1:{local}", f"127.0.0.1:{port}", socket.AF_INET)
        _OPEN[key] = (fwd, str(local))
        return local


def docker_socket(place: Placement) -> str:
    """A `unix://` URL of a local socket forwarded to the box's Docker engine socket."""
    access = _access(place)
    key = (place.host, f"unix:{access.docker_socket}")
    with _LOCK:
        held = _OPEN.get(key)
        if held is not None and held[0].alive:
            return held[1]
        folder = tempfile.TemporaryDirectory(prefix="gb300lane-ssh-")
        _SOCKET_DIRS.append(folder)
        os.chmod(folder.name, 0o700)
        path = str(Path(folder.name) / "docker.sock")
        fwd = Forward(place, path, access.docker_socket, socket.AF_UNIX)
        url = f"unix://{path}"
        _OPEN[key] = (fwd, url)
        return url


def open_forwards() -> list[str]:
    """What is forwarded now, as `host local -> remote` lines (for tests and diagnostics)."""
    with _LOCK:
        return [f"{host} {fwd.local} -> {fwd.remote}" for (host, _), (fwd, _) in _OPEN.items() if fwd.alive]


def close_all() -> None:
    """Close every forward this process opened (the lane scope's end, and the interpreter's)."""
    with _LOCK:
        held = list(_OPEN.values())
        _OPEN.clear()
        dirs = list(_SOCKET_DIRS)
        _SOCKET_DIRS.clear()
    for fwd, _ in held:
        fwd.close()
    for folder in dirs:
        folder.cleanup()


atexit.register(close_all)


def reach(url: str) -> str:
    """The URL the tool sends to for `url` as the acting lane's box sees it.

    On this machine, and for a box address, `url` itself. A loopback URL on a
    remote box (a dark lane, a sidecar's health) is reached through an SSH
    forward to that box's loopback.
    """
    place = placement_mod.current()
    if place is None or not place.remote:
        return url
    parts = urlsplit(url)
    if parts.hostname is None or parts.hostname not in _LOOPBACK_NAMES and f"[{parts.hostname}]" not in _LOOPBACK_NAMES:
        return url
    port = parts.port or (443 if parts.scheme == "https" else 80)
    local = forward_port(place, port)
    return urlunsplit(parts._replace(netloc=f"127.0.0.1:{local}"))
