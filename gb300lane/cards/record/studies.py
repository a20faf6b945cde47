"""Pilots and boot studies: the receipts under results/pilots/ that a card's plan and verdict read.

A pilot (`pilot.json`, `window.json`, `boot.json`) is a short window of the control recipe; a boot study
(`boots.json`, `boot-NNN.json`) is N boots of it, each one arm. `card plan` writes them (`instrument.plan`); here
they are found and read back for the card whose control recipe and window they match.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, JsonValue, ValidationError

from gb300lane.bench.models import WindowResult
from gb300lane.cards.decide.data import ArmData, WindowData
from gb300lane.cards.decide.more import BootStudy
from gb300lane.cards.embedded import engine_fingerprint, runs_embedded
from gb300lane.cards.record.arms import window_data_from_result
from gb300lane.cards.record.models import BootStudyReceipt, PilotReceipt
from gb300lane.cards.schema import Card, GroupSequential
from gb300lane.errors import CardError
from gb300lane.models import format_validation_error
from gb300lane.paths import results_dir
from gb300lane.recipes import fingerprint, load_recipe
from gb300lane.recipes.schema import WindowSpec


def same_primary(card: Card, w: WindowSpec) -> bool:
    """Whether a window samples the same requests' noise as the card's primary one (temperature, length, top_p)."""
    p = card.window(card.primary_window)
    return (
        w.temperature == p.temperature
        and w.forced_tokens == p.forced_tokens
        and w.max_tokens == p.max_tokens
        and w.top_p == p.top_p
    )


def pilot_root(base: Path | None = None) -> Path:
    """results/pilots: where pilots and boot studies keep their receipts."""
    return (base or results_dir()) / "pilots"


def _studies(
    card: Card,
    base: Path | None,
    meta_file: str,
    model: type[PilotReceipt] | type[BootStudyReceipt],
    same: Callable[[Card, WindowSpec], bool],
) -> list[Path]:
    """Study folders under results/pilots whose `meta_file` (a `model` receipt) names the card's control recipe
    and a window `same` accepts for the card."""
    root = pilot_root(base)
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        f = d / meta_file
        if not f.is_file():
            continue
        meta = _read(f, model)
        if meta.recipe == card.controls[0].recipe and same(card, meta.window):
            out.append(d)
    return out


def pilot_dirs(card: Card, base: Path | None = None) -> list[Path]:
    """Pilots of the card's control recipe over the card's primary window."""
    return _studies(card, base, "pilot.json", PilotReceipt, same_primary)


def pilot_windows(card: Card, base: Path | None = None) -> list[tuple[str, WindowData]]:
    """Each pilot's window, as the data the gates read."""
    out = []
    for d in pilot_dirs(card, base):
        out.append((d.name, window_data_from_result(_read(d / "window.json", WindowResult), "pilot")))
    return out


def boot_window(card: Card) -> WindowSpec:
    """What one boot of an arm runs of the primary window: all of it, or a sequential card's one stage."""
    p = card.window(card.primary_window)
    if isinstance(card.design, GroupSequential):
        return p.model_copy(update={"rounds": p.rounds // card.design.looks})
    return p


_SHAPE = (
    "classes",
    "transcripts_per_class",
    "rounds",
    "concurrency",
    "temperature",
    "top_p",
    "forced_tokens",
    "max_tokens",
    "tool_choice",
    "workload",
    "held_out",
)


def same_boot(card: Card, w: WindowSpec) -> bool:
    """A boot study measures the shift of one boot's mean over the requests it ran, which depends on what ran
    (an arm's last requests at C8 run in a shrinking batch, at another k): only a study of the same shape
    counts."""
    mine = boot_window(card)
    return all(getattr(w, f) == getattr(mine, f) for f in _SHAPE)


def boot_dirs(card: Card, base: Path | None = None) -> list[Path]:
    """Boot studies of the card's control recipe over the same requests one boot of its arms runs."""
    return _studies(card, base, "boots.json", BootStudyReceipt, same_boot)


_R = TypeVar("_R", bound=BaseModel)


def _read(path: Path, model: type[_R]) -> _R:
    """A study's receipt read into its model; CardError naming the file when it is not one."""
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        found = format_validation_error(exc, first_only=True) if isinstance(exc, ValidationError) else str(exc)
        raise CardError(
            f"{path}: not a {model.__name__} ({found}); move the study aside (results/pilots/), or run "
            "it again (`gb300lane card plan CARD --boots N`)"
        ) from None


def earlier_boots(card: Card, base: Path | None = None) -> BootStudy | None:
    """The boots of every boot study of the card's control recipe and window (each boot one arm)."""
    arms: list[ArmData] = []
    names = []
    for d in boot_dirs(card, base):
        for f in sorted(d.glob("boot-*.json")):
            w = _read(f, WindowData)
            arms.append(
                ArmData(
                    arm=f"{d.name}/{f.stem}",
                    recipe=card.controls[0].recipe,
                    role="control",
                    source="measured",
                    windows={card.primary_window: w},
                )
            )
        names.append(d.name)
    if len(arms) < 3:
        return None
    return arms, f"{len(arms)} boots of {card.controls[0].recipe} ({'; '.join(names)})"


def measured_on(card: Card) -> dict[str, JsonValue]:
    """What a boot study of the card's control recipe measures: the lane (in process on the embedded engine, or
    the recipe's lane), the recipe and its fingerprint (over its hash inputs), the image and what its compile hash
    covers, and on the embedded engine the engine's own fingerprint (its code and the card's recipes)."""
    r = load_recipe(card.controls[0].recipe)
    embedded = runs_embedded(card)
    return {
        "lane": "embedded engine, in process" if embedded else f"{r.engine} lane {r.lane.name}",
        "recipe": r.name,
        "recipe_fingerprint": fingerprint(r),
        "image": r.image.ref,
        "vllm_version": r.image.vllm_version,
        "hash_inputs": list(r.image.hash_inputs),
        "engine_fingerprint": engine_fingerprint(card) if embedded else None,
    }


def boot_provenance(card: Card, base: Path | None = None) -> tuple[dict[str, JsonValue], ...]:
    """What each boot study of the card's control recipe and shape recorded it was measured on (studies from
    before the record was kept have none)."""
    out = []
    for d in boot_dirs(card, base):
        got = _read(d / "boots.json", BootStudyReceipt).measured_on
        if isinstance(got, dict):
            out.append({"study": d.name, **got})
    return tuple(out)


__all__ = [
    "boot_dirs",
    "boot_provenance",
    "boot_window",
    "earlier_boots",
    "measured_on",
    "pilot_dirs",
    "pilot_root",
    "pilot_windows",
    "same_boot",
    "same_primary",
]
