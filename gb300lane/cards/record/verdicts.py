"""Verdicts: the pre-registered score (verdict 1), re-scores that point back at it, and look-ups.

A verdict is a write-once file. A re-score never edits verdict 1: it writes
verdict n+1 with the reason, the gate changes (old -> new) and the sha256 of
the verdict it supersedes, so both stay on the record.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from gb300lane import evidencelog
from gb300lane.cards.decide.question import QuestionRun
from gb300lane.cards.decide.results import Status
from gb300lane.cards.decide.verdict import (
    PreviousVerdict,
    Verdict,
    apply_changes,
    gates_of,
)
from gb300lane.cards.record.card_custody import require_intact
from gb300lane.cards.record.inputs import verdict_over
from gb300lane.cards.record.logged import LoggedRun, logged_runs, missing, receipts_key, unlogged
from gb300lane.cards.record.look_receipts import stopped_at
from gb300lane.cards.record.models import TranscribedRescore
from gb300lane.cards.record.receipts import Receipts, RecipeRef, all_receipts, read_verdict
from gb300lane.cards.schema import Card, stage_count
from gb300lane.errors import CardError, LaneError
from gb300lane.fsio import dumps_json, sha256_bytes, sha256_file
from gb300lane.models import FrozenModel


class VerdictRef(FrozenModel):
    """What promotion needs to know about a card's newest verdict."""

    card: str = Field(description="Card name.")
    receipts: str = Field(description="Receipts directory.")
    number: int = Field(description="Verdict number (2 over 1).")
    verdict: Status = Field(description="PASS, FAIL or INCONCLUSIVE.")
    written_at: str = Field(description="UTC time the verdict was written.")
    file: str = Field(description="Path of the verdict file.")
    sha256: str = Field(description="sha256 of the verdict file.")
    candidate_recipe: str = Field(description="Recipe of the candidate arm.")
    control_recipe: str = Field(description="Recipe of the control arms.")
    transcribed: bool = Field(default=False, description="True when computed from a write-up's transcribed receipts.")


def _refuse_transcribed(rec: Receipts) -> None:
    if rec.registration().transcribed:
        raise CardError(
            f"{rec.root}: transcribed receipts are the write-up's record and are never written to; "
            "score them with --dry-run, or run `gb300lane card reproduce br1|br2`"
        )


def score(rec: Receipts, *, dry_run: bool = False) -> Verdict:
    """Verdict 1: the registered gates over the receipts, written once (`dry_run`: computed, not written)."""
    card = rec.card()
    rec.check_frozen(card)
    if dry_run:
        return verdict_over(rec, card, card.gates)
    _refuse_transcribed(rec)
    if rec.verdict_numbers():
        raise CardError(
            f"{rec.verdict_file(1)}: verdict 1 is already recorded ({read_verdict(rec, 1).verdict}); "
            "the pre-registered verdict is final: use `gb300lane card rescore CARD --reason ...` to re-score"
        )
    done = [
        a.name
        for a in card.arms
        if (rec.arm_dir(a.name) / "done.json").is_file() or (rec.arm_dir(a.name) / "transcribed.json").is_file()
    ]
    if len(done) != len(card.arms):
        missing = [a.name for a in card.arms if a.name not in done]
        raise CardError(
            f"{rec.root}: arms {', '.join(missing)} have not finished; run `gb300lane card run {card.name}` first"
        )
    if stage_count(card) > 1 and stopped_at(rec) is None:
        raise CardError(
            f"{rec.root}: the sequential card has not stopped yet (looks on record: "
            f"{rec.look_numbers() or 'none'}); run `gb300lane card run {card.name}` to continue it"
        )
    require_intact(rec, "score")
    v = verdict_over(rec, card, card.gates)
    rec.write_json(rec.verdict_file(1), v.payload())
    rec.write_manifest("verdict-1")
    return v


