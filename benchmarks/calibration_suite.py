"""The error rates a user can reach, re-run as simulations through the tool's own functions.

Six checks, each a simulation whose truth is known (the reference), decided by the function the tool decides
with, each cell at least 2,000 replicates, with its rate, 95% Clopper-Pearson interval (scipy) and nominal:

1. rerun    A/A, Pocock 4 looks, re-registered after each final INCONCLUSIVE: false PASS within 2 and 5 runs
            of one question (`decide.question.plan_run` shares, `evidence.Look.level`, `stats.ratio_test`).
2. lane     cpu-br2 as shipped (its registered gates, `cardfile.load_card`) on a lane whose boots shift each arm
            by 1.5% (the real lane's calibration): false "B better" (tokens/step PASS with the controls shown
            equivalent) and false FAIL, each test `stats.ratio_test` with the gate's registered boot sd.
3. tail     `tails.eval_tail` at its margin (B's true quantile exactly margin above the controls'), each cell at
            the gate's guards (10 / (1 - q) values per arm, 16 transcripts): TTFT p99 from 1,000 values per
            arm (one per transcript), clustered ITL p99 over 4 (refused) and 16 transcripts and ITL p95 over 16,
            and a card of 4 looks (a PASS at any look). False PASS, nominal the gate's one-sided alpha. Its
            decisions start from 500 bootstrap draws (`--tail-draws`; the tool's 2,000 cost four times as
            long); the gate itself raises them to leave 25 beyond each percentile bound (about 1,000 at 2.5%).
4. cuped    `cuped.cuped_test` when B's gain moves with the level (theta 1.3) at 8 and 16 transcripts, at the
            2.5% a fixed card spends and the 0.25% a late look spends, and at 64 and 128; the transcripts
            are a fixed set (eight such sets) and the null holds over them (the test's own claim). False PASS.
5. ledger   `record.noise.pool` (and its replay grouping): how often the one-sided 95% upper bound of the boot
            variance falls below the truth, with one small card beside nine large, and with ten cards whose
            controls replay the same seeds (their request noise shared, the boots their own). Nominal 5%.
6. more     `decide.more.more_needed` read off an INCONCLUSIVE pilot, then the card run at the size it names at
            the registered effect: how often it fails to PASS. Nominal 10% (the 90% power it says).

Prints the table and writes benchmarks/results/calibration_suite.json (or --out); exits 1 when a cell's 95%
interval lies wholly above its nominal.

    python benchmarks/calibration_suite.py [--replicates 2000] [--seed 0] [--only tail,cuped] [--out PATH]
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from gb300lane.cards.cardfile import load_card  # noqa: E402
from gb300lane.cards.decide import more as more_mod  # noqa: E402
from gb300lane.cards.decide import tails  # noqa: E402
from gb300lane.cards.decide.cuped import cuped_test  # noqa: E402
from gb300lane.cards.decide.data import ArmData, CellData, WindowData  # noqa: E402
from gb300lane.cards.decide.evidence import Look  # noqa: E402
from gb300lane.cards.decide.question import EarlierRun, plan_run  # noqa: E402
from gb300lane.cards.decide.results import GateResult, GateTest  # noqa: E402
from gb300lane.cards.decide.stats import BootVariance, proportion, ratio_test  # noqa: E402
from gb300lane.cards.decide.tails import eval_tail  # noqa: E402
from gb300lane.cards.record import noise  # noqa: E402
from gb300lane.cards.schema import ControlsEquivalence, LatencyTailGate  # noqa: E402

RESULTS = Path(__file__).parent / "results"
Cell = dict[str, object]


def cell(check: str, name: str, events: int, n: int, nominal: float, what: str) -> Cell:
    ci = proportion(events, n)
    return {
        "check": check,
        "cell": name,
        "events": events,
        "replicates": n,
        "rate": ci.rate,
        "low": ci.low,
        "high": ci.high,
        "nominal": nominal,
        "what": what,
        "above_nominal": ci.low > nominal,
    }


# 1. re-registration ---------------------------------------------------------------------------------------------


def check_rerun(reps: int, seed: int) -> list[Cell]:
    from rerun_alpha import ALPHA, RUNS, run_outcome  # the benchmark's own A/A run of the Pocock 4-look design

    within2 = within5 = 0
    for i in range(reps):
        earlier: list[EarlierRun] = []
        first = None
        for r in range(1, RUNS + 1):
            planned = plan_run("aa", "candidate", RUNS, "gates", earlier)
            assert not isinstance(planned, str)
            out = run_outcome(np.random.default_rng([seed, 1, i, r]), planned.share)
            if out == "PASS":
                first = r
                break
            if out != "INCONCLUSIVE":
                break
            earlier.append(
                EarlierRun(
                    receipts=f"/r/{r}",
                    registered_at=str(r),
                    run=r,
                    runs=RUNS,
                    gates_sha256="gates",
                    verdict=out,
                    measured=True,
                )
            )
        within2 += first is not None and first <= 2
        within5 += first is not None
    what = "A/A false PASS, re-registered after each INCONCLUSIVE, one question of 5 runs"
    return [
        cell("1 rerun", "within 2 runs", within2, reps, ALPHA, what),
        cell("1 rerun", "within 5 runs", within5, reps, ALPHA, what),
    ]


# 2. the real lane's own noise -----------------------------------------------------------------------------------

LANE_BOOT_SD = 0.015  # per arm, beyond the requests: the real lane's calibration (statistics.md)


def check_lane(reps: int, seed: int) -> list[Cell]:
    card, _ = load_card("cpu-br2")
    tps = next(g for g in card.gates if g.id == "tokens-per-step-c1")
    agree = next(g for g in card.gates if isinstance(g, ControlsEquivalence))
    n = sum(w.transcripts_per_class * len(w.classes) for w in card.windows if w.name == card.primary_window)
    rng = np.random.default_rng([seed, 2])
    better = fail = 0
    for _ in range(reps):
        level = 2.0 * np.exp(0.10 * rng.standard_normal(n))
        shift = np.exp(LANE_BOOT_SD * rng.standard_normal(3))  # A, B, A2: one boot each
        a, b, a2 = (level * s * np.exp(0.16 * rng.standard_normal(n)) for s in shift)
        t = ratio_test(
            b,
            (a + a2) / 2.0,
            test="superiority",
            margin=tps.margin,
            level_one_sided=tps.alpha,
            boot=BootVariance(sd=tps.boot_sd, df=tps.boot_df, refs=2, boots=1),
        )
        e = ratio_test(
            a,
            a2,
            test="equivalence",
            margin=agree.margin,
            level_one_sided=agree.alpha,
            boot=BootVariance(sd=agree.boot_sd, df=agree.boot_df, refs=1, boots=1),
        )
        better += t.decision == "PASS" and e.decision == "PASS"
        fail += t.decision == "FAIL"
    what = (
        f"cpu-br2 as registered (tokens/step boot sd {tps.boot_sd:.2%}), A/A on a lane of boot sd "
        f"{LANE_BOOT_SD:.1%} per arm, {n} transcripts"
    )
    return [
        cell("2 lane", "false B better", better, reps, tps.alpha, what),
        cell("2 lane", "false FAIL", fail, reps, tps.alpha, what),
    ]


# 3. the latency tail --------------------------------------------------------------------------------------------


def _arm(name: str, role: str, values: dict[str, list[float]], metric: str) -> ArmData:
    if metric == "ttft":
        c = CellData(
            cls="prose",
            concurrency=1,
            round=1,
            ttft_s={f"{u}#{j}": v for u, vs in values.items() for j, v in enumerate(vs)},
        )
    else:
        c = CellData(cls="prose", concurrency=1, round=1, itl_s={f"{u}#0": tuple(vs) for u, vs in values.items()})
    return ArmData(
        arm=name,
        recipe="r",
        role=role,
        source="measured",  # type: ignore[arg-type]
        windows={"primary": WindowData(window="primary", clock="wall", cells=(c,))},
    )


def _tail(gate: LatencyTailGate, arms: list[ArmData], look: Look | None) -> str:
    """eval_tail at `look` where it takes one (a tool without looks tests every look at the full alpha)."""
    if look is not None and "look" in inspect.signature(eval_tail).parameters:
        return eval_tail(gate, arms[0], arms[1:], look=look).status  # type: ignore[call-arg]
    return eval_tail(gate, arms[0], arms[1:]).status


def _tail_values(
    rng: np.random.Generator, units: int, per_unit: int, margin: float, cluster_sd: float, stages: int = 1
) -> list[list[dict[str, list[float]]]]:
    """Per stage, per arm (B, A, A2): transcript -> values; B's every value scaled by (1 + margin), so B's true
    quantile lies exactly at the margin. A transcript has a level shared by the arms and one per arm and stage."""
    shared = cluster_sd * rng.standard_normal(units)
    out = []
    for _ in range(stages):
        arms = []
        for k in range(3):
            own = cluster_sd * rng.standard_normal(units)
            vals = np.exp(shared[:, None] + own[:, None] + 0.5 * rng.standard_normal((units, per_unit)))
            vals = 0.05 * vals * ((1.0 + margin) if k == 0 else 1.0)
            arms.append({f"t{u}": list(vals[u]) for u in range(units)})
        out.append(arms)
    return out


def _tail_cell(job: tuple[str, str, int, int, float, int, int]) -> Cell:
    name, metric, units, per, csd, reps, seed = job
    margin = 0.05
    gate = LatencyTailGate(
        id="tail",
        kind="latency_tail",
        window="primary",
        metric=metric,  # type: ignore[arg-type]
        quantile=0.95 if " p95" in name else 0.99,
        margin=margin,
        alpha=0.025,
    )
    rng = np.random.default_rng([seed, 3, units, per])
    passes = 0
    for _ in range(reps):
        (vals,) = _tail_values(rng, units, per, margin, csd)
        arms = [_arm(n, r, v, metric) for n, r, v in zip(("B", "A", "A2"), ("candidate", "control", "control"), vals)]
        passes += _tail(gate, arms, None) == "PASS"
    return cell("3 tail", name, passes, reps, gate.alpha, f"false PASS at the margin +{margin:.0%}")


def _tail_looks(job: tuple[int, int]) -> Cell:
    """Four looks (O'Brien-Fleming): each stage adds 100 transcripts x 1 TTFT per arm; a PASS at any look."""
    reps, seed = job
    margin = 0.05
    gate = LatencyTailGate(
        id="tail", kind="latency_tail", window="primary", metric="ttft", quantile=0.95, margin=margin, alpha=0.025
    )
    rng = np.random.default_rng([seed, 3, 99])
    passes = 0
    for _ in range(reps):
        stages = _tail_values(rng, 100, 1, margin, 0.0, stages=4)
        acc: list[dict[str, list[float]]] = [{}, {}, {}]
        for s, stage in enumerate(stages, start=1):
            for k in range(3):
                for u, vs in stage[k].items():
                    acc[k][f"s{s}{u}"] = vs
            arms = [
                _arm(n, r, v, "ttft") for n, r, v in zip(("B", "A", "A2"), ("candidate", "control", "control"), acc)
            ]
            status = _tail(gate, arms, Look(number=s, looks=4, spending="obrien_fleming"))
            if status == "PASS":
                passes += 1
                break
            if status == "FAIL":
                break
    return cell(
        "3 tail",
        "TTFT p95, 4 looks x 100 values",
        passes,
        reps,
        gate.alpha,
        f"false PASS at the margin +{margin:.0%}, at any of 4 looks",
    )


WORKERS = 2


def check_tail(reps: int, seed: int) -> list[Cell]:
    from concurrent.futures import ProcessPoolExecutor

    setups = [  # each at the gate's guards: 10 / (1 - q) values per arm, 16 transcripts
        ("TTFT p99, 1000 transcripts x 1 value", "ttft", 1000, 1, 0.0),
        ("ITL p99, 4 transcripts x 250 gaps", "itl", 4, 250, 0.15),
        ("ITL p99, 16 transcripts x 63 gaps", "itl", 16, 63, 0.15),
        ("ITL p95, 16 transcripts x 13 gaps", "itl", 16, 13, 0.15),
    ]
    with ProcessPoolExecutor(WORKERS) as pool:
        looks = pool.submit(_tail_looks, (reps, seed))
        rows = list(pool.map(_tail_cell, [(*s, reps, seed) for s in setups]))
        rows.append(looks.result())
    return rows


# 4. CUPED at small n --------------------------------------------------------------------------------------------


def check_cuped(reps: int, seed: int) -> list[Cell]:
    rows = []
    theta, sets = 1.3, 8
    for n in (8, 16, 64, 128):
        for alpha, r in ((0.025, reps), (0.0025, max(reps, 20000))):
            passes = 0
            for k in range(sets):  # the card's transcripts: a fixed, named set; eight such sets, r / 8 replicates each
                level = 0.3 * np.random.default_rng([seed, 4, n, k]).standard_normal(n)
                beta = -(theta - 1.0) * level.mean()  # the null over them: mean log ratio 0
                rng = np.random.default_rng([seed, 4, n, k, int(alpha * 1e4)])
                for _ in range(r // sets):
                    b = np.exp(beta + theta * level + 0.1 * rng.standard_normal(n))
                    ctrls = np.exp(level[None, :] + 0.1 * rng.standard_normal((2, n)))
                    t, _ = cuped_test(b, ctrls, test="superiority", margin=0.0, level_one_sided=alpha)
                    passes += t.decision == "PASS"
            rows.append(
                cell(
                    "4 cuped",
                    f"n {n}, level {alpha:.2%}",
                    passes,
                    r // sets * sets,
                    alpha,
                    f"false PASS, theta {theta}, request sd 0.1, level sd 0.3, {sets} transcript sets",
                )
            )
    return rows


# 5. the noise ledger --------------------------------------------------------------------------------------------


def _samples(
    rng: np.random.Generator, sizes: list[int], s_e: float, s_b: float, replay: bool
) -> list[noise.CardSample]:
    """One ledger's cards: per card two control boots of n transcripts, each a shift of sd s_b plus request noise of
    sd s_e per transcript; with `replay` every card's controls run the same seeds (the same request noise) and
    only the boots (and a trace of per-boot numerics) differ."""
    shared = s_e * rng.standard_normal((2, max(sizes)))
    out = []
    for c, n in enumerate(sizes):
        e = shared[:, :n] + 0.01 * s_e * rng.standard_normal((2, n)) if replay else s_e * rng.standard_normal((2, n))
        level = 1.0 + 0.2 * rng.standard_normal(n)
        y = level[None, :] * (1.0 + s_b * rng.standard_normal((2, 1))) * (1.0 + e)
        y = y / y.mean()
        from gb300lane.cards.decide.boots import boot_mean_squares

        ms_b, ms_r, _, _ = boot_mean_squares(y)
        kw = dict(
            card=f"c{c}",
            receipts=f"r{c}",
            date="2026-01-01",
            recipe="cpu-v26",
            fingerprint=None,
            transcripts=n,
            ms_boot=ms_b,
            ms_res=ms_r,
            data=f"{c}",
        )
        if "seeds" in noise.CardSample.__dataclass_fields__:
            kw["seeds"] = "seed_base 1000" if replay else f"seed_base {1000 + c}"
        out.append(noise.CardSample(**kw))  # type: ignore[arg-type]
    return out


def check_ledger(reps: int, seed: int) -> list[Cell]:
    rows = []
    s_b = 0.01
    setups = [
        ("one card of 8 transcripts beside nine of 200", [8] + [200] * 9, 0.10, False),
        ("ten cards of 200 replaying one seed base", [200] * 10, 0.10, True),
    ]
    for name, sizes, s_e, replay in setups:
        rng = np.random.default_rng([seed, 5, len(name)])
        below = 0
        for _ in range(reps):
            got = _samples(rng, sizes, s_e, s_b, replay)
            kept = noise._distinct(got)
            _, _, upper, _ = noise.pool(kept)
            below += upper < s_b * s_b
        rows.append(
            cell(
                "5 ledger",
                name,
                below,
                reps,
                0.05,
                f"one-sided 95% upper bound below the true boot variance (boot sd {s_b:.0%}, request sd {s_e:.0%})",
            )
        )
    return rows


# 6. more_needed -------------------------------------------------------------------------------------------------


def _gate_test(t, n: int, requests: int, alpha: float) -> GateTest:  # type: ignore[no-untyped-def]
    return GateTest(
        metric="tokens_per_step",
        comparison="B / mean(A, A2)",
        test="superiority",
        method="t",
        estimate=t.estimate,
        low=t.low,
        high=t.high,
        level=1 - 2 * alpha,
        margin=0.0,
        alpha=alpha,
        nominal_alpha=alpha,
        n=n,
        requests_per_arm=requests,
        statistic=t.statistic,
        df=t.df,
        p_value=t.p_value,
        baseline=t.baseline,
        decision=t.decision,
        reason=t.reason,
    )


def check_more(reps: int, seed: int) -> list[Cell]:
    card, _ = load_card("cpu-br2")  # its gates without a boot sd: the simulation's arms boot alike
    card = card.model_copy(
        update={
            "gates": tuple(
                g.model_copy(update={"boot_sd": 0.0, "boot_df": None}) if hasattr(g, "boot_sd") else g
                for g in card.gates
            )
        }
    )
    gate = next(g for g in card.gates if g.id == "tokens-per-step-c1")
    agree = next(g for g in card.gates if isinstance(g, ControlsEquivalence))
    takes_controls = "controls" in inspect.signature(more_mod.more_needed).parameters
    rows = []
    for n, gain_sd in ((8, 0.0), (16, 0.0), (40, 0.0), (16, 0.03)):
        rng = np.random.default_rng([seed, 6, n, int(gain_sd * 100)])
        misses = done = 0
        while done < reps:
            level = np.exp(0.2 * rng.standard_normal(n))
            gain = 1.0 + gate.mde + gain_sd * rng.standard_normal(n)  # B's gain per transcript, fixed for the card

            def run(rounds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
                sd = 0.15 / math.sqrt(rounds)
                a, a2 = (level * np.exp(sd * rng.standard_normal(n)) for _ in range(2))
                return level * gain * np.exp(sd * rng.standard_normal(n)), a, a2

            b, a, a2 = run(1)
            t = ratio_test(b, (a + a2) / 2.0, test="superiority", margin=0.0, level_one_sided=gate.alpha)
            if t.decision != "INCONCLUSIVE":
                continue
            res = GateResult(
                id=gate.id,
                kind=gate.kind,
                status="INCONCLUSIVE",
                observed="",
                bar="",
                noise_floor="",
                tests=(_gate_test(t, n, n, gate.alpha),),
                decides=True,
            )
            e = ratio_test(a, a2, test="equivalence", margin=agree.margin, level_one_sided=agree.alpha)
            ctrl = GateResult(
                id=agree.id,
                kind=agree.kind,
                status="INCONCLUSIVE",
                observed="",
                bar="",
                noise_floor="",
                tests=(
                    _gate_test(e, n, n, agree.alpha).model_copy(update={"test": "equivalence", "margin": agree.margin}),
                ),
                decides=True,
            )
            m = (
                more_mod.more_needed(card, gate, res, controls=ctrl)
                if takes_controls  # type: ignore[call-arg]
                else more_mod.more_needed(card, gate, res)
            )
            if m is None or m.requests_per_arm is None:
                continue
            done += 1
            rounds = max(1, math.ceil(m.requests_per_arm / n))
            b, a, a2 = run(rounds)
            misses += (
                ratio_test(b, (a + a2) / 2.0, test="superiority", margin=0.0, level_one_sided=gate.alpha).decision
                != "PASS"
            )
        what = "1 - power at the mde +4% of the size more_needed names after an INCONCLUSIVE pilot" + (
            f", B's gain sd {gain_sd:.0%} per transcript" if gain_sd else ""
        )
        rows.append(
            cell(
                "6 more",
                f"pilot {n} transcripts" + (f", gain sd {gain_sd:.0%}" if gain_sd else ""),
                misses,
                reps,
                1 - more_mod.TARGET_POWER,
                what,
            )
        )
    return rows


CHECKS: dict[str, Callable[[int, int], list[Cell]]] = {
    "rerun": check_rerun,
    "lane": check_lane,
    "tail": check_tail,
    "cuped": check_cuped,
    "ledger": check_ledger,
    "more": check_more,
}


def table(rows: list[Cell]) -> Iterator[str]:
    yield f"{'check':<9} {'cell':<44} {'rate':>7} {'95% interval':>18} {'nominal':>8} {'N':>6}"
    for r in rows:
        iv = f"[{r['low']:.2%}, {r['high']:.2%}]"
        flag = "  ABOVE" if r["above_nominal"] else ""
        yield (
            f"{r['check']:<9} {r['cell']:<44} {r['rate']:>7.2%} {iv:>18} {r['nominal']:>8.2%} "
            f"{r['replicates']:>6}{flag}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=",".join(CHECKS), help="comma-separated checks: " + ", ".join(CHECKS))
    ap.add_argument("--workers", type=int, default=2, help="processes for the tail gate's cells")
    ap.add_argument(
        "--tail-draws",
        type=int,
        default=500,
        help="the tail gate's bootstrap draws per decision (the tool's 2,000 cost four times as long)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "calibration_suite.json")
    args = ap.parse_args()
    global WORKERS
    WORKERS = args.workers
    tails.BOOTSTRAP_RESAMPLES = args.tail_draws
    rows: list[Cell] = []
    timings = {}
    for name in args.only.split(","):
        t0 = time.monotonic()
        rows += CHECKS[name](args.replicates, args.seed)
        timings[name] = round(time.monotonic() - t0, 1)
        print(f"# {name}: {timings[name]} s", file=sys.stderr)
        for line in table(rows):  # as it goes: a long run that is stopped keeps what it had
            print(line, file=sys.stderr)
    print("95% Clopper-Pearson intervals; ABOVE: the interval lies wholly above the nominal")
    for line in table(rows):
        print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "replicates": args.replicates,
                "seed": args.seed,
                "seconds": timings,
                "interval": "95% Clopper-Pearson",
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 1 if any(r["above_nominal"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
