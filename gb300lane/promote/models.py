"""The value objects of promotion: the production state, ledger events, and command reports.

Everything here is a frozen pydantic model; the ledger stores the same fields
in SQLite, and `history --json` prints them as they are.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from gb300lane.models import FrozenModel

TransitionKind = Literal["promote", "rollback", "prune", "take_lane"]
EventKind = Literal[
    "promote",
    "promote_failed",
    "rollback",
    "rollback_failed",
    "recover",
    "prune",
    "take_lane",
    "removed",
]


class Slot(FrozenModel):
    """One recipe's instance as the ledger knows it (production or the rollback pair)."""

    recipe: str = Field(description="Recipe name, e.g. local-v27.")
    instance: str = Field(description="Lane instance name (main + sidecar), e.g. lane-local-v27.")
    fingerprint: str = Field(description="Recipe fingerprint (16 hex chars over image.hash_inputs).")
    endpoint: str = Field(description="OpenAI-compatible endpoint the instance serves on.")
    since: str = Field(description="UTC time (ISO 8601) the instance took this role.")


class VerdictCustody(FrozenModel):
    """The verdict a promotion rests on, as the ledger keeps it: the file and the manifest that seals it, hashed."""

    file: str = Field(description="The verdict file (or what pins a transcribed verdict).")
    sha256: str | None = Field(description="Its sha256 when the promotion read it.")
    receipts: str | None = Field(description="The card's receipts directory.")
    manifest: str | None = Field(description="The newest manifest of the receipts, which seals the verdict.")
    manifest_sha256: str | None = Field(description="Its sha256 when the promotion read it.")
    verdict: str = Field(description="What the verdict said (PASS, FAIL, INCONCLUSIVE).")


class BootReportLink(FrozenModel):
    """The boot report of the instance an event made production, hashed."""

    file: str = Field(description="The boot report's file.")
    sha256: str | None = Field(description="Its sha256 when the boot finished.")
    instance: str = Field(description="The instance it reports on.")
    fingerprint: str = Field(description="The fingerprint it booted.")


class CustodyLinks(FrozenModel):
    """What a ledger event rests on; its custody row's MAC covers these with the event."""

    recipe: str | None = Field(default=None, description="The recipe the event made production.")
    fingerprint: str | None = Field(default=None, description="Its fingerprint.")
    verdict: VerdictCustody | None = Field(default=None, description="The verdict a promotion rests on.")
    forced: bool = Field(default=False, description="A promotion forced past its verdict.")
    boot_report: BootReportLink | None = Field(default=None, description="The boot report of what became production.")
    content_sha256: str | None = Field(
        default=None,
        description="sha256 of the promoted recipe's whole resolved content (`recipes.content_hash`); "
        "None for a promotion recorded before the content was bound.",
    )
    content: dict[str, JsonValue] | None = Field(
        default=None,
        description="The promoted recipe's resolved leaf keys (secrets as keyed digests): what `verify "
        "--production` compares the recipe with, naming the keys that changed.",
    )


class PromotePlan(FrozenModel):
    """What a promotion will do, written to the ledger before it touches the lane (the repair reads it back)."""

    recipe: str = Field(description="The recipe becoming production.")
    fingerprint: str = Field(description="Its recipe fingerprint when the plan was made.")
    port: int = Field(description="The production port.")
    tag: str = Field(description="The arm tag its instance is booted under.")
    instance: str = Field(description="The instance name the boot creates.")
    previous: Slot | None = Field(description="Production when the promotion began (None for a first promotion).")
    pair: Slot | None = Field(description="The rollback pair when the promotion began.")
    verdict: str | None = Field(description="The verdict reference the promotion rests on.")
    forced: bool = Field(description="True when forced past a missing or failing verdict.")
    reason: str | None = Field(description="The --reason of a forced promotion.")
    verdict_custody: VerdictCustody | None = Field(
        default=None, description="The verdict file and its sealing manifest, hashed when the plan was made."
    )
    from_card: str | None = Field(
        default=None,
        description="The card whose kept candidate `instance` is: started as production, not booted afresh.",
    )
    content: dict[str, JsonValue] | None = Field(
        default=None,
        description="The recipe's whole resolved content when the plan was made (secrets as keyed "
        "digests), recorded with the promotion; None on a lane without recipe files.",
    )


