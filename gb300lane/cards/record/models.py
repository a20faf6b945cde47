"""The receipts a card run writes beside the lane's boot reports and bench's windows, each a versioned model.

    arms/<ARM>/attempt-<n>/attempt.json   `AttemptReceipt`   an attempt began
    arms/<ARM>/attempt-<n>/foreign.json   `ForeignReceipt`   foreign clients before and after the windows
    arms/<ARM>/done.json                  `DoneReceipt`      which attempt finished (the resume state)
    selftest-<n>.json                     `SelftestReceipt`  the bench client's self-test before the first window
    results/pilots/<...>/pilot.json       `PilotReceipt`     a pilot of the control recipe
    results/pilots/<...>/boots.json       `BootStudyReceipt` a boot study of the control recipe

(`boot.json` is the lane's `BootReport`, `windows/<w>.json` bench's `WindowResult`, `looks/look-<s>.json` the
decision's `LookRecord` and `verdicts/verdict-<n>.json` its `Verdict`.) Each is written as its
`model_dump(mode="json")`, the bytes the dictionaries they replace had.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gb300lane.bench.selftest import SelftestResult
from gb300lane.models import FrozenModel
from gb300lane.recipes.schema import WindowSpec


class ForeignCount(FrozenModel):
    """Foreign clients a dark arm's /metrics showed at one moment, and the check that counted them."""

    foreign_clients: int | None = Field(description="Requests the bench did not send (None: could not be read).")
    check: dict[str, Any] = Field(description="The lane's foreign_clients check, as JSON (its evidence is free-form).")


class AttemptReceipt(FrozenModel):
    """An arm's attempt began: written before its boot, so an interrupted attempt is seen as one."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    arm: str = Field(description="Arm name.")
    recipe: str = Field(description="Recipe the arm boots.")
    attempt: int = Field(ge=1, description="Attempt number (1-based).")
    stage: int = Field(ge=1, description="Stage of a sequential card (1 for a fixed design).")
    started_at: str = Field(description="UTC time the attempt began.")


class ForeignReceipt(FrozenModel):
    """Foreign clients on the arm's lane before and after its windows."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    before_windows: ForeignCount = Field(description="The count before the first window.")
    after_windows: ForeignCount = Field(description="The count after the last window.")
    sent_by_bench: int = Field(ge=0, description="Requests the bench sent in between.")
    foreign_clients: int | None = Field(description="The larger count (None: either could not be read).")


class DoneReceipt(FrozenModel):
    """An arm (or stage) finished: which attempt did."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    attempt: int = Field(ge=1, description="The attempt that finished.")
    stage: int = Field(default=1, ge=1, description="Stage of a sequential card (1 for a fixed design).")
    finished_at: str | None = Field(default=None, description="UTC time it finished (always written).")


class SelftestReceipt(FrozenModel):
    """The bench client's self-test at the card's concurrency levels, every attempt of it."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    concurrency: list[int] = Field(description="Concurrency levels tested.")
    passed: bool = Field(description="Whether the last attempt met the registered bounds.")
    attempts: list[SelftestResult] = Field(description="Each attempt, in order.")


class PilotReceipt(FrozenModel):
    """A pilot: the control recipe over a short copy of the card's primary window."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    card: str = Field(description="The card the pilot was run for.")
    recipe: str = Field(description="The control recipe.")
    window: WindowSpec = Field(description="The pilot window as run.")


class BootStudyReceipt(FrozenModel):
    """A boot study: N boots of the control recipe over what one boot of the card's arms runs."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    card: str = Field(description="The card the study was run for.")
    recipe: str = Field(description="The control recipe.")
    boots: int = Field(ge=1, description="Boots in the study.")
    study_seed: int = Field(description="The study's seed (each boot's seeds derive from it).")
    in_process: bool = Field(description="True: on the embedded engine in process; False: real boots.")
    boot_seconds: list[float] = Field(description="Each real boot's time to ready (empty in process).")
    window: WindowSpec = Field(description="The window each boot ran.")
    measured_on: dict[str, Any] | None = Field(
        default=None, description="The lane, recipe, image and engine it was measured on (older studies: none)."
    )


class TranscribedRescore(FrozenModel):
    """A written-up card's re-score, as transcribed (`rescore.json`): its gate changes and why."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    changes: list[str] = Field(description="The re-score's gate changes, as GATE.KEY=VALUE.")
    reason: str = Field(description="Why the gates changed.")
    quote: str = Field(default="", description="The source's own words.")
    source: str = Field(default="", description="Where it was published.")
    transcribed: bool = Field(default=True, description="Transcribed from a write-up, never scored here.")


__all__ = [
    "AttemptReceipt",
    "BootStudyReceipt",
    "DoneReceipt",
    "ForeignCount",
    "ForeignReceipt",
    "PilotReceipt",
    "SelftestReceipt",
    "TranscribedRescore",
]
