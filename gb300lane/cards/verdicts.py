"""Verdicts: the pre-registered score (verdict 1), re-scores that point back at it, and look-ups.

A verdict is a write-once file. A re-score never edits verdict 1: it writes
verdict n+1 with the reason, the gate changes (old -> new) and the sha256 of
the verdict it supersedes, so both stay on the record.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from gb300lane import __version__
from gb300lane.cards.decide_more import MoreNeeded, boot_notes, more_needed, provenance_notes
from gb300lane.cards.gates import evaluate, overall
from gb300lane.cards.looks import design_look, stopped_at
from gb300lane.cards.receipts import Receipts, all_receipts, stage_count, utc_now
from gb300lane.cards.results import GateResult, Status
from gb300lane.cards.schema import Card, Gate, gates_payload
from gb300lane.errors import CardError
from gb300lane.fsio import dumps_json, sha256_bytes, sha256_file
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.recipes.yamlio import parse_value


class GateChange(FrozenModel):
    gate: str = Field(description="Gate id.")
    key: str = Field(description="Dotted key inside the gate, e.g. compare or bar.mode.")
    old: Any = Field(description="Value before the re-score.")
    new: Any = Field(description="Value after the re-score.")


class PreviousVerdict(FrozenModel):
    number: int = Field(description="The verdict this one supersedes.")
    file: str = Field(description="Its path inside the receipts directory.")
    sha256: str = Field(description="Its sha256, so the pointer cannot silently move.")
    verdict: Status = Field(description="What it said.")


class Verdict(FrozenModel):
    schema_version: Literal[1] = Field(description="File format version.")
    card: str = Field(description="Card name.")
    number: int = Field(ge=1, description="1 = pre-registered; 2.. = re-scores.")
    verdict: Status = Field(description="PASS, FAIL or INCONCLUSIVE.")
    written_at: str = Field(description="UTC time the verdict was written.")
    tool_version: str = Field(description="gb300lane version that scored.")
    candidate_recipe: str = Field(description="Recipe of the candidate arm (B).")
    control_recipe: str = Field(description="Recipe of the control arms (A, A2).")
    gates_sha256: str = Field(description="sha256 of the gates this verdict applied.")
    gates: list[dict[str, Any]] = Field(description="The gates applied, as data.")
    sources: dict[str, str] = Field(description="Arm -> measured or transcribed.")
    results: tuple[GateResult, ...] = Field(description="Per gate: status, observed, bar, noise floor.")
    previous: PreviousVerdict | None = Field(default=None, description="Verdict superseded (re-scores only).")
    reason: str | None = Field(default=None, description="Why the re-score was made (re-scores only).")
    changes: tuple[GateChange, ...] = Field(default=(), description="Gate changes of the re-score.")
    look: int = Field(default=1, description="The look the verdict was decided at (1 for a fixed design).")
    looks: int = Field(default=1, description="Looks the card's design plans (1 for a fixed design).")
    notes: tuple[str, ...] = Field(default=(), description="What the verdict found beside its gates: a registered "
                                   "boot sd that a measurement of the lane contradicts (never a change of status). "
                                   "Left out of the file when empty.")
    more_needed: tuple[MoreNeeded, ...] = Field(default=(), description="INCONCLUSIVE gates: the requests and boots "
                                                "per arm that would decide at 90% power. Left out when empty.")

    def payload(self) -> dict[str, Any]:
        """The verdict as written: the fields added since schema 1 only when they say something, so a verdict
        with nothing to add keeps the bytes it always had."""
        empty = {k for k in ("notes", "more_needed") if not getattr(self, k)}
        return self.model_dump(mode="json", exclude=empty)


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


_GATE = TypeAdapter(Gate)


def compute_verdict(card: Card, gates: tuple[Any, ...], rec: Receipts, *, number: int = 1,
                    previous: PreviousVerdict | None = None, reason: str | None = None,
                    changes: tuple[GateChange, ...] = ()) -> Verdict:
    """Score `gates` over the receipts without writing anything, at the look the card ended on."""
    stages = rec.stages_done(card) if stage_count(card) > 1 else 1
    look = design_look(card, max(stages, 1))
    arms = rec.load_arms(card, stages=stages)
    results = evaluate(card, gates, arms, rec.noise_floor_stated(), look)
    by_id = {g.id: g for g in gates}
    needed = tuple(m for r in results if r.id in by_id and (m := more_needed(card, by_id[r.id], r)) is not None)
    reg = rec.registration()
    notes: tuple[str, ...] = ()
    if not reg.transcribed:
        recorded = reg.plan.boot_measured_on if reg.plan is not None else ()
        notes = tuple(boot_notes(card, gates, arms, rec.root.parent, own=rec.root.name) + provenance_notes(card, gates, arms, recorded))
    payload = gates_payload(gates)
    return Verdict(
        schema_version=1,
        card=card.name,
        number=number,
        verdict=overall(results),
        written_at=utc_now(),
        tool_version=__version__,
        candidate_recipe=card.candidate.recipe,
        control_recipe=card.controls[0].recipe,
        gates_sha256=sha256_bytes(dumps_json(payload)),
        gates=payload,
        sources={a.arm: a.source for a in arms},
        results=tuple(results),
        previous=previous,
        reason=reason,
        changes=changes,
        look=look.number,
        looks=look.looks,
        notes=notes,
        more_needed=needed,
    )


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
        return compute_verdict(card, card.gates, rec)
    _refuse_transcribed(rec)
    if rec.verdict_numbers():
        raise CardError(
            f"{rec.verdict_file(1)}: verdict 1 is already recorded ({read_verdict(rec, 1).verdict}); "
            "the pre-registered verdict is final: use `gb300lane card rescore CARD --reason ...` to re-score"
        )
    done = [a.name for a in card.arms if (rec.arm_dir(a.name) / "done.json").is_file()
            or (rec.arm_dir(a.name) / "transcribed.json").is_file()]
    if len(done) != len(card.arms):
        missing = [a.name for a in card.arms if a.name not in done]
        raise CardError(f"{rec.root}: arms {', '.join(missing)} have not finished; run `gb300lane card run {card.name}` first")
    if stage_count(card) > 1 and stopped_at(rec) is None:
        raise CardError(f"{rec.root}: the sequential card has not stopped yet (looks on record: "
                        f"{rec.look_numbers() or 'none'}); run `gb300lane card run {card.name}` to continue it")
    _require_intact(rec, "score")
    v = compute_verdict(card, card.gates, rec)
    rec.write_json(rec.verdict_file(1), v.payload())
    rec.write_manifest("verdict-1")
    return v


def _require_intact(rec: Receipts, action: str) -> None:
    """Refuse to use receipts whose chain of custody is broken (the custody module re-scores with this one)."""
    from gb300lane.cards.custody import require_intact  # custody imports this module: import it when used

    require_intact(rec, action)


def read_verdict(rec: Receipts, n: int) -> Verdict:
    return rec.read_model(rec.verdict_file(n), Verdict)


def parse_change(text: str) -> tuple[str, str, Any]:
    """`GATE.KEY=VALUE` (VALUE as YAML, so `0.03`, `set`, `{mode: spread, source: rounds, value: 0.02}`)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise CardError(f"gate change {text!r}: write it as GATE.KEY=VALUE, e.g. env-equal.compare=set")
    lhs, raw = text.split("=", 1)
    gate, key = lhs.split(".", 1)
    value = parse_value(raw, f"gate change {text!r}: the value", error=CardError)
    return gate, key, value


