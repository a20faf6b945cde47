"""The promotion ledger: production, the rollback pair, transitions, their journal, kept instances, history.

One SQLite file under the state directory, in WAL mode. Every change of role
is one `BEGIN IMMEDIATE` transaction. A transition writes a journal row
(`intent`) before each side effect on the lane and another (`done`) after it,
so a process killed at any point leaves a journal that says how far it got.
A transition whose `outcome` is NULL is unfinished: running when the lock is
held, crashed when it is not.

Fail closed: a ledger is checked (`PRAGMA quick_check`, its schema, every row
read back into its model) whenever it is opened, and anything that keeps it
from being read or written is a `LedgerError` that says which (corrupt, empty,
unreadable, read-only, newer) and what fixes it; it is never read as
"nothing recorded". Only a missing file means nothing was ever promoted. A
new ledger is built beside its final name and moved into place, so a file of
0 bytes is never a ledger this tool left.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import JsonValue, ValidationError

from gb300lane import keyed, paths, signing
from gb300lane.errors import LaneError, LedgerError, StateError
from gb300lane.fsio import free_bytes, storage_error
from gb300lane.models import format_validation_error
from gb300lane.promote import witness
from gb300lane.promote.models import (
    CustodyLinks,
    KeptInstance,
    LedgerEvent,
    NewEvent,
    PromotePlan,
    PrunePlan,
    RollbackPlan,
    Slot,
    TakeLanePlan,
    TransitionKind,
    TransitionPlan,
)

SCHEMA_VERSION = 1
LEDGER_FILE = "promote.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS slots (
    role TEXT PRIMARY KEY CHECK (role IN ('production', 'rollback')),
    recipe TEXT NOT NULL, instance TEXT NOT NULL, fingerprint TEXT NOT NULL,
    endpoint TEXT NOT NULL, since TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS transitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL, recipe TEXT, previous TEXT,
    started_at TEXT NOT NULL, pid INTEGER NOT NULL,
    plan TEXT NOT NULL, finished_at TEXT, outcome TEXT
);
CREATE TABLE IF NOT EXISTS journal (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    transition_id INTEGER NOT NULL REFERENCES transitions(id),
    step TEXT NOT NULL, phase TEXT NOT NULL CHECK (phase IN ('intent', 'done', 'failed')),
    at TEXT NOT NULL, detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kept (
    instance TEXT PRIMARY KEY, recipe TEXT NOT NULL, fingerprint TEXT NOT NULL,
    endpoint TEXT NOT NULL, kept_at TEXT NOT NULL, why TEXT NOT NULL, removed_at TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL, kind TEXT NOT NULL, recipe TEXT, instance TEXT, fingerprint TEXT,
    previous TEXT, verdict TEXT, forced INTEGER NOT NULL DEFAULT 0, reason TEXT,
    restore_seconds REAL, tool_seconds REAL, detail TEXT, transition_id INTEGER
);
"""

#: One custody row per event: its SSH signature (`gb300lane.signing`) covers the event as stored, what it rests on
#: (`CustodyLinks`) and the previous row's MAC. Made on every writable open, so older ledgers gain it.
_CUSTODY_TABLE = """CREATE TABLE IF NOT EXISTS custody (
    event_id INTEGER PRIMARY KEY REFERENCES events(id),
    record TEXT NOT NULL, prev TEXT NOT NULL, mac TEXT NOT NULL, key_id TEXT NOT NULL
)"""
_SCHEMA += _CUSTODY_TABLE + ";\n"
#: The seal label of a ledger custody row, and the `prev` of the first row.
CUSTODY_SEAL = "ledger custody"
CUSTODY_ORIGIN = "origin"

_TABLES = ("meta", "slots", "transitions", "journal", "kept", "events")
_EVENT_FIELDS = (
    "at", "kind", "recipe", "instance", "fingerprint", "previous", "verdict",
    "forced", "reason", "restore_seconds", "tool_seconds", "detail",
)  # fmt: skip
_PLANS: dict[str, type[PromotePlan] | type[RollbackPlan] | type[PrunePlan] | type[TakeLanePlan]] = {
    "promote": PromotePlan, "rollback": RollbackPlan, "prune": PrunePlan, "take_lane": TakeLanePlan,
}  # fmt: skip

