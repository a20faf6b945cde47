"""How fast the bench client consumes streams, and how precisely it times them.

Two phases, each with its own engine boot and one window cell per
concurrency level (C1, C8, C64) through the real client code path
(`run_window_async`):

- capacity, at `--time-scale 0` (the engine emits as fast as it computes),
  engine pinned to one core and this process (the client) to another:
  consumed tok/s (output tokens / the cell's wall span; bounded by the
  engine, itself CPU-bound), client CPU capacity (output tokens / the
  client's CPU seconds: what one saturated client core would consume) and
  engine modelled tok/s (what the lane would serve at time scale 1);
- timing, paced at `--timing-time-scale` (default 0.25), pinned the same
  way unless `--timing-unpinned`: the engine sleeps between steps (its CPU
  use is in the table), so the error is the client's and the host's, not a
  CPU-saturated engine's. Unpinned, the kernel tends to wake the client on
  the engine's core (the engine's write wakes it), where it waits out the
  engine's next step; measured, that roughly doubles the p99.

On a shared host, `--timing-realtime PRIO` runs the timing phase's engine and
client under SCHED_FIFO at that priority (root): they are paced and mostly
asleep, so this takes little CPU from anyone, and what the phase measures is
the client's own per-chunk work rather than other tenants' load. The table's
title and the JSON say when it was used.

Timing error, per token: the client's receive time (the arrival of the chunk
that carried it, attributed by per-chunk usage) minus the engine-reported
send time of the same token (`wall_token_times_s`: when the engine wrote
that chunk), less the request's median difference (the constant offset
between the two clocks' origins: client = request sent, engine = request
arrived; reported apart). It includes loopback transit, OS scheduling of
both processes and the client's event-loop delay. Beside it each row shows
the engine's CPU use over the cell and, in the timing phase, the client
event loop's lag (overshoot of a 1 ms sleep), the host's noise floor.

A third phase is the client self-test (`gb300lane bench selftest`,
gb300lane/bench/selftest.py): the client against a mock server with known
TTFT and ITL at C1, C64 and C1000, no real-time priority, its TTFT error
and ITL error sigma against the registered bounds (TTFT p99 under 5 ms at
C64 and 28 ms at C1000, ITL sigma under 0.5 ms).

Floors: at C8 the client's CPU capacity is at least 5x the engine's modelled
C8 throughput (the client is never the bottleneck), the paced p99 timing
error is under 1 ms, and the self-test passes. Prints a table per phase,
writes benchmarks/results/client.json, and exits 1 when any floor is missed.

    python benchmarks/client.py [--tokens 256] [--concurrency 1,8,64]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil
from rich.console import Console
from rich.table import Table

from gb300lane import __version__
from gb300lane.bench.selftest import run_selftest, selftest_table
from gb300lane.bench.window import run_window_async
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.recipes.schema import WindowSpec
from gb300lane.testing.free_ports import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "client.json"
SPEC_CONFIG = {
    "method": "dspark",
    "num_speculative_tokens": 5,
    "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 3], [9, 64, 3]],
    "draft_sample_method": "probabilistic",
    "rejection_sample_method": "block",
}
FLOOR_RATIO_C8 = 5.0
FLOOR_P99_MS = 1.0


def _pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def _realtime(priority: int | None) -> None:
    """SCHED_FIFO at `priority` for this process, or back to the default scheduler with None."""
    if priority is None:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    else:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


def _boot(
    port: int, cpu: int | None, max_seqs: int, time_scale: float, cache_root: str, realtime: int | None = None
) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "gb300lane.engine",
        "serve",
        "--model",
        "builtin",
        "--served-model-name",
        "bench",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--time-scale",
        str(time_scale),
        "--max-num-seqs",
        str(max_seqs),
        "--seed",
        "0",
        "--speculative-config",
        json.dumps(SPEC_CONFIG),
        # The mixed class carries tool_json's `tools`, which need a tool-call parser (as on the lane).
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "deepseek_v41",
    ]
    env = {**os.environ, "VLLM_CACHE_ROOT": cache_root}
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=(lambda: (_pin(cpu), realtime is not None and _realtime(realtime))),
    )
    # A cached boot is ~530 modelled seconds, slept at the time scale.
    deadline = time.monotonic() + 120 + 600 * time_scale
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"engine exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"engine on port {port} not healthy after {120 + 600 * time_scale:.0f} s")


def _engine_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` (psutil), or None where unavailable."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


async def _loop_lag(stop: asyncio.Event, lags_ms: list[float]) -> None:
    """Overshoot of repeated 1 ms sleeps: how late this event loop runs a ready callback."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        lags_ms.append((time.perf_counter() - t - 0.001) * 1e3)