def compute_rescore(rec: Receipts, reason: str, changes: list[str]) -> tuple[Verdict, Verdict]:
    """The next verdict over the latest one's gates with `changes` applied; returns (previous, new)."""
    if not reason.strip():
        raise CardError("a re-score needs --reason: the record must say why the gates changed")
    card = rec.card()
    rec.check_frozen(card)
    nums = rec.verdict_numbers()
    if not nums:
        raise CardError(f"{rec.root}: no verdict 1 yet; run `gb300lane card score {card.name}` first")
    require_intact(rec, "re-score")
    prev = read_verdict(rec, nums[-1])
    base = gates_of(prev)
    gates, recorded = apply_changes(card, base, changes)
    if not recorded:
        raise CardError("a re-score needs at least one gate change (GATE.KEY=VALUE)")
    pointer = PreviousVerdict(
        number=prev.number,
        file=str(rec.verdict_file(prev.number).relative_to(rec.root)),
        sha256=sha256_file(rec.verdict_file(prev.number)),
        verdict=prev.verdict,
    )
    new = verdict_over(rec, card, gates, number=prev.number + 1, previous=pointer, reason=reason, changes=recorded)
    return prev, new


def rescore(rec: Receipts, reason: str, changes: list[str]) -> Verdict:
    """Write verdict n+1; verdict n stays as it was."""
    _refuse_transcribed(rec)
    _, new = compute_rescore(rec, reason, changes)
    rec.write_json(rec.verdict_file(new.number), new.payload())
    rec.write_manifest(f"verdict-{new.number}")
    return new


def transcribed_verdicts(rec: Receipts) -> tuple[Verdict, Verdict | None, TranscribedRescore | None]:
    """A written-up card's verdicts, computed (never stored): the registered gates, then its re-score.

    Returns (verdict 1, verdict 2 or None, the transcribed re-score record or None).
    """
    card = rec.card()
    rec.check_frozen(card)
    v1 = verdict_over(rec, card, card.gates)
    rs_file = rec.root / "rescore.json"
    if not rs_file.is_file():
        return v1, None, None
    rs = rec.read_model(rs_file, TranscribedRescore)
    gates, changes = apply_changes(card, card.gates, rs.changes)
    pointer = PreviousVerdict(
        number=1,
        file="verdicts/verdict-1.json (not written: computed from transcribed receipts)",
        sha256=sha256_bytes(dumps_json(v1.model_dump(mode="json"))),
        verdict=v1.verdict,
    )
    v2 = verdict_over(rec, card, gates, number=2, previous=pointer, reason=rs.reason, changes=changes)
    return v1, v2, rs


def _newest_ref(rec: Receipts, card: Card) -> VerdictRef | None:
    if rec.registration().transcribed:
        # the write-up's verdicts are derived from its receipts; the file that
        # pins the newest one is the transcribed re-score (or the card itself)
        v1, v2, _ = transcribed_verdicts(rec)
        v = v2 or v1
        path = rec.root / ("rescore.json" if v2 else "card.yaml")
        return VerdictRef(
            card=card.name,
            receipts=str(rec.root),
            number=v.number,
            verdict=v.verdict,
            written_at=rec.registration().registered_at,
            file=str(path),
            sha256=sha256_file(path),
            candidate_recipe=v.candidate_recipe,
            control_recipe=v.control_recipe,
            transcribed=True,
        )
    nums = rec.verdict_numbers()
    if not nums:
        return None
    v = read_verdict(rec, nums[-1])
    path = rec.verdict_file(nums[-1])
    return VerdictRef(
        card=card.name,
        receipts=str(rec.root),
        number=v.number,
        verdict=v.verdict,
        written_at=v.written_at,
        file=str(path),
        sha256=sha256_file(path),
        candidate_recipe=v.candidate_recipe,
        control_recipe=v.control_recipe,
    )


def latest_verdict_for(recipe_name: str, base: Path | None = None) -> VerdictRef | None:
    """The newest verdict (a re-score over the verdict it supersedes) of a card whose B arm is the recipe.

    Written-up cards count too: their verdicts are computed from the
    transcribed receipts (BR1's B arm is v27, so v27's newest verdict is
    BR1's re-score).
    """
    best: tuple[str, int, VerdictRef] | None = None
    for rec in all_receipts(base):
        try:
            card = rec.card()
        except CardError:
            continue
        if card.candidate.recipe != recipe_name:
            continue
        ref = _newest_ref(rec, card)
        if ref is None:
            continue
        key = (ref.written_at, ref.number, ref)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


