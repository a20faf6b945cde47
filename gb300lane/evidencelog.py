"""The evidence log: what the cards wrote, entered when it was written, in an append-only, signed, hash-chained file.

`<state root>/evidence.log` holds one JSON line per entry: every registration (the card, its receipts
directory, the sha256 of registration.json and card.yaml, the candidate recipe and the sha256 of its whole
resolved content, the run of its question), and every manifest a receipts directory seals when a stage ends
(the run, each look's stage, each verdict and re-score with what it said, each extension, each report),
with the sha256 of the files it pins. Each line carries its number (`seq`), the sha256 of the line before it
(`prev`) and an SSH signature (`gb300lane.signing`) over both and the entry. The config directory, which
holds the signing key, also holds the log's head (`evidence-heads/<state root digest>.json`: the newest
line's number and sha256), rewritten after every entry.

What it proves. The files under `results/` are what an attacker with write access there can change; the log
remembers, outside them, that a run or a verdict existed and which bytes it had. A receipts directory
deleted, a verdict or manifest deleted or replaced, a registration overwritten, a verdict backdated (its bytes
change) or another run's verdict copied over one: each is a file the log names whose bytes are gone or
differ, and promotion asks the log, not the files, which verdict of a recipe is the newest. A line edited in
the log breaks the chain of sha256 (and the newest line's signature covers the whole chain); lines removed
from the end, or the file deleted, fall short of the head the config directory keeps. Signing a line needs
the private key, so the state directory alone (`state.key` included) cannot forge one.

What it cannot prove. Someone who can use the signing key or write the config directory (the same user,
root) can append, rewrite the head, or reset the log; the log is evidence against edits of the results and
state directories, not against the tool's own rights. It knows only what was written through the tool after
it existed: receipts made before, or on another machine, are unknown to it (`gb300lane evidence adopt`
enters a receipts directory whose chain of custody holds, saying so). Without a head in the config directory
(a new config directory), a log cut short at its end cannot be told from a shorter one: `verify` says so.
A `reset` starts a new log when the old cannot be repaired; the old file is kept beside it and the reset,
with its reason and the head it replaced, is the new log's first line.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field, JsonValue, ValidationError

from gb300lane import keyed, paths, signing
from gb300lane.errors import StateError
from gb300lane.fsio import atomic_write, writing
from gb300lane.locks import FileLock
from gb300lane.models import FrozenModel

LOG_FILE = "evidence.log"
#: What a line's signature is labelled with (a signature of one kind never verifies another).
ENTRY_SEAL = "evidence log entry"
#: `prev` of the first line.
ORIGIN = "0" * 64
HEADS_DIR = "evidence-heads"

EntryKind = Literal["registration", "run", "look", "verdict", "rescore", "extension", "report", "adopted", "reset"]
VerdictWord = Literal["PASS", "FAIL", "INCONCLUSIVE"]


class Entry(FrozenModel):
    """One thing a card wrote, as the log keeps it."""

    kind: EntryKind = Field(
        description="registration, run, look, verdict, rescore, extension, report, adopted "
        "(a receipts directory entered after the fact) or reset (a new log)."
    )
    at: str = Field(description="UTC time the entry was made (ISO 8601); the order is the line number's.")
    card: str | None = Field(default=None, description="Card name.")
    receipts: str | None = Field(default=None, description="The receipts directory (absolute path).")
    stage: str | None = Field(default=None, description="The manifest's stage (run, verdict-2, extension-1, ...).")
    candidate: str | None = Field(default=None, description="The candidate arm's recipe name.")
    candidate_sha256: str | None = Field(default=None, description="sha256 of the candidate's whole resolved recipe.")
    gates_sha256: str | None = Field(default=None, description="The registered gates' sha256.")
    files: dict[str, str] = Field(
        default_factory=dict, description="What the entry pins: path inside the receipts directory -> sha256."
    )
    verdict: VerdictWord | None = Field(default=None, description="What a verdict said.")
    number: int | None = Field(default=None, description="The verdict's number (2 and up: a re-score or extension).")
    run: int | None = Field(default=None, description="Registration: this run's number among its question's runs.")
    runs: int | None = Field(default=None, description="Registration: the runs its question's plan allows.")
    new_question: str | None = Field(
        default=None, description="Registration: why this run asks a new question, when it says so."
    )
    detail: str | None = Field(default=None, description="One line more (an adoption's or a reset's reason).")
    aside: str | None = Field(
        default=None,
        description="Registration: why the run is no question's run and never "
        "promotion evidence (a lane calibration's replicate, a reproduction of the write-up).",
    )


class Record(FrozenModel):
    """One line of the log."""

    schema_version: Literal[1] = Field(description="Line format version.")
    seq: int = Field(ge=1, description="Line number, from 1.")
    prev: str = Field(description="sha256 of the line before (ORIGIN for the first).")
    entry: Entry = Field(description="What was entered.")
    seal: dict[str, str] = Field(description="SSH signature over seq, prev and the entry.")


class Head(FrozenModel):
    """The newest line as the config directory remembers it."""

    schema_version: Literal[1] = Field(description="File format version.")
    log: str = Field(description="The log file it is the head of.")
    seq: int = Field(ge=0, description="The newest line's number.")
    sha256: str = Field(description="The newest line's sha256.")


class EvidenceLog(FrozenModel):
    """The log as read: every line that reads back, and what breaks it."""

    path: str = Field(description="The log file.")
    records: tuple[Record, ...] = Field(description="Every line, in order.")
    hashes: tuple[str, ...] = Field(description="Each line's sha256, in order.")
    breaks: tuple[str, ...] = Field(description="What does not hold, each naming the line and the fix.")
    notes: tuple[str, ...] = Field(description="What holds nothing but is worth saying (no head on record).")

    @property
    def ok(self) -> bool:
        return not self.breaks

    def entries(self) -> list[Entry]:
        return [r.entry for r in self.records]


def log_path() -> Path:
    """`<state root>/evidence.log`: one log per installation's state, beside the state key."""
    return paths.state_root() / LOG_FILE


