"""Atomic and write-once file writes, and content hashes.

Every file the tool records goes through here: state writes are atomic
(temp file in the same directory, fsync, `os.replace`), receipts are
write-once (`O_EXCL` on a temp name, then `os.link`, so a crash never leaves a
half-written receipt and an existing one is never replaced).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gb300lane.canonical import dumps_json as dumps_json  # the bytes this module writes (re-exported)
from gb300lane.canonical import sha256_bytes as sha256_bytes
from gb300lane.canonical import to_bytes as _to_bytes
from gb300lane.errors import ReceiptExists, StorageError

#: errno values that mean "this storage cannot take the write" (not a bug): each gets a one-line StorageError.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})
#: Least free space a transition (promote, rollback, prune) needs where it writes before it starts.
MIN_FREE_BYTES = 16 * 1024 * 1024


def storage_error(path: str | os.PathLike[str] | None, exc: OSError) -> StorageError:
    """A one-line error for a write the storage refused: which file, what the system said, and the fix."""
    where = Path(path) if path is not None else Path(exc.filename) if exc.filename else None
    name = str(where) if where is not None else "a file"
    folder = where.parent if where is not None else Path(".")
    why = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = f"free space on the file system that holds it (`df -h {folder}`), then run the command again"
    elif exc.errno == errno.EROFS:
        fix = (
            "the file system is read-only: remount it read-write, or point GB300LANE_STATE_DIR / "
            "GB300LANE_RESULTS_DIR at a writable directory, then run the command again"
        )
    else:
        fix = f"this user may not write {folder}: fix its permissions (or use another directory)"
    return StorageError(f"{name}: cannot write ({why}); {fix}", why=why, fix=fix)


@contextmanager
def writing(path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Turn a write the storage refuses (ENOSPC, EROFS, EACCES, ...) into a StorageError naming `path`."""
    try:
        yield
    except OSError as exc:
        if exc.errno in STORAGE_ERRNOS:
            raise storage_error(path if path is not None else exc.filename, exc) from None
        raise


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Free bytes on the file system that holds `path` (or the nearest folder above it that exists)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def require_free(*paths: str | os.PathLike[str], need: int = MIN_FREE_BYTES, action: str = "start") -> None:
    """StorageError unless every path's file system has `need` bytes free (checked before a transition writes)."""
    for path in paths:
        free = free_bytes(path)
        if free < need:
            raise StorageError(
                f"{path}: only {free / 2**20:.1f} MiB free where it writes, {need / 2**20:.0f} MiB needed; "
                f"free space there (`df -h {path}`) before you {action} (nothing was changed)"
            )


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Replace `path` with `data` atomically: readers see the old or the new file, never half.

    A write the storage refuses (full, read-only) is a StorageError naming the file; nothing is left behind.
    """
    path = Path(path)
    with writing(path):
        return _atomic_write(path, data)


def _atomic_write(path: Path, data: str | bytes) -> Path:
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
    """Write `path` only if it does not exist (see `_write_once`); a refused write is a StorageError naming it."""
    with writing(path):
        return _write_once(Path(path), data, mode=mode)


def _write_once(path: Path, data: str | bytes, *, mode: int) -> Path:
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


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