class KeptCandidate(FrozenModel):
    """The instance a card's candidate arm left on the lane, as the card's receipts and the lane record it."""

    card: str = Field(description="The card's name.")
    receipts: str = Field(description="Its receipts directory.")
    arm: str = Field(description="The candidate arm's name, e.g. B.")
    recipe: str = Field(description="The candidate arm's recipe.")
    verdict: str | None = Field(
        description="The card's newest verdict (PASS, FAIL, INCONCLUSIVE); None before scoring."
    )
    instance: str | None = Field(
        description="The instance the arm's last finished boot created; None if none finished."
    )
    port: int | None = Field(description="The port it serves on, where known.")
    fingerprint: str | None = Field(description="The recipe fingerprint it was booted with.")
    problem: str | None = Field(
        description="Why the lane's instance is not the one the card measured or cannot serve production as it "
        "stands (gone, booted again, another address), with the fix; None when it can."
    )


class RollbackPlan(FrozenModel):
    """What a rollback will do: start the kept pair, stop (and keep) what serves production."""

    target: Slot = Field(description="The kept rollback pair that becomes production.")
    previous: Slot | None = Field(description="Production when the rollback began.")
    port: int = Field(description="The production port.")
    reason: str | None = Field(
        default=None, description="Why, when a caller says (a fleet rollout putting a lane back)."
    )


class PrunePlan(FrozenModel):
    """What a prune will remove."""

    remove: tuple[str, ...] = Field(description="Kept instances it removes.")


class TakeLanePlan(FrozenModel):
    """A card taking the lane from production for its bracket: stop production (kept), run the arms, restore it."""

    card: str = Field(description="The card whose arms run on the lane meanwhile.")
    production: Slot = Field(description="Production when the card took the lane: what is restored.")
    port: int = Field(description="The production port.")


TransitionPlan = PromotePlan | RollbackPlan | PrunePlan | TakeLanePlan


class KeptInstance(FrozenModel):
    """An instance the ledger keeps (stopped, not removed) and why; only prune removes it."""

    instance: str = Field(description="Lane instance name.")
    recipe: str = Field(description="Its recipe.")
    fingerprint: str = Field(description="Its recipe fingerprint.")
    endpoint: str = Field(description="Its endpoint.")
    kept_at: str = Field(description="UTC time it was kept.")
    why: str = Field(description="Why it is kept: the rollback pair, a failed candidate, ...")
    removed_at: str | None = Field(default=None, description="UTC time prune removed it (None while kept).")


class NewEvent(FrozenModel):
    """A line of history as a transition writes it (the ledger adds the id and, unless given, the time)."""

    kind: EventKind = Field(description="What happened.")
    at: str | None = Field(default=None, description="UTC time (ISO 8601); now when None.")
    recipe: str | None = Field(default=None, description="Recipe the action aimed at.")
    instance: str | None = Field(default=None, description="Its instance.")
    fingerprint: str | None = Field(default=None, description="Its fingerprint.")
    previous: str | None = Field(default=None, description="Recipe that was production before.")
    verdict: str | None = Field(default=None, description="Verdict reference the promotion rests on.")
    forced: bool = Field(default=False, description="True for a forced promotion.")
    reason: str | None = Field(default=None, description="Why: the --reason given, or what failed.")
    restore_seconds: float | None = Field(default=None, description="Seconds until the restored instance was ready.")
    tool_seconds: float | None = Field(default=None, description="The tool's own share of restore_seconds.")
    detail: str | None = Field(default=None, description="Anything else worth keeping, one line.")


class InFlight(FrozenModel):
    """A transition that began and has not been recorded as finished."""

    transition_id: int = Field(description="Ledger id of the transition.")
    kind: TransitionKind = Field(description="What the transition was doing.")
    recipe: str | None = Field(description="The recipe it was moving production to (None for prune).")
    previous: str | None = Field(description="The recipe that was production when it began.")
    started_at: str = Field(description="UTC time the transition began.")
    pid: int = Field(description="Process id that ran it.")
    crashed: bool = Field(description="True when no process holds the lock any more: it was killed.")
    last_step: str | None = Field(description="The last journal step, e.g. 'stop_production (done)'.")
    explanation: str = Field(description="One sentence saying where it stopped.")
    commands: tuple[str, ...] = Field(description="Commands that complete or revert it.")


