"""The latency-tail gate: a quantile of TTFT or ITL, B against the controls, resampled by transcript.

The estimate is log r = log Q(B) - mean_k log Q(C_k): Q the gate's quantile
(the inverted-CDF quantile, a value that was observed) of every value of the
arm's covered cells (TTFT: one per request; ITL: every gap between a
request's successive chunks, vLLM's definition), B against each control over
its own values. Like against like: arms that ran the same requests have equal
counts, so the inverted-CDF quantile's small-sample bias (a p99 of fewer
values sits lower) is the same on both sides; the controls pooled into 2N
values, as the gate once compared them, biased it toward "no worse".

Values are not independent: a transcript's requests share a prompt (and,
within an arm and round, their seeds), and one request's gaps share its
batch. The unit is therefore the transcript (class/id, as the tested gates
pair them): the bootstrap draws transcripts with replacement, the same draw
for every arm, and recomputes log r from every value of the drawn
transcripts in every cell, round and stage. A boot shifts a whole arm, which
no draw of transcripts sees: each draw adds a normal shift of variance
`(1 + 1/controls) boot_sd^2 / s` at look s (each arm has booted s times), the
registered `boot_sd` as the tested gates add it.

The interval is the draws' own percentiles, not log r +- t se: a quantile's
bootstrap standard error rests on the few values beyond it and converges
slowly (Hall and Martin 1988), and the t interval built on it ran at 3.3% to
3.5% where 2.5% was named (benchmarks/calibration_suite.py, check 3). With
few transcripts the draws' spread is itself too narrow, so the percentiles
are expanded (Hesterberg 2015): the one-sided level alpha_s the look may
spend (the gate's alpha on a fixed design) is read at alpha' with

    Phi^-1(1 - alpha') = sqrt(n / (n - 1)) t(1 - alpha_s, n - 1),   n transcripts,

and the bounds are the draws' alpha' and 1 - alpha' quantiles. Enough draws
are made to leave TAIL_DRAWS_BEYOND (25) beyond each bound, up to
MAX_TAIL_DRAWS (40,000); a look whose level needs more is not decided there
(O'Brien-Fleming's first looks).

Lower is better: PASS when the upper bound is below log(1 + margin) (B shown
no worse than the margin), FAIL when the lower bound is above it (shown
worse), INCONCLUSIVE otherwise. A quantile q is only estimated where every
arm has at least 10 / (1 - q) values (1,000 for p99, 200 for p95: ten
values beyond it; with four the interval still ran above alpha) over at
least MIN_TRANSCRIPTS (16) transcripts (with 4 transcripts of clustered ITL
no interval held alpha); below that the gate is INCONCLUSIVE and says how
many it needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.evidence import Look
from gb300lane.cards.decide.results import GateResult, Status
from gb300lane.cards.decide.stats import BOOTSTRAP_RESAMPLES, bootstrap_seed
from gb300lane.cards.schema import LatencyTailGate

#: The fewest transcripts a tail is decided over: 4 transcripts have 35 distinct resamples, and the t interval ran at
#: 11% there where it named 2.5%; over 16 the expanded percentiles hold (benchmarks/calibration_suite.py, check 3).
MIN_TRANSCRIPTS = 16

#: Draws evaluated at once (their weight matrix is CHUNK x values).
CHUNK = 100

#: Draws left beyond each percentile bound, at least.
TAIL_DRAWS_BEYOND = 25

#: The most draws one decision makes.
MAX_TAIL_DRAWS = 40_000

#: Per transcript unit, its values (TTFT or ITL gaps, seconds) in one arm.
UnitValues = dict[str, list[float]]


def unit_values(arm: ArmData, gate: LatencyTailGate) -> tuple[UnitValues, set[str]]:
    """(transcript unit -> the arm's values over the gate's cells, the clocks those cells lead with)."""
    w = arm.windows.get(gate.window)
    out: UnitValues = {}
    clocks: set[str] = set()
    if w is None:
        return out, clocks
    for c in w.cells:
        if (gate.classes is not None and c.cls not in gate.classes) or (
            gate.concurrency is not None and c.concurrency not in gate.concurrency
        ):
            continue
        if w.clock:
            clocks.add(w.clock)
        if gate.metric == "ttft":
            for t, v in c.ttft_s.items():
                out.setdefault(f"{c.cls}/{t.split('#')[0]}", []).append(v)
        else:
            for t, gaps in c.itl_s.items():
                out.setdefault(f"{c.cls}/{t.split('#')[0]}", []).extend(gaps)
    return out, clocks


def quantile(values: np.ndarray, q: float) -> float:
    """The inverted-CDF q-quantile (the smallest value with at least q of the values at or below it)."""
    return float(np.quantile(values, q, method="inverted_cdf"))


def _weighted_quantiles(sorted_values: np.ndarray, unit_of: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """Per row of `counts` (draws x units): the inverted-CDF quantile of the values each unit repeated that often."""
    weights = counts[:, unit_of]
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1:]
    idx = (cum < q * total).sum(axis=1)
    out: np.ndarray = sorted_values[np.minimum(idx, sorted_values.size - 1)]
    return out


class _Arm:
    """One arm's values over the shared units, sorted once for the weighted quantiles."""

    def __init__(self, values: UnitValues, units: list[str]) -> None:
        pos = {u: i for i, u in enumerate(units)}
        flat = np.array([v for u in units for v in values.get(u, [])], dtype=float)
        of = np.array([pos[u] for u in units for _ in values.get(u, [])], dtype=np.int64)
        order = np.argsort(flat, kind="stable")
        self.values, self.unit_of = flat[order], of[order]

    def at(self, counts: np.ndarray, q: float) -> np.ndarray:
        return _weighted_quantiles(self.values, self.unit_of, counts, q)


