"""The compiled verification kernels (`_kernels.c`), or None where they were not built.

`pip install` builds them with the package wherever a C compiler is present
(setup.py marks the extension optional, so an install without one still
succeeds). Callers keep a numpy path that gives the same results; the kernels
only fuse passes numpy makes (over a vocabulary row, a drafter slot's rows, a
verify step's rows and draws), with the same element arithmetic in the same
order; numpy keeps the transcendental functions (exp, log, ndtri).
`GB300LANE_NO_KERNELS=1` selects the numpy path, to compare the two.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("GB300LANE_NO_KERNELS") == "1":
        return None
    try:
        from gb300lane.spec import _kernels
    except ImportError:
        return None
    return _kernels


_BUILT: ModuleType | None = _load()
_off = 0


def active() -> ModuleType | None:
    """The extension module verification should call now, or None for the numpy path."""
    return None if _off else _BUILT


@contextlib.contextmanager
def numpy_only() -> Iterator[None]:
    """Verify on the numpy path inside the block (what the engine did before the kernels; for comparisons)."""
    global _off
    _off += 1
    try:
        yield
    finally:
        _off -= 1


def describe() -> str:
    """One line for benchmark and status output: which path verification runs."""
    if _BUILT is not None:
        return "compiled kernels (gb300lane.spec._kernels)"
    if os.environ.get("GB300LANE_NO_KERNELS") == "1":
        return "numpy (GB300LANE_NO_KERNELS=1)"
    return "numpy (the compiled kernels were not built: install with a C compiler present)"
