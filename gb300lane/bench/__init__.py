"""Bench: the shipped transcripts, the async streaming client, windows and smoke gates.

`run_window` measures a lane over (class, concurrency, round) cells with
seeded, forced-length requests; `run_smoke` runs a recipe's smoke gates;
`load_transcripts` reads the shipped transcripts.

Each name loads its submodule when first used (`gb300lane.lazy`): reading a smoke report's folder
(`bench.store`) does not load the HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gb300lane.lazy import attach

if TYPE_CHECKING:
    from gb300lane.bench.catalog import STANDARD_WINDOWS, resolve_window, standard_window, with_overrides
    from gb300lane.bench.models import CellResult, EngineTiming, RequestRecord, SpecStats, WindowResult
    from gb300lane.bench.smoke import GateResult, SmokeReport, run_smoke
    from gb300lane.bench.stats import Percentiles
    from gb300lane.bench.store import load_result, save_result
    from gb300lane.bench.transcripts import CLASSES, Transcript, load_transcripts
    from gb300lane.bench.window import derive_seed, run_window, run_window_async

__getattr__, __dir__ = attach(
    __name__,
    {
        "CLASSES": "transcripts",
        "CellResult": "models",
        "EngineTiming": "models",
        "GateResult": "smoke",
        "Percentiles": "stats",
        "RequestRecord": "models",
        "STANDARD_WINDOWS": "catalog",
        "SmokeReport": "smoke",
        "SpecStats": "models",
        "Transcript": "transcripts",
        "WindowResult": "models",
        "derive_seed": "window",
        "load_result": "store",
        "load_transcripts": "transcripts",
        "resolve_window": "catalog",
        "run_smoke": "smoke",
        "run_window": "window",
        "run_window_async": "window",
        "save_result": "store",
        "standard_window": "catalog",
        "with_overrides": "catalog",
    },
)

__all__ = [
    "CLASSES",
    "CellResult",
    "EngineTiming",
    "GateResult",
    "Percentiles",
    "RequestRecord",
    "STANDARD_WINDOWS",
    "SmokeReport",
    "SpecStats",
    "Transcript",
    "WindowResult",
    "derive_seed",
    "load_result",
    "load_transcripts",
    "resolve_window",
    "run_smoke",
    "run_window",
    "run_window_async",
    "save_result",
    "standard_window",
    "with_overrides",
]
