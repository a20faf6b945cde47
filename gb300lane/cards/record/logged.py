"""What the evidence log (`gb300lane.evidencelog`) remembers of each receipts directory, and where the files
no longer show it.

Every registration and every sealed stage of a card is entered in the log when it is written
(`receipts.register`, `Receipts.write_manifest`), with the sha256 of the files it pins: registration.json and
card.yaml, each manifest, each verdict. `logged_runs` reads the log back into one `LoggedRun` per receipts
directory; `missing` names each pinned file that is gone or whose bytes differ (a directory deleted, a verdict
and its manifest deleted, a registration overwritten, a verdict backdated, another run's verdict copied over
it); `unlogged` names the verdicts and manifests a directory holds that the log never saw. Promotion
(`verdicts.evidence_for`) asks the log, not the files, which verdict of a recipe is the newest, and counts each
of these as a break; `card register` asks it for a question's earlier runs (`earlier_runs`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from gb300lane.cards.decide.question import EarlierRun
from gb300lane.evidencelog import Entry, EntryKind, EvidenceLog, VerdictWord
from gb300lane.fsio import sha256_file
from gb300lane.models import FrozenModel

#: Entries that mean an arm's data was sealed: the run has measured something.
MEASURED: frozenset[str] = frozenset({"run", "verdict", "rescore", "extension", "report"})


class LoggedFile(FrozenModel):
    """A file of a receipts directory as the log pinned it last."""

    sha256: str = Field(description="Its sha256 when it was entered.")
    seq: int = Field(description="The log line that entered it.")
    kind: EntryKind = Field(description="What that line entered.")


class LoggedVerdict(FrozenModel):
    """A verdict as the log entered it."""

    number: int = Field(description="Its number in the receipts directory.")
    verdict: VerdictWord = Field(description="What it said.")
    kind: EntryKind = Field(description="verdict (a first or an extended verdict) or rescore.")
    file: str = Field(description="Its path inside the receipts directory.")
    sha256: str = Field(description="Its sha256 when it was entered.")
    seq: int = Field(description="The log line that entered it: the order of verdicts.")
    at: str = Field(description="When it was entered (UTC).")


class LoggedRun(FrozenModel):
    """One receipts directory as the log remembers it."""

    receipts: str = Field(description="The receipts directory (absolute).")
    card: str = Field(description="The card's name.")
    candidate: str | None = Field(default=None, description="The candidate arm's recipe.")
    candidate_sha256: str | None = Field(default=None, description="sha256 of its resolved recipe at registration.")
    gates_sha256: str | None = Field(default=None, description="The registered gates' sha256.")
    registered_seq: int | None = Field(default=None, description="The line that entered its registration.")
    registered_at: str | None = Field(default=None, description="When that line was written (UTC).")
    run: int | None = Field(default=None, description="Its number among its question's runs.")
    runs: int | None = Field(default=None, description="The runs its question allows.")
    new_question: str | None = Field(default=None, description="Why it asked a new question, when it said so.")
    adopted: str | None = Field(default=None, description="Why it was entered after the fact (`evidence adopt`).")
    aside: str | None = Field(default=None, description="Why it is no question's run and never promotion evidence.")
    files: dict[str, LoggedFile] = Field(default_factory=dict, description="Every file the log pinned, newest first.")
    verdicts: tuple[LoggedVerdict, ...] = Field(default=(), description="Its verdicts, in the order entered.")
    measured: bool = Field(default=False, description="True once any stage of it was sealed.")

    @property
    def newest(self) -> LoggedVerdict | None:
        return self.verdicts[-1] if self.verdicts else None

    def as_earlier(self) -> EarlierRun:
        newest = self.newest
        return EarlierRun(
            receipts=self.receipts,
            registered_at=self.registered_at or "?",
            run=self.run,
            runs=self.runs,
            gates_sha256=self.gates_sha256,
            verdict=f"verdict {newest.number} {newest.verdict}" if newest else None,
            measured=self.measured,
            new_question=self.new_question,
        )


def receipts_key(root: Path) -> str:
    """How the log names a receipts directory: its absolute path, links resolved."""
    return str(Path(root).resolve())


def _fold(run: LoggedRun | None, seq: int, e: Entry) -> LoggedRun:
    base = run or LoggedRun(receipts=e.receipts or "?", card=e.card or "?")
    update: dict[str, object] = {}
    if e.kind in ("registration", "adopted"):
        update.update(
            candidate=e.candidate,
            candidate_sha256=e.candidate_sha256,
            gates_sha256=e.gates_sha256,
            registered_seq=seq,
            registered_at=e.at,
            run=e.run,
            runs=e.runs,
            new_question=e.new_question,
            aside=e.aside,
        )
        if e.kind == "adopted":
            update["adopted"] = e.detail or "adopted"
    files = dict(base.files)
    for rel, digest in e.files.items():
        files[rel] = LoggedFile(sha256=digest, seq=seq, kind=e.kind)
    update["files"] = files
    if e.kind in MEASURED:
        update["measured"] = True
    verdicts = list(base.verdicts)
    if e.verdict is not None and e.number is not None:
        rel = f"verdicts/verdict-{e.number}.json"
        kind: EntryKind = "rescore" if e.kind == "rescore" else "verdict"
        verdicts.append(
            LoggedVerdict(
                number=e.number, verdict=e.verdict, kind=kind, file=rel, sha256=e.files.get(rel, ""), seq=seq, at=e.at
            )
        )
    update["verdicts"] = tuple(verdicts)
    return base.model_copy(update=update)


def logged_runs(log: EvidenceLog) -> dict[str, LoggedRun]:
    """Every receipts directory the log knows, by `receipts_key`, in the order first entered."""
    out: dict[str, LoggedRun] = {}
    for rec in log.records:
        e = rec.entry
        if e.kind == "reset":
            out.clear()  # a reset log knows nothing before it
            continue
        if e.receipts is None:
            continue
        out[e.receipts] = _fold(out.get(e.receipts), rec.seq, e)
    return out


def earlier_runs(log: EvidenceLog, card: str, candidate_sha256: str | None, *, other: bool = False) -> list[EarlierRun]:
    """The question's registrations the log remembers (this card, this candidate content), oldest first; with
    `other`, the card's registrations of any other candidate content instead."""
    return [
        r.as_earlier()
        for r in logged_runs(log).values()
        if r.card == card
        and r.aside is None
        and (r.candidate_sha256 != candidate_sha256 if other else r.candidate_sha256 == candidate_sha256)
        and r.registered_seq is not None
    ]


