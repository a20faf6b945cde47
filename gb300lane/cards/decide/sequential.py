"""Group-sequential designs: alpha spending over a few looks, boundaries and their crossing probabilities.

A sequential card runs its bracket in stages (A -> B -> A2 over a share of
the requests, then again) and looks at the accumulated data after each
stage. Each gate's one-sided alpha is spent over the looks by a Lan-DeMets
spending function, so the chance of ever crossing a boundary under the null
is the registered alpha, however many looks are taken:

    obrien_fleming  alpha(t) = 2 - 2 Phi(z_(1 - alpha/2) / sqrt(t))   (spends little early)
    pocock          alpha(t) = alpha ln(1 + (e - 1) t)                 (spends evenly)

The boundary at look k is found by numerical integration of the standardized
statistic's path (independent Gaussian increments of the score, Armitage,
McPherson and Rowe's recursion, as in Jennison and Turnbull ch. 19), so that
the probability of first crossing at look k under the null is exactly the
alpha spent between looks k - 1 and k. The same recursion with a drift gives
the power and the expected stopping time that `card plan` reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from gb300lane.cards.schema import Spending

_GRID = 1201


def spent(alpha: float, t: float, spending: Spending) -> float:
    """One-sided alpha spent by information fraction t (0 < t <= 1)."""
    from scipy.stats import norm

    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if spending == "obrien_fleming":
        return float(2.0 - 2.0 * norm.cdf(norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t)))
    return float(alpha * math.log(1.0 + (math.e - 1.0) * t))


#: scipy's own constant for the standard normal density (`scipy.stats._continuous_distns._norm_pdf_C`).
_NORM_PDF_C = np.sqrt(2 * np.pi)


def _norm_pdf(x: np.ndarray) -> np.ndarray:
    """The standard normal density, as `scipy.stats.norm.pdf(x)` computes it for loc 0 and scale 1 (the same
    expression, so the same bits), without its generic checks: the path's kernel is a grid of a million points
    evaluated once per look."""
    density: np.ndarray = np.exp(-(x**2) / 2.0) / _NORM_PDF_C
    return density


class _Path:
    """The sub-density of the score S_k = Z_k sqrt(t_k) on the continuation region, look by look."""

    def __init__(self, drift: float, points: int = _GRID) -> None:
        self.drift = drift
        self.points = points
        self.t = 0.0
        self.grid: np.ndarray | None = None  # score values
        self.dens: np.ndarray | None = None  # sub-density at the grid points
        self.w: np.ndarray | None = None  # integration weights

    def exit_prob(self, t: float, bound: float) -> float:
        """P(not stopped before, and Z at information t >= bound)."""
        from scipy.stats import norm

        dt = t - self.t
        mean = self.drift * dt
        b = bound * math.sqrt(t)
        if self.grid is None:
            return float(norm.sf((b - mean) / math.sqrt(dt)))
        assert self.dens is not None and self.w is not None
        tail = norm.sf((b - self.grid - mean) / math.sqrt(dt))
        return float(np.sum(self.w * self.dens * tail))

    def advance(self, t: float, bound: float) -> None:
        """Move to information t, keeping only paths below the boundary."""
        dt = t - self.t
        mean = self.drift * dt
        sd = math.sqrt(dt)
        hi = bound * math.sqrt(t)
        centre = self.drift * t
        lo = min(centre, hi) - 9.0 * math.sqrt(t)
        grid = np.linspace(lo, hi, self.points)
        w = np.full(self.points, (hi - lo) / (self.points - 1))
        w[0] *= 0.5
        w[-1] *= 0.5
        if self.grid is None:
            dens = _norm_pdf((grid - mean) / sd) / sd
        else:
            assert self.dens is not None and self.w is not None
            kern = _norm_pdf((grid[:, None] - self.grid[None, :] - mean) / sd) / sd
            dens = kern @ (self.w * self.dens)
        self.grid, self.dens, self.w, self.t = grid, dens, w, t


def run_share(run: int, runs: int) -> float:
    """The share of a gate's alpha run `run` of a question's `runs` may spend: the runs are looks of one Pocock
    spending plan over the question, alpha(r) = alpha ln(1 + (e - 1) r / runs), so the shares add to 1 and a
    question's false PASS stays each gate's alpha however many of its runs are taken (the runs' data are
    independent, so their errors add at most). 1.0 for a question of one run."""
    if not 1 <= run <= runs:
        raise ValueError(f"run {run} of a question of {runs} runs")
    return spent(1.0, run / runs, "pocock") - spent(1.0, (run - 1) / runs, "pocock")


@lru_cache(maxsize=256)
def _bounds(alpha: float, fractions: tuple[float, ...], spending: Spending) -> tuple[float, ...]:
    from scipy.optimize import brentq
    from scipy.stats import norm

    path = _Path(0.0)
    out: list[float] = []
    prev = 0.0
    for t in fractions:
        target = spent(alpha, t, spending) - prev
        prev += target
        if target <= 1e-15:
            bound = 12.0
        else:
            if path.grid is None:
                bound = float(norm.isf(target))
            else:
                bound = float(brentq(lambda b: path.exit_prob(t, b) - target, 0.0, 12.0, xtol=1e-7))
        out.append(bound)
        path.advance(t, bound)
    return tuple(out)


def boundaries(alpha: float, looks: int, spending: Spending) -> list[float]:
    """Upper z boundaries of `looks` equally spaced looks spending one-sided `alpha`."""
    if looks < 1:
        raise ValueError("a design has at least one look")
    if looks == 1:
        from scipy.stats import norm

        return [float(norm.isf(alpha))]
    return list(_bounds(float(alpha), tuple((k + 1) / looks for k in range(looks)), spending))


def nominal_level(alpha: float, look: int, looks: int, spending: Spending) -> float:
    """The one-sided nominal level of look `look` (1-based): 1 - Phi(boundary)."""
    from scipy.stats import norm

    return float(norm.sf(boundaries(alpha, looks, spending)[look - 1]))


#: Grid points of a power computation's path: planning solves for a size over many drifts, and the densities
#: are smooth, so a coarser grid than the boundaries' loses nothing visible (`crossing`'s `points`).
PLAN_GRID = 241


def crossing(bounds: Sequence[float], drift: float, points: int = _GRID) -> list[float]:
    """P(first crossing at look k) for equally spaced looks when E[Z at information t] = drift sqrt(t).

    `drift` is the standardized effect at the full information (the z the
    final look would expect); crossings of the upper boundary only. `points`
    is the integration grid (the boundaries' own by default; `PLAN_GRID`
    where a plan evaluates many drifts).
    """
    looks = len(bounds)
    path = _Path(drift, points)
    out = []
    for k, b in enumerate(bounds):
        t = (k + 1) / looks
        out.append(path.exit_prob(t, b))
        path.advance(t, b)
    return out


def power_and_stop(bounds: Sequence[float], drift: float) -> tuple[float, float]:
    """(power, expected fraction of the maximum sample used) when the design stops at a crossing."""
    p = crossing(bounds, drift)
    return float(sum(p)), used_fraction(p)


def used_fraction(p: Sequence[float]) -> float:
    """Expected fraction of the maximum sample used when the design stops at its first crossing, from the
    crossing probabilities `p` of its equally spaced looks (the last look is taken whenever none came before)."""
    looks = len(p)
    return float(sum((k + 1) / looks * pk for k, pk in enumerate(p[:-1])) + (1.0 - sum(p[:-1])))
