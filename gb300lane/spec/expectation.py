"""Exact expected accepted drafts for context-independent target and draft distributions.

Enumerates every draft sequence (V^k of them) with exact fractions, so it is
for small vocabularies: it is the ground truth the statistical tests and the
verification code are held to, not a production estimator.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction

Dist = tuple[Fraction, ...]

#: Enumeration limit: V^k draft sequences beyond this are refused rather than left running.
MAX_SEQUENCES = 200_000


def _as_distribution(values: Sequence[float | Fraction | str], name: str) -> tuple[Fraction, ...]:
    dist = tuple(Fraction(v) for v in values)
    if not dist or any(x < 0 for x in dist):
        raise ValueError(f"{name} must be a non-empty list of non-negative probabilities; got {list(values)}")
    total = sum(dist)
    if abs(float(total) - 1.0) > 1e-9:
        raise ValueError(f"{name} must sum to 1; it sums to {float(total):.12g}")
    # Floats that sum to 1 only up to rounding are renormalised so the arithmetic stays exact.
    return tuple(x / total for x in dist)


def _block_thresholds(p: Dist, q: Dist, drafts: Sequence[int]) -> list[Fraction]:
    """h_1..h_k for one draft sequence (Sun et al. 2024), exactly."""
    k = len(drafts)
    joint = Fraction(1)
    out = []
    for i, x in enumerate(drafts, start=1):
        if joint > 0 and q[x] > 0:
            joint = min(Fraction(1), joint * p[x] / q[x])
        elif joint > 0:
            joint = Fraction(1) if p[x] > 0 else Fraction(0)
        if i < k:
            residual = sum((max(Fraction(0), joint * pv - qv) for pv, qv in zip(p, q)), Fraction(0))
            denom = residual + 1 - joint
            out.append(residual / denom if denom else Fraction(1))
        else:
            out.append(joint)
    return out


def _expected_block(h: list[Fraction]) -> Fraction:
    # tau is the last i with u_i <= h_i: P(tau = i) = h_i * prod_{j > i} (1 - h_j).
    expected, survive = Fraction(0), Fraction(1)
    for i in range(len(h), 0, -1):
        expected += i * h[i - 1] * survive
        survive *= 1 - h[i - 1]
    return expected


def _expected_token(p: Dist, q: Dist, drafts: Sequence[int]) -> Fraction:
    expected, run = Fraction(0), Fraction(1)
    for x in drafts:
        run *= min(Fraction(1), p[x] / q[x]) if q[x] else (Fraction(1) if p[x] > 0 else Fraction(0))
        expected += run
    return expected


def expected_accepted(
    p: Sequence[float | Fraction | str], q: Sequence[float | Fraction | str], k: int, method: str
) -> Fraction:
    """E[accepted drafts] when every position has target p and draft q, drafts drawn from q.

    `method` is "standard" (alias "token") or "block". Entries may be
    Fractions, ints, strings such as "1/3", or floats (taken at their exact
    binary value, renormalised if they sum to 1 only up to rounding).
    """
    if method not in ("standard", "token", "block"):
        raise ValueError(f"method must be 'standard' (or 'token') or 'block'; got {method!r}")
    pf = _as_distribution(p, "p")
    qf = _as_distribution(q, "q")
    if len(pf) != len(qf):
        raise ValueError(f"p and q must cover the same vocabulary; got {len(pf)} and {len(qf)} entries")
    if k < 0:
        raise ValueError(f"k must be >= 0; got {k}")
    support = [x for x, v in enumerate(qf) if v > 0]
    if len(support) ** k > MAX_SEQUENCES:
        raise ValueError(f"{len(support)}^{k} draft sequences exceed the enumeration limit of {MAX_SEQUENCES}")
    total = Fraction(0)
    for drafts in itertools.product(support, repeat=k):
        weight = Fraction(1)
        for x in drafts:
            weight *= qf[x]
        if method == "block":
            total += weight * _expected_block(_block_thresholds(pf, qf, drafts))
        else:
            total += weight * _expected_token(pf, qf, drafts)
    return total
