"""Where things live: what the package ships, what the user has, and the lane state.

What the tool ships (the recipes, the cards, the write-up's transcribed
receipts, the vLLM schema snapshots) lives inside the package under
`gb300lane/data/` and is found with `importlib.resources`, so an installed
wheel reads exactly what a checkout reads. A user's own `recipes/` and
`cards/` in the working directory come first (a file there shadows the shipped
one of the same name); their results go to `./results`. Each location can be
overridden by an environment variable so that tests and several lanes on one
host never share state by accident.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from gb300lane import placement
from gb300lane.errors import StateError

#: The package that holds the shipped data files.
DATA_PACKAGE = "gb300lane.data"


def shipped(*parts: str) -> Path:
    """A file or folder the package ships under `gb300lane/data/`, located with importlib.resources.

    Recipes and receipts are read as folders (globbed, hashed file by file),
    so the package must be installed as files on disk, which pip always does.
    """
    found = resources.files(DATA_PACKAGE).joinpath(*parts)
    if not isinstance(found, Path):
        raise StateError(
            f"{DATA_PACKAGE}/{'/'.join(parts)} is inside an archive ({found!r}); "
            "install gb300lane with pip (as files) rather than running it from a zip"
        )
    return found


def _search(env_name: str, local: str, shipped_name: str) -> tuple[Path, ...]:
    env = os.environ.get(env_name)
    if env:
        return (Path(env),)
    cwd = Path.cwd() / local
    return ((cwd,) if cwd.is_dir() else ()) + (shipped(shipped_name),)


def recipe_dirs() -> tuple[Path, ...]:
    """Where recipe names are looked up, first match first.

    `GB300LANE_RECIPES_DIR` alone when set; else `./recipes` (when it exists),
    then the shipped recipes.
    """
    return _search("GB300LANE_RECIPES_DIR", "recipes", "recipes")


def card_dirs() -> tuple[Path, ...]:
    """Where card names are looked up, first match first: `GB300LANE_CARDS_DIR` alone, else `./cards`, then the shipped cards."""
    return _search("GB300LANE_CARDS_DIR", "cards", "cards")


def results_dir() -> Path:
    """Where card receipts are written: `GB300LANE_RESULTS_DIR`, else `./results` (created on first write)."""
    env = os.environ.get("GB300LANE_RESULTS_DIR")
    return Path(env) if env else Path.cwd() / "results"


def writeup_receipts_dir() -> Path:
    """The write-up's transcribed receipts, shipped read-only with the package."""
    return shipped("receipts")


def state_dir() -> Path:
    """The state of the lane the tool acts on: the state root, or `hosts/<host>/<lane>/` under it for an inventory lane.

    Instances, boot reports, the hash ledger, smoke results and the promotion
    ledger all live below it, so two lanes' state is never mixed.
    """
    return placement.state_subdir(state_root(), placement.current())


def state_root() -> Path:
    """`GB300LANE_STATE_DIR`, else `$XDG_STATE_HOME/gb300lane` (default `~/.local/state/gb300lane`).

    What belongs to the installation rather than to one lane (the digest key, scratch space) lives here.
    """
    env = os.environ.get("GB300LANE_STATE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "gb300lane"
