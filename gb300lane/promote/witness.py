"""The other witnesses of production: the witness file beside the ledger and the marks on instance records.

The ledger is one record that a production exists; a ledger deleted or
emptied by hand must not read as "never promoted" while production still
serves. So every change of role the ledger commits is also written

- to `<state>/production.json` (atomically): production and the rollback pair
  by instance and recipe, the port, and the number of the newest ledger event;
- onto the instance records themselves (`lane.hold`): "production" or
  "rollback pair", with the same event number.

- and the engines themselves: a running instance, not dark, that has the boot
  report and a smoke report for its endpoint that a promotion writes, may be
  production whatever the files say (a ledger, witness file and marks can be
  forged or deleted together; a serving engine cannot).

`disagreement` compares what each witness says with the ledger. A witness whose
event number is below the ledger's newest event is behind (a process killed
between the ledger's commit and the witness write) and is rewritten by the next
transition; one at or above it must say what the ledger says. When they differ,
`gb300lane.promote.state` refuses everything that could remove or replace
production and names every witness and the repair.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from gb300lane import lane, paths
from gb300lane.errors import LaneError, StateError
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.promote.models import Slot

WITNESS_FILE = "production.json"
PRODUCTION = "production"
PAIR = "rollback pair"


class WitnessSlot(FrozenModel):
    """One role as the witness file remembers it."""

    instance: str = Field(description="Instance name.")
    recipe: str = Field(description="Recipe name.")


class Witness(FrozenModel):
    """`<state>/production.json`: production and the pair as of ledger event `event_id`."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    production: WitnessSlot | None = Field(description="Production, or None.")
    rollback: WitnessSlot | None = Field(description="The kept rollback pair, or None.")
    port: int | None = Field(default=None, description="The production port.")
    event_id: int = Field(description="The newest ledger event when this was written.")
    written_at: float = Field(description="Unix time it was written.")


def witness_path() -> Path:
    return paths.state_dir() / WITNESS_FILE


def _slot(slot: Slot | None) -> WitnessSlot | None:
    return WitnessSlot(instance=slot.instance, recipe=slot.recipe) if slot is not None else None


def write(production: Slot | None, pair: Slot | None, *, port: int | None, event_id: int) -> None:
    """Write what the ledger just committed to the witness file and onto the instance records."""
    body = Witness(
        production=_slot(production), rollback=_slot(pair), port=port, event_id=event_id, written_at=time.time()
    )
    atomic_write(witness_path(), dumps_json(body.model_dump(mode="json")))
    roles = {s.instance: role for role, s in ((PAIR, pair), (PRODUCTION, production)) if s is not None}
    try:
        marked = lane.holds()
    except StateError:
        marked = {}
    for name in set(marked) | set(roles):
        lane.hold(name, roles.get(name), event_id)


def forget(removed: set[str]) -> None:
    """Instances taken down by force with no ledger to record it: the witness file stops naming them."""
    found = read()
    if found is None:
        return
    changes = {
        role: None
        for role in ("production", "rollback")
        if (s := getattr(found, role)) is not None and s.instance in removed
    }
    if changes:
        atomic_write(witness_path(), dumps_json(found.model_copy(update=changes).model_dump(mode="json")))


def read() -> Witness | None:
    """The witness file, None when there is none; StateError naming it when it cannot be read."""
    path = witness_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(
            f"{path}: the production witness cannot be read ({exc.strerror or exc}); "
            "make it readable (it says which instance is production)"
        ) from None
    try:
        return Witness.model_validate_json(data)
    except ValidationError as exc:
        found = format_validation_error(exc, first_only=True, missing="missing")
    except ValueError as exc:
        found = str(exc)
    raise StateError(
        f"{path}: the production witness is damaged ({found}); restore it from a backup, or move it "
        "aside when the promotion ledger is intact (the next promote or rollback writes it again)"
    )


def serving(skip: set[str]) -> list[tuple[str, str]]:
    """Running engines that may be production (instance, why), other than those in `skip` (what the ledger names).

    One that is not dark and has a boot report and a smoke report for its own endpoint serves as a promotion left
    it: only a promotion (or an operator's `gb300lane smoke` of a public instance) runs smoke on a public engine.
    """
    from gb300lane.bench.store import smoke_dir

    out = []
    try:
        found = lane.list_instances()
    except LaneError as exc:
        return [("(instances)", f"cannot be listed ({exc}), so what serves production is unknown")]
    for info in found:
        if info.name in skip or info.state not in ("running", "partial") or info.dark is not False:
            continue
        endpoint = (info.endpoint or "").rstrip("/")
        reports = sorted(smoke_dir(info.recipe, info.fingerprint).glob("*-report.json")) if endpoint else []
        for report in reversed(reports):
            try:
                said = json.loads(report.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(said, dict) and str(said.get("endpoint", "")).rstrip("/") == endpoint:
                boot = f", boot report {info.report}" if info.report else ""
                out.append(
                    (
                        info.name,
                        f"is running, not dark, on {endpoint} with a smoke report of that endpoint "
                        f"({report}{boot}): it may be production",
                    )
                )
                break
    return out


def disagreement(
    said: tuple[str | None, str | None],
    newest_event: int,
    ledger_what: str,
    ledger_file: Path,
    transition: tuple[str, ...] = (),
) -> str | None:
    """Why the witnesses and the ledger disagree about production and the pair, with the repair; None when they agree.

    `said` is (production instance, pair instance) per the ledger; `ledger_what` how the ledger reads ("missing",
    "no production recorded", ...); `transition` the instances an unfinished transition acts on (a candidate
    booted and smoked before the ledger names it is not a disagreement).
    """
    prod, pair = said
    wrong: list[str] = []
    try:
        found = read()
    except StateError as exc:
        wrong.append(str(exc))
        found = None
    if found is not None and found.event_id >= newest_event:
        w = (
            found.production.instance if found.production else None,
            found.rollback.instance if found.rollback else None,
        )
        if w != (prod, pair):
            wrong.append(
                f"{witness_path()} says production {_name(w[0])}, rollback pair {_name(w[1])} "
                f"(as of ledger event #{found.event_id})"
            )
    try:
        marks = lane.holds()
    except LaneError as exc:
        wrong.append(str(exc))
        marks = {}
    for name, (held, by, where) in sorted(marks.items()):
        if by < newest_event:
            continue  # behind the ledger: rewritten by the next transition
        if (held == PRODUCTION and name != prod) or (held == PAIR and name != pair):
            wrong.append(f"{where} marks {name} as {held} (as of ledger event #{by})")
    for name, why in serving(skip={n for n in (prod, pair, *transition) if n}):
        wrong.append(f"{name} {why}")
    if not wrong:
        return None
    return (
        f"production witnesses disagree: the ledger {ledger_file} {ledger_what} (production {_name(prod)}, rollback "
        f"pair {_name(pair)}, newest event #{newest_event}), but "
        + "; ".join(wrong)
        + ". Nothing that could remove or replace production runs while they disagree: restore the ledger "
        f"({ledger_file} with its -wal file) from a backup; or, if production really is gone, "
        "`gb300lane down --all --force` takes the instances down and clears the witnesses"
    )


def _name(instance: str | None) -> str:
    return instance or "none"