def apply_changes(card: Card, gates: tuple[Any, ...], changes: list[str]) -> tuple[tuple[Any, ...], tuple[GateChange, ...]]:
    """Apply GATE.KEY=VALUE changes to gates; every change names an existing gate and key."""
    data = [g.model_dump(mode="json") for g in gates]
    by_id = {d["id"]: d for d in data}
    recorded = []
    for text in changes:
        gid, key, value = parse_change(text)
        if gid not in by_id:
            raise CardError(f"gate change {text!r}: card {card.name} has no gate {gid!r}; gates are {sorted(by_id)}")
        node = by_id[gid]
        parts = key.split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                raise CardError(f"gate change {text!r}: gate {gid} has no mapping {p!r}")
            node = node[p]
        if parts[-1] in ("id", "kind"):
            raise CardError(f"gate change {text!r}: a re-score may not rename a gate or change its kind")
        old = copy.deepcopy(node.get(parts[-1]))
        node[parts[-1]] = value
        recorded.append(GateChange(gate=gid, key=key, old=old, new=value))
    out = []
    for d in data:
        try:
            out.append(_GATE.validate_python(d))
        except ValidationError as exc:
            msg = format_validation_error(exc)
            raise CardError(f"re-score of gate {d['id']}: the changed gate is invalid ({msg})") from exc
    return tuple(out), tuple(recorded)


