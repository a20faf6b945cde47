"""A live progress bar per window: cells, requests and tokens/s as they arrive.

The bar is a `WindowProgress`; the CLI uses it only on a terminal and never
with --json, so machine output stays clean.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gb300lane.bench.models import CellResult, RequestRecord
from gb300lane.recipes.schema import WindowSpec


class RichWindowProgress:
    """Draws one bar over a window's requests; the description carries cells and live tok/s."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("{task.fields[window]}", style="bold", markup=False),  # a window name is user text
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("requests · cells {task.fields[cells]} · {task.fields[rate]} tok/s · {task.fields[errors]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task: int | None = None
        self._cells_total = 0
        self._cells_done = 0
        self._tokens = 0
        self._errors = 0
        self._t0 = time.perf_counter()

    def __enter__(self) -> RichWindowProgress:
        self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.stop()

    def window_started(self, window: WindowSpec, cells: int, requests: int) -> None:
        self._cells_total = cells
        self._t0 = time.perf_counter()
        self._task = self._progress.add_task(
            "window", total=requests, window=window.name, cells=f"0/{cells}", rate="—", errors="no errors"
        )

    def request_done(self, record: RequestRecord) -> None:
        self._tokens += record.output_tokens or 0
        self._errors += 0 if record.ok else 1
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        self._update(advance=1, rate=f"{self._tokens / elapsed:,.0f}")

    def cell_done(self, cell: CellResult) -> None:
        self._cells_done += 1
        self._update(cells=f"{self._cells_done}/{self._cells_total}")

    def _update(self, advance: int = 0, **fields: str) -> None:
        if self._task is None:
            return
        errors = "no errors" if not self._errors else f"[red]{self._errors} errors[/]"
        self._progress.update(self._task, advance=advance, errors=errors, **fields)  # type: ignore[arg-type]
