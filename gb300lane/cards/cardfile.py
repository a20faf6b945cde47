"""Card files: where a card named on the command line is found, and reading one (the strict YAML reader).

`cards.schema` is the card as data (pure); this module is the file around it.
"""

from __future__ import annotations

import os
from pathlib import Path

from gb300lane import paths
from gb300lane.cards.schema import Card, parse_card
from gb300lane.errors import CardError
from gb300lane.recipes.yamlio import read_text


def known_cards() -> list[Path]:
    """One file per card name across the card folders, the first folder's copy winning, sorted by name."""
    found: dict[str, Path] = {}
    for d in paths.card_dirs():
        for p in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            found.setdefault(p.stem, p)
    return [found[k] for k in sorted(found)]


def resolve_card_path(ref: str | os.PathLike[str]) -> Path:
    """A card argument is a path to a YAML file, or a card name in ./cards or the shipped cards.

    `cards/NAME.yaml` that is not a file here names the card NAME in those
    folders (the shipped cards are the package's `cards/`).
    """
    p = Path(ref)
    where = " or ".join(str(d) for d in paths.card_dirs())
    if not p.exists() and p.suffix in (".yaml", ".yml") and p.parent == Path("cards"):
        for d in paths.card_dirs():
            if (d / p.name).is_file():
                return d / p.name
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise CardError(f"{p}: card file not found; pass a path to a card YAML or a card name in {where}")
        return p
    for d in paths.card_dirs():
        for suffix in (".yaml", ".yml"):
            cand = d / f"{ref}{suffix}"
            if cand.is_file():
                return cand
    known = [x.stem for x in known_cards()]
    raise CardError(f"card {ref!r} not found in {where}; known cards: {', '.join(known) or 'none'}")


def read_card_text(path: Path) -> str:
    """A card file's text (UTF-8, at most the strict loader's size limit), else a one-line CardError."""
    return read_text(path, str(path), error=CardError, what="card")


def load_card(ref: str | os.PathLike[str]) -> tuple[Card, Path]:
    """Load and validate a card by path or name; returns the card and its file."""
    path = resolve_card_path(ref)
    return parse_card(read_card_text(path), str(path)), path


__all__ = ["known_cards", "load_card", "read_card_text", "resolve_card_path"]