class ProductionState(FrozenModel):
    """What serves the production port, the kept rollback pair, and any unfinished transition.

    `recipe`/`instance`/... are None only while a first promotion is unfinished
    (there was no production before it); `in_flight` then says what to run.
    """

    recipe: str | None = Field(description="Recipe serving production.")
    instance: str | None = Field(description="Its lane instance.")
    fingerprint: str | None = Field(description="Its recipe fingerprint.")
    endpoint: str | None = Field(description="The production endpoint.")
    port: int | None = Field(description="The production port.")
    since: str | None = Field(description="When it became production (UTC, ISO 8601).")
    rollback_pair: Slot | None = Field(description="The stopped-and-kept pair `rollback` restores, if any.")
    in_flight: InFlight | None = Field(description="An unfinished (or running) transition, if any.")

    def summary_lines(self) -> list[str]:
        """Human lines for `gb300lane status`: production, rollback pair, and what to run."""
        lines: list[str] = []
        if self.recipe:
            lines.append(
                f"production: {self.recipe} ({self.instance}, fingerprint {self.fingerprint}) "
                f"on {self.endpoint} since {self.since}"
            )
        else:
            lines.append("production: none recorded")
        if self.rollback_pair:
            rp = self.rollback_pair
            lines.append(f"rollback pair: {rp.recipe} ({rp.instance}, stopped and kept since {rp.since})")
        else:
            lines.append("rollback pair: none")
        if self.in_flight:
            lines.append(self.in_flight.explanation)
            for cmd in self.in_flight.commands:
                lines.append(f"  run: {cmd}")
        return lines


class VerdictInfo(FrozenModel):
    """The verdict that allowed (or would have allowed) a promotion."""

    passed: bool = Field(description="True for a PASS verdict (first or re-scored).")
    verdict: str = Field(description="The verdict as written on the card, e.g. PASS.")
    reference: str = Field(description="Card id and verdict file the decision rests on.")
    rescored: bool = Field(default=False, description="True when the verdict is a re-score of an earlier one.")
    custody: str | None = Field(
        default=None,
        description="Why the verdict's chain of custody does not hold (file: what broke); None when it does.",
    )
    file: str | None = Field(default=None, description="The verdict file (or what pins a transcribed verdict).")
    sha256: str | None = Field(default=None, description="Its sha256 when the verdict was read.")
    receipts: str | None = Field(default=None, description="The card's receipts directory.")
    manifest: str | None = Field(default=None, description="The newest manifest, which seals the verdict file.")
    manifest_sha256: str | None = Field(default=None, description="Its sha256 when the verdict was read.")
    card: str | None = Field(default=None, description="The card the verdict is of.")
    evidence: tuple[str, ...] = Field(
        default=(),
        description="What the evidence log knows of the recipe's runs and verdicts that the files no "
        "longer show, verdicts it never saw, and its own breaks: each refuses the promotion.",
    )
    binding: str | None = Field(
        default=None,
        description="Why the recipe as it is now is not the candidate the verdict measured (the keys "
        "that differ, or a registration that did not record it); None when it is.",
    )
    question: str | None = Field(
        default=None,
        description="Which run of its question the verdict's receipts are, and why a new question was "
        "asked, as every verdict of it says.",
    )


class BootInfo(FrozenModel):
    """What a boot or restart of an instance reported."""

    instance: str = Field(description="Lane instance name.")
    endpoint: str = Field(description="Its endpoint.")
    fingerprint: str = Field(description="Recipe fingerprint of what is running.")
    boot_seconds: float = Field(
        description="Wall seconds from starting the containers until ready, as the lane measured."
    )
    engine_seconds: float | None = Field(
        default=None, description="The engine's own logged init time (engine clock), where the log has it."
    )
    report: str | None = Field(default=None, description="The boot report's file, where the lane wrote one.")
    report_sha256: str | None = Field(default=None, description="Its sha256 when the boot finished.")