def eval_tail(
    gate: LatencyTailGate, cand: ArmData | None, ctrls: Sequence[ArmData], look: Look | None = None
) -> GateResult:
    """Decide `gate` over the candidate's and the controls' per-request latencies at `look` (module docstring)."""
    look = look or Look()
    what = {"ttft": "TTFT", "itl": "ITL"}[gate.metric]
    q_name = f"p{gate.quantile * 100:g}"
    need = gate.min_values()
    level_one_sided = look.level(gate.alpha)
    seq = "" if look.looks == 1 else f"; look {look.number} of {look.looks}, one-sided {level_one_sided:.3%} here"
    bar = (
        f"latency-tail: B's {q_name} {what} no worse than the controls' by more than +{gate.margin:.2%}; "
        f"one-sided alpha {gate.alpha:.2%}{seq}; a {q_name} needs more than {need - 1} values per arm "
        f"(n >= 10/(1-q)) over at least {MIN_TRANSCRIPTS} transcripts; B against each control at equal counts, "
        f"resampled by transcript, percentiles expanded for transcripts - 1 df"
    )

    def undecided(observed: str, *reasons: str) -> GateResult:
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status="INCONCLUSIVE",
            observed=observed,
            bar=bar,
            noise_floor="-",
            reasons=reasons,
            decides=gate.decides,
        )

    if cand is None or not ctrls:
        return undecided("no arms", "the candidate and at least one control are needed")
    per_arm = [unit_values(a, gate) for a in (cand, *ctrls)]
    units = sorted(set(per_arm[0][0]).intersection(*[set(v) for v, _ in per_arm[1:]]))
    clocks = set().union(*[c for _, c in per_arm])
    if not units:
        return undecided(
            "no paired units",
            f"the arms share no transcript with {what} values in window "
            f"{gate.window} (windows run in process, and receipts without per-request timing, carry none)",
        )
    arms = [_Arm(v, units) for v, _ in per_arm]
    sizes = [a.values.size for a in arms]
    names = [a.arm for a in (cand, *ctrls)]
    short = [f"{n} has {s}" for n, s in zip(names, sizes) if s < need]
    guards = []
    if short:
        guards.append(
            f"too few values for a {q_name}: it needs at least {need} per arm, ten beyond it ({'; '.join(short)}); "
            f"run more requests or compare a lower quantile"
        )
    if len(units) < MIN_TRANSCRIPTS:
        guards.append(
            f"too few transcripts for a {q_name}: values within a transcript share its prompt and "
            f"batch, and fewer than {MIN_TRANSCRIPTS} transcripts cannot bound the tail's spread "
            f"(benchmarks/calibration_suite.py); run more transcripts"
        )
    if guards:
        return undecided(
            f"{len(units)} transcripts; {', '.join(f'{n} {s}' for n, s in zip(names, sizes))} values", *guards
        )
    b = quantile(arms[0].values, gate.quantile)
    cs = [quantile(a.values, gate.quantile) for a in arms[1:]]
    clock = "/".join(sorted(clocks)) or "unknown"
    if b <= 0 or min(cs) <= 0:
        return undecided(
            f"{q_name} {what} B {b * 1e3:.3g} ms, controls {', '.join(f'{c * 1e3:.3g}' for c in cs)} ms",
            f"a {q_name} of zero has no ratio (the {clock} clock did not resolve these gaps)",
        )
    # like against like: B's quantile against each control's, each over its own values (equal counts where the
    # arms ran the same requests), so the inverted-CDF quantile's small-sample bias cancels
    c = math.exp(sum(math.log(c) for c in cs) / len(cs))
    quantiles = f"{q_name} {what} B {b * 1e3:.4g} ms vs controls {c * 1e3:.4g} ms"
    n_units = len(units)
    df = n_units - 1
    # the expanded percentile level (module docstring)
    tcrit = float(sps.t.isf(level_one_sided, df))
    level_draws = float(sps.norm.sf(math.sqrt(n_units / df) * tcrit))
    draws_needed = math.ceil(TAIL_DRAWS_BEYOND / level_draws)
    if draws_needed > MAX_TAIL_DRAWS:
        return undecided(
            quantiles,
            f"look {look.number}'s one-sided level {level_one_sided:.3g} is beyond what {MAX_TAIL_DRAWS:,} "
            f"resampling draws resolve in a tail; the gate decides at a later look",
        )
    n_draws = max(BOOTSTRAP_RESAMPLES, draws_needed)
    rng = np.random.default_rng(bootstrap_seed("tail", gate.id))
    logs = []
    for start in range(0, n_draws, CHUNK):
        counts = rng.multinomial(n_units, [1.0 / n_units] * n_units, size=min(CHUNK, n_draws - start))
        qs = [a.at(counts, gate.quantile) for a in arms]
        ok = np.logical_and.reduce([q > 0 for q in qs])
        logs.append(np.log(qs[0][ok]) - np.mean([np.log(q[ok]) for q in qs[1:]], axis=0))
    draws = np.concatenate(logs)
    if draws.size < draws_needed:
        return undecided(
            quantiles,
            f"the resampled {q_name} is zero in {n_draws - draws.size:,} of {n_draws:,} draws, which leaves too few to "
            f"read the interval at {level_draws:.3g} (the {clock} clock did not resolve these gaps)",
        )
    factor = 1.0 + 1.0 / len(ctrls)
    boot_var = factor * gate.boot_sd**2 / max(1, look.number)
    if boot_var > 0:
        draws = draws + math.sqrt(boot_var) * rng.standard_normal(draws.size)
    lo_log, hi_log = np.quantile(draws, [level_draws, 1.0 - level_draws])
    low, high = math.exp(float(lo_log)) - 1.0, math.exp(float(hi_log)) - 1.0
    level = 1.0 - 2.0 * level_one_sided
    interval = f"{level:.1%} interval [{low:+.2%}, {high:+.2%}]"
    boot = (
        f", boot sd {gate.boot_sd:.2%} registered ({look.number} boot(s) per arm)"
        if gate.boot_sd > 0
        else ", no boot sd registered"
    )
    observed = (
        f"{quantiles}: {b / c - 1.0:+.2%} ({interval}, "
        f"percentiles expanded for {df} df; {len(units)} transcripts, {' / '.join(f'{n} {s}' for n, s in zip(names, sizes))} "
        f"values, {clock} clock{boot}; {draws.size:,} draws, read at {level_draws:.3g})"
    )
    bound = gate.margin
    status: Status
    reasons: tuple[str, ...]
    if high < bound:
        status, reasons = "PASS", ()
    elif low > bound:
        status, reasons = (
            "FAIL",
            (f"B's {q_name} {what} is shown worse than the controls' by more than +{bound:.2%} ({interval})",),
        )
    else:
        status, reasons = (
            "INCONCLUSIVE",
            (f"the {interval} straddles +{bound:.2%}: neither no worse nor worse is shown",),
        )
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status=status,
        observed=observed,
        bar=bar,
        noise_floor="-",
        reasons=reasons,
        decides=gate.decides,
    )
