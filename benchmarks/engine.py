"""Embedded engine throughput: output tokens per CPU second at C1 and C8 for k = 3, 5, 9, and peak RSS.

Runs the engine core in-process at --time-scale 0 (no server, no pacing) on
prompts from every traffic class, temperature 1.0, probabilistic drafts and
block verification, forced-length outputs. Every cell runs the engine's own
path (drafting from the boot's tables, verifying on the draft support) and,
in the same run on the same requests, the reference path
(`EngineCore(support=False)`: the drafter computing every slot's candidates
step by step, the target's full rows at every position and full-vocabulary
verification, the algorithm the engine used before, verifying with numpy as
it did; the compiled kernels would speed its full-vocabulary verification,
and the "reference, kernels" column shows by how much); "same tokens"
compares every request's output ids, so the ratio is the speedup at equal
output. Each path runs --repeats times per cell, the two
alternating, and keeps its least CPU time (`_best_of` says why).
A core is built before its cell's clock starts, as a boot precedes serving;
the boot's drafter tables are timed on their own (built from nothing, k=5).
Prints a table, writes benchmarks/results/engine.json, and exits 1 if a
floor is missed: >= 10,000 output tokens per CPU second at k=5, C8, the
support path >= 3x the reference there, <= 300 MB peak RSS for a process
running the engine's path over the grid, and the model read
back from its disk cache (what every engine process after the first does) in
<= 2 CPU seconds.

    python benchmarks/engine.py [--tokens 256] [--requests 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from gb300lane import __version__
from gb300lane.engine import drafter as drafter_mod
from gb300lane.engine.config import parse_spec_config
from gb300lane.engine.core import EngineCore, SamplingParams, Sequence
from gb300lane.engine.model import CLASSES, corpus_texts, load_model
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.spec import kernels

FLOOR_TOK_PER_CPU_S = 10_000
FLOOR_SPEEDUP = 3.0
FLOOR_RSS_MB = 300
CEILING_CACHED_LOAD_CPU_S = 2.0
OUT = Path(__file__).parent / "results" / "engine.json"


def _prompts(model, count: int, prompt_tokens: int = 64) -> list[list[int]]:
    texts = corpus_texts()
    docs = [(cls, doc) for cls in CLASSES for doc in texts[cls].split("<|endoftext|>") if doc.strip()]
    step = max(1, len(docs) // max(count, 1))
    return [model.tokenizer.encode(docs[(i * step) % len(docs)][1])[:prompt_tokens] for i in range(count)]


def _peak_rss_mb() -> float:
    """This process's peak RSS since it started its program (VmHWM: ru_maxrss would also count the
    parent's memory at the fork, which Linux carries across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_spec(k: int):
    spec, _ = parse_spec_config(
        json.dumps(
            {
                "method": "dspark",
                "num_speculative_tokens": k,
                "draft_sample_method": "probabilistic",
                "rejection_sample_method": "block",
            }
        )
    )
    return spec


#: The paths a cell runs: the engine's, the reference (numpy verification, as the engine verified when the
#: speed target was set: the engine it was set against, algorithm and code), and the reference with the kernels.
PATHS = ("support", "reference", "reference_kernels")


def run_cell(
    model, k: int, concurrency: int, tokens: int, requests: int, support: bool = True, numpy_verify: bool | None = None
) -> dict:
    """One cell on the engine's path (`support`) or the reference path; the reference verifies with numpy
    unless `numpy_verify` is False."""
    if numpy_verify if numpy_verify is not None else not support:
        with kernels.numpy_only():
            return _run_cell(model, k, concurrency, tokens, requests, support)
    return _run_cell(model, k, concurrency, tokens, requests, support)


