"""Canonical JSON and its sha256: the bytes a receipt is written as and a hash is taken over.

Pure (no file is read or written here), so the code that decides can hash what it decided over without
importing file I/O; `gb300lane.fsio` writes these bytes.
"""

from __future__ import annotations

import hashlib
import json


def to_bytes(data: str | bytes) -> bytes:
    """`data` as bytes (text as UTF-8)."""
    return data.encode("utf-8") if isinstance(data, str) else data


def dumps_json(obj: object) -> str:
    """Stable JSON for files on disk: sorted keys, two-space indent, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def sha256_bytes(data: str | bytes) -> str:
    """Hex sha256 of `data` (text as UTF-8)."""
    return hashlib.sha256(to_bytes(data)).hexdigest()


__all__ = ["dumps_json", "sha256_bytes", "to_bytes"]