class CandidateEvidence(FrozenModel):
    """What promotion rests on for a recipe: the newest verdict the evidence log knows, and every break."""

    recipe: str = Field(description="The candidate recipe.")
    ref: VerdictRef | None = Field(
        description="Its newest verdict as the evidence log ordered them (a write-up's "
        "transcribed verdict when the log knows none); None when there is none."
    )
    breaks: tuple[str, ...] = Field(
        description="What the log knows that the files no longer show, verdicts the log "
        "never saw, and the log's own breaks; each names the file and the fix."
    )
    registered: RecipeRef | None = Field(description="The candidate as the verdict's registration froze it.")
    question: QuestionRun | None = Field(description="Which run of its question the verdict's receipts are.")


def _logged_ref(run: LoggedRun, recipe: str) -> VerdictRef:
    v = run.newest
    assert v is not None
    path = Path(run.receipts) / v.file
    control = "unknown"
    written = v.at
    try:
        if path.is_file() and sha256_file(path) == v.sha256:
            got = Verdict.model_validate_json(path.read_bytes())
            control, written = got.control_recipe, got.written_at
    except (OSError, ValueError):
        pass
    return VerdictRef(
        card=run.card,
        receipts=run.receipts,
        number=v.number,
        verdict=v.verdict,
        written_at=written,
        file=str(path),
        sha256=v.sha256,
        candidate_recipe=recipe,
        control_recipe=control,
    )


def evidence_for(recipe_name: str, base: Path | None = None) -> CandidateEvidence:
    """The newest verdict of the recipe as the evidence log orders them, and what breaks it: every run or verdict
    of the recipe the log knows whose files are gone or differ (`logged.missing`), every verdict of it under the
    results directory the log never entered (`logged.unlogged`), and the log's own breaks. Written-up cards
    (transcribed, shipped with the package) are never in the log: their verdict counts only when the log knows
    none of the recipe."""
    log = evidencelog.read_log()
    breaks = list(log.breaks)
    runs = logged_runs(log)
    mine = [r for r in runs.values() if r.candidate == recipe_name and r.aside is None]
    for run in mine:
        breaks.extend(missing(run))
    transcribed: list[VerdictRef] = []
    for rec in all_receipts(base):
        try:
            reg = rec.registration()
            card = rec.card()
        except (CardError, LaneError, ValueError):
            continue
        if card.candidate.recipe != recipe_name:
            continue
        if reg.transcribed:
            ref = _newest_ref(rec, card)
            if ref is not None:
                transcribed.append(ref)
            continue
        known = runs.get(receipts_key(rec.root))
        if known is None and not rec.verdict_numbers():
            continue  # registered, never scored and never entered: evidence of nothing
        breaks.extend(unlogged(rec.root, known))
    scored = [r for r in mine if r.newest is not None]
    newest = max(scored, key=lambda r: r.newest.seq if r.newest else 0, default=None)
    ref = (
        _logged_ref(newest, recipe_name)
        if newest is not None
        else (max(transcribed, key=lambda t: (t.written_at, t.number)) if transcribed else None)
    )
    registered = question = None
    if ref is not None and Path(ref.receipts, "registration.json").is_file():
        try:
            rec = Receipts(Path(ref.receipts))
            reg = rec.registration()
            registered = reg.candidate_ref(rec.card())
            question = reg.question
        except (CardError, LaneError, ValueError):
            pass
    return CandidateEvidence(
        recipe=recipe_name, ref=ref, breaks=tuple(dict.fromkeys(breaks)), registered=registered, question=question
    )


def newest_verdict(rec: Receipts) -> VerdictRef | None:
    """A receipts directory's newest verdict (written-up cards: computed from their transcribed receipts)."""
    return _newest_ref(rec, rec.card())


__all__ = [
    "CandidateEvidence",
    "VerdictRef",
    "compute_rescore",
    "evidence_for",
    "latest_verdict_for",
    "newest_verdict",
    "rescore",
    "score",
    "transcribed_verdicts",
]
