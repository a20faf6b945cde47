"""Facts gathered from the host: listening sockets (the dark-lane check) and GPUs.

Gathering and parsing are apart: `parse_proc_net_tcp` and `parse_nvidia_smi`
are pure functions tests feed recorded text; `listeners` reads /proc/net/tcp
and /proc/net/tcp6 (host networking puts Docker containers' sockets there too).
The request counters of the foreign-client check are read from /metrics by
`gb300lane.spec.metrics`, the one Prometheus parser.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from pydantic import Field

from gb300lane.models import FrozenModel

_LISTEN = "0A"


class Listener(FrozenModel):
    """One listening TCP socket."""

    address: str = Field(description="Bound address (0.0.0.0 / :: mean every interface).")
    port: int = Field(description="Bound port.")

    @property
    def loopback_only(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


def _decode_address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # IPv6 is stored as four little-endian 32-bit words.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    addr = ipaddress.IPv6Address(words)
    return str(addr.ipv4_mapped or addr)


def parse_proc_net_tcp(text: str) -> list[Listener]:
    """Listening sockets from the text of /proc/net/tcp or /proc/net/tcp6."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != _LISTEN:
            continue
        addr, _, port = fields[1].partition(":")
        out.append(Listener(address=_decode_address(addr), port=int(port, 16)))
    return out


def listeners(port: int | None = None) -> list[Listener] | None:
    """Listening sockets on this host (on `port` if given); None where /proc/net is unreadable."""
    found: list[Listener] = []
    readable = False
    for name in ("tcp", "tcp6"):
        try:
            text = Path("/proc/net", name).read_text()
        except OSError:
            continue
        readable = True
        found.extend(parse_proc_net_tcp(text))
    if not readable:
        return None
    return [lst for lst in found if port is None or lst.port == port]


def port_in_use(port: int) -> bool:
    """True when something listens on `port` (or, without /proc, when binding it fails)."""
    found = listeners(port)
    if found is not None:
        return bool(found)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def parse_nvidia_smi(text: str) -> set[str]:
    """Device ids (index and UUID) from `nvidia-smi --query-gpu=index,uuid --format=csv,noheader`."""
    ids: set[str] = set()
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            ids.update(parts[:2])
    return ids


def discover_gpus() -> set[str] | None:
    """GPU ids on this host; None where they cannot be discovered (no nvidia-smi, or it failed)."""
    import shutil
    import subprocess

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
