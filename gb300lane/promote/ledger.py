"""The promotion ledger: production, the rollback pair, transitions, their journal, kept instances, history.

One SQLite file under the state directory, in WAL mode. Every change of role
is one `BEGIN IMMEDIATE` transaction. A transition writes a journal row
(`intent`) before each side effect on the lane and another (`done`) after it,
so a process killed at any point leaves a journal that says how far it got.
A transition whose `outcome` is NULL is unfinished: running when the lock is
held, crashed when it is not.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gb300lane import paths
from gb300lane.errors import StateError
from gb300lane.promote.models import LedgerEvent, Slot

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

_EVENT_FIELDS = (
    "at", "kind", "recipe", "instance", "fingerprint", "previous", "verdict",
    "forced", "reason", "restore_seconds", "tool_seconds", "detail",
)


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ledger_path() -> Path:
    return paths.state_dir() / LEDGER_FILE


@dataclass(frozen=True)
class Transition:
    """A transitions row: what was being done, from what, and the plan it wrote up front."""

    id: int
    kind: str
    recipe: str | None
    previous: str | None
    started_at: str
    pid: int
    plan: dict[str, Any]
    outcome: str | None


@dataclass(frozen=True)
class JournalEntry:
    step: str
    phase: str
    at: str
    detail: dict[str, Any]


class Ledger:
    """The SQLite ledger. Cheap to open; open one per command."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else ledger_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE), never implicit.
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            with self.tx():
                # Statement by statement: executescript would COMMIT the open transaction first.
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    self._db.execute(statement)
                row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif int(row["value"]) != SCHEMA_VERSION:
                    raise StateError(
                        f"{self.path}: meta.schema_version = {row['value']}, this tool reads {SCHEMA_VERSION}; "
                        "use the gb300lane version that wrote it"
                    )
        except sqlite3.DatabaseError as exc:
            raise StateError(
                f"{self.path}: not a readable promotion ledger ({exc}); move it aside to start a new ledger"
            ) from exc

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls join the outer one."""
        if self._db.in_transaction:
            yield self._db
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- roles -------------------------------------------------------------------------------

    def slot(self, role: str) -> Slot | None:
        row = self._db.execute(
            "SELECT recipe, instance, fingerprint, endpoint, since FROM slots WHERE role=?", (role,)
        ).fetchone()
        return Slot(**dict(row)) if row else None

    def production(self) -> Slot | None:
        return self.slot("production")

    def rollback_pair(self) -> Slot | None:
        return self.slot("rollback")

    def port(self) -> int | None:
        row = self._db.execute("SELECT value FROM meta WHERE key='port'").fetchone()
        return int(row["value"]) if row else None

    def _set_slot(self, role: str, slot: Slot | None) -> None:
        self._db.execute("DELETE FROM slots WHERE role=?", (role,))
        if slot is not None:
            self._db.execute(
                "INSERT INTO slots VALUES (?, ?, ?, ?, ?, ?)",
                (role, slot.recipe, slot.instance, slot.fingerprint, slot.endpoint, slot.since),
            )

    # -- transitions and the journal ---------------------------------------------------------

    def open_transition(self) -> Transition | None:
        row = self._db.execute(
            "SELECT * FROM transitions WHERE outcome IS NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return _transition(row) if row else None

    def transition(self, tid: int) -> Transition:
        row = self._db.execute("SELECT * FROM transitions WHERE id=?", (tid,)).fetchone()
        if row is None:
            raise StateError(f"{self.path}: transitions.id = {tid} does not exist")
        return _transition(row)

    def begin(self, kind: str, recipe: str | None, previous: str | None, plan: dict[str, Any]) -> int:
        with self.tx() as db:
            if db.execute("SELECT 1 FROM transitions WHERE outcome IS NULL").fetchone():
                raise StateError(
                    f"{self.path}: an unfinished transition is in the ledger; run `gb300lane status` to see it"
                )
            cur = db.execute(
                "INSERT INTO transitions (kind, recipe, previous, started_at, pid, plan) VALUES (?, ?, ?, ?, ?, ?)",
                (kind, recipe, previous, utcnow(), os.getpid(), json.dumps(plan, sort_keys=True)),
            )
            return _rowid(cur)

    def update_plan(self, tid: int, **changes: Any) -> dict[str, Any]:
        with self.tx() as db:
            plan = self.transition(tid).plan
            plan.update(changes)
            db.execute("UPDATE transitions SET plan=? WHERE id=?", (json.dumps(plan, sort_keys=True), tid))
            return plan

    def journal(self, tid: int, step: str, phase: str, detail: dict[str, Any] | None = None) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT INTO journal (transition_id, step, phase, at, detail) VALUES (?, ?, ?, ?, ?)",
                (tid, step, phase, utcnow(), json.dumps(detail or {}, sort_keys=True)),
            )

    def entries(self, tid: int) -> list[JournalEntry]:
        rows = self._db.execute(
            "SELECT step, phase, at, detail FROM journal WHERE transition_id=? ORDER BY id", (tid,)
        ).fetchall()
        return [JournalEntry(r["step"], r["phase"], r["at"], json.loads(r["detail"])) for r in rows]

    def finish(
        self,
        tid: int,
        outcome: str,
        *,
        production: Slot | None | bool = False,
        rollback: Slot | None | bool = False,
        port: int | None = None,
        kept: list[tuple[Slot, str]] | None = None,
        event: dict[str, Any] | None = None,
    ) -> int | None:
        """Close a transition and apply its role changes in one transaction.

        `production` / `rollback` left at False are unchanged; None clears the role.
        Returns the id of the event written, if any.
        """
        with self.tx() as db:
            if production is not False:
                self._set_slot("production", production)  # type: ignore[arg-type]
            if rollback is not False:
                self._set_slot("rollback", rollback)  # type: ignore[arg-type]
            if port is not None:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('port', ?)", (str(port),))
            for slot, why in kept or []:
                self._keep(slot, why)
            event_id = self._event(event, tid) if event else None
            db.execute(
                "UPDATE transitions SET outcome=?, finished_at=? WHERE id=?", (outcome, utcnow(), tid)
            )
            return event_id

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

    def kept(self) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT * FROM kept WHERE removed_at IS NULL ORDER BY kept_at DESC, instance"
        ).fetchall()
        return [dict(r) for r in rows]

    def mark_removed(self, instance: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE kept SET removed_at=? WHERE instance=?", (utcnow(), instance))

    # -- history -----------------------------------------------------------------------------

    def _event(self, event: dict[str, Any], tid: int | None) -> int:
        unknown = set(event) - set(_EVENT_FIELDS)
        if unknown:
            raise StateError(f"ledger event has unknown fields {sorted(unknown)}")
        row = {k: event.get(k) for k in _EVENT_FIELDS}
        row["at"] = row["at"] or utcnow()
        row["forced"] = 1 if row["forced"] else 0
        cur = self._db.execute(
            f"INSERT INTO events ({', '.join(_EVENT_FIELDS)}, transition_id) "
            f"VALUES ({', '.join('?' for _ in _EVENT_FIELDS)}, ?)",
            (*row.values(), tid),
        )
        return _rowid(cur)

    def record(self, event: dict[str, Any], tid: int | None = None) -> int:
        with self.tx():
            return self._event(event, tid)

    def events(self) -> list[LedgerEvent]:
        rows = self._db.execute(f"SELECT id, {', '.join(_EVENT_FIELDS)} FROM events ORDER BY id").fetchall()
        return [LedgerEvent(**{**dict(r), "forced": bool(r["forced"])}) for r in rows]


def _rowid(cur: sqlite3.Cursor) -> int:
    if cur.lastrowid is None:  # an INSERT always sets it; None would mean the statement was not one
        raise StateError("ledger: an INSERT recorded no row id")
    return cur.lastrowid


def _transition(row: sqlite3.Row) -> Transition:
    return Transition(
        id=row["id"],
        kind=row["kind"],
        recipe=row["recipe"],
        previous=row["previous"],
        started_at=row["started_at"],
        pid=row["pid"],
        plan=json.loads(row["plan"]),
        outcome=row["outcome"],
    )
