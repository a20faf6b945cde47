"""Where things live: recipes, results, the lane state directory.

Each location can be overridden by an environment variable so that tests and
several lanes on one host never share state by accident.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root when running from a checkout (editable install).
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def recipes_dir() -> Path:
    """`GB300LANE_RECIPES_DIR`, else `./recipes` when it exists, else the checkout's `recipes/`."""
    env = os.environ.get("GB300LANE_RECIPES_DIR")
    if env:
        return Path(env)
    cwd = Path.cwd() / "recipes"
    if cwd.is_dir():
        return cwd
    return PROJECT_ROOT / "recipes"


def templates_dir() -> Path:
    """`GB300LANE_TEMPLATES_DIR`, else the checkout's `templates/`."""
    env = os.environ.get("GB300LANE_TEMPLATES_DIR")
    return Path(env) if env else PROJECT_ROOT / "templates"


def results_dir() -> Path:
    """`GB300LANE_RESULTS_DIR`, else `./results` when it exists, else the checkout's `results/`."""
    env = os.environ.get("GB300LANE_RESULTS_DIR")
    if env:
        return Path(env)
    cwd = Path.cwd() / "results"
    if cwd.is_dir():
        return cwd
    return PROJECT_ROOT / "results"


def state_dir() -> Path:
    """`GB300LANE_STATE_DIR`, else `$XDG_STATE_HOME/gb300lane` (default `~/.local/state/gb300lane`)."""
    env = os.environ.get("GB300LANE_STATE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "gb300lane"
