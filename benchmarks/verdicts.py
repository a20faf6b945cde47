"""Benchmark: the verdicts' error rates and sizes, fixed against group-sequential, on the embedded engine.

Design x scenario: the shipped `local-br1` card (fixed, 800 requests per arm) and
`local-br1-sequential` (four looks of 240, Pocock-type spending)
are each calibrated (`gb300lane card calibrate`'s fast path: the engine core
in process, the same request builder, adapter and gate code as a card run)
under A/A (B = local-v26) and the known effect (B = local-v27, block
verification). For each: replicates, false "B better" (A/A PASS), false FAIL
(A/A FAIL), power (as-written PASS) with 95% Clopper-Pearson intervals, and
the mean primary-window requests per arm.

Each design's calibration is written as receipts under results/calibrations/.
A calibration repeats from its seed, so receipts of the same card (gates hash),
seed, replicates and engine (`engine_sha256`: the engine's and verifier's files
and the recipes) are that run: the benchmark reuses them (e.g. those of
`gb300lane card calibrate local-br1 --replicates 200`) and says so, unless
--no-reuse. Where only the gates changed, the arms a calibration kept in its
raw file (`results/calibrations/raw/`, keyed by what runs, the seed and the
engine) are re-scored instead of run again; the output counts them.

Floors: each design keeps false "B better" <= 2.5%, false FAIL <= 5% and
power >= 90% (point estimates), and the sequential design uses at least 25%
fewer requests per arm on average than the fixed one when the effect is real.

    python benchmarks/verdicts.py [--replicates 200] [--sequential-replicates N] [--workers 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from gb300lane import __version__
from gb300lane.cards.cardfile import load_card
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.instrument.calibrate import (
    calibrate,
    default_workers,
    find_calibration,
    progress_file,
    raw_file,
    write_calibration,
)
from gb300lane.paths import shipped

OUT = Path(__file__).parent / "results" / "verdicts.json"
CARDS = {"fixed": shipped("cards") / "local-br1.yaml", "sequential": shipped("cards") / "local-br1-sequential.yaml"}
FLOORS = {"false_better_max": 0.025, "false_fail_max": 0.05, "power_min": 0.90, "sequential_saving_min": 0.25}


def _ci(r) -> str:
    return f"{r.rate:6.1%} [{r.low:.1%}, {r.high:.1%}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=200, help="replicates per design and scenario")
    ap.add_argument(
        "--sequential-replicates",
        type=int,
        default=None,
        help="replicates of the sequential design (default: --replicates)",
    )
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-reuse", action="store_true", help="run every calibration even if its receipts exist")
    ns = ap.parse_args(argv)

    rows = []
    cals = {}
    sources: dict[str, str] = {}
    for design, path in CARDS.items():
        card, _ = load_card(path)
        t0 = time.perf_counter()
        reps = ns.replicates if design == "fixed" or ns.sequential_replicates is None else ns.sequential_replicates
        found = None if ns.no_reuse else find_calibration(card, reps, ns.seed)
        if found is not None:
            cal, receipts = found
            source = f"reused receipts {receipts} (same gates, seed, replicates and engine)"
        else:
            keep = progress_file(card, ns.seed)
            cal, outcomes = calibrate(
                card,
                reps,
                seed=ns.seed,
                workers=ns.workers,
                resume=keep,
                raw=raw_file(card, ns.seed),
                progress=lambda m, d=design: print(f"  {d}: {m}", file=sys.stderr),
            )
            receipts = write_calibration(card, path.read_text(encoding="utf-8"), cal, outcomes)
            source = (
                f"ran here ({cal.reused_arm_stages} arm-stages re-scored from the raw file, the rest run); "
                f"receipts {receipts}"
            )
        print(f"{design}: {card.name}: {source}", file=sys.stderr)
        sources[design] = source
        cals[design] = cal
        wall = None if found is not None else round(time.perf_counter() - t0, 1)
        rows.append(
            {
                "design": design,
                "card": card.name,
                "scenario": "A/A",
                "replicates": cal.replicates,
                "false_better": cal.false_better.model_dump(),
                "false_fail": cal.false_fail.model_dump(),
                "power": None,
                "mean_requests_per_arm": cal.mean_requests_per_arm_aa,
                "max_requests_per_arm": cal.requests_per_arm,
                "wall_s": wall,
                "cpu_s": cal.cpu_seconds,
            }
        )
        rows.append(
            {
                "design": design,
                "card": card.name,
                "scenario": "known effect",
                "replicates": cal.replicates,
                "false_better": None,
                "false_fail": cal.fail_when_real.model_dump(),
                "power": cal.power.model_dump(),
                "mean_requests_per_arm": cal.mean_requests_per_arm_card,
                "max_requests_per_arm": cal.requests_per_arm,
                "wall_s": wall,
                "cpu_s": cal.cpu_seconds,
            }
        )

    print(
        f"{'design':<11} {'scenario':<13} {'reps':>5} {'false B better':>22} {'false FAIL':>22} {'power':>22} "
        f"{'mean req/arm':>13} {'max':>5}"
    )
    for design, cal in cals.items():
        print(
            f"{design:<11} {'A/A':<13} {cal.replicates:>5} {_ci(cal.false_better):>22} {_ci(cal.false_fail):>22} "
            f"{'-':>22} {cal.mean_requests_per_arm_aa:>13.0f} {cal.requests_per_arm:>5}"
        )
        print(
            f"{design:<11} {'known effect':<13} {cal.replicates:>5} {'-':>22} {_ci(cal.fail_when_real):>22} "
            f"{_ci(cal.power):>22} {cal.mean_requests_per_arm_card:>13.0f} {cal.requests_per_arm:>5}"
        )
    fixed, seq = cals["fixed"], cals["sequential"]
    saving = 1.0 - seq.mean_requests_per_arm_card / fixed.mean_requests_per_arm_card
    saving_aa = 1.0 - seq.mean_requests_per_arm_aa / fixed.mean_requests_per_arm_aa
    print(
        f"sequential saves {saving:.1%} of the requests per arm when the effect is real "
        f"({saving_aa:+.1%} under A/A); fast path: {fixed.fast_path}"
    )
    for design, cal in cals.items():
        b = cal.boot_check.get("tokens-per-step")
        if b is not None:
            print(
                f"{design}: tokens/step boot sd registered {b.registered_sd:.3%}; the calibration's {b.boots} control "
                f"boots show {b.measured_sd_signed:+.3%} (F {b.f_ratio:.2f}, 95% upper bound {b.upper:.3%})"
            )
    for design, source in sources.items():
        print(f"{design}: {source}")

    checks = {}
    for design, cal in cals.items():
        checks[f"{design}_false_better"] = {
            "max": FLOORS["false_better_max"],
            "value": cal.false_better.rate,
            "ok": cal.false_better.rate <= FLOORS["false_better_max"],
        }
        checks[f"{design}_false_fail"] = {
            "max": FLOORS["false_fail_max"],
            "value": cal.false_fail.rate,
            "ok": cal.false_fail.rate <= FLOORS["false_fail_max"],
        }
        checks[f"{design}_power"] = {
            "min": FLOORS["power_min"],
            "value": cal.power.rate,
            "ok": cal.power.rate >= FLOORS["power_min"],
        }
    checks["sequential_saving"] = {
        "min": FLOORS["sequential_saving_min"],
        "value": round(saving, 4),
        "ok": saving >= FLOORS["sequential_saving_min"],
    }
    result = {
        "schema_version": 1,
        "tool_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "settings": {
            "replicates": ns.replicates,
            "sequential_replicates": ns.sequential_replicates or ns.replicates,
            "seed": ns.seed,
            "workers": ns.workers,
        },
        "sources": sources,
        "engine_sha256": {k: v.engine_sha256 for k, v in cals.items()},
        "rows": rows,
        "sequential_saving": round(saving, 4),
        "sequential_saving_aa": round(saving_aa, 4),
        "calibrations": {k: v.model_dump(mode="json") for k, v in cals.items()},
        "floors": checks,
    }
    atomic_write(ns.out, dumps_json(result))
    failed = [k for k, v in checks.items() if not v["ok"]]
    if failed:
        print(f"FLOOR MISSED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
