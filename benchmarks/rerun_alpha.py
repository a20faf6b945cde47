"""One alpha budget per question: the false PASS of an A/A card registered again and again, before and after.

An A/A card (B is A) with one deciding superiority gate of one-sided alpha 2.5% and a Pocock design of 4 looks
is run, and registered again (a new run, fresh seeds and boots) after each final INCONCLUSIVE, or after each
final INCONCLUSIVE or FAIL, within 1..5 runs. Two regimes:

- reset: every run spends the whole alpha (what `card register --fresh` did: look 1 of each run spent again);
- question: the runs are one question of `design.runs: 5`; each run's share of each gate's alpha is what
  `card register` plans from the runs before it (`cards.decide.question.plan_run`, Pocock shares over the runs,
  `sequential.run_share`), and its looks spend that share as the design registers (`evidence.Look.level`).

Each look is the tool's own test: `decide.stats.ratio_test` (superiority, margin 0, Fieller interval on t)
over the per-transcript means of the stages so far (40 transcripts, each arm's value = the transcript's level
+ per-stage noise; B against the mean of A and A2), at the look's one-sided level. A run stops at its first
PASS or FAIL. The false PASS within r runs is the share of replicates with a PASS among the runs taken by r.

Prints the table (rate, 95% Clopper-Pearson interval, nominal, replicates) and writes
benchmarks/results/rerun_alpha.json; exits 1 when an interval of the question regime lies above nominal.

    python benchmarks/rerun_alpha.py [--replicates 2000] [--seed 0] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from gb300lane.cards.decide.evidence import Look
from gb300lane.cards.decide.question import EarlierRun, plan_run
from gb300lane.cards.decide.stats import proportion, ratio_test

RESULTS = Path(__file__).parent / "results"
ALPHA, LOOKS, RUNS, TRANSCRIPTS = 0.025, 4, 5, 40
#: Transcripts differ a lot from each other (the pairing removes that); a stage's noise per arm and transcript.
LEVEL_SD, STAGE_SD = 0.30, 0.05
POLICIES = {"after INCONCLUSIVE": ("INCONCLUSIVE",), "after INCONCLUSIVE or FAIL": ("INCONCLUSIVE", "FAIL")}


def run_outcome(rng: np.random.Generator, share: float) -> str:
    """One A/A run of the Pocock 4-look design spending `share` of the gate's alpha: PASS, FAIL or INCONCLUSIVE."""
    level = 1.0 + LEVEL_SD * rng.standard_normal(TRANSCRIPTS).clip(-3, 3)
    sums = np.zeros((3, TRANSCRIPTS))
    for look in range(1, LOOKS + 1):
        sums += level * (1.0 + STAGE_SD * rng.standard_normal((3, TRANSCRIPTS)))
        a, b, a2 = sums / look
        test = ratio_test(
            b,
            (a + a2) / 2.0,
            test="superiority",
            margin=0.0,
            level_one_sided=Look(number=look, looks=LOOKS, spending="pocock", share=share).level(ALPHA),
        )
        if test.decision in ("PASS", "FAIL"):
            return test.decision
    return "INCONCLUSIVE"


def replicate(seed: int) -> dict[str, list[str]]:
    """Each regime's outcomes of runs 1..RUNS of one replicate (the same data for both regimes' run r)."""
    out: dict[str, list[str]] = {"reset": [], "question": []}
    earlier: list[EarlierRun] = []
    for r in range(1, RUNS + 1):
        planned = plan_run("aa", "candidate", RUNS, "gates", earlier)
        assert not isinstance(planned, str) and planned.run == r, planned
        for regime, share in (("reset", 1.0), ("question", planned.share)):
            out[regime].append(run_outcome(np.random.default_rng([seed, r]), share))
        earlier.append(
            EarlierRun(
                receipts=f"/r/{r}",
                registered_at=str(r),
                run=r,
                runs=RUNS,
                gates_sha256="gates",
                verdict=out["question"][-1],
                measured=True,
            )
        )
    return out


def false_pass_within(outcomes: list[str], again: tuple[str, ...], runs: int) -> bool:
    """A PASS among the runs a user takes by run `runs`, re-registering after the outcomes in `again`."""
    for r in range(runs):
        if outcomes[r] == "PASS":
            return True
        if outcomes[r] not in again:
            return False
    return False


def _batch(seeds: list[int]) -> list[dict[str, list[str]]]:
    return [replicate(s) for s in seeds]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    t0 = time.monotonic()
    seeds = [args.seed * 1_000_003 + i for i in range(args.replicates)]
    chunks = [seeds[i :: args.workers * 8] for i in range(args.workers * 8)]
    with ProcessPoolExecutor(args.workers) as pool:
        reps = [x for part in pool.map(_batch, chunks) for x in part]
    rows = []
    for regime in ("reset", "question"):
        for policy, again in POLICIES.items():
            for runs in range(1, RUNS + 1):
                events = sum(false_pass_within(rep[regime], again, runs) for rep in reps)
                ci = proportion(events, len(reps))
                rows.append(
                    {
                        "regime": regime,
                        "policy": policy,
                        "within_runs": runs,
                        "events": events,
                        "replicates": len(reps),
                        "rate": ci.rate,
                        "low": ci.low,
                        "high": ci.high,
                        "nominal": ALPHA,
                        "above_nominal": ci.low > ALPHA,
                    }
                )
    print(
        f"A/A false PASS under repeated registration: one superiority gate, alpha {ALPHA:.1%} one-sided, Pocock "
        f"{LOOKS} looks, {TRANSCRIPTS} transcripts; 95% Clopper-Pearson intervals; {len(reps)} replicates a cell "
        f"({time.monotonic() - t0:.0f} s)"
    )
    print(f"{'regime':<9} {'re-register':<27} {'runs':>4} {'false PASS':>10} {'95% interval':>18} {'nominal':>8}")
    for row in rows:
        iv = f"[{row['low']:.2%}, {row['high']:.2%}]"
        flag = "  ABOVE" if row["above_nominal"] else ""
        print(
            f"{row['regime']:<9} {row['policy']:<27} {row['within_runs']:>4} {row['rate']:>10.2%} {iv:>18} "
            f"{row['nominal']:>8.1%}{flag}"
        )
    shares = [
        plan_run(
            "aa",
            "c",
            RUNS,
            "g",
            [
                EarlierRun(
                    receipts=str(j),
                    registered_at=str(j),
                    run=j,
                    runs=RUNS,
                    gates_sha256="g",
                    verdict="INCONCLUSIVE",
                    measured=True,
                )
                for j in range(1, r)
            ],
        )
        for r in range(1, RUNS + 1)
    ]
    print(
        "question regime's shares of alpha, runs 1..5: "
        + ", ".join(f"{s.share:.3f}" for s in shares if not isinstance(s, str))
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "rerun_alpha.json"
    out.write_text(
        json.dumps(
            {
                "alpha": ALPHA,
                "looks": LOOKS,
                "spending": "pocock",
                "runs": RUNS,
                "transcripts": TRANSCRIPTS,
                "replicates": len(reps),
                "seed": args.seed,
                "interval": "95% Clopper-Pearson",
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")
    bad = [r for r in rows if r["regime"] == "question" and r["above_nominal"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