def compute_rescore(rec: Receipts, reason: str, changes: list[str]) -> tuple[Verdict, Verdict]:
    """The next verdict over the latest one's gates with `changes` applied; returns (previous, new)."""
    if not reason.strip():
        raise CardError("a re-score needs --reason: the record must say why the gates changed")
    card = rec.card()
    rec.check_frozen(card)
    nums = rec.verdict_numbers()
    if not nums:
        raise CardError(f"{rec.root}: no verdict 1 yet; run `gb300lane card score {card.name}` first")
    _require_intact(rec, "re-score")
    prev = read_verdict(rec, nums[-1])
    base = tuple(_GATE.validate_python(g) for g in prev.gates)
    gates, recorded = apply_changes(card, base, changes)
    if not recorded:
        raise CardError("a re-score needs at least one gate change (GATE.KEY=VALUE)")
    pointer = PreviousVerdict(number=prev.number, file=str(rec.verdict_file(prev.number).relative_to(rec.root)),
                              sha256=sha256_file(rec.verdict_file(prev.number)), verdict=prev.verdict)
    new = compute_verdict(card, gates, rec, number=prev.number + 1, previous=pointer, reason=reason,
                          changes=recorded)
    return prev, new


def rescore(rec: Receipts, reason: str, changes: list[str]) -> Verdict:
    """Write verdict n+1; verdict n stays as it was."""
    _refuse_transcribed(rec)
    _, new = compute_rescore(rec, reason, changes)
    rec.write_json(rec.verdict_file(new.number), new.payload())
    rec.write_manifest(f"verdict-{new.number}")
    return new


def transcribed_verdicts(rec: Receipts) -> tuple[Verdict, Verdict | None, dict[str, Any] | None]:
    """A written-up card's verdicts, computed (never stored): the registered gates, then its re-score.

    Returns (verdict 1, verdict 2 or None, the transcribed re-score record or None).
    """
    card = rec.card()
    rec.check_frozen(card)
    v1 = compute_verdict(card, card.gates, rec)
    rs_file = rec.root / "rescore.json"
    if not rs_file.is_file():
        return v1, None, None
    rs = json.loads(rs_file.read_text(encoding="utf-8"))
    gates, changes = apply_changes(card, card.gates, rs["changes"])
    pointer = PreviousVerdict(number=1, file="verdicts/verdict-1.json (not written: computed from transcribed receipts)",
                              sha256=sha256_bytes(dumps_json(v1.model_dump(mode="json"))), verdict=v1.verdict)
    v2 = compute_verdict(card, gates, rec, number=2, previous=pointer, reason=rs["reason"], changes=changes)
    return v1, v2, rs


def _newest_ref(rec: Receipts, card: Card) -> VerdictRef | None:
    if rec.registration().transcribed:
        # the write-up's verdicts are derived from its receipts; the file that
        # pins the newest one is the transcribed re-score (or the card itself)
        v1, v2, _ = transcribed_verdicts(rec)
        v = v2 or v1
        path = rec.root / ("rescore.json" if v2 else "card.yaml")
        return VerdictRef(card=card.name, receipts=str(rec.root), number=v.number, verdict=v.verdict,
                          written_at=rec.registration().registered_at, file=str(path), sha256=sha256_file(path),
                          candidate_recipe=v.candidate_recipe, control_recipe=v.control_recipe, transcribed=True)
    nums = rec.verdict_numbers()
    if not nums:
        return None
    v = read_verdict(rec, nums[-1])
    path = rec.verdict_file(nums[-1])
    return VerdictRef(card=card.name, receipts=str(rec.root), number=v.number, verdict=v.verdict,
                      written_at=v.written_at, file=str(path), sha256=sha256_file(path),
                      candidate_recipe=v.candidate_recipe, control_recipe=v.control_recipe)


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



def newest_verdict(rec: Receipts) -> VerdictRef | None:
    """A receipts directory's newest verdict (written-up cards: computed from their transcribed receipts)."""
    return _newest_ref(rec, rec.card())
