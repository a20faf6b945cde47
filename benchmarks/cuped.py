"""The CUPED saving on the embedded engine: requests per arm at equal power with and without `adjust: cuped`.

Replicates of a card (default the shipped local-br1, its primary window and the tested gates that read it) run
in process on the engine core (`instrument.calibrate.run_replicate`: four arms per replicate, A, A2, B as written
and the control recipe as B), each scored twice: every tested B-against-the-controls gate as registered and a
copy with `adjust: cuped`. Per gate it reports, over the replicates:

- the units' part of the test's variance (log scale) unadjusted (the paired log ratio, theta = 1) and adjusted,
  and their ratio: at equal power the requests per arm scale with it (the registered boot part is the same
  both ways), so requests at equal power = requests as written x the ratio;
- the mean theta and reliability the adjusted test found;
- whether the standard errors hold: the replicates' own variance of the estimate (same transcripts, fresh
  seeds and boots) against the mean se^2 each test claimed (units + boot);
- power (B as written) and the A/A false PASS and false FAIL rates of the gate as registered, adjusted, and
  (for comparison only, not a card option) plain OLS of log b on log c, which explains part of the controls'
  noise away; rates with 95% Clopper-Pearson intervals.

Prints a table and writes benchmarks/results/cuped.json; replicates are kept in benchmarks/results/cuped.jsonl
as they finish (rerun with the same arguments to resume).

    python benchmarks/cuped.py [--card local-br1] [--replicates 200] [--workers 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gb300lane.cards.cardfile import load_card
from gb300lane.cards.decide.cuped import adjusted_log_ratio
from gb300lane.cards.decide.data import ArmData, BootFacts, WindowData
from gb300lane.cards.decide.evidence import by_transcript, units_of
from gb300lane.cards.decide.stats import BootVariance, proportion
from gb300lane.cards.schema import Card, ControlsEquivalence, TestedGate
from gb300lane.instrument.calibrate import ArmStage, run_replicate
from gb300lane.instrument.simulate import InProcessLane

RESULTS = Path(__file__).parent / "results"
SCENARIOS = ("card", "aa")


def bench_card(card: Card) -> tuple[Card, list[TestedGate]]:
    """The card's primary window and its tested B-against-the-controls gates, each also as a cuped copy."""
    base: list[TestedGate] = [
        g
        for g in card.gates
        if isinstance(g, TestedGate)
        and not isinstance(g, ControlsEquivalence)
        and g.window == card.primary_window
        and g.decides
    ]
    if not base:
        raise SystemExit(
            f"card {card.name} has no deciding tested gate of B against the controls on its primary window"
        )
    copies = [g.model_copy(update={"id": f"{g.id}-cuped", "adjust": "cuped"}) for g in base]
    d = card.model_dump(mode="json")
    d["windows"] = [w for w in d["windows"] if w["name"] == card.primary_window]
    d["gates"] = [g.model_dump(mode="json") for g in base + copies]
    return Card.model_validate(d), base


def units(gate: TestedGate, b: ArmData, ctrls: list[ArmData]) -> tuple[np.ndarray, np.ndarray] | None:
    """B's values and each control's (k x n) over the paired units of an aggregate gate (None for per-cell)."""
    if gate.scope != "aggregate":
        return None
    su, _ = units_of(b, gate, gate.metric)
    rus = [units_of(r, gate, gate.metric)[0] for r in ctrls]
    keys = sorted(set(su).intersection(*[set(r) for r in rus]), key=lambda k: (k[1], k[0]))
    sub, refs = by_transcript(su, keys), [by_transcript(r, keys) for r in rus]
    common = sorted(u for u in sub if all(u in r and r[u][1] == sub[u][1] for r in refs))
    return (np.array([sub[u][0] for u in common]), np.array([[r[u][0] for u in common] for r in refs]))


