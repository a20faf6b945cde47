"""What the lane's plans may read: only receipts whose chain of custody holds and that the evidence log entered.

The noise ledger, the plans' earlier control data and the time plans' boot seconds read what the lane
measured (`receipts.lane_receipts`). A receipts directory counts there only when its chain verifies (sealed
manifests by a chosen signer, every file as hashed: `chain.walk`, without re-scoring) and the evidence log
entered it with the files it holds (`logged.missing`); a write-up's transcribed receipts, shipped with the
package, need only their chain. Everything else is left out and said: `planning_receipts` returns what it
kept and, for each directory it skipped, why, so a hand-made or copied directory (four copies of one card
with A2 made equal to A, which would shrink the lane's boot sd and the plan's size a hundredfold) never
reaches a plan that `card register` then signs.

The check is a separate step at the readers' input, so what they compute from the receipts is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gb300lane import evidencelog
from gb300lane.cards.record.chain import walk
from gb300lane.cards.record.logged import LoggedRun, logged_runs, missing, receipts_key
from gb300lane.cards.record.receipts import Receipts, lane_receipts
from gb300lane.errors import LaneError


@dataclass(frozen=True)
class Skipped:
    """A receipts directory a plan did not read, and why."""

    receipts: str
    why: str


@dataclass(frozen=True)
class Planning:
    """The receipts a plan reads, and those it left out."""

    kept: tuple[Receipts, ...]
    skipped: tuple[Skipped, ...]

    def note(self, besides: str | None = None) -> str | None:
        """One line on what was left out (`besides`: a receipts directory not to count, as `card register` leaves
        out the one it has just made, which has no manifest yet); None when nothing was."""
        skipped = [s for s in self.skipped if besides is None or s.receipts != besides]
        if not skipped:
            return None
        first = skipped[0]
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        return (
            f"{len(skipped)} receipts director{'ies' if len(skipped) != 1 else 'y'} left out of the "
            f"lane's noise and plans, their chain of custody or the evidence log not holding: {first.receipts}: "
            f"{first.why}{more}; `gb300lane verify --evidence` shows every one"
        )


#: A chain's walk (its seals cost an ssh-keygen each), by directory and the stamp of every file in it.
_MEMO: dict[tuple[str, tuple[tuple[str, int, int], ...]], str | None] = {}


def _stamp(root: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    for p in sorted(root.rglob("*")):
        try:
            st = p.stat()
        except OSError:
            continue
        if p.is_file():
            out.append((str(p.relative_to(root)), st.st_mtime_ns, st.st_size))
    return tuple(out)


def _chain_problem(rec: Receipts) -> str | None:
    key = (str(rec.root), _stamp(rec.root))
    if key not in _MEMO:
        br = walk(rec).first_break
        _MEMO[key] = None if br is None else f"its chain breaks at {br.file or br.kind}: {br.detail}"
    return _MEMO[key]


def problem(rec: Receipts, log: evidencelog.EvidenceLog, runs: dict[str, LoggedRun] | None = None) -> str | None:
    """Why `rec` may not be read for planning (None: it may)."""
    why = _chain_problem(rec)
    if why is not None:
        return why
    try:
        if rec.registration().transcribed:
            return None
    except LaneError:
        pass
    if not log.ok:
        return f"the evidence log does not hold ({log.breaks[0]})"
    run = (runs if runs is not None else logged_runs(log)).get(receipts_key(rec.root))
    if run is None:
        return "the evidence log never entered it (copied in, or made by hand)"
    gone = missing(run)
    return gone[0] if gone else None


def planning_receipts(base: Path | None = None) -> Planning:
    """`lane_receipts` whose chain holds and that the evidence log entered; and what was left out, with why."""
    log = evidencelog.read_log()
    runs = logged_runs(log)
    kept, skipped = [], []
    for rec in lane_receipts(base):
        why = problem(rec, log, runs)
        if why is None:
            kept.append(rec)
        else:
            skipped.append(Skipped(receipts=str(rec.root), why=why))
    return Planning(kept=tuple(kept), skipped=tuple(skipped))


__all__ = ["Planning", "Skipped", "planning_receipts", "problem"]