def _timing_errors_ms(result) -> tuple[list[float], list[float]]:
    """(per-token timing errors, per-request origin offsets), in ms.

    The client's clock starts when it sends a request and the engine's when
    the request arrives, so the two differ by a per-request constant (connect,
    transit, parse). That offset is estimated as the median of the per-token
    differences (robust to a late first chunk) and reported on its own; the
    timing error is each token's deviation from it, which is what every
    inter-token time, TPOT and decode rate the client reports inherits.
    """
    errors: list[float] = []
    offsets: list[float] = []
    for rec in result.records:
        if not rec.ok or rec.engine is None:
            continue
        client, engine = rec.token_times_s, rec.engine.wall_token_times_s
        if len(client) != len(engine) or not client:
            continue  # chunk-only attribution: no per-token pairing
        diff = (np.asarray(client) - np.asarray(engine)) * 1e3
        offset = float(np.median(diff))
        offsets.append(offset)
        errors.extend((diff - offset).tolist())
    return errors, offsets


async def _measure(endpoint: str, conc: int, tokens: int, requests: int, engine_pid: int, probe: bool) -> dict:
    window = WindowSpec(
        name=f"client-c{conc}",
        classes=("mixed",),
        transcripts_per_class=requests,
        rounds=1,
        concurrency=(conc,),
        temperature=1.0,
        top_p=1.0,
        seed_base=1,
        forced_tokens=tokens,
    )
    lags: list[float] = []
    stop = asyncio.Event()
    # The probe wakes 1000 times a second, so it runs only where client CPU is not being measured.
    prober = asyncio.create_task(_loop_lag(stop, lags)) if probe else None
    engine_cpu0 = _engine_cpu_s(engine_pid)
    cpu0 = time.process_time()
    result = await run_window_async(endpoint, window, model="bench")
    client_cpu_s = time.process_time() - cpu0
    engine_cpu1 = _engine_cpu_s(engine_pid)
    if prober is not None:
        stop.set()
        await prober
    (cell,) = result.cells
    err_list, offset_list = _timing_errors_ms(result)
    errs = np.asarray(err_list)
    abs_errs = np.abs(errs)
    offsets = np.asarray(offset_list)
    client_tok_s = cell.output_tokens / cell.wall_span_s
    # The engine at time scale 0 is itself CPU-bound, so the consumed rate is a lower bound on
    # what the client can take; tokens per second of client CPU is the client's own ceiling.
    capacity = cell.output_tokens / client_cpu_s if client_cpu_s > 0 else None
    modelled = cell.decode_tok_s if cell.clock == "modelled" else None
    return {
        "concurrency": conc,
        "requests": cell.requests,
        "valid": cell.valid,
        "invalid_reasons": cell.invalid_reasons,
        "output_tokens": cell.output_tokens,
        "wall_span_s": cell.wall_span_s,
        "client_tok_s": client_tok_s,
        "client_cpu_s": client_cpu_s,
        "client_capacity_tok_s": capacity,
        "engine_modelled_tok_s": modelled,
        "ratio": (capacity / modelled) if capacity and modelled else None,
        "tokens_per_step": cell.spec.tokens_per_step if cell.spec else None,
        # Engine CPU seconds per wall second over the cell (1.0 = one core saturated).
        "engine_cpu_util": (
            (engine_cpu1 - engine_cpu0) / cell.wall_span_s
            if engine_cpu0 is not None and engine_cpu1 is not None and cell.wall_span_s
            else None
        ),
        "client_loop_lag_ms": {
            "samples": len(lags),
            "p50": float(np.percentile(lags, 50)) if lags else None,
            "p99": float(np.percentile(lags, 99)) if lags else None,
            "max": float(max(lags)) if lags else None,
        },
        "timing_error_ms": {
            "tokens": int(errs.size),
            "mean": float(errs.mean()) if errs.size else None,
            "signed_p1": float(np.percentile(errs, 1)) if errs.size else None,
            "signed_p99": float(np.percentile(errs, 99)) if errs.size else None,
            "abs_p50": float(np.percentile(abs_errs, 50)) if errs.size else None,
            "abs_p99": float(np.percentile(abs_errs, 99)) if errs.size else None,
            "abs_max": float(abs_errs.max()) if errs.size else None,
        },
        "origin_offset_ms": {
            "requests": int(offsets.size),
            "p50": float(np.percentile(offsets, 50)) if offsets.size else None,
            "p99": float(np.percentile(offsets, 99)) if offsets.size else None,
        },
    }


