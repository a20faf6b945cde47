"""Fit the embedded engine's calibration (gb300lane/engine/calibration.json) to the write-up's curves.

Every evaluation really runs the engine core (drafting and verifying) on the
shipped transcripts at temperature 1.0 with fixed seeds and a fixed boot, so
the objective is deterministic; scipy.optimize.brentq solves one parameter at
a time against one published number, in passes:

  mu_c     (drafter's miss rate, per class)     <- tokens/step at k=5, token verification
           (rho_c, the target's predictability, only where mu_c reaches 0 and the class needs more)
  sigma    (drafter error on known contexts)    <- Figure 4's block effect (+1.8%, served schedule)
  kappa    (cliff past the block)               <- prose positions 6-9 at k=9 (0.130 tokens)
  omega_c  (wide query block, per class)        <- tokens/step at k=9, block verification

The drafter's miss error (`--miss-noise`) and its sharpness (1: the target's
log-probabilities as they are) are held fixed.
Prints every fitted value with its residual, then writes the file (unless --dry-run).

    python scripts/fit_engine.py [--transcripts 40] [--tokens 256] [--passes 1] [--cliff-passes 3] [--dry-run]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from scipy.optimize import brentq

from gb300lane.bench.fidelity import (
    FIDELITY_CLASSES,
    WRITEUP_FIG4_TPS,
    WRITEUP_PROSE_K9,
    WRITEUP_TPS_K5,
    WRITEUP_TPS_K9,
    class_prompts,
    figure4_window,
    run_window,
)
from gb300lane.engine.calibration import CALIBRATION_FILE, Calibration, ClassParams, DrafterParams
from gb300lane.engine.model import BuiltinModel, load_model, with_calibration
from gb300lane.fsio import atomic_write

FIG4_EFFECT = WRITEUP_FIG4_TPS[1] / WRITEUP_FIG4_TPS[0] - 1.0
PROSE_TAIL = sum(WRITEUP_PROSE_K9[5:])


def _root(f: Callable[[float], float], lo: float, hi: float, xtol: float) -> float:
    """brentq where the bracket changes sign, else the bound with the smaller |f|."""
    f_lo, f_hi = f(lo), f(hi)
    if f_lo * f_hi > 0:
        return lo if abs(f_lo) <= abs(f_hi) else hi
    # The objective is a step function of the parameter (samples flip), so brentq may stop on a step.
    return float(brentq(f, lo, hi, xtol=xtol, maxiter=16, disp=False))


class Fitter:
    def __init__(
        self,
        base: BuiltinModel,
        cal: Calibration,
        transcripts: int,
        tokens: int,
        fig4_transcripts: int,
        fig4_tokens: int,
    ) -> None:
        self.base, self.cal = base, cal
        self.tokens, self.fig4_transcripts, self.fig4_tokens = tokens, fig4_transcripts, fig4_tokens
        self.prompts = {c: class_prompts(base, c, transcripts) for c in FIDELITY_CLASSES}
        self.evals = 0

    def _with(self, cls: str | None = None, drafter: dict | None = None, **cls_update: float) -> Calibration:
        classes = dict(self.cal.classes)
        if cls is not None:
            classes[cls] = classes[cls].model_copy(update=cls_update)
        d = self.cal.drafter.model_copy(update=drafter or {})
        return self.cal.model_copy(update={"classes": classes, "drafter": d})

    def tps(self, cal: Calibration, cls: str, k: int, method: str):
        self.evals += 1
        model = with_calibration(self.base, cal)
        return run_window(model, self.prompts[cls], k=k, method=method, tokens=self.tokens)

    def fig4_effect(self, cal: Calibration) -> float:
        self.evals += 1
        model = with_calibration(self.base, cal)
        a = figure4_window(model, "standard", transcripts=self.fig4_transcripts, tokens=self.fig4_tokens)
        b = figure4_window(model, "block", transcripts=self.fig4_transcripts, tokens=self.fig4_tokens)
        return b.tokens_per_step / a.tokens_per_step - 1.0

    def fit_k5(self, cls: str) -> None:
        target = WRITEUP_TPS_K5[cls]
        self.cal = self._with(cls, predictability=1.0)
        mu = _root(
            lambda m: self.tps(self._with(cls, miss=m), cls, 5, "standard").tokens_per_step - target, 0.0, 0.95, 2e-3
        )
        self.cal = self._with(cls, miss=round(mu, 4))
        if mu == 0.0:
            rho = _root(
                lambda r: self.tps(self._with(cls, predictability=r), cls, 5, "standard").tokens_per_step - target,
                0.2,
                1.0,
                2e-3,
            )
            self.cal = self._with(cls, predictability=round(rho, 4))

    def fit_omega(self, cls: str) -> None:
        target = WRITEUP_TPS_K9[cls]
        omega = _root(
            lambda w: self.tps(self._with(cls, wide_block=w), cls, 9, "block").tokens_per_step - target, 0.0, 0.95, 2e-3
        )
        self.cal = self._with(cls, wide_block=round(omega, 4))

    def fit_sigma(self) -> None:
        sigma = _root(lambda s: self.fig4_effect(self._with(drafter={"noise": s})) - FIG4_EFFECT, 0.0, 2.0, 5e-3)
        self.cal = self._with(drafter={"noise": round(sigma, 4)})

    def fit_kappa(self) -> None:
        def tail(c: float) -> float:
            w = self.tps(self._with(drafter={"cliff": c}), "prose", 9, "block")
            return sum(w.a_p(9)[5:]) - PROSE_TAIL

        self.cal = self._with(drafter={"cliff": round(_root(tail, 0.0, 0.95, 2e-3), 4)})


def residual_table(f: Fitter) -> list[str]:
    lines = [
        f"{'class':<11} {'mu':>7} {'rho':>7} {'omega':>7} {'k5 fit':>7} {'k5 w-up':>7} {'resid':>7} "
        f"{'k9 fit':>7} {'k9 w-up':>7} {'resid':>7}"
    ]
    for cls in FIDELITY_CLASSES:
        p = f.cal.classes[cls]
        t5 = f.tps(f.cal, cls, 5, "standard").tokens_per_step
        t9 = f.tps(f.cal, cls, 9, "block").tokens_per_step
        lines.append(
            f"{cls:<11} {p.miss:>7.4f} {p.predictability:>7.4f} {p.wide_block:>7.4f} {t5:>7.3f} {WRITEUP_TPS_K5[cls]:>7.2f} "
            f"{t5 - WRITEUP_TPS_K5[cls]:>+7.3f} {t9:>7.3f} {WRITEUP_TPS_K9[cls]:>7.2f} "
            f"{t9 - WRITEUP_TPS_K9[cls]:>+7.3f}"
        )
    prose9 = f.tps(f.cal, "prose", 9, "block").a_p(9)
    lines.append(
        f"prose k=9 positions 6-9: {sum(prose9[5:]):.3f} (write-up {PROSE_TAIL:.3f}); "
        f"a_p {' '.join(f'{x:.3f}' for x in prose9)}"
    )
    effect = f.fig4_effect(f.cal)
    lines.append(
        f"Figure 4 block effect: {effect:+.4f} (write-up {FIG4_EFFECT:+.4f}); drafter: {f.cal.drafter.model_dump()}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcripts", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--fig4-transcripts", type=int, default=10)
    ap.add_argument("--fig4-tokens", type=int, default=128)
    ap.add_argument("--passes", type=int, default=1, help="rounds of (mu/rho per class, then sigma)")
    ap.add_argument("--cliff-passes", type=int, default=3, help="rounds of (prose omega, then kappa)")
    ap.add_argument("--miss-noise", type=float, default=4.0)
    ap.add_argument("--dry-run", action="store_true", help="print the fit, do not write calibration.json")
    ns = ap.parse_args(argv)
    t0 = time.process_time()
    base = load_model()
    start = Calibration(
        fitted_by=" ".join(["python scripts/fit_engine.py", *(argv if argv is not None else sys.argv[1:])]),
        classes={c: ClassParams(predictability=1.0, miss=0.3, wide_block=0.2) for c in FIDELITY_CLASSES},
        drafter=DrafterParams(noise=0.8, miss_noise=ns.miss_noise, sharpness=1.0, cliff=0.3),
    )
    f = Fitter(base, start, ns.transcripts, ns.tokens, ns.fig4_transcripts, ns.fig4_tokens)
    for n in range(ns.passes):
        for cls in FIDELITY_CLASSES:
            f.fit_k5(cls)
        print(
            f"pass {n + 1}: mu, rho {[(f.cal.classes[c].miss, f.cal.classes[c].predictability) for c in FIDELITY_CLASSES]}",
            flush=True,
        )
        f.fit_sigma()
        print(f"pass {n + 1}: sigma {f.cal.drafter.noise}", flush=True)
    for cls in FIDELITY_CLASSES:
        f.fit_k5(cls)
    for n in range(ns.cliff_passes):
        f.fit_omega("prose")
        f.fit_kappa()
        print(f"pass {n + 1}: prose omega {f.cal.classes['prose'].wide_block}, kappa {f.cal.drafter.cliff}", flush=True)
    for cls in FIDELITY_CLASSES:
        if cls != "prose":
            f.fit_omega(cls)
    for line in residual_table(f):
        print(line)
    print(f"{f.evals} engine windows, {time.process_time() - t0:.0f} CPU s")
    if not ns.dry_run:
        atomic_write(str(CALIBRATION_FILE), f.cal.model_dump_json(indent=2) + "\n")
        print(f"wrote {CALIBRATION_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
