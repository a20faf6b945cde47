"""Benchmark: verified draft positions per second, token vs block verification.

Grid: vocabularies of 2,048, 32,768 and 129,280 (DeepSeek's), batches of 1, 8
and 32, k of 3, 5 and 9. Inputs are realistic rather than adversarial: the
draft is the target's softmax with perturbed logits (temperature 1.0), and the
draft tokens are sampled from it, so acceptance lands in the range a lane sees.
Both methods verify the same inputs with the same seed, on the same code
path (the compiled kernels where built, else numpy; the output says which);
the floor is block costing no more than 1.3x token (Sun et al.: block
verification costs nothing extra per draft position).

    python benchmarks/verify.py [--quick] [--out benchmarks/results/verify.json]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

from gb300lane import __version__
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.spec import block_verify, kernels, token_verify

VOCABS = (2048, 32768, 129280)
BATCHES = (1, 8, 32)
KS = (3, 5, 9)
FLOOR = 1.3


def make_inputs(batch: int, k: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((batch, k + 1, vocab), dtype=np.float32) * 3.0
    p = np.exp(logits - logits.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    draft_logits = logits[:, :k] + rng.standard_normal((batch, k, vocab), dtype=np.float32) * 0.8
    q = np.exp(draft_logits - draft_logits.max(axis=2, keepdims=True))
    q /= q.sum(axis=2, keepdims=True)
    cdf = np.cumsum(q, axis=2)
    u = rng.random((batch, k, 1), dtype=np.float32) * cdf[:, :, -1:]
    drafts = np.minimum((cdf <= u).sum(axis=2), vocab - 1).astype(np.int64)
    return p, q, drafts


def time_pair(p, q, drafts, reps: int) -> dict[str, tuple[float, float]]:
    """Median CPU seconds per call and mean accepted length for each method, calls alternating.

    CPU time of this thread, not wall time: on a shared host, wall time mostly
    measures the neighbours. Verification is single-threaded numpy, so the two agree
    on a quiet machine.
    """
    times: dict[str, list[float]] = {"token": [], "block": []}
    accepted: dict[str, list[float]] = {"token": [], "block": []}
    methods = (("token", token_verify), ("block", block_verify))
    for rep in range(reps):
        for name, fn in methods if rep % 2 == 0 else methods[::-1]:
            rng = np.random.default_rng(rep)
            start = time.thread_time()
            res = fn(p, q, drafts, rng)
            times[name].append(time.thread_time() - start)
            accepted[name].append(float(res.accepted.mean()))
    return {name: (float(np.median(times[name])), float(np.mean(accepted[name]))) for name in times}


def reps_for(batch: int, k: int, vocab: int, quick: bool) -> int:
    # Fewer repetitions where one call already reads hundreds of MB, so the grid runs in minutes on one core.
    work = batch * (k + 1) * vocab
    reps = 60 if work < 1e6 else 25 if work < 1e7 else 11
    return max(3, reps // 3) if quick else reps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "verify.json")
    args = parser.parse_args(argv)

    rows = []
    header = f"{'V':>7} {'B':>3} {'k':>2} {'token pos/s':>12} {'block pos/s':>12} {'block/token cost':>16} {'acc tok':>7} {'acc blk':>7}"
    print(header)
    print("-" * len(header))
    for vocab in VOCABS:
        for batch in BATCHES:
            for k in KS:
                p, q, drafts = make_inputs(batch, k, vocab)
                reps = reps_for(batch, k, vocab, args.quick)
                # One untimed call each warms caches and allocator pools for both methods alike.
                token_verify(p, q, drafts, np.random.default_rng(0))
                block_verify(p, q, drafts, np.random.default_rng(0))
                timed = time_pair(p, q, drafts, reps)
                (t_tok, acc_tok), (t_blk, acc_blk) = timed["token"], timed["block"]
                positions = batch * k
                row = {
                    "vocab": vocab,
                    "batch": batch,
                    "k": k,
                    "reps": reps,
                    "token_seconds": t_tok,
                    "block_seconds": t_blk,
                    "token_positions_per_s": positions / t_tok,
                    "block_positions_per_s": positions / t_blk,
                    "block_over_token_cost": t_blk / t_tok,
                    "token_mean_accepted": acc_tok,
                    "block_mean_accepted": acc_blk,
                }
                rows.append(row)
                print(
                    f"{vocab:>7} {batch:>3} {k:>2} {row['token_positions_per_s']:>12,.0f} "
                    f"{row['block_positions_per_s']:>12,.0f} {row['block_over_token_cost']:>16.2f} "
                    f"{acc_tok:>7.2f} {acc_blk:>7.2f}"
                )
                del p, q, drafts
    worst = max(r["block_over_token_cost"] for r in rows)
    ok = worst <= FLOOR
    print(
        f"\nworst block/token cost {worst:.2f} (floor {FLOOR}): {'PASS' if ok else 'FAIL'}; "
        f"both methods on {kernels.describe()}"
    )
    result = {
        "schema_version": 1,
        "benchmark": "verify",
        "tool_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "verification": kernels.describe(),
        "quick": args.quick,
        "floor_block_over_token": FLOOR,
        "worst_block_over_token": worst,
        "passed": ok,
        "rows": rows,
    }
    atomic_write(args.out, dumps_json(result))
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
