"""The BCa gate's error rates against the paired t's at small n: where `BCA_MIN_UNITS` comes from.

With no engine: synthetic per-transcript values (transcripts differ by 30%, each request 10% noise, B and the
control the same distribution: A/A), a one-sided superiority test at alpha 2.5% and margin 0, `reps`
replicates per n, BCa and t on the same data. A BCa false PASS or false FAIL rate above nominal at an n is why
a BCa gate below `gb300lane.cards.schema.BCA_MIN_UNITS` is refused at registration. Rates with 95%
Clopper-Pearson intervals. Prints a table and writes benchmarks/results/bca-small-n.json.

    python benchmarks/bca_small_n.py [--reps 1000] [--n 16 40 100 200]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from gb300lane.cards.decide.stats import proportion, ratio_test


def rates(n: int, reps: int, method: str) -> dict[str, object]:
    rng = np.random.default_rng(n)
    fb = ff = 0
    for r in range(reps):
        base = 3.0 * (1 + 0.3 * rng.standard_normal(n))
        b = base * (1 + 0.1 * rng.standard_normal(n))
        c = base * (1 + 0.1 * rng.standard_normal(n))
        d = ratio_test(
            b,
            c,
            test="superiority",
            margin=0.0,
            level_one_sided=0.025,
            method=method,  # type: ignore[arg-type]
            seed=r,
        ).decision
        fb += d == "PASS"
        ff += d == "FAIL"
    out: dict[str, object] = {"n": n, "replicates": reps, "method": method}
    for name, k in (("false_pass", fb), ("false_fail", ff)):
        p = proportion(k, reps)
        out[name] = {"events": k, "rate": p.rate, "ci95": [p.low, p.high]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--n", type=int, nargs="+", default=[16, 40, 100, 200])
    args = ap.parse_args()
    rows = [rates(n, args.reps, m) for n in args.n for m in ("bca", "t")]
    print(f"{'n':>5} {'method':>6} {'false PASS':>24} {'false FAIL':>24}")
    for r in rows:
        cells = []
        for k in ("false_pass", "false_fail"):
            v = r[k]
            assert isinstance(v, dict)
            cells.append(f"{v['rate']:.1%} [{v['ci95'][0]:.1%}, {v['ci95'][1]:.1%}]")
        print(f"{r['n']:>5} {r['method']:>6} {cells[0]:>24} {cells[1]:>24}")
    out = Path(__file__).parent / "results" / "bca-small-n.json"
    out.write_text(json.dumps({"nominal_alpha": 0.025, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
