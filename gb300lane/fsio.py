"""Atomic and write-once file writes, and content hashes.

Every file the tool records goes through here: state writes are atomic
(temp file in the same directory, fsync, `os.replace`), receipts are
write-once (`O_EXCL` on a temp name, then `os.link`, so a crash never leaves a
half-written receipt and an existing one is never replaced).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from gb300lane.errors import ReceiptExists


def _to_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Replace `path` with `data` atomically: readers see the old or the new file, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_to_bytes(data))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_once(path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o444) -> Path:
    """Write `path` only if it does not exist; raise ReceiptExists otherwise.

    The content is written to a temp file first and then hard-linked into
    place, which fails atomically if the name is taken. The file is left
    read-only (`mode`: everyone may read a receipt; 0o400 for what only the
    owner should read).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise ReceiptExists(f"{path}: receipt already exists; receipts are write-once (write a new file instead)")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_to_bytes(data))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError as exc:
            raise ReceiptExists(
                f"{path}: receipt already exists; receipts are write-once (write a new file instead)"
            ) from exc
    finally:
        Path(tmp).unlink(missing_ok=True)
    os.chmod(path, mode)
    return path


def quarantine(path: str | os.PathLike[str], folder: str | os.PathLike[str], why: str) -> Path:
    """Move an unreadable record out of the way into `folder`, with a note saying what was found; returns its new path.

    Nothing is deleted: the record keeps its bytes under a time-stamped name, and
    `<name>.why.txt` beside it says why it was moved.
    """
    src = Path(path)
    dest_dir = Path(folder)
    dest_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    dest = dest_dir / f"{src.name}.{stamp}"
    n = 1
    while dest.exists():
        n += 1
        dest = dest_dir / f"{src.name}.{stamp}.{n}"
    os.replace(src, dest)
    atomic_write(dest.with_name(dest.name + ".why.txt"), f"{src}: {why}\n")
    return dest


def dumps_json(obj: Any) -> str:
    """Stable JSON for files on disk: sorted keys, two-space indent, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def sha256_bytes(data: str | bytes) -> str:
    return hashlib.sha256(_to_bytes(data)).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
