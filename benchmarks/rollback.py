"""Benchmark: time to restore on rollback, embedded engine, hash hit, and the tool's own share of it.

A throwaway lane (its own state dir, cache root and free ports) runs
local-v26 and local-v27 from the checkout's recipes on the process runtime at
`--time-scale` (default 0.01; the write-up's 528 s hash-hit boot becomes about
5 s). v26 is promoted, then v27 (forced: this measures rollback, not the
verdict gate), then `rollback` runs `--rounds` times, swapping the pair each
time; every restart is of a kept pair whose compile hash is already cached.

restore   seconds from stopping production until the kept pair answered ready
boot      the lane's own measure: the pair's containers started -> ready
engine    the engine's own boot, from its log: (loading weights + torch.compile
          + init engine) modelled seconds x time scale, i.e. what it slept
tool      restore - engine: stop, port check, ledger, process start, readiness polling

Smoke gates run after each restore (the recipes' gates are trimmed to one
small window so a round stays short); their time is reported apart and is
not part of the restore.

    python benchmarks/rollback.py [--rounds 4] [--time-scale 0.01] [--out benchmarks/results/rollback.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair

ROOT = Path(__file__).resolve().parents[1]


def write_recipes(dest: Path, time_scale: float) -> str:
    """local-v26 / local-v27 as shipped, on free ports, with a one-window smoke; returns the lane name."""
    # A lane name of its own: Docker is shared, and cleanup removes only this lane's instances.
    base = quick_local_v26(name="rollback-bench-{port}", time_scale=time_scale)
    write_quick_pair(dest, base)
    return str(base["lane"]["name"])


_PHASES = (
    re.compile(r"Loading weights took (?P<s>[\d.]+) seconds"),
    re.compile(r"torch\.compile took (?P<s>[\d.]+) s in total"),
    re.compile(r"init engine \(.*\) took (?P<s>[\d.]+) seconds"),
)


def engine_boot_seconds(log: str, time_scale: float) -> float | None:
    """Wall seconds the embedded engine spent in its boot phases, read from its last boot's log lines."""
    last = log.rsplit("vLLM API server version", 1)[-1]
    found = [float(m["s"]) for rx in _PHASES for m in [rx.search(last)] if m]
    return sum(found) * time_scale if len(found) == len(_PHASES) else None


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="rollbacks to time (each swaps the pair)")
    parser.add_argument("--time-scale", type=float, default=0.01, help="embedded engine time scale")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "rollback.json")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gb300lane-rollback-bench-"))
    os.environ.update(
        GB300LANE_STATE_DIR=str(work / "state"),
        GB300LANE_RECIPES_DIR=str(work / "recipes"),
        GB300LANE_RESULTS_DIR=str(work / "results"),
        VLLM_CACHE_ROOT=str(work / "vllm-cache"),
    )
    os.environ.pop("GB300LANE_LANE_OPS", None)
    lane_name = write_recipes(work / "recipes", args.time_scale)

    from gb300lane import __version__, lane
    from gb300lane import promote as pm
    from gb300lane.fsio import atomic_write, dumps_json

    rows = []
    try:
        t0 = time.monotonic()
        first = pm.promote("local-v26", force=True, reason="benchmark: first production")
        second = pm.promote("local-v27", force=True, reason="benchmark: measuring rollback, not the verdict gate")
        if not (first.ok and second.ok):
            print(f"setup failed: {first.message} / {second.message}", file=sys.stderr)
            return 1
        print(f"setup (two boots, first may compile): {time.monotonic() - t0:.1f} s", file=sys.stderr)
        for n in range(1, args.rounds + 1):
            report = pm.rollback()
            if not report.ok:
                print(f"rollback {n} failed: {report.message}", file=sys.stderr)
                return 1
            engine_s = engine_boot_seconds(lane.logs(report.production), args.time_scale)
            if engine_s is None:
                print(f"rollback {n}: the engine log of {report.production} has no boot phase lines", file=sys.stderr)
                return 1
            rows.append({
                "round": n,
                "to": report.production,
                "restore_s": report.restore_seconds,
                "boot_s": report.boot_seconds,
                "engine_s": engine_s,
                "tool_s": report.restore_seconds - engine_s,
                "outside_boot_s": report.tool_seconds,
                "smoke_s": report.smoke_seconds,
            })  # fmt: skip
            print(f"  round {n}: -> {report.production}: {report.message}", file=sys.stderr)
    finally:
        for info in lane.list_instances():
            if info.name.startswith(f"{lane_name}-"):
                lane.remove_instance(info.name)
        shutil.rmtree(work, ignore_errors=True)

    header = f"{'round':>5}  {'to':<10} {'restore s':>9} {'boot s':>7} {'engine s':>8} {'tool s':>7} {'tool %':>6} {'smoke s':>7}"
    print(f"rollback time to restore, embedded engine, hash hit, time scale {args.time_scale}")
    print(header)
    for r in rows:
        pct = 100 * r["tool_s"] / r["restore_s"]
        print(
            f"{r['round']:>5}  {r['to']:<10} {r['restore_s']:9.2f} {r['boot_s']:7.2f} {r['engine_s']:8.2f} "
            f"{r['tool_s']:7.2f} {pct:6.1f} {r['smoke_s']:7.2f}"
        )
    restore = [r["restore_s"] for r in rows]
    tool = [r["tool_s"] for r in rows]
    engine = [r["engine_s"] for r in rows]
    outside = [r["outside_boot_s"] for r in rows]
    print(
        f"median restore {statistics.median(restore):.2f} s: engine {statistics.median(engine):.2f} s, "
        f"tool {statistics.median(tool):.2f} s (of which outside the pair's start-to-ready "
        f"{statistics.median(outside):.2f} s)"
    )
    result = {
        "schema_version": 1,
        "benchmark": "rollback",
        "tool_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "runtime": "process",
        "engine": "embedded",
        "time_scale": args.time_scale,
        "rounds": rows,
        "restore_s": summary(restore),
        "engine_s": summary(engine),
        "tool_s": summary(tool),
        "outside_boot_s": summary(outside),
        "tool_share": statistics.median(tool) / statistics.median(restore),
    }
    atomic_write(args.out, dumps_json(result))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
