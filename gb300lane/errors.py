"""The exception tree every layer raises; the CLI maps it to one red line.

    LaneError                      anything the user can fix; exit code 1
    ├── RecipeError                a recipe file, key or value is wrong
    ├── RenderError                a template could not produce a container spec
    ├── TemplateError              a text template (shipped, or the user's ./templates) is missing or wrong
    ├── RuntimeUnavailable         the Docker engine (or another runtime) does not answer
    ├── BootError                  a lane did not come up (carries the log tail)
    ├── EngineError                the embedded engine was misconfigured
    ├── MetricsError               a /metrics scrape or counter delta is unusable
    ├── BenchError                 a window could not be run
    │   └── WorkloadError          a workload's files, manifest or import input are wrong
    ├── CardError                  a card file, registration or receipt is wrong
    ├── ReceiptExists              a write-once file already exists
    ├── StorageError               a file cannot be written: disk full, read-only file system, no permission
    ├── InventoryError             the hosts inventory (lanes.yaml) is wrong, or names no such host or lane
    └── StateError                 the lane state (ledger, lock) refuses a transition
        └── LedgerError            the promotion ledger cannot be read or written (corrupt, unreadable, read-only)

Third-party exceptions are translated once, at the boundary that meets them
(`raise BootError(...) from exc`).
"""

from __future__ import annotations


class LaneError(Exception):
    """An error the user can act on. The message says what, where and the fix."""

    exit_code = 1


class RecipeError(LaneError):
    """A recipe is invalid: names the file, the key (and line where known) and the fix."""


class RenderError(LaneError):
    """A recipe could not be rendered into container specs."""


class TemplateError(LaneError):
    """A text template could not be found, parsed or rendered: names the template file (and line) and the fix."""


class RuntimeUnavailable(LaneError):
    """The runtime (usually the Docker engine) cannot be reached."""


class BootError(LaneError):
    """A lane failed to boot; `log_tail` carries the container's last log lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class EngineError(LaneError):
    """The embedded engine was given a configuration it cannot serve."""


class MetricsError(LaneError):
    """A metrics scrape is missing, malformed or went backwards."""


class BenchError(LaneError):
    """A bench window or smoke gate could not be run."""


class WorkloadError(BenchError):
    """A workload folder, its manifest or a file given to `workload import` is wrong; names the file and line."""


class CardError(LaneError):
    """A card file, its registration or its receipts are wrong."""


class ReceiptExists(LaneError):
    """A write-once receipt already exists and will not be overwritten."""


class StorageError(LaneError):
    """A file could not be written (no space, a read-only file system, no permission): names the file and the fix.

    `why` is what the system said (e.g. "No space left on device"), `fix` what to do, for callers that
    phrase their own message.
    """

    def __init__(self, message: str, *, why: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.why = why
        self.fix = fix


class InventoryError(LaneError):
    """The hosts inventory file, a key in it, or a --host / --lane that names nothing in it."""


class StateError(LaneError):
    """The lane state refuses a transition (locked, inconsistent, or missing)."""


class LedgerError(StateError):
    """The promotion ledger cannot be used; `kind` says why and the message says what fixes it.

    kinds: `corrupt` (not a readable ledger, or a page fails its check), `empty` (0 bytes),
    `unreadable` (permissions), `read-only` (readable, but its directory or file cannot be
    written), `newer` (written by another schema version).
    """

    def __init__(self, message: str, *, kind: str, path: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.path = path
