"""The one file lock: an advisory `flock` on a path, a file or a directory.

The kernel drops a flock when its holder dies, so a kill -9 never leaves
anything locked. Locking a directory (as the promotion lock locks the state
directory) gives a lock nobody can delete from under its holder: a directory
that holds files cannot be removed, and a file deleted beside it changes
nothing about the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from gb300lane.errors import StateError

#: How often a waiting acquire retries.
_POLL_S = 0.02


class FileLock:
    """An exclusive (or shared) flock on `path`; a missing file is created, a directory is locked as it is.

    `acquire(wait_s)` returns False when someone else holds it after `wait_s`
    seconds (None waits for ever); as a context manager it waits for ever.
    """

    def __init__(self, path: str | os.PathLike[str], *, shared: bool = False) -> None:
        self.path = Path(path)
        self.shared = shared
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _open(self) -> int:
        try:
            if self.path.is_dir():
                return os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StateError(
                f"{self.path}: cannot open the lock ({exc.strerror or exc}); check the directory exists and is "
                "readable by this user"
            ) from exc

    def acquire(self, wait_s: float | None = 0.0) -> bool:
        """Take the lock; False when another process still holds it after `wait_s` seconds."""
        if self._fd is not None:
            return True
        fd = self._open()
        mode = (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, mode)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise StateError(f"{self.path}: cannot lock ({exc.strerror or exc})") from exc
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(_POLL_S)
                continue
            self._fd = fd
            return True

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire(wait_s=None)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def is_locked(path: str | os.PathLike[str]) -> bool:
    """True when some process holds an exclusive lock on `path` (a missing path is not locked)."""
    if not Path(path).exists():
        return False
    probe = FileLock(path, shared=True)
    if probe.acquire(wait_s=0.0):
        probe.release()
        return False
    return True
