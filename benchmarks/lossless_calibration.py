"""The losslessness check's error rates: its false-FAIL rate on exact sampling, and its power against faults.

Two instruments, each decided by the check's own code (`spec.lossless.check`, alpha 0.01, margin 0.05):

1. Synthetic draws (no engine). Each replicate is a window of 20 transcripts; per token a target
   distribution over 200 tokens (Gumbel logits), the referee's top-20 of it, and a token drawn at a known
   temperature. Exact sampling (temperature 1 served at 1) gives the false-FAIL rate over `--reps`
   replicates per window size, with its 95% Clopper-Pearson interval; a sampler at temperature 0.8 to 1.1
   served at 1 gives the power table (fraction FAILed) per fault size and tokens in the window.
2. The embedded engine end to end (`--engine-reps`, 0 to skip): a window of 2 classes x 6 transcripts x 128
   forced tokens at temperature 1 from a lane with speculative decoding (k = 3, token rule), its outputs
   scored by the lane's own prefill (`bench.referee`), exact and with each fault of `--fault` switched on
   (`gb300lane.engine.faults`): the fraction FAILed, the tokens scored, and the referee's cost.

The smallest window that holds the error rates: the fewest tokens whose false-FAIL rate is consistent with
alpha (its 95% interval reaches down to alpha) and whose power against a temperature-0.9 sampler is >= 0.9.
`--recompute` re-derives that line from the JSON already written, without running anything; `--engine-only`
keeps the JSON's synthetic tables and runs the engine again.

    python benchmarks/lossless_calibration.py [--reps 200] [--power-reps 60] [--engine-reps 20]

Prints the tables and writes benchmarks/results/lossless_calibration.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import beta

from gb300lane.spec.lossless import check, simulate_transcripts

ALPHA = 0.01
MARGIN = 0.05
TRANSCRIPTS = 20
VOCAB = 200
TOKENS = (500, 1000, 2000, 4000)
FAULTS = (0.8, 0.9, 0.95, 1.1)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def fail_rate(t: float, tokens: int, reps: int, seed: int) -> int:
    per = tokens // TRANSCRIPTS
    fails = 0
    for r in range(reps):
        rng = np.random.default_rng([seed, tokens, int(t * 1000), r])
        window = simulate_transcripts(rng, transcripts=TRANSCRIPTS, tokens=per, vocab=VOCAB, sample_temperature=t)
        fails += check(window, temperature=1.0, alpha=ALPHA, margin=MARGIN, seed=r).status == "FAIL"
    return fails


def smallest_window(null: list[dict[str, object]], power: list[dict[str, object]]) -> int | None:
    """The fewest tokens whose false-FAIL rate is consistent with alpha (its 95% interval's lower end at most alpha)
    and whose power against a temperature-0.9 sampler is at least 0.9."""
    for row in sorted(null, key=lambda r: r["tokens"]):  # type: ignore[arg-type, return-value]
        n = row["tokens"]
        caught = [p["caught"] for p in power if p["tokens"] == n and p["sample_temperature"] == 0.9]
        if row["ci95"][0] <= ALPHA and caught and caught[0] >= 0.9:  # type: ignore[index, operator]
            return int(n)  # type: ignore[call-overload]
    return None


def engine_runs(reps: int, faults: list[str]) -> list[dict[str, object]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from gb300lane.bench.referee import referee_window
    from gb300lane.bench.window import run_window
    from gb300lane.recipes.schema import WindowSpec

    from engines import running_engine  # the tests' in-process engine runner

    flags = [
        "--model",
        "builtin",
        "--served-model-name",
        "lane",
        "--time-scale",
        "0",
        "--speculative-config",
        json.dumps({"method": "dspark", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"}),
    ]
    rows = []
    for fault in ["", *faults]:
        statuses: list[str] = []
        tokens: list[int] = []
        ref_tokens: list[int] = []
        ref_s: list[float] = []
        t_eff: list[float] = []
        with running_engine(flags + (["--fault", fault] if fault else [])) as eng:
            for r in range(reps if not fault else max(reps // 4, 5)):
                window = WindowSpec(
                    name="lossless-t1",
                    classes=("prose", "code"),
                    transcripts_per_class=6,
                    rounds=1,
                    concurrency=(1,),
                    temperature=1.0,
                    seed_base=1000 + r,
                    forced_tokens=128,
                )
                result = run_window(eng.url, window, model="lane")
                ll = referee_window(result, eng.url, alpha=ALPHA, margin=MARGIN, seed=r)
                statuses.append(ll.status)
                tokens.append(ll.tokens_scored)
                ref_tokens.append(ll.referee_tokens)
                ref_s.append(ll.referee_s)
                if ll.overall.t_eff is not None:
                    t_eff.append(ll.overall.t_eff)
        n = len(statuses)
        k = statuses.count("FAIL")
        lo, hi = clopper_pearson(k, n)
        rows.append(
            {
                "fault": fault or "none (exact)",
                "replicates": n,
                "fail": k,
                "fail_rate": k / n,
                "ci95": [lo, hi],
                "inconclusive": statuses.count("INCONCLUSIVE"),
                "tokens_scored_mean": float(np.mean(tokens)),
                "referee_tokens_mean": float(np.mean(ref_tokens)),
                "referee_s_mean": float(np.mean(ref_s)),
                "t_eff_mean": float(np.mean(t_eff)) if t_eff else None,
            }
        )
    return rows


def synthetic(args: argparse.Namespace) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The false-FAIL rows (exact sampling) and the power rows (a sampler at each temperature of FAULTS)."""
    null: list[dict[str, object]] = []
    for n in args.tokens:
        k = fail_rate(1.0, n, args.reps, seed=1)
        lo, hi = clopper_pearson(k, args.reps)
        null.append({"tokens": n, "replicates": args.reps, "fail": k, "fail_rate": k / args.reps, "ci95": [lo, hi]})
    power: list[dict[str, object]] = []
    for t in FAULTS:
        for n in args.tokens:
            k = fail_rate(t, n, args.power_reps, seed=2)
            power.append(
                {"sample_temperature": t, "tokens": n, "replicates": args.power_reps, "caught": k / args.power_reps}
            )
    return null, power


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200, help="exact-sampling replicates per window size")
    ap.add_argument("--power-reps", type=int, default=60, help="replicates per fault x window size")
    ap.add_argument("--engine-reps", type=int, default=20, help="exact embedded-engine replicates (0: skip)")
    ap.add_argument(
        "--fault",
        nargs="*",
        default=["temperature=0.9", "accept_bias=1.5", "accept_bias=3"],
        help="engine faults to run (a quarter of --engine-reps each, at least 5)",
    )
    ap.add_argument("--tokens", type=int, nargs="*", default=list(TOKENS))
    ap.add_argument("--engine-only", action="store_true", help="keep the JSON's synthetic tables; run the engine")
    ap.add_argument("--recompute", action="store_true", help="re-derive the smallest window from the JSON written")
    args = ap.parse_args()
    out = Path(__file__).parent / "results" / "lossless_calibration.json"
    if args.recompute:
        data = json.loads(out.read_text())
        data["smallest_window_tokens"] = smallest_window(data["false_fail"], data["power"])
        out.write_text(json.dumps(data, indent=2) + "\n")
        print(f"smallest window: {data['smallest_window_tokens']} tokens")
        return 0
    t0 = time.perf_counter()
    if args.engine_only:  # the synthetic tables as the JSON holds them; only the engine runs again
        kept = json.loads(out.read_text())
        null, power = kept["false_fail"], kept["power"]
        args.tokens = [r["tokens"] for r in null]
    else:
        null, power = synthetic(args)
    print(f"False-FAIL rate of exact sampling (alpha {ALPHA}, {TRANSCRIPTS} transcripts, synthetic)")
    print(f"{'tokens':>8} {'reps':>6} {'FAIL':>6} {'rate':>7}  95% CI")
    for row in null:
        print(
            f"{row['tokens']:>8} {row['replicates']:>6} {row['fail']:>6} {row['fail_rate']:>7.3f}  "
            f"[{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}]"
        )
    print(f"\nPower: fraction FAILed, sampler at temperature T served at 1 ({args.power_reps} replicates per cell)")
    print(f"{'T':>6} " + " ".join(f"{n:>7}" for n in args.tokens))
    for t in FAULTS:
        cells = [p["caught"] for p in power if p["sample_temperature"] == t]
        print(f"{t:>6} " + " ".join(f"{c:>7.2f}" for c in cells))
    smallest = smallest_window(null, power)
    print(
        f"\nsmallest window whose false-FAIL interval reaches down to alpha = {ALPHA} and whose power against a "
        f"sampler at T=0.9 is >= 0.9: {smallest if smallest else 'none of those tried'} tokens"
    )
    engine = engine_runs(args.engine_reps, args.fault) if args.engine_reps else []
    if engine:
        print(
            "\nEmbedded engine end to end (12 transcripts x 128 tokens at temperature 1, k = 3, referee = own prefill)"
        )
        print(
            f"{'fault':<24} {'reps':>5} {'FAIL':>5} {'rate':>6}  95% CI          {'tokens':>7} {'ref tok':>8} {'ref s':>6} {'T_eff':>6}"
        )
        for row in engine:
            lo, hi = row["ci95"]  # type: ignore[misc]
            t_eff = row["t_eff_mean"]
            print(
                f"{row['fault']:<24} {row['replicates']:>5} {row['fail']:>5} {row['fail_rate']:>6.2f}  "
                f"[{lo:.3f}, {hi:.3f}]  {row['tokens_scored_mean']:>7.0f} {row['referee_tokens_mean']:>8.0f} "
                f"{row['referee_s_mean']:>6.2f} {'' if t_eff is None else f'{t_eff:.3f}':>6}"
            )
    out.write_text(
        json.dumps(
            {
                "alpha": ALPHA,
                "margin": MARGIN,
                "transcripts": TRANSCRIPTS,
                "vocab": VOCAB,
                "false_fail": null,
                "power": power,
                "smallest_window_tokens": smallest,
                "engine": engine,
                "seconds": time.perf_counter() - t0,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwritten to {out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
