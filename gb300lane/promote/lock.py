"""The transition lock: one promote, rollback, repair or prune at a time per state directory.

An exclusive `flock` on `promote.lock`. The kernel drops it when the holder
dies, so a kill -9 never leaves the lane locked; the file's text (pid, what,
since) is only for the message a refused command prints.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from gb300lane import paths
from gb300lane.errors import StateError
from gb300lane.promote.ledger import utcnow

LOCK_FILE = "promote.lock"


def lock_path() -> Path:
    return paths.state_dir() / LOCK_FILE


class TransitionLock:
    """Context manager holding the lock; refuses (StateError) when another process holds it."""

    def __init__(self, what: str, *, path: Path | None = None, wait_s: float = 0.5) -> None:
        self.what = what
        self.path = Path(path) if path else lock_path()
        # A short wait absorbs `holder()` probes from `status`, which take the lock for microseconds.
        self.wait_s = wait_s
        self._fd: int | None = None

    def __enter__(self) -> TransitionLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    held = _read(self.path) or "another process"
                    raise StateError(
                        f"{self.path}: the lane is locked by {held}; only one promote, rollback or prune "
                        "runs at a time: wait for it to finish (`gb300lane status` shows it)"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({self.what}, since {utcnow()})\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None


def holder(path: Path | None = None) -> str | None:
    """Who holds the lock ('pid 123 (promote local-v27, since ...)'), or None when nobody does."""
    path = Path(path) if path else lock_path()
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(path) or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