def missing(run: LoggedRun) -> list[str]:
    """Each file the log pinned that is gone or whose bytes differ; the directory itself when it is gone."""
    root = Path(run.receipts)
    said = (
        f"verdict {run.newest.number} {run.newest.verdict} entered at line {run.newest.seq}"
        if run.newest
        else f"registered at line {run.registered_seq}"
        if run.registered_seq
        else "entered"
    )
    if not root.is_dir():
        return [f"{root}: the receipts of card {run.card} ({said}) are gone; the evidence log remembers them"]
    out = []
    for rel, pinned in sorted(run.files.items(), key=lambda kv: kv[1].seq):
        path = root / rel
        if not path.is_file():
            out.append(
                f"{path}: the evidence log entered it at line {pinned.seq} ({pinned.kind} of card {run.card}), "
                "and it is gone"
            )
            continue
        try:
            now = sha256_file(path)
        except OSError:
            now = "unreadable"
        if now != pinned.sha256:
            out.append(
                f"{path}: sha256 {now[:16]} is not the {pinned.sha256[:16]} the evidence log entered at line "
                f"{pinned.seq} ({pinned.kind} of card {run.card}): replaced, backdated or copied from another "
                "run"
            )
    return out


def unlogged(root: Path, run: LoggedRun | None) -> list[str]:
    """The verdicts and manifests a receipts directory holds that the log never entered (with the fix)."""
    fix = (
        f"it was not written by this installation's tool, or was copied in: `gb300lane evidence adopt {root} "
        '--reason "..."` enters a directory whose chain of custody holds'
    )
    if run is None:
        verdicts = root / "verdicts"
        held = sorted(p.name for p in verdicts.glob("verdict-*.json")) if verdicts.is_dir() else []
        return [
            f"{root}: a registered receipts directory the evidence log never entered"
            + (f" (holding {', '.join(held)})" if held else "")
            + f"; {fix}"
        ]
    out = []
    for p in sorted([*root.glob("manifest*.json"), *(root / "verdicts").glob("verdict-*.json")]):
        rel = str(p.relative_to(root))
        if rel not in run.files:
            out.append(f"{p}: not in the evidence log (written after its last entry, or added by hand); {fix}")
    return out


__all__ = [
    "LoggedFile",
    "LoggedRun",
    "LoggedVerdict",
    "earlier_runs",
    "logged_runs",
    "missing",
    "receipts_key",
    "unlogged",
]
