"""The state directory's key and the keyed digests made with it; seals, which are signatures.

One random 256-bit key per state directory (`<state>/state.key`, mode 0600,
created on first use). It keys digests of secret values (an env value compared
across boots), so a stored digest cannot be checked against a guessed value
without the key.

Seals on what the tool records (card manifests, ledger custody rows) are not
made with it: a key beside the files it protects proves nothing once it is
replaced. `seal` and `check_seal` are SSH signatures with the user's key in the
config directory, checked against the allowed signers (`gb300lane.signing`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path

from gb300lane import paths, signing
from gb300lane.errors import StateError

KEY_FILE = "state.key"
#: Hex characters in a key file (256 bits).
_KEY_HEX = 64


def key_path() -> Path:
    return paths.state_root() / KEY_FILE


def _read(path: Path) -> bytes | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(
            f"{path}: the state key is unreadable ({exc}); it must be a 0600 file of 64 hex digits"
        ) from None
    if len(text) != _KEY_HEX or any(c not in "0123456789abcdef" for c in text):
        raise StateError(
            f"{path}: not a state key (expected 64 hex digits); restore it from a backup. Moving it aside starts a "
            "new key: the secret digests made with the old one no longer match, so a kept instance whose recipe "
            "has a secret cannot be restarted (promote and rollback then refuse before they stop anything) and "
            "must boot again"
        )
    return bytes.fromhex(text)


def state_key(*, create: bool = True) -> bytes | None:
    """The state directory's key; created (0600, atomically, first writer wins) when absent and `create`."""
    path = key_path()
    key = _read(path)
    if key is not None or not create:
        return key
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{KEY_FILE}.", suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(_KEY_HEX // 2) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process made it first: use theirs
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        raise StateError(
            f"{path}: cannot create the state key ({exc.strerror or exc}); the state directory must be writable"
        ) from None
    key = _read(path)
    if key is None:
        raise StateError(f"{path}: the state key vanished while it was being created; run the command again")
    return key


def key_id(key: bytes) -> str:
    """A public name for a key (16 hex chars of its sha256): says which key made a seal, reveals nothing."""
    return hashlib.sha256(b"gb300lane key id\0" + key).hexdigest()[:16]


def mac(key: bytes, label: str, data: str | bytes) -> str:
    """HMAC-SHA256 of `data` under `key`, domain-separated by `label` (hex)."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    return hmac.new(key, label.encode("utf-8") + b"\0" + body, hashlib.sha256).hexdigest()


def same(a: str, b: str) -> bool:
    """Constant-time comparison of two digests."""
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def canonical(obj: object) -> str:
    """The one byte form a seal covers: JSON, sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def seal(label: str, body: object) -> dict[str, str]:
    """An SSH signature (`{"signer", "key", "ssh_signature"}`) over the canonical JSON of `body`."""
    return signing.sign(label, canonical(body).encode("utf-8"))


SealStatus = signing.SignatureStatus


def check_seal(label: str, body: object, found: object) -> tuple[SealStatus, str]:
    """Whether `found` (a seal as `seal` made it) signs `body` for an allowed signer; and one line saying so."""
    return signing.verify(label, canonical(body).encode("utf-8"), found)
