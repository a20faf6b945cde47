"""The task-quality gate's error rates by simulation: its A/A false-FAIL rate, its power against known drops in
quality, and its false-PASS rate at the margin.

No engine: each replicate draws n paired units (transcripts x rounds). Transcripts differ: a unit's pass
probability p_u is Beta-distributed around the base rate (concentration 2: many transcripts nearly always or
nearly never pass, as a served model's do). A, A2 and B each draw their outcome independently (per-arm seeds);
B's probability is p_u (1 - drop / base), so B's pass rate is `drop` below the controls' (A/A: drop 0). Each
replicate is decided by the gate's own code (`cards.decide.quality_gate`: McNemar's exact test per control, the
floor, the drop's upper bound), at one-sided alpha 2.5% and margin 10 points, as the shipped cards register it.

    FAIL rate at drop 0      the false-FAIL rate (nominal: at most alpha)
    FAIL rate at drop > 0    the power to catch a drop of that size
    PASS rate at the margin  the false-PASS rate (nominal: at most alpha)
    PASS rate at drop 0      how often a clean change is cleared at that n

Rates with 95% Clopper-Pearson intervals; exit 1 when a false-FAIL or false-PASS interval lies wholly above
alpha. Prints a table and writes benchmarks/results/task_quality.json.

    python benchmarks/task_quality.py [--reps 2000] [--n 40 80 160 320 640] [--base 0.5 0.9]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import cache
from pathlib import Path

import numpy as np

from gb300lane.cards.decide.quality_gate import decide, mcnemar_counts
from gb300lane.cards.decide.results import McNemarTest
from gb300lane.cards.decide.stats import proportion

ALPHA = 0.025
MARGIN = 0.10
CONCENTRATION = 2.0
DROPS = (0.0, 0.05, 0.10, 0.20)


@cache
def _test(worse: int, better: int, n: int, comparison: str, two_sided: bool) -> McNemarTest:
    return mcnemar_counts(worse, better, n, comparison=comparison, level=ALPHA, two_sided=two_sided)


def _counts(s: np.ndarray, r: np.ndarray) -> tuple[int, int]:
    return int((r & ~s).sum()), int((s & ~r).sum())


def replicate(rng: np.random.Generator, n: int, base: float, drop: float) -> str:
    p = rng.beta(base * CONCENTRATION, (1 - base) * CONCENTRATION, size=n)
    a, a2 = rng.random(n) < p, rng.random(n) < p
    b = rng.random(n) < p * (1.0 - drop / base)
    tests = [_test(*_counts(b, a), n, "B vs A", False), _test(*_counts(b, a2), n, "B vs A2", False)]
    floor = _test(*_counts(a, a2), n, "A vs A2", True)
    status, _ = decide(tests, floor, margin=MARGIN, level=ALPHA, controls_passed=int(a.sum() + a2.sum()))
    return status


def row(n: int, base: float, drop: float, reps: int) -> dict[str, object]:
    rng = np.random.default_rng([n, int(base * 1000), int(drop * 1000)])
    got = [replicate(rng, n, base, drop) for _ in range(reps)]
    out: dict[str, object] = {"n": n, "base": base, "drop": drop, "replicates": reps}
    for status in ("FAIL", "PASS", "INCONCLUSIVE"):
        r = proportion(got.count(status), reps)
        out[status.lower()] = {"events": r.events, "rate": r.rate, "ci95": [r.low, r.high]}
    return out


def _cell(v: object) -> str:
    assert isinstance(v, dict)
    return f"{v['rate']:6.1%} [{v['ci95'][0]:5.1%}, {v['ci95'][1]:5.1%}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--n", type=int, nargs="+", default=[40, 80, 160, 320, 640])
    ap.add_argument("--base", type=float, nargs="+", default=[0.5, 0.9])
    args = ap.parse_args()
    start = time.perf_counter()
    rows = [row(n, base, drop, args.reps) for base in args.base for n in args.n for drop in DROPS]
    print(
        f"task_quality gate: one-sided alpha {ALPHA:.1%}, margin {MARGIN * 100:.0f} pts, {args.reps} replicates "
        "per row (95% Clopper-Pearson)"
    )
    print(f"{'base':>5} {'n':>5} {'drop':>6}   {'FAIL':>24}   {'PASS':>24}   {'INCONCLUSIVE':>24}   reads as")
    problems = []
    for r in rows:
        drop = float(r["drop"])  # type: ignore[arg-type]
        fail, passed = r["fail"], r["pass"]
        assert isinstance(fail, dict) and isinstance(passed, dict)
        what = (
            "false FAIL (A/A)"
            if drop == 0
            else "power; false PASS at the margin"
            if abs(drop - MARGIN) < 1e-9
            else "power"
        )
        print(
            f"{r['base']:>5} {r['n']:>5} {drop:>6.2f}   {_cell(fail):>24}   {_cell(passed):>24}   "
            f"{_cell(r['inconclusive']):>24}   {what}"
        )
        if drop == 0 and fail["ci95"][0] > ALPHA:
            problems.append(f"false FAIL {fail['rate']:.1%} above alpha at base {r['base']}, n {r['n']}")
        if abs(drop - MARGIN) < 1e-9 and passed["ci95"][0] > ALPHA:
            problems.append(f"false PASS {passed['rate']:.1%} above alpha at base {r['base']}, n {r['n']}")
    out = Path(__file__).parent / "results" / "task_quality.json"
    out.write_text(
        json.dumps(
            {
                "gate": "task_quality",
                "alpha": ALPHA,
                "margin": MARGIN,
                "concentration": CONCENTRATION,
                "model": "per-unit pass probability Beta(base c, (1 - base) c); A, A2, B independent draws; "
                "B's probability p (1 - drop / base)",
                "seconds": round(time.perf_counter() - start, 1),
                "rows": rows,
                "problems": problems,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
