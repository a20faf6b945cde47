"""Up-to-ready for a hash hit and a hash miss, and what `gb300lane up` adds on top of the engine's own boot.

On the process runtime with the embedded engine at `--time-scale 0.01`, for
each outcome (miss: a fresh VLLM_CACHE_ROOT; hit: the cache the miss left):

- up-to-ready: wall seconds of `gb300lane.lane.up()` from the call until it
  returns (render, preconditions, create, start, readiness, checks, report);
- bare: the same rendered argv and env started directly as subprocesses, with
  /health and /v1/models polled every 10 ms (no tool in the loop);
- engine logged: the engine's own logged boot (weights + torch.compile + init
  engine, modelled seconds) times the time scale;
- overhead: up-to-ready minus bare, i.e. what the tool adds.

Floor: the overhead is at most 1 s. Prints a table and writes
benchmarks/results/boot.json.

    python benchmarks/boot.py [--reps 2] [--time-scale 0.01]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from gb300lane import __version__, paths
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.testing.free_ports import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "boot.json"
FLOOR_OVERHEAD_S = 1.0


def _ready(endpoint: str, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/health", timeout=1) as r:
            if r.status != 200:
                return False
        with urllib.request.urlopen(f"{endpoint}/v1/models", timeout=1) as r:
            return model in r.read().decode()
    except (urllib.error.URLError, OSError):
        return False


def bare_boot(recipe_name: str) -> float:
    """Start the rendered containers as plain subprocesses; seconds until ready."""
    from gb300lane.recipes import load_recipe, render
    from gb300lane.runtime import ProcessRuntime

    rendered = render(load_recipe(recipe_name))
    base = ProcessRuntime().base_env()
    procs = []
    t0 = time.perf_counter()
    try:
        for spec in reversed(rendered.containers):
            argv = [sys.executable if a == "python3" and i == 0 else a for i, a in enumerate(spec.argv)]
            procs.append(
                subprocess.Popen(argv, env={**base, **spec.env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        while not _ready(rendered.endpoint, rendered.served_model_name):
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("the engine exited during a bare boot")
            time.sleep(0.01)
        return time.perf_counter() - t0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)


def tool_boot(recipe_name: str) -> dict[str, float | str | None]:
    from gb300lane import lane

    t0 = time.perf_counter()
    report = lane.up(recipe_name)
    up_to_ready = time.perf_counter() - t0
    lane.down(recipe_name)
    autotune = report.check("autotune")
    return {
        "up_to_ready_s": up_to_ready,
        "wait_s": report.boot_seconds,
        "engine_logged_s": report.engine_boot_seconds,
        "observed": autotune.evidence["observed"] if autotune else None,
        "ok": report.ok,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--time-scale", type=float, default=0.01)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gb300lane-boot-bench-"))
    recipes = work / "recipes"
    recipes.mkdir()
    for f in paths.shipped("recipes").glob("*.yaml"):
        shutil.copy(f, recipes / f.name)
    body = {
        "schema_version": 1, "name": "bench-boot", "extends": "local-v27", "description": "boot benchmark",
        "lane": {"port": free_port()}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": args.time_scale},
    }  # fmt: skip
    (recipes / "bench-boot.yaml").write_text(yaml.safe_dump(body))
    os.environ.update(GB300LANE_RECIPES_DIR=str(recipes), GB300LANE_STATE_DIR=str(work / "state"))

    rows: dict[str, list[dict[str, float | str | None]]] = {"miss": [], "hit": []}
    try:
        for rep in range(args.reps):
            for outcome, cache in (("miss", work / f"cache-{rep}"), ("hit", work / f"cache-{rep}")):
                # The tool and the bare runs each get their own cache: fresh for the miss,
                # then the one that miss filled for the hit.
                os.environ["VLLM_CACHE_ROOT"] = str(cache)
                tool = tool_boot("bench-boot")
                os.environ["VLLM_CACHE_ROOT"] = str(work / f"cache-bare-{rep}")
                bare = bare_boot("bench-boot")
                assert tool["observed"] == outcome, f"expected a {outcome}, the log showed {tool['observed']}"
                logged = tool["engine_logged_s"]
                rows[outcome].append(
                    {**tool, "bare_s": bare, "engine_logged_wall_s": None if logged is None else float(logged) * args.time_scale,
                     "overhead_s": float(tool["up_to_ready_s"]) - bare}  # type: ignore[arg-type]
                )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = Table(title=f"gb300lane up: up-to-ready on the process runtime, time scale {args.time_scale}")
    for col in (
        "outcome",
        "up-to-ready s",
        "readiness wait s",
        "bare engine s",
        "engine logged x scale s",
        "overhead s",
    ):
        table.add_column(col, justify="right")
    summary = {}
    for outcome, runs in rows.items():
        med = {
            k: statistics.median(float(r[k]) for r in runs)
            for k in ("up_to_ready_s", "wait_s", "bare_s", "engine_logged_wall_s", "overhead_s")
        }  # type: ignore[arg-type]
        summary[outcome] = {**med, "max_overhead_s": max(float(r["overhead_s"]) for r in runs), "reps": len(runs)}  # type: ignore[arg-type]
        table.add_row(
            outcome,
            *(f"{med[k]:.3f}" for k in ("up_to_ready_s", "wait_s", "bare_s", "engine_logged_wall_s", "overhead_s")),
        )
    worst = max(s["max_overhead_s"] for s in summary.values())
    console = Console()
    console.print(table)
    verdict = "PASS" if worst <= FLOOR_OVERHEAD_S else "FAIL"
    console.print(f"floor: overhead <= {FLOOR_OVERHEAD_S:.1f} s; worst {worst:.3f} s: {verdict}")
    atomic_write(
        RESULTS,
        dumps_json(
            {
                "schema_version": 1,
                "benchmark": "boot",
                "tool_version": __version__,
                "python": platform.python_version(),
                "platform": sys.platform,
                "time_scale": args.time_scale,
                "runs": rows,
                "median": summary,
                "floor_overhead_s": FLOOR_OVERHEAD_S,
                "worst_overhead_s": worst,
                "verdict": verdict,
            }
        ),  # fmt: skip
    )
    if verdict != "PASS":
        raise SystemExit(1)


if __name__ == "__main__":
    main()