Phase = Literal["intent", "done", "failed"]
Detail = dict[str, JsonValue]


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ledger_path() -> Path:
    return paths.state_dir() / LEDGER_FILE


@dataclass(frozen=True)
class Transition:
    """A transitions row: what was being done, from what, and the plan it wrote up front."""

    id: int
    kind: TransitionKind
    recipe: str | None
    previous: str | None
    started_at: str
    pid: int
    plan: TransitionPlan
    outcome: str | None


@dataclass(frozen=True)
class JournalEntry:
    step: str
    phase: Phase
    at: str
    detail: Detail


# -- what cannot be read, and what fixes it ------------------------------------------------------


def _corrupt(path: Path, found: str) -> LedgerError:
    return LedgerError(
        f"{path}: the promotion ledger is corrupt ({found}); production and the rollback pair cannot be read, "
        "so commands that could touch them refuse. Restore the file from a backup; or move it aside "
        f"(`mv {path} {path}.corrupt`), take stock with `gb300lane status` and record production again with "
        "`gb300lane promote RECIPE --force --reason \"ledger rebuilt\"`",
        kind="corrupt", path=str(path),
    )  # fmt: skip


def _empty(path: Path) -> LedgerError:
    return LedgerError(
        f"{path}: the promotion ledger is empty (0 bytes): it was truncated (this tool never leaves an empty "
        "ledger); production and the rollback pair cannot be read, so commands that could touch them refuse. "
        f"Restore it from a backup; if nothing was ever promoted on this host, remove it (`rm {path}`)",
        kind="empty", path=str(path),
    )  # fmt: skip


#: Below this many free bytes the file system holding the ledger is taken as full: SQLite cannot make the
#: shared-memory file even a read of a WAL database needs, and says only "disk I/O error".
_FULL_BYTES = 64 * 1024


def _full(folder: Path) -> int | None:
    """Free bytes where the ledger lives when that file system is full; None when it has room (or cannot say)."""
    try:
        free = free_bytes(folder)
    except OSError:
        return None
    return free if free < _FULL_BYTES else None


def _unreadable(path: Path, why: str) -> LedgerError:
    free = _full(path.parent)
    if free is not None:
        return LedgerError(
            f"{path}: the promotion ledger cannot be read ({why}): the file system that holds it is full ({free} "
            f"bytes free; SQLite needs room for its shared-memory file even to read it); production and the rollback "
            f"pair are unknown, so commands that could touch them refuse. Free space there (`df -h {path.parent}`), "
            "then run the command again",
            kind="unreadable", path=str(path),
        )  # fmt: skip
    return LedgerError(
        f"{path}: the promotion ledger cannot be read ({why}); production and the rollback pair are unknown, so "
        f"commands that could touch them refuse. Check the permissions of the file and of {path.parent} "
        f"(`ls -ld {path.parent} {path}`; this command runs as uid {os.getuid()})",
        kind="unreadable", path=str(path),
    )  # fmt: skip


def read_only_error(path: Path, why: str) -> LedgerError:
    return LedgerError(
        f"{path}: the promotion ledger can be read but not written ({why}); promote, rollback and prune "
        f"refuse until it can. The ledger itself is fine: make {path.parent} and the file writable "
        f"(`chmod u+w {path.parent} {path}`, or remount the filesystem read-write), or run as their owner",
        kind="read-only", path=str(path),
    )  # fmt: skip


def write_problem(path: Path) -> str | None:
    """Why the ledger at `path` cannot be written by this process, or None."""
    folder = path.parent
    if not os.access(folder, os.W_OK):
        return f"{folder} is not writable"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path.name} is not writable"
    return None