def _run_cell(model, k: int, concurrency: int, tokens: int, requests: int, support: bool) -> dict:
    core = EngineCore(model, run_spec(k), max_num_seqs=concurrency, seed=0, boot_seed=1, support=support)
    for i, ids in enumerate(_prompts(model, requests)):
        core.add(Sequence(f"b{i}", ids, SamplingParams(temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=i)))
    seqs = list(core.waiting)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while core.has_work:
        core.step()
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    c = core.counters
    digest = hashlib.sha256(json.dumps([s.output_ids for s in seqs]).encode()).hexdigest()[:16]
    return {
        "k": k,
        "concurrency": concurrency,
        "output_tokens": c.generation_tokens,
        "cpu_s": round(cpu, 4),
        "wall_s": round(wall, 4),
        "tok_per_cpu_s": round(c.generation_tokens / cpu, 1),
        "tokens_per_step": round(1 + c.num_accepted / c.num_drafts, 4) if c.num_drafts else None,
        "modelled_tok_s": round(c.generation_tokens / c.modelled_seconds, 1),
        "verify_steps": c.verify_steps,
        "path": "support" if support else "reference",
        "outputs_sha256": digest,
    }


def _best_of(model, k: int, concurrency: int, tokens: int, requests: int, repeats: int) -> dict[str, dict]:
    """Each path's run with the least CPU time over `repeats` runs, the paths alternating.

    On a shared or virtual machine a run's CPU time also counts what the
    neighbours cost it (cache, memory bandwidth, a stolen core), so one run per
    path can land the ratio anywhere within about a third either way; the least
    of several is the cost of the work itself, as timeit reports. Every run of a
    path must give the same tokens.
    """
    best: dict[str, dict] = {}
    for rep in range(repeats):
        for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
            run = run_cell(
                model, k, concurrency, tokens, requests, support=path == "support", numpy_verify=path == "reference"
            )
            kept = best.get(path)
            if kept is not None and kept["outputs_sha256"] != run["outputs_sha256"]:
                raise SystemExit(f"k={k} C={concurrency}: two runs of one path gave different tokens")
            if kept is None or run["cpu_s"] < kept["cpu_s"]:
                best[path] = run
    for run in best.values():
        run["runs"] = repeats
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=32, help="requests per cell")
    ap.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="runs per path and cell, alternating; each path's least CPU time is kept (default 5)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--engine-only",
        action="store_true",
        help="run the engine's own path alone and print its peak RSS (what the RSS ceiling reads)",
    )
    ns = ap.parse_args(argv)
    if ns.engine_only:
        model = load_model()
        for c in (1, 8):
            for k in (3, 5, 9):
                run_cell(model, k, c, ns.tokens, ns.requests, support=True)
        print(json.dumps({"peak_rss_mb": _peak_rss_mb()}))
        return 0
    t0 = time.process_time()
    model = load_model()
    load_cpu_s = time.process_time() - t0
    cells, refs = [], []
    for c in (1, 8):
        for k in (3, 5, 9):
            best = _best_of(model, k, c, ns.tokens, ns.requests, ns.repeats)
            cells.append(best["support"])
            refs.append((best["reference"], best["reference_kernels"]))
    # This process held both paths at once; an engine holds its own. The ceiling reads a process
    # that runs the engine's path alone over the same cells.
    both_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = subprocess.run(
        [sys.executable, __file__, "--engine-only", "--tokens", str(ns.tokens), "--requests", str(ns.requests)],
        capture_output=True,
        text=True,
        check=True,
    )
    rss_mb = json.loads(child.stdout.strip().splitlines()[-1])["peak_rss_mb"]
    from gb300lane.engine import model as model_mod

    drafter_mod._BOOT.clear()  # a boot's drafter tables from nothing (the checkpoint's errors stay cached)
    t0 = time.process_time()
    EngineCore(model, run_spec(5), max_num_seqs=8, seed=0, boot_seed=2)
    boot_tables_cpu_s = time.process_time() - t0

    # After the peak RSS is read (a second copy of the model is not the engine's footprint).
    model_mod._loaded.clear()  # forget the in-memory copy: the next load reads the cache file, as a new process does
    t0 = time.process_time()
    load_model()
    cached_load_cpu_s = time.process_time() - t0
    print(
        f"{'C':>3} {'k':>3} {'out tok':>8} {'tok/CPU s':>10} {'reference':>10} {'speedup':>8} {'same tokens':>11} "
        f"{'ref, kernels':>12} {'speedup':>8} {'tok/step':>9} {'modelled tok/s':>15}"
    )
    for cell, (ref, ref_k) in zip(cells, refs):
        cell["reference_tok_per_cpu_s"] = ref["tok_per_cpu_s"]
        cell["speedup"] = round(cell["tok_per_cpu_s"] / ref["tok_per_cpu_s"], 3)
        cell["reference_kernels_tok_per_cpu_s"] = ref_k["tok_per_cpu_s"]
        cell["speedup_over_reference_kernels"] = round(cell["tok_per_cpu_s"] / ref_k["tok_per_cpu_s"], 3)
        cell["same_as_reference"] = cell["outputs_sha256"] == ref["outputs_sha256"] == ref_k["outputs_sha256"]
        print(
            f"{cell['concurrency']:>3} {cell['k']:>3} {cell['output_tokens']:>8} {cell['tok_per_cpu_s']:>10,.0f} "
            f"{ref['tok_per_cpu_s']:>10,.0f} {cell['speedup']:>7.2f}x {'yes' if cell['same_as_reference'] else 'no':>11} "
            f"{ref_k['tok_per_cpu_s']:>12,.0f} {cell['speedup_over_reference_kernels']:>7.2f}x "
            f"{cell['tokens_per_step']:>9.3f} {cell['modelled_tok_s']:>15,.1f}"
        )
    k5c8 = next(c for c in cells if c["k"] == 5 and c["concurrency"] == 8)
    floors = {
        "tok_per_cpu_s_k5_c8": {
            "floor": FLOOR_TOK_PER_CPU_S,
            "value": k5c8["tok_per_cpu_s"],
            "ok": k5c8["tok_per_cpu_s"] >= FLOOR_TOK_PER_CPU_S,
        },
        "speedup_k5_c8": {"floor": FLOOR_SPEEDUP, "value": k5c8["speedup"], "ok": k5c8["speedup"] >= FLOOR_SPEEDUP},
        "peak_rss_mb": {"ceiling": FLOOR_RSS_MB, "value": round(rss_mb, 1), "ok": rss_mb <= FLOOR_RSS_MB},
        "cached_model_load_cpu_s": {
            "ceiling": CEILING_CACHED_LOAD_CPU_S,
            "value": round(cached_load_cpu_s, 3),
            "ok": cached_load_cpu_s <= CEILING_CACHED_LOAD_CPU_S,
        },
    }
    print(
        f"peak RSS {rss_mb:.1f} MB, the engine's path alone (ceiling {FLOOR_RSS_MB}; both paths in one process "
        f"{both_rss_mb:.1f} MB); model load {load_cpu_s:.2f} CPU s, "
        f"from the cache {cached_load_cpu_s:.2f} CPU s (ceiling {CEILING_CACHED_LOAD_CPU_S}); "
        f"a boot's drafter tables (k=5) {boot_tables_cpu_s:.2f} CPU s"
    )
    print(f"each path's least CPU time of {ns.repeats} alternating runs per cell; verification on {kernels.describe()}")
    result = {
        "schema_version": 1,
        "tool_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "settings": {"tokens": ns.tokens, "requests": ns.requests, "temperature": 1.0, "time_scale": 0},
        "cells": cells,
        "peak_rss_mb": round(rss_mb, 1),
        "peak_rss_mb_both_paths": round(both_rss_mb, 1),
        "model_load_cpu_s": round(load_cpu_s, 3),
        "cached_model_load_cpu_s": round(cached_load_cpu_s, 3),
        "boot_tables_cpu_s": round(boot_tables_cpu_s, 3),
        "floors": floors,
        "repeats": ns.repeats,
        "verification": kernels.describe(),
    }
    atomic_write(ns.out, dumps_json(result))
    failed = [name for name, f in floors.items() if not f["ok"]]
    if failed:
        print(f"FLOOR MISSED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
