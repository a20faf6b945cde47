"""Facts gathered from the host: listening sockets (the dark-lane check, the port precondition) and GPUs.

Sockets come from psutil, so they are read wherever psutil runs (on Linux it
reads the network namespace's socket tables, where host networking puts Docker
containers' sockets too) and each carries the pid holding it where this user
may see it. `listening` is the pure half tests feed with recorded connections;
`parse_nvidia_smi` is the pure half of GPU discovery. The request counters of
the foreign-client check are read from /metrics by `gb300lane.spec.counters`,
the one Prometheus parser.

On a lane of a remote host the sockets and GPUs are that box's: its
/proc/net/tcp and tcp6 and its nvidia-smi are read over SSH
(`parse_proc_net_tcp` is the pure half), so a dark lane's loopback bind and a
free port are checked where the lane runs. A tcp:// host gives no shell, so
its facts are unknown there, never this machine's.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from typing import Protocol

import psutil
from pydantic import Field

from gb300lane import placement
from gb300lane.models import FrozenModel
from gb300lane.runtime import ssh


class Listener(FrozenModel):
    """One listening TCP socket."""

    address: str = Field(description="Bound address (0.0.0.0 / :: mean every interface).")
    port: int = Field(description="Bound port.")
    pid: int | None = Field(default=None, description="Process holding the socket; None where this user cannot see it.")

    @property
    def loopback_only(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


def _address(ip: str) -> str:
    # An IPv4-mapped IPv6 address is the IPv4 address it maps (a dual-stack socket bound to 127.0.0.1).
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


class SocketAddress(Protocol):
    """An (ip, port) pair as psutil records a socket's address."""

    @property
    def ip(self) -> str: ...
    @property
    def port(self) -> int: ...


class ConnectionRecord(Protocol):
    """What `listening` reads of a `psutil.net_connections` row."""

    @property
    def status(self) -> str: ...
    @property
    def laddr(self) -> SocketAddress | tuple[()]: ...
    @property
    def pid(self) -> int | None: ...


def listening(conns: Iterable[ConnectionRecord], port: int | None = None) -> list[Listener]:
    """The listening sockets among psutil connection records (`psutil.net_connections` rows), on `port` if given."""
    out = []
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr:
            continue
        if port is not None and conn.laddr.port != port:
            continue
        out.append(Listener(address=_address(conn.laddr.ip), port=conn.laddr.port, pid=conn.pid))
    return out


_LISTEN = "0A"


def _decode_address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # IPv6 is stored as four little-endian 32-bit words.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return _address(str(ipaddress.IPv6Address(words)))


def parse_proc_net_tcp(text: str) -> list[Listener]:
    """Listening sockets from the text of /proc/net/tcp and /proc/net/tcp6 (a box's, read over SSH).

    Header lines (one per file when both are read together) are skipped; the holder's pid is not in these files.
    """
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != _LISTEN or ":" not in fields[1]:
            continue
        addr, _, port = fields[1].partition(":")
        out.append(Listener(address=_decode_address(addr), port=int(port, 16)))
    return out


def _remote_listeners(place: placement.Placement, port: int | None) -> list[Listener] | None:
    if place.ssh is None:
        return None
    _code, text = ssh.run(place, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
    if not text.strip():
        return None
    return [lst for lst in parse_proc_net_tcp(text) if port is None or lst.port == port]


def listeners(port: int | None = None) -> list[Listener] | None:
    """Listening TCP sockets on the acting lane's host (on `port` if given); None where they cannot be listed."""
    place = placement.current()
    if place is not None and place.remote:
        return _remote_listeners(place, port)
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError, NotImplementedError):
        return None  # macOS without root, or a platform psutil cannot read sockets on
    return listening(conns, port)


def lane_listeners(ports: Sequence[int], pids: Sequence[int]) -> list[Listener] | None:
    """The listening sockets of a lane: on any of `ports`, or held by any of `pids` or their descendants."""
    found = listeners()
    if found is None:
        return None
    tree = set(pids)
    for pid in pids:
        try:
            tree.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            continue
    return [l for l in found if l.port in ports or (l.pid is not None and l.pid in tree)]


def port_in_use(port: int) -> bool:
    """True when something listens on `port` (or, where sockets cannot be listed, when binding it fails)."""
    found = listeners(port)
    if found is not None:
        return bool(found)
    place = placement.current()
    if place is not None and place.remote:
        return False  # no shell on the box to ask; its engine refuses a taken port when the container starts
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def describe_process(pid: int) -> str:
    """`pid 123 (python3 -m http.server 8000)`: a process named for a message; just the pid where it cannot be read."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            argv = proc.cmdline() or [proc.name()]
    except psutil.Error:
        return f"pid {pid}"
    text = " ".join(argv)
    return f"pid {pid} ({text[:117] + '...' if len(text) > 120 else text})"


def port_holders(port: int) -> str:
    """Who listens on `port`, for an error message: `pid 123 (...)`, or why the holder cannot be named."""
    found = listeners(port)
    if found is None:
        return "a process this user may not list sockets of"
    pids = sorted({lst.pid for lst in found if lst.pid is not None})
    if not pids:
        return "a process this user cannot see (another user's, or a container's)" if found else "another process"
    return ", ".join(describe_process(pid) for pid in pids)


def parse_nvidia_smi(text: str) -> set[str]:
    """Device ids (index and UUID) from `nvidia-smi --query-gpu=index,uuid --format=csv,noheader`."""
    ids: set[str] = set()
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            ids.update(parts[:2])
    return ids


def discover_gpus() -> set[str] | None:
    """GPU ids on the acting lane's host; None where they cannot be discovered (no nvidia-smi, or it failed)."""
    import shutil
    import subprocess

    place = placement.current()
    if place is not None and place.remote:
        if place.ssh is None:
            return None
        code, text = ssh.run(place, "nvidia-smi --query-gpu=index,uuid --format=csv,noheader")
        return parse_nvidia_smi(text) if code == 0 else None

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else None