def _is_read_only(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith("SQLITE_READONLY") or "readonly database" in str(exc)


def _precheck(path: Path) -> bool:
    """False when no ledger exists; LedgerError when one exists that cannot be opened as a ledger file."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from exc
    if path.is_dir():
        raise _corrupt(path, "it is a directory, not a file")
    if st.st_size == 0:
        raise _empty(path)
    if not os.access(path, os.R_OK):
        raise _unreadable(path, f"{path.name} is not readable by uid {os.getuid()}")
    return True


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection to an existing ledger file; read-only ones fall back to an immutable read on a read-only directory."""
    if not readonly:
        return sqlite3.connect(path, timeout=30, isolation_level=None)
    uri = path.resolve().as_uri()
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30, isolation_level=None)
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.OperationalError as exc:
        if not _is_read_only(exc) and getattr(exc, "sqlite_errorname", "") != "SQLITE_CANTOPEN":
            raise
        # A WAL database in a directory this process cannot write: its shared-memory file cannot be
        # made. Nobody can be writing it then, so read the file as it is, unless changes wait in its
        # write-ahead log, which only a writer can merge.
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise read_only_error(
                path, f"{wal.name} holds changes not yet merged and {path.parent} is not writable"
            ) from exc
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=30, isolation_level=None)


# -- the ledger ----------------------------------------------------------------------------------


