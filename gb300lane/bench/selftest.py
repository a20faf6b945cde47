"""The client's self-test: the bench client against a server with known timing, at C1, C64 and C1000.

A window's latencies are only as good as the client's stamps. Here the
client streams from `bench.mock` (a separate process, so its work never
delays the client's loop) whose every event carries the moment it was
written (see the mock's docstring), and each figure the client would report
is compared with the truth:

- TTFT error: the client's TTFT minus the server's (first write minus the
  moment the request had been read), per request;
- ITL error: each inter-event gap the client saw minus the gap between the
  two writes, per gap; its standard deviation is the ITL sigma;
- vLLM agreement: the mean ITL of the client's events beside the mean ITL
  `vllm bench serve`'s own stamping (`vllm_style_stream`) gives on the same
  schedule.

Each level runs its requests per stream at its concurrency, after one
warm-up request per stream (so the connections are open and the figures are
the client's, not the kernel's connect), the streams' starts spread over one
event gap. The registered bounds
(`BOUNDS`) are what a card checks before its windows; a level outside them
fails the self-test and the card refuses to run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
import numpy as np
from pydantic import Field

from gb300lane.bench.client import StreamOutcome, collector_paused, stream_request
from gb300lane.bench.mock import MockTiming, raise_open_files
from gb300lane.errors import BenchError
from gb300lane.models import FrozenModel

#: The self-test's levels: (concurrency, mock timing, requests per stream).
LEVELS: tuple[tuple[int, MockTiming, int], ...] = (
    (1, MockTiming(ttft_s=0.02, itl_s=0.005, events=48), 16),
    (64, MockTiming(ttft_s=0.02, itl_s=0.01, events=32), 3),
    (1000, MockTiming(ttft_s=0.1, itl_s=0.1, events=8), 1),
)
#: Least spacing of the streams' first sends (one aiohttp request costs the client about this much CPU).
SEND_SPACING_S = 0.0005
#: Registered bounds: TTFT error p99 (ms) per concurrency, and ITL error sigma (ms) at every level.
BOUNDS_TTFT_P99_MS = {1: 5.0, 64: 5.0, 1000: 28.0}
BOUND_ITL_SIGMA_MS = 0.5
#: Most the client's mean ITL may differ from vLLM-style per-line stamping on the same schedule (relative).
BOUND_VLLM_ITL = 0.10


class SelftestLevel(FrozenModel):
    """One concurrency level of the self-test."""

    concurrency: int = Field(description="Streams in flight.")
    requests: int = Field(description="Requests measured (after one warm-up request per stream).")
    failed: int = Field(description="Requests that failed.")
    ttft_ms: float = Field(description="The mock's nominal time to first event, ms.")
    itl_ms: float = Field(description="The mock's nominal gap between events, ms.")
    events: int = Field(description="Events per stream.")
    ttft_error_ms_p50: float | None = Field(description="Median TTFT error (client minus server), ms.")
    ttft_error_ms_p99: float | None = Field(description="99th percentile of the TTFT error, ms.")
    ttft_error_ms_max: float | None = Field(description="Largest TTFT error, ms.")
    itl_error_sigma_ms: float | None = Field(description="Standard deviation of the per-gap ITL error, ms.")
    itl_error_ms_p99: float | None = Field(description="99th percentile of the absolute per-gap ITL error, ms.")
    arrival_late_ms_p99: float | None = Field(description="99th percentile of event arrival minus its write, ms.")
    server_late_ms_p99: float | None = Field(
        description="99th percentile of the mock's own lateness (write minus nominal schedule), ms; not charged to "
        "the client."
    )
    bound_ttft_p99_ms: float = Field(description="The registered TTFT error p99 bound at this level, ms.")
    bound_itl_sigma_ms: float = Field(description="The registered ITL error sigma bound, ms.")
    passed: bool = Field(description="Both errors within their bounds and no request failed.")


class SelftestResult(FrozenModel):
    """The self-test's result (a card records it beside its windows)."""

    schema_version: int = Field(default=1, description="Format version.")
    levels: list[SelftestLevel] = Field(description="One row per concurrency level.")
    vllm_itl_ms: float | None = Field(description="Mean ITL by vLLM-style per-line stamping on the C1 schedule, ms.")
    client_itl_ms: float | None = Field(description="Mean ITL of the client's events on the same schedule, ms.")
    vllm_itl_agrees: bool = Field(
        description=f"The two within {BOUND_VLLM_ITL:.0%} of each other (true when not checked: both None)."
    )
    load_average: float | None = Field(description="1-minute load average of the host when it ran.")
    realtime: bool = Field(description="Whether the client ran under a real-time scheduling policy.")
    passed: bool = Field(description="Every level passed and the ITL agrees with vLLM's stamping.")

    def failures(self) -> list[str]:
        """One line per bound missed."""
        out = []
        for lv in self.levels:
            if lv.failed:
                out.append(f"C{lv.concurrency}: {lv.failed} of {lv.requests} self-test requests failed")
            if lv.ttft_error_ms_p99 is None or lv.ttft_error_ms_p99 >= lv.bound_ttft_p99_ms:
                out.append(
                    f"C{lv.concurrency}: TTFT error p99 {_ms(lv.ttft_error_ms_p99)} >= the registered "
                    f"{lv.bound_ttft_p99_ms:g} ms"
                )
            if lv.itl_error_sigma_ms is None or lv.itl_error_sigma_ms >= lv.bound_itl_sigma_ms:
                out.append(
                    f"C{lv.concurrency}: ITL error sigma {_ms(lv.itl_error_sigma_ms)} >= the registered "
                    f"{lv.bound_itl_sigma_ms:g} ms"
                )
        if not self.vllm_itl_agrees:
            out.append(
                f"mean ITL {_ms(self.client_itl_ms)} is not within {BOUND_VLLM_ITL:.0%} of vLLM-style "
                f"stamping's {_ms(self.vllm_itl_ms)}"
            )
        return out