def one(lane: InProcessLane, card: Card, base: list[TestedGate], seed: int, rep: int) -> dict[str, Any]:
    """One replicate: decisions of every gate in both scenarios and the variance parts of each base gate."""
    from scipy import stats as sps

    raw: dict[tuple[int, str, int], str] = {}
    t0 = time.process_time()
    outcomes = run_replicate(lane, card, seed, rep, raw)
    arms = {k: ArmStage.model_validate_json(raw[(rep, k, 1)]).windows for k in ("A", "A2", "B:card", "B:aa")}

    def arm(key: str, name: str, role: str) -> ArmData:
        w: dict[str, WindowData] = arms[key]
        return ArmData(arm=name, recipe="", role=role, source="measured", boot=BootFacts(), windows=w)

    ctrls = [arm("A", "A", "control"), arm("A2", "A2", "control")]
    out: dict[str, Any] = {"replicate": rep, "cpu_s": time.process_time() - t0, "scenarios": {}}
    for o in outcomes:
        sc: dict[str, Any] = {"gates": o.gates, "requests_per_arm": o.requests_per_arm, "parts": {}}
        b = arm(f"B:{o.scenario}", "B", "candidate")
        for g in base:
            got = units(g, b, ctrls)
            if got is None:
                continue
            bv, cv = got
            boot = BootVariance(sd=g.boot_sd, df=g.boot_df, refs=len(ctrls), boots=1)
            paired = adjusted_log_ratio(bv, cv, boot=boot, theta=1.0)
            cup = adjusted_log_ratio(bv, cv, boot=boot)
            ols = adjusted_log_ratio(bv, cv, boot=boot, correct_noise=False)
            bound = math.log1p(g.margin if g.test == "superiority" else -g.margin)
            tcrit = float(sps.t.ppf(1.0 - g.alpha, ols.df))
            t_ols = (ols.estimate_log - bound) / ols.se
            sc["parts"][g.id] = {
                "n": paired.n,
                "estimate_log": paired.estimate_log,
                "var_boot": paired.var_boot,
                "var_units_paired": paired.var_units,
                "var_units_cuped": cup.var_units,
                "var_units_ols": ols.var_units,
                "theta": cup.theta,
                "reliability": cup.reliability,
                "adjusted": cup.adjusted,
                "ols_decision": "PASS" if t_ols > tcrit else "FAIL" if t_ols < -tcrit else "INCONCLUSIVE",
            }
        out["scenarios"][o.scenario] = sc
    return out


_LANE: InProcessLane | None = None


def _init() -> None:
    global _LANE
    _LANE = InProcessLane()


def _task(args: tuple[Card, list[TestedGate], int, int]) -> dict[str, Any]:
    assert _LANE is not None
    return one(_LANE, *args)


def rate(events: int, trials: int) -> dict[str, Any]:
    p = proportion(events, trials)
    return {"events": events, "trials": trials, "rate": p.rate, "ci95": [p.low, p.high]}


def summarize(card: Card, base: list[TestedGate], reps: list[dict[str, Any]]) -> dict[str, Any]:
    gates: dict[str, Any] = {}
    for g in base:
        row: dict[str, Any] = {"test": g.test, "margin": g.margin, "alpha": g.alpha, "boot_sd": g.boot_sd}
        for sc in SCENARIOS:
            got = [r["scenarios"][sc] for r in reps if sc in r["scenarios"]]
            parts = [s["parts"][g.id] for s in got if g.id in s["parts"]]
            n_rep = len(got)
            dec = {v: [s["gates"][gid] for s in got] for v, gid in (("registered", g.id), ("cuped", f"{g.id}-cuped"))}
            dec["ols"] = [p["ols_decision"] for p in parts]
            entry: dict[str, Any] = {"replicates": n_rep}
            for v, ds in dec.items():
                entry[v] = {
                    "pass": rate(sum(d == "PASS" for d in ds), len(ds)),
                    "fail": rate(sum(d == "FAIL" for d in ds), len(ds)),
                }
            if parts:
                est = np.array([p["estimate_log"] for p in parts])
                vb = float(np.mean([p["var_boot"] for p in parts]))
                vu = {k: float(np.mean([p[f"var_units_{k}"] for p in parts])) for k in ("paired", "cuped", "ols")}
                entry.update(
                    {
                        "units": parts[0]["n"],
                        "requests_per_arm": got[0]["requests_per_arm"],
                        "var_units": vu,
                        "var_boot": vb,
                        "variance_ratio_cuped": vu["cuped"] / vu["paired"],
                        "variance_ratio_ols": vu["ols"] / vu["paired"],
                        "requests_at_equal_power": {
                            "paired": got[0]["requests_per_arm"],
                            "cuped": got[0]["requests_per_arm"] * vu["cuped"] / vu["paired"],
                        },
                        "realized_var_estimate": float(est.var(ddof=1)) if len(est) > 1 else None,
                        "claimed_var": {k: v + vb for k, v in vu.items()},
                        "theta_mean": float(np.mean([p["theta"] for p in parts])),
                        "theta_sd": float(np.std([p["theta"] for p in parts], ddof=1)) if len(parts) > 1 else None,
                        "reliability_mean": float(
                            np.mean([p["reliability"] for p in parts if p["reliability"] is not None])
                        ),
                        "adjusted_share": float(np.mean([p["adjusted"] for p in parts])),
                    }
                )
            row[sc] = entry
        gates[g.id] = row
    return {"card": card.name, "replicates": len(reps), "cpu_s": sum(r["cpu_s"] for r in reps), "gates": gates}


