"""The transition lock: one promote, rollback, repair or prune at a time per state directory.

The lock is a flock on the state directory itself (`gb300lane.locks`), the
directory that holds the ledger: nothing can delete it from under a running
transition. Deleting `promote.lock`, the small file beside it that names the
holder (pid, what, since) for messages, changes nothing about who holds the
lock. The kernel drops a flock when its holder dies, so a kill -9 never
leaves the lane locked.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from gb300lane import paths
from gb300lane.errors import StateError, StorageError
from gb300lane.fsio import atomic_write
from gb300lane.locks import FileLock, is_locked
from gb300lane.promote.ledger import utcnow

#: The file naming the lock's holder, for the message a refused command prints.
HOLDER_FILE = "promote.lock"


class TransitionLock:
    """Context manager holding the lock; refuses (StateError) when another process holds it."""

    def __init__(self, what: str, *, state_dir: Path | None = None, wait_s: float = 0.5) -> None:
        self.what = what
        self.dir = Path(state_dir) if state_dir else paths.state_dir()
        # A short wait absorbs a second command started at the same moment.
        self.wait_s = wait_s
        self._lock: FileLock | None = None

    @property
    def holder_file(self) -> Path:
        return self.dir / HOLDER_FILE

    def __enter__(self) -> TransitionLock:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"{self.dir}: cannot create the state directory ({exc.strerror or exc})") from exc
        lock = FileLock(self.dir)
        if not lock.acquire(wait_s=self.wait_s):
            held = _read(self.holder_file) or "another process"
            raise StateError(
                f"{self.dir}: the lane is locked by {held}; only one promote, rollback or prune "
                "runs at a time: wait for it to finish (`gb300lane status` shows it)"
            )
        try:
            _write_holder(self.holder_file, f"pid {os.getpid()} ({self.what}, since {utcnow()})\n")
        except BaseException:
            lock.release()
            raise
        self._lock = lock
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lock is None:
            return
        try:
            if self.holder_file.is_file():
                self.holder_file.unlink()
        except OSError:
            pass  # the holder text is only for messages; the lock is released below either way
        finally:
            self._lock.release()
            self._lock = None


def _write_holder(path: Path, text: str) -> None:
    if path.is_dir():
        raise StateError(
            f"{path} is a directory; it should be the small file that names the transition lock's holder. "
            f"Remove it (`rmdir {path}`) and run the command again"
        )
    try:
        atomic_write(path, text)
    except StorageError as exc:
        raise StateError(f"{path}: cannot write the lock holder ({exc.why}); {exc.fix}") from None
    except OSError as exc:
        raise StateError(
            f"{path}: cannot write the lock holder ({exc.strerror or exc}); check {path.parent} is writable"
        ) from exc


def holder(state_dir: Path | None = None) -> str | None:
    """Who holds the lock ('pid 123 (promote local-v27, since ...)'), or None when nobody does."""
    folder = Path(state_dir) if state_dir else paths.state_dir()
    if not is_locked(folder):
        return None
    return _read(folder / HOLDER_FILE) or "another process"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""
