"""The embedded engine against the write-up's acceptance curves (C1, temperature 1.0, 40 transcripts x 256 tokens).

Really drafts and verifies on the shipped transcripts (gb300lane/bench/fidelity.py
says how a window runs) under the shipped calibration (scripts/fit_engine.py
fits it). Prints the write-up against the engine and writes
benchmarks/results/fidelity.json; exits 1 if a target is missed:

- tokens/step per class at k=5 (token verification) within 5% of the write-up;
- prose accepted-at-position at k=5 and at k=9 within 0.05 at every position;
- k=9 (block verification) below k=5 in exactly the write-up's classes;
- Figure 4 (all five classes, served schedule, C1 + C8): block over token
  verification within 1 point of +1.8%, position 1 within 0.005 and at least
  three quarters of the gain at positions 2-5.

Uncertainty: each tokens/step carries the standard error of its per-request
mean (n = 40 requests); the k=9 vs k=5 sign is reported with its z score. The
targets are tolerances on point estimates, not tests.

    python benchmarks/fidelity.py [--transcripts 40] [--tokens 256]
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

from gb300lane import __version__
from gb300lane.bench.fidelity import (
    FIDELITY_CLASSES,
    WRITEUP_FIG4_BLOCK,
    WRITEUP_FIG4_TOKEN,
    WRITEUP_FIG4_TPS,
    WRITEUP_PROSE_K5,
    WRITEUP_PROSE_K9,
    WRITEUP_TPS_K5,
    WRITEUP_TPS_K9,
    class_window,
    figure4_window,
)
from gb300lane.engine.model import load_model
from gb300lane.fsio import atomic_write, dumps_json

OUT = Path(__file__).parent / "results" / "fidelity.json"
TPS_REL_TOL = 0.05
AP_ABS_TOL = 0.05
EFFECT_TOL = 0.01
POS1_TOL = 0.005


def _row(cells: list[str], widths: list[int]) -> str:
    return " ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcripts", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--out", type=Path, default=OUT)
    ns = ap.parse_args(argv)
    cpu0 = time.process_time()
    model = load_model()
    checks: dict[str, bool] = {}
    k5 = {
        c: class_window(model, c, k=5, method="standard", transcripts=ns.transcripts, tokens=ns.tokens)
        for c in FIDELITY_CLASSES
    }
    k9 = {
        c: class_window(model, c, k=9, method="block", transcripts=ns.transcripts, tokens=ns.tokens)
        for c in FIDELITY_CLASSES
    }

    print(
        f"tokens/step at C1 ({ns.transcripts} transcripts x {ns.tokens} tokens per class, temperature 1.0; "
        "k=5 token verification, k=9 block verification)"
    )
    w = [11, 8, 14, 7, 8, 14, 10, 6]
    print(_row(["class", "w-up k5", "engine k5", "k5 err", "w-up k9", "engine k9", "k9<k5 (z)", "ok"], w))
    classes_out = {}
    for c in FIDELITY_CLASSES:
        a, b = k5[c], k9[c]
        err = a.tokens_per_step / WRITEUP_TPS_K5[c] - 1.0
        lower_w = WRITEUP_TPS_K9[c] < WRITEUP_TPS_K5[c]
        lower_e = b.tokens_per_step < a.tokens_per_step
        z = (a.tokens_per_step - b.tokens_per_step) / math.hypot(a.standard_error, b.standard_error)
        ok = abs(err) <= TPS_REL_TOL and lower_w == lower_e
        checks[f"tps_k5_{c}"] = abs(err) <= TPS_REL_TOL
        checks[f"k9_sign_{c}"] = lower_w == lower_e
        print(
            _row(
                [
                    c,
                    f"{WRITEUP_TPS_K5[c]:.2f}",
                    f"{a.tokens_per_step:.3f}±{a.standard_error:.3f}",
                    f"{err:+.1%}",
                    f"{WRITEUP_TPS_K9[c]:.2f}",
                    f"{b.tokens_per_step:.3f}±{b.standard_error:.3f}",
                    f"{'yes' if lower_e else 'no'} ({z:+.1f})",
                    "ok" if ok else "MISS",
                ],
                w,
            )
        )
        classes_out[c] = {
            "k5": a.tokens_per_step,
            "k5_se": a.standard_error,
            "k9": b.tokens_per_step,
            "k9_se": b.standard_error,
            "writeup_k5": WRITEUP_TPS_K5[c],
            "writeup_k9": WRITEUP_TPS_K9[c],
        }

    curves_out = {}
    for label, win, ref in (("k=5", k5["prose"], WRITEUP_PROSE_K5), ("k=9", k9["prose"], WRITEUP_PROSE_K9)):
        got = win.a_p(len(ref))
        worst = max(abs(x - y) for x, y in zip(got, ref))
        checks[f"prose_a_p_{label}"] = worst <= AP_ABS_TOL
        print(
            f"\nprose accepted-at-position, {label} (tokens/step {1 + sum(ref):.2f} write-up, "
            f"{1 + sum(got):.3f} engine); worst |diff| {worst:.3f} {'ok' if worst <= AP_ABS_TOL else 'MISS'}"
        )
        print("  position " + " ".join(f"{i + 1:>6}" for i in range(len(ref))))
        print("  write-up " + " ".join(f"{x:>6.3f}" for x in ref))
        print("  engine   " + " ".join(f"{x:>6.3f}" for x in got))
        marg = [got[0]] + [got[i] / got[i - 1] if got[i - 1] else float("nan") for i in range(1, len(got))]
        print("  marginal " + " ".join(f"{x:>6.3f}" for x in marg))
        curves_out[label] = {"writeup": list(ref), "engine": got, "marginal": marg}

    tok = figure4_window(model, "standard", transcripts=ns.transcripts, tokens=ns.tokens)
    blk = figure4_window(model, "block", transcripts=ns.transcripts, tokens=ns.tokens)
    effect = blk.tokens_per_step / tok.tokens_per_step - 1.0
    a_t, a_b = tok.a_p(5), blk.a_p(5)
    gains = [y - x for x, y in zip(a_t, a_b)]
    later = sum(gains[1:])
    total = sum(gains)
    checks["block_effect"] = abs(effect - (WRITEUP_FIG4_TPS[1] / WRITEUP_FIG4_TPS[0] - 1.0)) <= EFFECT_TOL
    checks["block_gain_positions_2_5"] = abs(gains[0]) <= POS1_TOL and total > 0 and later >= 0.75 * total
    print(
        f"\nFigure 4: block over token verification, all five classes, served schedule (k=5 at 1-4 streams, "
        f"k=3 above), C1 + C8; mean drafts/step {tok.num_draft_tokens_per_step():.2f} (write-up 4.1)"
    )
    print(
        f"  tokens/step  write-up {WRITEUP_FIG4_TPS[0]:.3f} -> {WRITEUP_FIG4_TPS[1]:.3f} "
        f"({WRITEUP_FIG4_TPS[1] / WRITEUP_FIG4_TPS[0] - 1:+.1%}); engine {tok.tokens_per_step:.3f} -> "
        f"{blk.tokens_per_step:.3f} ({effect:+.2%}) {'ok' if checks['block_effect'] else 'MISS'}"
    )
    print("  position          " + " ".join(f"{i + 1:>6}" for i in range(5)))
    print("  write-up token    " + " ".join(f"{x:>6.3f}" for x in WRITEUP_FIG4_TOKEN))
    print("  write-up block    " + " ".join(f"{x:>6.3f}" for x in WRITEUP_FIG4_BLOCK))
    print("  engine token      " + " ".join(f"{x:>6.3f}" for x in a_t))
    print("  engine block      " + " ".join(f"{x:>6.3f}" for x in a_b))
    print(
        "  engine gain       "
        + " ".join(f"{x:>+6.3f}" for x in gains)
        + f"   positions 2-5: {later / total if total else float('nan'):.0%} of the gain "
        f"{'ok' if checks['block_gain_positions_2_5'] else 'MISS'}"
    )

    cpu = time.process_time() - cpu0
    missed = [k for k, v in checks.items() if not v]
    print(f"\n{len(checks) - len(missed)}/{len(checks)} targets met; {cpu:.0f} CPU s")
    result = {
        "schema_version": 1,
        "benchmark": "fidelity",
        "tool_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "settings": {"transcripts": ns.transcripts, "tokens": ns.tokens, "temperature": 1.0, "concurrency": 1},
        "calibration": model.calibration.model_dump(),
        "classes": classes_out,
        "prose_curves": curves_out,
        "figure4": {"token": a_t, "block": a_b, "tps": [tok.tokens_per_step, blk.tokens_per_step], "effect": effect},
        "checks": checks,
        "cpu_s": round(cpu, 1),
    }
    atomic_write(ns.out, dumps_json(result))
    if missed:
        print(f"TARGETS MISSED: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