def head_path(log: Path | None = None) -> Path:
    """The log's head in the config directory (beside the signing key), one per log file."""
    where = (log or log_path()).absolute()
    return signing.config_dir() / HEADS_DIR / f"{hashlib.sha256(str(where).encode()).hexdigest()[:24]}.json"


def utcnow() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _body(seq: int, prev: str, entry: object) -> bytes:
    return keyed.canonical({"seq": seq, "prev": prev, "entry": entry}).encode("utf-8")


def _read_head(log: Path) -> tuple[Head | None, str | None]:
    path = head_path(log)
    try:
        return Head.model_validate_json(path.read_bytes()), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return (
            None,
            f"{path}: the log's head is unreadable ({type(exc).__name__}); restore it, or `gb300lane "
            'evidence reset --reason "..."` starts a new log',
        )


def read_log(*, signatures: Literal["head", "all"] = "head") -> EvidenceLog:
    """The log with every break found: lines that do not read back or do not chain, the newest line's signature
    (every line's with `signatures="all"`), and the head the config directory keeps. Never raises for what the
    file holds; a missing log with no head is an empty one."""
    path = log_path()
    head, head_problem = _read_head(path)
    breaks: list[str] = [head_problem] if head_problem else []
    notes: list[str] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if head is not None and head.seq > 0:
            breaks.append(
                f"{path}: the evidence log is gone, and {head_path(path)} remembers {head.seq} entries; "
                'restore it from a backup (or `gb300lane evidence reset --reason "..."` starts a new one, '
                "and promotion then rests only on what is entered from then on)"
            )
        return EvidenceLog(path=str(path), records=(), hashes=(), breaks=tuple(breaks), notes=tuple(notes))
    except OSError as exc:
        breaks.append(f"{path}: the evidence log is unreadable ({exc.strerror or exc}); fix its permissions")
        return EvidenceLog(path=str(path), records=(), hashes=(), breaks=tuple(breaks), notes=tuple(notes))
    records: list[Record] = []
    hashes: list[str] = []
    bodies: list[tuple[bytes, dict[str, str]]] = []
    lines = raw.split(b"\n")
    torn = lines[-1] != b""
    prev = ORIGIN
    for n, line in enumerate(lines[:-1] if not torn else lines, 1):
        if torn and n == len(lines):
            breaks.append(
                f"{path}: line {n} is cut short (a write interrupted); `gb300lane evidence reset --reason "
                '"..."` starts a new log (the old one is kept beside it)'
            )
            break
        try:
            data = json.loads(line)
            rec = Record.model_validate(data)
        except (ValueError, ValidationError) as exc:
            breaks.append(
                f"{path}: line {n} does not read back ({type(exc).__name__}); it was edited: restore the "
                "log from a backup"
            )
            break
        if rec.seq != n or rec.prev != prev:
            breaks.append(
                f"{path}: line {n} does not follow the line before it (a line removed, inserted or "
                "edited); restore the log from a backup"
            )
            break
        digest = hashlib.sha256(line).hexdigest()
        records.append(rec)
        hashes.append(digest)
        bodies.append((_body(rec.seq, rec.prev, data["entry"]), rec.seal))
        prev = digest
    if not breaks and bodies:
        check = bodies if signatures == "all" else bodies[-1:]
        first = len(bodies) - len(check) + 1
        for n, (body, seal) in enumerate(check, first):
            status, text = signing.verify(ENTRY_SEAL, body, seal)
            if status != "ok":
                breaks.append(f"{path}: line {n}: {text}")
                break
    if head is None:
        if records:
            notes.append(
                f"{head_path(path)}: no head of this log in the config directory (a new config directory, "
                "or a log made elsewhere): lines removed from its end could not be seen"
            )
    elif not breaks:
        if head.seq > len(records):
            breaks.append(
                f"{path}: {len(records)} entries, and {head_path(path)} remembers {head.seq}: entries were "
                "removed from the end of the log; restore it from a backup"
            )
        elif head.seq > 0 and hashes[head.seq - 1] != head.sha256:
            breaks.append(
                f"{path}: line {head.seq} is not the one {head_path(path)} remembers: the log was "
                "rewritten; restore it from a backup"
            )
    return EvidenceLog(
        path=str(path), records=tuple(records), hashes=tuple(hashes), breaks=tuple(breaks), notes=tuple(notes)
    )