class SmokeInfo(FrozenModel):
    """The overall outcome of a recipe's smoke gates."""

    passed: bool = Field(description="True when every gate passed.")
    summary: str = Field(description="One line naming the failing gates, or 'all N gates passed'.")
    seconds: float = Field(description="Wall seconds the smoke took.")


class LedgerEvent(FrozenModel):
    """One line of history: a promotion, rollback, failure, recovery or prune."""

    schema_version: Literal[1] = Field(default=1, description="Event schema version.")
    id: int = Field(description="Ledger id, increasing.")
    at: str = Field(description="UTC time (ISO 8601).")
    kind: EventKind = Field(description="What happened.")
    recipe: str | None = Field(
        description="Recipe the action aimed at: promoted, rolled back to, or attempted (a *_failed or recover event)."
    )
    instance: str | None = Field(description="Its instance.")
    fingerprint: str | None = Field(description="Its fingerprint.")
    previous: str | None = Field(
        description="Recipe that was production before; after a *_failed or recover event it is production again."
    )
    verdict: str | None = Field(description="Verdict reference the promotion rests on.")
    forced: bool = Field(description="True when a promotion was forced past a missing or failing verdict.")
    reason: str | None = Field(description="Why: the --reason given, or what failed.")
    restore_seconds: float | None = Field(
        description="Seconds from stopping production until the restored pair was ready."
    )
    tool_seconds: float | None = Field(
        description="The tool's own share of restore_seconds (minus the instance's boot)."
    )
    detail: str | None = Field(description="Anything else worth keeping, one line.")


class TransitionReport(FrozenModel):
    """What `promote`, `rollback` or a repair did, for the CLI to print."""

    kind: Literal["promote", "rollback", "recover", "take_lane"] = Field(description="The command's transition.")
    ok: bool = Field(description="True when production is the recipe the command aimed for.")
    production: str | None = Field(description="Recipe serving production afterwards.")
    rollback_pair: str | None = Field(description="Recipe kept as the rollback pair afterwards.")
    message: str = Field(description="One paragraph for the user: what happened and why.")
    restore_seconds: float | None = Field(default=None, description="Time to restore, where something was restored.")
    tool_seconds: float | None = Field(
        default=None, description="The tool's own share: restore_seconds minus boot_seconds (stop, port check, ledger)."
    )
    boot_seconds: float | None = Field(
        default=None, description="Seconds the lane measured from starting the pair's containers until ready."
    )
    smoke_seconds: float | None = Field(default=None, description="Seconds the smoke gates took.")
    event_id: int | None = Field(default=None, description="Ledger event written.")
    steps: tuple[str, ...] = Field(default=(), description="A plan's steps, in order (a dry run's, or what was done).")
    refusals: tuple[str, ...] = Field(
        default=(),
        description="Every reason the plan refuses, each naming what is wrong and the fix (a dry run "
        "lists them all; a real run refuses before anything is stopped).",
    )
    notes: tuple[str, ...] = Field(
        default=(), description="What the verdict adds: the run of its question, a new question's reason."
    )


class PlannedTransition(FrozenModel):
    """What a promote or rollback will do and everything that refuses it, found before anything is changed
    (`transitions.plan_promotion`, `transitions.plan_rollback`)."""

    kind: Literal["promote", "rollback"] = Field(description="The transition planned.")
    steps: tuple[str, ...] = Field(description="What it will do, in order.")
    refusals: tuple[str, ...] = Field(
        description="Every reason it may not run, each naming what is wrong and the fix; empty when it may."
    )
    notes: tuple[str, ...] = Field(default=(), description="What the verdict adds (its question).")
    plan: PromotePlan | RollbackPlan | None = Field(
        description="The plan the ledger journals; None when refused or when there is nothing to do."
    )
    nothing: str | None = Field(default=None, description="Why there is nothing to do (already production).")


class PruneReport(FrozenModel):
    """What `prune` removed and what it kept, and why."""

    removed: tuple[str, ...] = Field(description="Instances removed.")
    kept: tuple[str, ...] = Field(description="Kept instances left in place, each with its reason.")
    dry_run: bool = Field(description="True when nothing was removed.")