class Ledger:
    """The SQLite ledger. Cheap to open; open one per command.

    `readonly=True` (status, history, the protected set) never creates or changes
    anything and works on a read-only state directory; a writable ledger (promote,
    rollback, prune) is created when missing. Both check the file before use.
    """

    def __init__(self, path: Path | None = None, *, readonly: bool = False) -> None:
        self.path = Path(path) if path else ledger_path()
        self.readonly = readonly
        exists = _precheck(self.path)
        if not exists:
            if readonly:
                raise LedgerError(f"{self.path}: no promotion ledger yet", kind="missing", path=str(self.path))
            self._create()
        if not readonly:
            why = write_problem(self.path)
            if why is not None:
                self._check_readable()
                raise read_only_error(self.path, why)
        try:
            self._db = _connect(self.path, readonly=readonly)
        except sqlite3.OperationalError as exc:
            raise _unreadable(self.path, str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, str(exc)) from exc
        try:
            self._db.row_factory = sqlite3.Row
            if not readonly:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.execute("PRAGMA foreign_keys=ON")
            self._verify()
            if not readonly:
                self._db.execute(_CUSTODY_TABLE)
        except sqlite3.OperationalError as exc:
            self._db.close()
            if _is_read_only(exc):
                raise read_only_error(self.path, str(exc)) from exc
            raise _unreadable(self.path, str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise _corrupt(self.path, str(exc)) from exc
        except LedgerError:
            self._db.close()
            raise

    def _create(self) -> None:
        """Build an empty ledger beside its final name, then move it into place (never a half-made file)."""
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise read_only_error(self.path, f"cannot create {folder}: {exc.strerror or exc}") from exc
        tmp = folder / f".{self.path.name}.{os.getpid()}.new"
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("BEGIN IMMEDIATE")
                # Statement by statement: executescript would COMMIT the open transaction first.
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                db.execute("COMMIT")
            finally:
                db.close()
            os.replace(tmp, self.path)
        except (OSError, sqlite3.Error) as exc:
            for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
                leftover.unlink(missing_ok=True)
            if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                raise read_only_error(self.path, f"cannot create it in {folder}: {exc.strerror}") from exc
            if isinstance(exc, sqlite3.Error) and _is_read_only(exc):
                raise read_only_error(self.path, f"cannot create it in {folder}: {exc}") from exc
            raise

    def _check_readable(self) -> None:
        """Raise the read error if the ledger cannot even be read (so a corrupt read-only ledger says corrupt)."""
        Ledger(self.path, readonly=True).close()

    def _verify(self) -> None:
        """The file is a ledger of this schema, its pages pass SQLite's check, and every row reads back."""
        problems = [str(r[0]) for r in self._db.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise _corrupt(self.path, "; ".join(problems[:3]))
        tables = {str(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in _TABLES if t not in tables]
        if missing:
            raise _corrupt(self.path, f"not a promotion ledger: no {', '.join(missing)} table")
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            raise _corrupt(self.path, "meta.schema_version is missing")
        if str(row["value"]) != str(SCHEMA_VERSION):
            raise LedgerError(
                f"{self.path}: meta.schema_version = {row['value']}, this tool reads {SCHEMA_VERSION}; "
                "use the gb300lane version that wrote it",
                kind="newer", path=str(self.path),
            )  # fmt: skip
        # Read every row the commands rely on back into its model: a value that does not fit is corruption too.
        self.production()
        self.rollback_pair()
        self.port()
        tr = self.open_transition()
        if tr is not None:
            self.entries(tr.id)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls join the outer one."""
        if self.readonly:
            raise StateError(f"{self.path}: opened read-only; a change needs a writable ledger")
        if self._db.in_transaction:
            yield self._db
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise self._write_error(exc) from exc

    def _write_error(self, exc: sqlite3.OperationalError) -> LaneError:
        """A write SQLite refused, as one line: a full disk or a read-only file system, with the fix."""
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_FULL" or "disk is full" in str(exc):
            return storage_error(self.path, OSError(errno.ENOSPC, "database or disk is full", str(self.path)))
        if _is_read_only(exc):
            return read_only_error(self.path, str(exc))
        return _unreadable(self.path, str(exc))

    def _row_error(self, table: str, exc: ValidationError | ValueError) -> LedgerError:
        detail = format_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        return _corrupt(self.path, f"a {table} row does not read back: {detail}")

    # -- roles -------------------------------------------------------------------------------

    def slot(self, role: str) -> Slot | None:
        row = self._db.execute(
            "SELECT recipe, instance, fingerprint, endpoint, since FROM slots WHERE role=?", (role,)
        ).fetchone()
        if row is None:
            return None
        try:
            return Slot(**dict(row))
        except ValidationError as exc:
            raise self._row_error("slots", exc) from exc

    def production(self) -> Slot | None:
        return self.slot("production")

    def rollback_pair(self) -> Slot | None:
        return self.slot("rollback")

    def port(self) -> int | None:
        row = self._db.execute("SELECT value FROM meta WHERE key='port'").fetchone()
        if row is None:
            return None
        try:
            return int(row["value"])
        except (TypeError, ValueError) as exc:
            raise self._row_error("meta (port)", ValueError(f"port = {row['value']!r}")) from exc

    def _set_slot(self, role: str, slot: Slot | None) -> None:
        self._db.execute("DELETE FROM slots WHERE role=?", (role,))
        if slot is not None:
            self._db.execute(
                "INSERT INTO slots VALUES (?, ?, ?, ?, ?, ?)",
                (role, slot.recipe, slot.instance, slot.fingerprint, slot.endpoint, slot.since),
            )

    # -- transitions and the journal ---------------------------------------------------------

    def open_transition(self) -> Transition | None:
        row = self._db.execute("SELECT * FROM transitions WHERE outcome IS NULL ORDER BY id DESC LIMIT 1").fetchone()
        return self._transition(row) if row else None

    def transition(self, tid: int) -> Transition:
        row = self._db.execute("SELECT * FROM transitions WHERE id=?", (tid,)).fetchone()
        if row is None:
            raise StateError(f"{self.path}: transitions.id = {tid} does not exist")
        return self._transition(row)

    def begin(self, recipe: str | None, previous: str | None, plan: TransitionPlan) -> int:
        kind = next(k for k, model in _PLANS.items() if isinstance(plan, model))
        with self.tx() as db:
            if db.execute("SELECT 1 FROM transitions WHERE outcome IS NULL").fetchone():
                raise StateError(
                    f"{self.path}: an unfinished transition is in the ledger; run `gb300lane status` to see it"
                )
            cur = db.execute(
                "INSERT INTO transitions (kind, recipe, previous, started_at, pid, plan) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    kind,
                    recipe,
                    previous,
                    utcnow(),
                    os.getpid(),
                    json.dumps(plan.model_dump(mode="json"), sort_keys=True),
                ),
            )
            return _rowid(cur)

    def journal(self, tid: int, step: str, phase: Phase, detail: Detail | None = None) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT INTO journal (transition_id, step, phase, at, detail) VALUES (?, ?, ?, ?, ?)",
                (tid, step, phase, utcnow(), json.dumps(detail or {}, sort_keys=True)),
            )

    def entries(self, tid: int) -> list[JournalEntry]:
        rows = self._db.execute(
            "SELECT step, phase, at, detail FROM journal WHERE transition_id=? ORDER BY id", (tid,)
        ).fetchall()
        out = []
        for r in rows:
            try:
                detail = json.loads(r["detail"])
            except (TypeError, ValueError) as exc:
                raise self._row_error("journal", ValueError(f"detail is not JSON: {exc}")) from exc
            if r["phase"] not in ("intent", "done", "failed") or not isinstance(detail, dict):
                raise self._row_error("journal", ValueError(f"phase {r['phase']!r}, detail {str(r['detail'])[:60]}"))
            out.append(JournalEntry(r["step"], r["phase"], r["at"], detail))
        return out

    def finish(
        self,
        tid: int,
        outcome: str,
        *,
        production: Slot | None | Literal[False] = False,
        rollback: Slot | None | Literal[False] = False,
        port: int | None = None,
        kept: list[tuple[Slot, str]] | None = None,
        event: NewEvent | None = None,
        links: CustodyLinks | None = None,
    ) -> int | None:
        """Close a transition and apply its role changes in one transaction.

        `production` / `rollback` left at False are unchanged; None clears the role.
        `links` (the verdict, boot report and recipe the event rests on) go into its custody row.
        Returns the id of the event written, if any.
        """
        with self.tx() as db:
            if production is not False:
                self._set_slot("production", production)
            if rollback is not False:
                self._set_slot("rollback", rollback)
            if port is not None:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('port', ?)", (str(port),))
            for slot, why in kept or []:
                self._keep(slot, why)
            event_id = self._event(event, tid, links) if event else None
            db.execute("UPDATE transitions SET outcome=?, finished_at=? WHERE id=?", (outcome, utcnow(), tid))
        self._witness()
        return event_id

    def last_event_id(self) -> int:
        """The number of the newest event (0 when there is none): what the witnesses are stamped with."""
        row = self._db.execute("SELECT max(id) AS n FROM events").fetchone()
        return int(row["n"] or 0)

    def _witness(self) -> None:
        """Write the committed roles to the other witnesses (the witness file, the instance records' marks)."""
        witness.write(self.production(), self.rollback_pair(), port=self.port(), event_id=self.last_event_id())

    def _transition(self, row: sqlite3.Row) -> Transition:
        kind = row["kind"]
        model = _PLANS.get(kind)
        if model is None:
            raise self._row_error("transitions", ValueError(f"kind = {kind!r}"))
        try:
            plan = model.model_validate_json(row["plan"])
        except ValidationError as exc:
            raise self._row_error(f"transitions (id {row['id']}, plan)", exc) from exc
        except ValueError as exc:
            raise self._row_error(f"transitions (id {row['id']}, plan)", exc) from exc
        return Transition(
            id=row["id"], kind=kind, recipe=row["recipe"], previous=row["previous"], started_at=row["started_at"],
            pid=row["pid"], plan=plan, outcome=row["outcome"],
        )  # fmt: skip

    # -- kept instances ----------------------------------------------------------------------

    def _keep(self, slot: Slot, why: str) -> None:
        self._db.execute(
            "INSERT INTO kept (instance, recipe, fingerprint, endpoint, kept_at, why) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(instance) DO UPDATE SET kept_at=excluded.kept_at, why=excluded.why, removed_at=NULL",
            (slot.instance, slot.recipe, slot.fingerprint, slot.endpoint, utcnow(), why),
        )

    def keep(self, slot: Slot, why: str) -> None:
        with self.tx():
            self._keep(slot, why)

    def kept(self) -> list[KeptInstance]:
        """Kept instances not yet removed, newest first."""
        rows = self._db.execute(
            "SELECT * FROM kept WHERE removed_at IS NULL ORDER BY kept_at DESC, instance"
        ).fetchall()
        try:
            return [KeptInstance(**dict(r)) for r in rows]
        except ValidationError as exc:
            raise self._row_error("kept", exc) from exc

    def forget(self, removed: set[str], events: list[NewEvent]) -> None:
        """Instances removed outside a transition (`down --force`): clear the roles they held, mark them removed
        among the kept, and write `events`, in one transaction, so the ledger never names an instance that is gone."""
        with self.tx() as db:
            for role in ("production", "rollback"):
                slot = self.slot(role)
                if slot is not None and slot.instance in removed:
                    self._set_slot(role, None)
            for name in removed:
                db.execute("UPDATE kept SET removed_at=? WHERE instance=? AND removed_at IS NULL", (utcnow(), name))
            for event in events:
                self._event(event, None)
        self._witness()

    def mark_removed(self, instance: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE kept SET removed_at=? WHERE instance=?", (utcnow(), instance))

    # -- history -----------------------------------------------------------------------------

    def _event(self, event: NewEvent, tid: int | None, links: CustodyLinks | None = None) -> int:
        row = event.model_dump()
        row["at"] = row["at"] or utcnow()
        row["forced"] = 1 if row["forced"] else 0
        cur = self._db.execute(
            f"INSERT INTO events ({', '.join(_EVENT_FIELDS)}, transition_id) "
            f"VALUES ({', '.join('?' for _ in _EVENT_FIELDS)}, ?)",
            (*(row[k] for k in _EVENT_FIELDS), tid),
        )
        event_id = _rowid(cur)
        stored = {"id": event_id, **{k: row[k] for k in _EVENT_FIELDS}, "transition_id": tid}
        self._custody(event_id, stored, links or CustodyLinks())
        return event_id

    def _custody(self, event_id: int, stored: dict[str, JsonValue], links: CustodyLinks) -> None:
        """Chain the event into the custody rows: each row's MAC covers the event, its links and the row before."""
        last = self._db.execute("SELECT mac FROM custody ORDER BY event_id DESC LIMIT 1").fetchone()
        prev = str(last["mac"]) if last else CUSTODY_ORIGIN
        record = keyed.canonical({"event": stored, "links": links.model_dump(mode="json")})
        # Signed with the user's key outside the state directory (`mac` holds the SSH signature, `key_id` its key).
        sig = signing.sign(CUSTODY_SEAL, (prev + "\n" + record).encode("utf-8"))
        self._db.execute(
            "INSERT INTO custody (event_id, record, prev, mac, key_id) VALUES (?, ?, ?, ?, ?)",
            (event_id, record, prev, sig["ssh_signature"], sig["key"]),
        )

    def custody_rows(self) -> list[CustodyRow]:
        """The custody rows, oldest first (none in a ledger no writable command has opened since they began)."""
        if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='custody'").fetchone():
            return []
        rows = self._db.execute("SELECT event_id, record, prev, mac, key_id FROM custody ORDER BY event_id")
        return [
            CustodyRow(int(r["event_id"]), str(r["record"]), str(r["prev"]), str(r["mac"]), str(r["key_id"]))
            for r in rows.fetchall()
        ]

    def event_rows(self) -> list[dict[str, JsonValue]]:
        """The events as stored (id, every field, transition_id), oldest first: what custody rows cover."""
        rows = self._db.execute(
            f"SELECT id, {', '.join(_EVENT_FIELDS)}, transition_id FROM events ORDER BY id"
        ).fetchall()
        return [dict(r) for r in rows]

    def record(self, event: NewEvent, tid: int | None = None, links: CustodyLinks | None = None) -> int:
        with self.tx():
            return self._event(event, tid, links)

    def events(self) -> list[LedgerEvent]:
        rows = self._db.execute(f"SELECT id, {', '.join(_EVENT_FIELDS)} FROM events ORDER BY id").fetchall()
        try:
            return [LedgerEvent(**{**dict(r), "forced": bool(r["forced"])}) for r in rows]
        except ValidationError as exc:
            raise self._row_error("events", exc) from exc


@dataclass(frozen=True)
class CustodyRow:
    """A custody row as stored: the event it covers, the canonical record, the previous MAC, its MAC and key id."""

    event_id: int
    record: str
    prev: str
    mac: str
    key_id: str


def read_ledger(path: Path | None = None) -> Ledger | None:
    """The ledger opened read-only, or None when none exists; LedgerError when one exists and cannot be read."""
    target = Path(path) if path else ledger_path()
    if not _precheck(target):
        return None
    return Ledger(target, readonly=True)


def _rowid(cur: sqlite3.Cursor) -> int:
    if cur.lastrowid is None:  # an INSERT always sets it; None would mean the statement was not one
        raise StateError("ledger: an INSERT recorded no row id")
    return cur.lastrowid