def fmt_rate(r: dict[str, Any]) -> str:
    return f"{r['rate']:.1%} [{r['ci95'][0]:.1%}, {r['ci95'][1]:.1%}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--card", default="local-br1")
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    card0, _ = load_card(args.card)
    card, base = bench_card(card0)
    RESULTS.mkdir(exist_ok=True)
    keep = RESULTS / "cuped.jsonl"
    tag = {"card": card.name, "seed": args.seed}
    reps: dict[int, dict[str, Any]] = {}
    if keep.is_file():
        for line in keep.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("tag") == tag:
                reps[r["replicate"]] = r
    todo = [r for r in range(args.replicates) if r not in reps]
    t0 = time.perf_counter()
    with keep.open("a") as f, ProcessPoolExecutor(args.workers, initializer=_init) as ex:
        for i, r in enumerate(ex.map(_task, [(card, base, args.seed, rep) for rep in todo])):
            r["tag"] = tag
            f.write(json.dumps(r) + "\n")
            f.flush()
            reps[r["replicate"]] = r
            if (i + 1) % 10 == 0:
                print(f"{i + 1}/{len(todo)} replicates, {time.perf_counter() - t0:.0f} s", flush=True)
    got = [reps[r] for r in range(args.replicates) if r in reps]
    summary = summarize(card, base, got)
    summary["seed"] = args.seed
    print(f"card {card.name}, {summary['replicates']} replicates, {summary['cpu_s']:.0f} CPU s")
    print(
        f"{'gate':<16} {'req/arm':>7} {'cuped req':>9} {'var ratio':>9} {'theta':>13} {'rel':>5} "
        f"{'realized/claimed var (paired, cuped, ols)':>42}"
    )
    for gid, row in summary["gates"].items():
        e = row["card"]
        claimed = e["claimed_var"]
        rv = e["realized_var_estimate"]
        print(
            f"{gid:<16} {e['requests_per_arm']:>7} {e['requests_at_equal_power']['cuped']:>9.0f} "
            f"{e['variance_ratio_cuped']:>9.3f} {e['theta_mean']:>6.3f}+-{e['theta_sd']:.3f} "
            f"{e['reliability_mean']:>5.3f} "
            f"{rv / claimed['paired']:>13.2f} {rv / claimed['cuped']:>13.2f} {rv / claimed['ols']:>13.2f}"
        )
    print(f"{'gate':<16} {'variant':<10} {'power':>22} {'A/A false PASS':>22} {'A/A false FAIL':>22}")
    for gid, row in summary["gates"].items():
        for v in ("registered", "cuped", "ols"):
            print(
                f"{gid:<16} {v:<10} {fmt_rate(row['card'][v]['pass']):>22} {fmt_rate(row['aa'][v]['pass']):>22} "
                f"{fmt_rate(row['aa'][v]['fail']):>22}"
            )
    out = RESULTS / "cuped.json"
    out.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
