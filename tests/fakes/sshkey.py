"""A fixed Ed25519 signing key for runs that must sign the same bytes every time (the golden card run).

The key is derived from a public seed, so nothing secret is stored: it signs test receipts only. Ed25519
signatures are deterministic, so the same key over the same manifest gives the same signature.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

_P = 2**255 - 19
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_GY = 4 * pow(5, _P - 2, _P) % _P


def _recover_x(y: int) -> int:
    xx = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P)
    x = pow(xx, (_P + 3) // 8, _P)
    if (x * x - xx) % _P:
        x = x * pow(2, (_P - 1) // 4, _P) % _P
    return _P - x if x & 1 else x


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = a, b
    t = _D * x1 * x2 * y1 * y2
    return ((x1 * y2 + x2 * y1) * pow(1 + t, _P - 2, _P) % _P, (y1 * y2 + x1 * x2) * pow(1 - t, _P - 2, _P) % _P)


def _public(seed: bytes) -> bytes:
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    point, q = (0, 1), (_recover_x(_GY), _GY)
    while a:
        if a & 1:
            point = _add(point, q)
        q, a = _add(q, q), a >> 1
    x, y = point
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _string(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def write_key(path: Path, seed_text: str = "gb300lane golden card run") -> Path:
    """Write the OpenSSH private key (unencrypted) for `seed_text`, mode 0600, and its `.pub`; returns `path`."""
    seed = hashlib.sha256(seed_text.encode()).digest()
    pub = _public(seed)
    blob = _string(b"ssh-ed25519") + _string(pub)
    private = struct.pack(">II", 1, 1) + blob + _string(seed + pub) + _string(b"golden")
    private += bytes(range(1, 1 + (-len(private)) % 8))
    body = (
        b"openssh-key-v1\0"
        + _string(b"none")
        + _string(b"none")
        + _string(b"")
        + struct.pack(">I", 1)
        + _string(blob)
        + _string(private)
    )
    import base64

    b64 = base64.b64encode(body).decode()
    text = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "".join(b64[i : i + 70] + "\n" for i in range(0, len(b64), 70))
        + "-----END OPENSSH PRIVATE KEY-----\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    Path(f"{path}.pub").write_text(f"ssh-ed25519 {base64.b64encode(blob).decode()} golden\n")
    return path