def bound_ttft_p99_ms(concurrency: int) -> float:
    """The registered TTFT error bound of a concurrency: the bound of the least registered level at or above it."""
    above = [c for c in BOUNDS_TTFT_P99_MS if c >= concurrency]
    return BOUNDS_TTFT_P99_MS[min(above)] if above else BOUNDS_TTFT_P99_MS[max(BOUNDS_TTFT_P99_MS)]


def levels_for(concurrencies: list[int]) -> tuple[tuple[int, MockTiming, int], ...]:
    """Self-test levels for the concurrencies a card's windows run: each at its own level, with the timing
    of the registered level it falls under (short streams: a card pays seconds, not a minute, for it)."""
    out = []
    for conc in sorted(set(concurrencies)):
        if conc <= 64:
            # About 250 gaps at every level: one late read then moves the sigma by well under the bound.
            out.append((conc, MockTiming(ttft_s=0.02, itl_s=0.005, events=32), max(1, 8 // conc)))
        else:
            out.append((conc, MockTiming(ttft_s=0.1, itl_s=0.1, events=8), 1))
    return tuple(out)


def _ms(v: float | None) -> str:
    return "none" if v is None else f"{v:.3f} ms"


def _stamps(text: str) -> tuple[float, list[float]] | None:
    """(the server's read time, each event's write time) from a mock stream's text."""
    head, sep, rest = text.partition("@")
    if not sep:
        return None
    try:
        return float(head), [float(x) for x in rest.split(";") if x]
    except ValueError:
        return None


async def vllm_style_stream(session: aiohttp.ClientSession, url: str, payload: Mapping[str, object]) -> list[float]:
    """Event times (seconds since send) as `vllm bench serve` stamps them: `time.perf_counter()` per message.

    vLLM's request function reads the body with `iter_any()`, splits it into
    SSE messages and stamps each message with choices when its loop reaches
    it; the ITL it reports is the gap before every message after the first.
    """
    times: list[float] = []
    st = time.perf_counter()
    buffer = ""
    async with session.post(url, json=payload) as resp:
        async for raw in resp.content.iter_any():
            buffer += raw.decode("utf-8")
            while "\n\n" in buffer:
                message, buffer = buffer.split("\n\n", 1)
                chunk = message.strip().removeprefix("data: ")
                if chunk and chunk != "[DONE]" and json.loads(chunk).get("choices"):
                    times.append(time.perf_counter() - st)
    return times


@contextlib.contextmanager
def mock_process(timing: MockTiming) -> Iterator[str]:
    """A mock server in its own process; yields its base URL and stops it on exit."""
    argv = [
        sys.executable,
        "-m",
        "gb300lane.bench.mock",
        "--port",
        "0",
        "--ttft-ms",
        str(timing.ttft_s * 1e3),
        "--itl-ms",
        str(timing.itl_s * 1e3),
        "--events",
        str(timing.events),
        "--events-per-write",
        str(timing.events_per_write),
        "--parent",
        str(os.getpid()),
    ]
    # It ends with this process even when this one is killed (SIGKILL runs no `finally`): it watches its parent.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("port "):
            err = proc.stderr.read() if proc.stderr is not None else ""
            raise BenchError(f"the self-test's mock server did not start: {line!r} {err[-500:]}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _body(events: int) -> dict[str, Any]:
    return {
        "model": "mock",
        "prompt": "self-test",
        "max_tokens": events,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


async def _level(base: str, conc: int, timing: MockTiming, per_stream: int) -> tuple[SelftestLevel, list[float]]:
    url = base + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0)
    outcomes: list[StreamOutcome] = []
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(stream_request(session, url, _body(1), read_timeout_s=30) for _ in range(conc)))

        async def one(i: int) -> None:
            # Streams start spread over one event gap, as a closed loop's streams are once its first
            # requests have ended at their own times; all at once would time a burst of C sends instead.
            await asyncio.sleep(i * max(timing.itl_s, conc * SEND_SPACING_S) / conc)
            for _ in range(per_stream):
                outcomes.append(await stream_request(session, url, _body(timing.events), read_timeout_s=60))

        with collector_paused():
            await asyncio.gather(*(one(i) for i in range(conc)))
    ttft_err: list[float] = []
    itl_err: list[float] = []
    late: list[float] = []
    server_late: list[float] = []
    gaps: list[float] = []
    failed = 0
    for out in outcomes:
        parsed = _stamps(out.text) if out.ok else None
        if parsed is None or len(parsed[1]) != len(out.event_times_s) or not out.event_times_s:
            failed += 1
            continue
        received, sent = parsed
        ev = out.event_times_s
        ttft_err.append((ev[0] - (sent[0] - received)) * 1e3)
        for j in range(len(ev) - 1):
            itl_err.append(((ev[j + 1] - ev[j]) - (sent[j + 1] - sent[j])) * 1e3)
            gaps.append(ev[j + 1] - ev[j])
        late.extend((out.started_at + t - s) * 1e3 for t, s in zip(ev, sent))
        server_late.extend((s - (received + timing.ttft_s + j * timing.itl_s)) * 1e3 for j, s in enumerate(sent))

    def p(xs: list[float], q: float) -> float | None:
        return float(np.percentile(xs, q)) if xs else None

    sigma = float(np.std(itl_err)) if itl_err else None
    bound = bound_ttft_p99_ms(conc)
    level = SelftestLevel(
        concurrency=conc,
        requests=len(outcomes),
        failed=failed,
        ttft_ms=timing.ttft_s * 1e3,
        itl_ms=timing.itl_s * 1e3,
        events=timing.events,
        ttft_error_ms_p50=p(ttft_err, 50),
        ttft_error_ms_p99=p(ttft_err, 99),
        ttft_error_ms_max=max(ttft_err) if ttft_err else None,
        itl_error_sigma_ms=sigma,
        itl_error_ms_p99=p([abs(x) for x in itl_err], 99),
        arrival_late_ms_p99=p(late, 99),
        server_late_ms_p99=p(server_late, 99),
        bound_ttft_p99_ms=bound,
        bound_itl_sigma_ms=BOUND_ITL_SIGMA_MS,
        passed=bool(
            not failed
            and ttft_err
            and p(ttft_err, 99) < bound  # type: ignore[operator]
            and sigma is not None
            and sigma < BOUND_ITL_SIGMA_MS
        ),
    )
    return level, gaps


async def _vllm_agreement(base: str, timing: MockTiming, requests: int) -> tuple[float | None, float | None]:
    url = base + "/v1/completions"
    ours: list[float] = []
    theirs: list[float] = []
    async with aiohttp.ClientSession() as session:
        for _ in range(requests):
            out = await stream_request(session, url, _body(timing.events), read_timeout_s=30)
            ours.extend(b - a for a, b in zip(out.event_times_s, out.event_times_s[1:]))
            ev = await vllm_style_stream(session, url, _body(timing.events))
            theirs.extend(b - a for a, b in zip(ev, ev[1:]))
    return (float(np.mean(ours)) * 1e3 if ours else None, float(np.mean(theirs)) * 1e3 if theirs else None)


def _realtime() -> bool:
    try:
        return os.sched_getscheduler(0) in (os.SCHED_FIFO, os.SCHED_RR)
    except (AttributeError, OSError):
        return False


def run_selftest(levels: tuple[tuple[int, MockTiming, int], ...] = LEVELS, *, agreement: bool = True) -> SelftestResult:
    """The client against the mock at every level; see the module docstring. Raises BenchError if the mock cannot start.

    `agreement` also checks the mean ITL against vLLM-style stamping (a property of the code, not of the host:
    a card's self-test leaves it out).
    """
    raise_open_files()
    rows: list[SelftestLevel] = []
    client_itl = vllm_itl = None
    for conc, timing, per_stream in levels:
        with mock_process(timing) as base:
            row, _ = asyncio.run(_level(base, conc, timing, per_stream))
            rows.append(row)
    agrees = True
    if agreement:
        # Several events a write (the case stamping per read got wrong), with per-line stamping as the reference.
        grouped = MockTiming(ttft_s=0.01, itl_s=0.002, events=48, events_per_write=3)
        with mock_process(grouped) as base:
            client_itl, vllm_itl = asyncio.run(_vllm_agreement(base, grouped, 8))
        agrees = (
            client_itl is not None
            and vllm_itl is not None
            and vllm_itl > 0
            and abs(client_itl / vllm_itl - 1) <= BOUND_VLLM_ITL
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return SelftestResult(
        levels=rows,
        vllm_itl_ms=vllm_itl,
        client_itl_ms=client_itl,
        vllm_itl_agrees=agrees,
        load_average=load,
        realtime=_realtime(),
        passed=agrees and all(r.passed for r in rows),
    )


#: Column headers of the self-test table (`table_rows`).
TABLE_COLUMNS = (
    "C",
    "requests",
    "failed",
    "TTFT / ITL ms",
    "TTFT err p50",
    "TTFT err p99",
    "bound",
    "ITL err sigma",
    "bound",
    "ITL err p99",
    "arrival late p99",
    "mock late p99",
    "result",
)


def table_rows(result: SelftestResult) -> list[list[str]]:
    """The self-test as table rows (ms), one per level, in `TABLE_COLUMNS` order."""

    def f(v: float | None) -> str:
        return "—" if v is None else f"{v:.3f}"

    return [
        [
            str(lv.concurrency),
            str(lv.requests),
            str(lv.failed),
            f"{lv.ttft_ms:g} / {lv.itl_ms:g}",
            f(lv.ttft_error_ms_p50),
            f(lv.ttft_error_ms_p99),
            f"< {lv.bound_ttft_p99_ms:g}",
            f(lv.itl_error_sigma_ms),
            f"< {lv.bound_itl_sigma_ms:g}",
            f(lv.itl_error_ms_p99),
            f(lv.arrival_late_ms_p99),
            f(lv.server_late_ms_p99),
            "PASS" if lv.passed else "FAIL",
        ]
        for lv in result.levels
    ]


def selftest_table(result: SelftestResult, title: str) -> Table:
    """The self-test as a rich table (the CLI and benchmarks/client.py print the same one)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in TABLE_COLUMNS:
        table.add_column(col, justify="right")
    for row in table_rows(result):
        table.add_row(*row)
    return table
