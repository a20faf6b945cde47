"""Where things live: what the package ships, what the user has, and the lane state.

What the tool ships is found in one of two places, and an installed wheel
reads exactly what a checkout reads. The cards and the vLLM schema snapshots
live inside the package under `gb300lane/data/` (importlib.resources). The
recipes, the templates and the write-up's transcribed receipts live at the
repository's top level (`recipes/`, `templates/`, `results/<run>/`, where
people read and edit them); a wheel carries them under `gb300lane/data/`
(`recipes/`, `templates/`, `receipts/<run>/`), copied in at build time by
setup.py, and a checkout (an editable install) reads them where they are.

A user's own `recipes/`, `cards/`, `workloads/` and `templates/` in the working directory
come first (a file there shadows the shipped one of the same name); their
results go to `./results`. Each location can be overridden by an environment
variable so that tests and several lanes on one host never share state by
accident.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from gb300lane import placement
from gb300lane.errors import StateError

#: The package that holds the shipped data files.
DATA_PACKAGE = "gb300lane.data"
#: What the repository keeps at its top level and a wheel under gb300lane/data/: folder in the package -> in the
#: repository. setup.py copies each into the wheel (the receipts: the write-up's runs only, `WRITEUP_RUNS`).
TOP_LEVEL = {"recipes": "recipes", "templates": "templates", "receipts": "results"}
#: The write-up's transcribed receipts, under the write-up's own run names.
WRITEUP_RUNS = ("2026-10-26-br1-block-verification", "2026-10-26-br2-k-ladder-peerbench")
#: The checkout this module sits in, when it sits in one (an editable install, or the source tree on sys.path).
_CHECKOUT = Path(__file__).resolve().parent.parent


def _in_checkout(top: str) -> Path | None:
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "gb300lane" / "paths.py").is_file():
        found = _CHECKOUT / top
        return found if found.is_dir() else None
    return None


def shipped(*parts: str) -> Path:
    """A file or folder the tool ships: under `gb300lane/data/` in the package, or, for the recipes, templates
    and receipts, at the top of the checkout the package was imported from (see the module's docstring).

    Recipes and receipts are read as folders (globbed, hashed file by file),
    so the package must be installed as files on disk, which pip always does.
    """
    if parts and parts[0] in TOP_LEVEL:
        packaged = resources.files(DATA_PACKAGE).joinpath(parts[0])
        if isinstance(packaged, Path) and packaged.is_dir():
            return packaged.joinpath(*parts[1:])  # a wheel's copy
        top = _in_checkout(TOP_LEVEL[parts[0]])
        if top is not None:
            return top.joinpath(*parts[1:])
        raise StateError(
            f"{DATA_PACKAGE}/{parts[0]} is not installed and this is no checkout with {TOP_LEVEL[parts[0]]}/ at its "
            "top; reinstall gb300lane (pip install gb300lane, or pip install -e . in a checkout)"
        )
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


def workload_dirs() -> tuple[Path, ...]:
    """Where workload names are looked up, first match first: `GB300LANE_WORKLOADS_DIR` (else `./workloads`, when
    it exists), then the shipped workloads: `builtin`, which every window runs unless it names another, is always
    found."""
    env = os.environ.get("GB300LANE_WORKLOADS_DIR")
    if env:
        return (Path(env), shipped("workloads"))
    return _search("GB300LANE_WORKLOADS_DIR", "workloads", "workloads")


def workloads_home() -> Path:
    """Where `workload import` writes: `GB300LANE_WORKLOADS_DIR`, else `./workloads` (created on first write)."""
    env = os.environ.get("GB300LANE_WORKLOADS_DIR")
    return Path(env) if env else Path.cwd() / "workloads"


def results_dir() -> Path:
    """Where card receipts are written: `GB300LANE_RESULTS_DIR`, else `./results` (created on first write)."""
    env = os.environ.get("GB300LANE_RESULTS_DIR")
    return Path(env) if env else Path.cwd() / "results"


def template_dirs() -> tuple[Path, ...]:
    """Where templates are looked up by name, first match first: `GB300LANE_TEMPLATES_DIR` alone, else
    `./templates` (when it exists), then the shipped templates."""
    return _search("GB300LANE_TEMPLATES_DIR", "templates", "templates")


def writeup_receipts(run: str) -> Path:
    """One of the write-up's transcribed receipts directories (`WRITEUP_RUNS`), shipped read-only with the tool."""
    return shipped("receipts", run)


def writeup_receipts_dirs() -> tuple[Path, ...]:
    """Every shipped receipts directory of the write-up, in `WRITEUP_RUNS` order."""
    return tuple(writeup_receipts(run) for run in WRITEUP_RUNS)


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
