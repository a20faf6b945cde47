"""The compiled verification kernels (`_kernels.c`), or None where they were not built.

`pip install` builds them with the package wherever a C compiler is present
(setup.py marks the extension optional, so an install without one still
succeeds). Callers keep a numpy path that gives the same results; the kernels
only fuse the passes numpy makes over a vocabulary row. `GB300LANE_NO_KERNELS=1`
selects the numpy path, to compare the two.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("GB300LANE_NO_KERNELS") == "1":
        return None
    try:
        from gb300lane.spec import _kernels
    except ImportError:
        return None
    return _kernels


#: The extension module, or None (the numpy path).
KERNELS: ModuleType | None = _load()


def describe() -> str:
    """One line for benchmark and status output: which path verification runs."""
    if KERNELS is not None:
        return "compiled kernels (gb300lane.spec._kernels)"
    if os.environ.get("GB300LANE_NO_KERNELS") == "1":
        return "numpy (GB300LANE_NO_KERNELS=1)"
    return "numpy (the compiled kernels were not built: install with a C compiler present)"