def _phase(
    levels: list[int],
    tokens: int,
    per_stream: int,
    time_scale: float,
    args,
    cache_root: str,
    *,
    pin: bool,
    probe: bool,
    realtime: int | None = None,
) -> list[dict]:
    port = free_port()
    engine_cpu = args.engine_cpu if pin and (os.cpu_count() or 1) > 1 else None
    _pin(args.client_cpu if pin else None)
    if not pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    proc = _boot(port, engine_cpu, max(levels), time_scale, cache_root, realtime)
    if realtime is not None:
        _realtime(realtime)
    try:
        rows = [
            asyncio.run(
                _measure(f"http://127.0.0.1:{port}", conc, tokens, min(200, conc * per_stream), proc.pid, probe)
            )
            for conc in levels
        ]
        for row in rows:
            row.update(
                phase="capacity" if time_scale == 0 else "timing",
                time_scale=time_scale,
                pinned=pin,
                realtime_priority=realtime,
            )
        return rows
    finally:
        if realtime is not None:
            _realtime(None)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--requests-per-stream", type=int, default=4, help="requests each concurrent stream sends")
    ap.add_argument("--timing-time-scale", type=float, default=0.25, help="engine pacing for the timing-error phase")
    ap.add_argument("--timing-tokens", type=int, default=128)
    ap.add_argument("--timing-requests-per-stream", type=int, default=8)
    ap.add_argument(
        "--timing-unpinned",
        action="store_true",
        help="leave engine and client unpinned in the timing phase (the kernel may then run the "
        "client on the engine's core, behind its step)",
    )
    ap.add_argument(
        "--timing-realtime",
        type=int,
        default=None,
        metavar="PRIO",
        help="run the timing phase's engine and client under SCHED_FIFO at PRIO (root; a shared host)",
    )
    ap.add_argument("--timing-only", action="store_true", help="skip the capacity phase (comparisons of timing alone)")
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--engine-cpu", type=int, default=1)
    ap.add_argument("--skip-selftest", action="store_true", help="leave out the self-test phase")
    ap.add_argument("--selftest-only", action="store_true", help="run only the self-test phase")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    cpus = os.cpu_count() or 1
    engine_cpu = args.engine_cpu if cpus > 1 else None
    if args.timing_time_scale <= 0:
        raise SystemExit("--timing-time-scale must be > 0 (the timing phase is the paced one); e.g. 0.1")
    selftest = None if args.skip_selftest else run_selftest()
    if args.selftest_only:
        rows, paced = [], []
    with (
        contextlib.nullcontext()
        if args.selftest_only
        else tempfile.TemporaryDirectory(prefix="gb300lane-bench-client-")
    ) as cache_root:
        # Throughput at time scale 0; this boot also fills the compile cache so the paced boot is a hit.
        if args.selftest_only:
            pass
        elif args.timing_only:
            # No measurement, but the compile cache filled as the capacity phase's boot would, so the paced boot hits.
            warm = _boot(free_port(), None, max(levels), 0.0, cache_root)
            warm.terminate()
            warm.wait(10)
            rows = []
        else:
            rows = _phase(levels, args.tokens, args.requests_per_stream, 0.0, args, cache_root, pin=True, probe=False)
        if not args.selftest_only:
            paced = _phase(
                levels,
                args.timing_tokens,
                args.timing_requests_per_stream,
                args.timing_time_scale,
                args,
                cache_root,
                pin=not args.timing_unpinned,
                probe=True,
                realtime=args.timing_realtime,
            )
    c8 = next((r for r in rows if r["concurrency"] == 8), None)
    floors = {
        "c8_client_over_modelled_min": FLOOR_RATIO_C8,
        "c8_ratio": c8["ratio"] if c8 else None,
        "c8_ratio_pass": bool(c8 and c8["ratio"] is not None and c8["ratio"] >= FLOOR_RATIO_C8),
        "p99_timing_error_ms_max": FLOOR_P99_MS,
        "p99_pass_paced": {str(r["concurrency"]): _p99_ok(r) for r in paced},
        "p99_pass_time_scale_0": {str(r["concurrency"]): _p99_ok(r) for r in rows},
        "selftest_pass": selftest.passed if selftest is not None else None,
        "selftest_failures": selftest.failures() if selftest is not None else None,
    }
    out = {
        "schema_version": 1,
        "benchmark": "client",
        "tool_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": cpus,
        "client_cpu": args.client_cpu,
        "engine_cpu": engine_cpu,
        "tokens": args.tokens,
        "timing_tokens": args.timing_tokens,
        "timing_time_scale": args.timing_time_scale,
        "timing_pinned": not args.timing_unpinned,
        "timing_realtime_priority": args.timing_realtime,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "speculative_config": SPEC_CONFIG,
        "rows": rows,
        "paced_rows": paced,
        "floors": floors,
        "selftest": selftest.model_dump(mode="json") if selftest is not None else None,
    }
    atomic_write(args.out, dumps_json(out))
    console = Console(width=max(Console().width, 150))
    if rows:
        console.print(
            _table(f"capacity phase, time scale 0: {args.tokens} tokens/request, engine and client pinned", rows)
        )
    rt = f", SCHED_FIFO {args.timing_realtime}" if args.timing_realtime is not None else ""
    console.print(
        _table(
            f"timing phase, time scale {args.timing_time_scale:g} (paced): {args.timing_tokens} "
            f"tokens/request, {'unpinned' if args.timing_unpinned else 'pinned'}{rt}; "
            f"load average {os.getloadavg()[0]:.1f}",
            paced,
        )
    )
    verdict = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    console.print(
        f"floor C8 client >= {FLOOR_RATIO_C8:g}x modelled: {verdict(floors['c8_ratio_pass'])}; "
        f"p99 timing error < {FLOOR_P99_MS:g} ms, timing phase: "
        + ", ".join(f"C{c} {verdict(ok)}" for c, ok in floors["p99_pass_paced"].items())
        + "; capacity phase (time scale 0): "
        + ", ".join(f"C{c} {verdict(ok)}" for c, ok in floors["p99_pass_time_scale_0"].items())
    )
    if selftest is not None:
        console.print(
            selftest_table(
                selftest,
                f"client self-test, mock with known timing, no real-time priority "
                f"(ms); load average {selftest.load_average or 0:.1f}",
            )
        )
        console.print(
            f"mean ITL, three events a write: client {selftest.client_itl_ms or 0:.3f} ms, vLLM-style "
            f"per-line stamping {selftest.vllm_itl_ms or 0:.3f} ms",
            highlight=False,
        )
        for line in selftest.failures():
            console.print(f"self-test FAIL: {line}", highlight=False, markup=False)
    console.print(f"wrote {args.out}")
    missed = [
        name
        for name, ok in (
            ("C8 client capacity", floors["c8_ratio_pass"] if rows else True),
            ("paced p99 timing error", all(floors["p99_pass_paced"].values())),
            ("self-test", selftest is None or selftest.passed),
        )
        if not ok
    ]
    if missed:
        console.print(f"missed: {', '.join(missed)}", highlight=False, markup=False)
        sys.exit(1)