def require_intact(action: str) -> EvidenceLog:
    """The log, when it holds; StateError naming its first break otherwise (before anything is written)."""
    log = read_log()
    if not log.ok:
        raise StateError(f"refusing to {action}: {log.breaks[0]}")
    return log


def _write_head(log: Path, seq: int, digest: str) -> None:
    path = head_path(log)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StateError(
            f"{path.parent}: cannot create the evidence log's head there ({exc.strerror or exc}); the "
            "config directory must be writable"
        ) from None
    atomic_write(path, Head(schema_version=1, log=str(log.absolute()), seq=seq, sha256=digest).model_dump_json() + "\n")


def _line(seq: int, prev: str, entry: Entry) -> bytes:
    data: dict[str, JsonValue] = entry.model_dump(mode="json", exclude_defaults=True)
    data["kind"], data["at"] = entry.kind, entry.at
    body = _body(seq, prev, data)
    seal = signing.sign(ENTRY_SEAL, body)
    # A line the log's own reader would refuse (a key that is not a chosen signer) is never written: it would
    # break the log for every later entry.
    status, text = signing.verify(ENTRY_SEAL, body, seal)
    if status != "ok":
        raise StateError(
            f"{signing.signing_key_path()}: what it signs does not verify ({text}); nothing was entered "
            f"in the evidence log: restore the signing key, or add its public half to "
            f'{signing.allowed_signers_path()} with namespaces="{signing.NAMESPACE}"'
        )
    record = {"schema_version": 1, "seq": seq, "prev": prev, "entry": data, "seal": seal}
    return keyed.canonical(record).encode("utf-8")


def append(entry: Entry, *, action: str | None = None) -> Record:
    """Enter `entry` at the end of the log (under its lock), signed and chained, and move the head to it.

    A log that does not hold takes nothing: StateError naming its first break, so nothing is entered on top of
    a log someone cut short or rewrote."""
    path = log_path()
    with FileLock(path.with_name(path.name + ".lock")):
        log = read_log()
        if not log.ok:
            raise StateError(f"refusing to {action or 'enter ' + entry.kind} in the evidence log: {log.breaks[0]}")
        seq = len(log.records) + 1
        prev = log.hashes[-1] if log.hashes else ORIGIN
        line = _line(seq, prev, entry)
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        _write_head(path, seq, hashlib.sha256(line).hexdigest())
    return Record.model_validate_json(line)


def reset(reason: str) -> Record:
    """Start a new log: the old file is kept beside it (`evidence.log.reset-<time>`), and the new log's first
    line says why and which head it replaced. What the old log knew no longer counts for promotion."""
    if not reason.strip():
        raise StateError('evidence reset needs --reason "...": a new log says why the old one was set aside')
    path = log_path()
    with FileLock(path.with_name(path.name + ".lock")):
        old = read_log()
        head, _ = _read_head(path)
        kept = None
        if path.exists():
            kept = path.with_name(f"{LOG_FILE}.reset-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}")
            with writing(kept):
                os.replace(path, kept)
        replaced = (
            f"head {head.seq} {head.sha256[:16]}"
            if head is not None
            else f"{len(old.records)} entries, no head on record"
        )
        detail = (
            f"{reason.strip()}; replaced {replaced}"
            + (f" (kept as {kept.name})" if kept else "")
            + (f"; it broke at: {old.breaks[0]}" if old.breaks else "")
        )
        line = _line(1, ORIGIN, Entry(kind="reset", at=utcnow(), detail=detail))
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, line + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        _write_head(path, 1, hashlib.sha256(line).hexdigest())
    return Record.model_validate_json(line)


__all__ = [
    "Entry",
    "EntryKind",
    "EvidenceLog",
    "Head",
    "Record",
    "append",
    "head_path",
    "log_path",
    "read_log",
    "require_intact",
    "reset",
    "utcnow",
]