def _p99_ok(row: dict) -> bool:
    p99 = row["timing_error_ms"]["abs_p99"]
    return p99 is not None and p99 < FLOOR_P99_MS


def _table(title: str, rows: list[dict]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in (
        "C",
        "requests",
        "valid",
        "consumed tok/s",
        "client CPU cap tok/s",
        "engine modelled tok/s",
        "cap / modelled",
        "tok/step",
        "engine CPU",
        "err p50 ms",
        "err p99 ms",
        "err max ms",
        "offset p50 ms",
        "loop lag p99 ms",
    ):
        table.add_column(col, justify="right")
    fmt = lambda v, f="{:,.1f}": "—" if v is None else f.format(v)  # noqa: E731
    for r in rows:
        t = r["timing_error_ms"]
        table.add_row(
            str(r["concurrency"]),
            str(r["requests"]),
            "yes" if r["valid"] else "NO",
            fmt(r["client_tok_s"]),
            fmt(r["client_capacity_tok_s"]),
            fmt(r["engine_modelled_tok_s"]),
            fmt(r["ratio"], "{:.1f}x"),
            fmt(r["tokens_per_step"], "{:.2f}"),
            fmt(r["engine_cpu_util"], "{:.0%}"),
            fmt(t["abs_p50"], "{:.3f}"),
            fmt(t["abs_p99"], "{:.3f}"),
            fmt(t["abs_max"], "{:.3f}"),
            fmt(r["origin_offset_ms"]["p50"], "{:.3f}"),
            fmt(r["client_loop_lag_ms"]["p99"], "{:.3f}"),
        )
    return table


if __name__ == "__main__":
    main()
