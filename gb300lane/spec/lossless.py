"""Losslessness at the served temperature: is a lane's text distributed as its target model samples it?

A referee (any engine that runs the target without the sampler under test: a prefill pass with
`prompt_logprobs`) gives, for each generated token after the first, the target's raw log-probability of the
token that was sampled, its rank, and the top-k raw log-probabilities (k <= 20). This module turns those into
one verdict, pure: arrays in, a `LosslessResult` out.

The test. Order the target's distribution by descending probability and lump every token outside the top-k
into one *tail* category carrying the remaining mass. The randomized probability integral transform of the
sampled category c, u = F(c-1) + V * P(c) with V ~ U(0,1) independent, is U(0,1) given the past when the token
was sampled exactly from that distribution; over a transcript the u's are iid U(0,1) (Rosenblatt), whatever
the dependence between its tokens. So three exact or asymptotic tests follow, each two-sided:

- mean: Z = sum Phi^-1(u) / sqrt(N) ~ N(0, 1) exactly (Stouffer over transcripts with weights sqrt(n_i));
  too greedy a sampler gives small u (Z < 0), too flat a sampler large u (Z > 0);
- dispersion: sum Phi^-1(u)^2 ~ chi-square(N) exactly (a sampler whose errors cancel in the mean);
- top-1 calibration: the top token is sampled at rate mean(p_max); sum(I - p_max) / sqrt(sum p_max (1 - p_max))
  ~ N(0, 1) by the martingale CLT.

The check's p is the Bonferroni minimum of the three (3 * min p, capped at 1), so its false-FAIL rate is at
most `alpha` under exact sampling; `benchmarks/lossless_calibration.py` measures it and the power.

When the distribution is determined. At temperature 1 and top_p 1 the category distribution is the referee's
raw one, exactly: every token counts, tail tokens too. At temperature T != 1 the tempered tail mass
sum_tail p^(1/T) depends on the tail's unseen shape, so the full distribution is not determined; the
distribution *conditional on the token being in the top-k* is (p_i^(1/T) / sum_topk p_j^(1/T)), exactly, and
the test uses it: a token outside the top-k is left out (conditioning on an event keeps the rest iid
uniform) and counted under `tail_tokens`. A top_p < 1 keeps the tokens whose more-probable mass is below
top_p (vLLM's rule); the nucleus boundary inside the top-k needs the normaliser, which is bounded (each tail
token is at most as likely as the k-th, the tail's raw mass is known; with `vocab_size` unknown the tail may
be spread without limit); a token whose nucleus boundary these bounds do not fix (within `nucleus_tol` of
top_p) is left out and counted as `undetermined_tokens`. A token sampled where the bounds put it surely
outside the nucleus (more-probable mass >= top_p + `nucleus_tol`) is impossible under exact sampling: each
is counted under `outside_nucleus` and the check FAILs on any.

The effect. `t_eff` is the maximum-likelihood temperature at which the referee's distribution (restricted to
each token's top-k, within the nucleus: exact at every temperature) best explains the sampled tokens, "samples
as if at temperature 0.93"; its interval is Wald with a cluster-robust (sandwich) variance over transcripts,
since a transcript's tokens share a prompt. It is reported against the served temperature (`t_ratio` =
t_eff / T). Per class always; per position in the verify block only where the engine says which position
emitted each token (the embedded engine does; vLLM does not): a token index mod (k + 1) is *not* a block position
(a rejection ends a block early), so without the engine's positions nothing per position is reported. A FAIL names
the class and the position that stray furthest.

The decision. INCONCLUSIVE below `min_tokens` scored tokens or two transcripts. FAIL on any token outside the
nucleus, or when p < alpha and the deviation is not shown to be within the margin: the check passes a
detected deviation only when the 1 - alpha interval of t_ratio lies inside [1 - margin, 1 + margin] and the
top-1 rate's observed/expected ratio lies inside it too (a referee that runs the target in other numerics,
bf16 or another batch shape, differs from the sampler by tiny amounts that a large window detects). PASS
otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from gb300lane.spec.lossless_result import LosslessResult, TempDifference, TempEstimate

#: What a detected deviation must be to FAIL: any not shown within the margin, or only one shown beyond it.
FailWhen = Literal["detected", "beyond_margin"]

#: vLLM's default ceiling on logprobs and prompt_logprobs (`--max-logprobs`).
MAX_TOP_K = 20
#: Newton's bounds on 1 / T_eff (a temperature between 0.02 and 20).
_THETA_BOUNDS = (0.05, 50.0)


@dataclass(frozen=True)
class ScoredTranscript:
    """One transcript's generated tokens (after the first), as the referee scored them.

    `top_logprobs[t]` holds the target's raw top-k log-probabilities at token t in descending order, padded
    with -inf where fewer than k came back; `sampled_rank[t]` is the sampled token's 1-based rank in the
    target's distribution (> k when it lies outside the top-k), `sampled_logprob[t]` its raw log-probability;
    `positions[t]`, when the engine reports it, the 0-based position in the verify block that emitted it.
    """

    klass: str
    sampled_rank: npt.NDArray[np.int64]
    sampled_logprob: npt.NDArray[np.float64]
    top_logprobs: npt.NDArray[np.float64]
    positions: npt.NDArray[np.int64] | None = None
    label: str = ""
    #: Rows sampled with a token banned (EOS under min_tokens), that token already taken out of `top_logprobs`:
    #: the tail's mass is then not known, so these rows count only inside the top-k (None: no row).
    conditional: npt.NDArray[np.bool_] | None = None

    def __post_init__(self) -> None:
        n = len(self.sampled_rank)
        if self.top_logprobs.ndim != 2 or self.top_logprobs.shape[0] != n or len(self.sampled_logprob) != n:
            raise ValueError(
                f"transcript {self.label or self.klass!r}: {n} ranks, {len(self.sampled_logprob)} logprobs and "
                f"top_logprobs of shape {self.top_logprobs.shape}; each needs one row per scored token"
            )
        if not 1 <= self.top_logprobs.shape[1] <= MAX_TOP_K:
            raise ValueError(
                f"transcript {self.label or self.klass!r}: top-k of {self.top_logprobs.shape[1]}; "
                f"the check reads 1 to {MAX_TOP_K} top log-probabilities"
            )
        if self.positions is not None and len(self.positions) != n:
            raise ValueError(f"transcript {self.label or self.klass!r}: {len(self.positions)} positions for {n} tokens")


@dataclass
class _Token:
    """The per-token arrays the tests read, after the distribution is formed (internal)."""

    u: list[npt.NDArray[np.float64]] = field(default_factory=list)
    top1: list[npt.NDArray[np.float64]] = field(default_factory=list)
    p1: list[npt.NDArray[np.float64]] = field(default_factory=list)
    logits: list[npt.NDArray[np.float64]] = field(default_factory=list)  # (n, k) raw logprobs in the set, -inf out
    chosen: list[npt.NDArray[np.int64]] = field(default_factory=list)  # index in the set (for T_eff), -1 out of it
    cls: list[str] = field(default_factory=list)
    pos: list[npt.NDArray[np.int64] | None] = field(default_factory=list)


def _tail_bounds(
    top: npt.NDArray[np.float64], theta: float, vocab_size: int | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Bounds on each row's tempered tail mass sum_tail p^theta, given the tail's raw mass and that every tail
    token is at most as probable as the k-th (rows: tokens)."""
    p = np.exp(top)
    r = np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
    pk = np.where(np.isfinite(top), p, np.inf).min(axis=1)
    pk = np.where(np.isfinite(pk) & (pk > 0), pk, 1e-300)
    whole = np.floor(r / pk)
    concentrated = whole * pk**theta + (r - whole * pk) ** theta
    n_tail = None if vocab_size is None else max(vocab_size - top.shape[1], 1)
    if theta == 1.0:  # untempered: the tail's mass is its raw mass, known
        return r, r
    if theta > 1.0:  # convex: the spread tail is smallest
        low = np.zeros_like(r) if n_tail is None else n_tail * (r / n_tail) ** theta
        return low, concentrated
    high = np.full_like(r, np.inf) if n_tail is None else n_tail ** (1 - theta) * r**theta
    return concentrated, high


def _form(
    tr: ScoredTranscript,
    temperature: float,
    top_p: float,
    nucleus_tol: float,
    vocab_size: int | None,
    rng: np.random.Generator,
    acc: _Token,
) -> tuple[int, int, int]:
    """Form each token's distribution at (temperature, top_p), draw its randomized PIT, append what counts.

    Returns (tail tokens, undetermined tokens, outside-nucleus tokens) of the transcript.
    """
    top = np.asarray(tr.top_logprobs, dtype=np.float64)
    n, k = top.shape
    rank = np.asarray(tr.sampled_rank, dtype=np.int64)
    in_top = rank <= k
    cat = np.where(in_top, rank - 1, k)
    theta = 1.0 / temperature
    exact = temperature == 1.0 and top_p >= 1.0
    if exact:
        p = np.exp(top)
        tail = np.clip(1.0 - p.sum(axis=1), 0.0, None)
        probs = np.concatenate([p, tail[:, None]], axis=1)
        cond = np.zeros(n, dtype=bool) if tr.conditional is None else np.asarray(tr.conditional, dtype=bool)
        probs[cond, k] = 0.0  # a banned token's mass is not known: these rows count inside the top-k only
        probs /= probs.sum(axis=1, keepdims=True)
        keep = ~(cond & ~in_top)
        set_size = np.full(n, k)
        tail_n, undetermined, outside = int((~in_top).sum()), 0, 0
    else:
        w = np.exp(theta * (top - top[:, :1]))  # tempered, up to the row's scale exp(theta * top_1)
        w = np.where(np.isfinite(top), w, 0.0)
        set_size = np.full(n, k)
        undetermined_row = np.zeros(n, dtype=bool)
        outside_row = np.zeros(n, dtype=bool)
        if top_p < 1.0:
            lo, hi = _tail_bounds(top, theta, vocab_size)
            scale = np.exp(theta * top[:, :1])[:, 0]  # back to absolute tempered masses
            w_abs = w * scale[:, None]
            prefix = np.cumsum(w_abs, axis=1) - w_abs  # more-probable mass before each top-k token
            wk = w_abs.sum(axis=1)
            z_lo, z_hi = wk + lo, wk + hi
            surely_kept = prefix / z_lo[:, None] < top_p - nucleus_tol
            surely_out = prefix / z_hi[:, None] >= top_p + nucleus_tol
            m_lo = surely_kept.sum(axis=1)
            m_hi = k - surely_out.sum(axis=1)
            undetermined_row = m_lo != m_hi
            set_size = np.where(undetermined_row, k, m_lo)
            outside_row = ~undetermined_row & (rank > set_size) & (set_size < k)
        cols = np.arange(k)[None, :]
        w = np.where(cols < set_size[:, None], w, 0.0)
        probs = w / w.sum(axis=1, keepdims=True)
        in_set = rank <= set_size
        keep = in_set & ~undetermined_row
        tail_n = int((~in_top & ~undetermined_row & ~outside_row).sum())
        undetermined, outside = int(undetermined_row.sum()), int(outside_row.sum())
        probs = np.concatenate([probs, np.zeros((n, 1))], axis=1)
    cat_k = np.minimum(cat, probs.shape[1] - 1)
    cdf_before = np.cumsum(probs, axis=1) - probs
    rows = np.arange(n)
    v = rng.random(n)
    u = cdf_before[rows, cat_k] + v * probs[rows, cat_k]
    u = np.clip(u, 1e-12, 1 - 1e-12)
    acc.u.append(u[keep])
    acc.top1.append((rank[keep] == 1).astype(np.float64))
    acc.p1.append(probs[keep, 0])
    logits = np.where(np.arange(k)[None, :] < set_size[:, None], top, -np.inf)
    acc.logits.append(logits[keep])
    acc.chosen.append(np.where(in_top, rank - 1, -1)[keep])
    acc.cls.append(tr.klass)
    acc.pos.append(None if tr.positions is None else np.asarray(tr.positions)[keep])
    return tail_n, undetermined, outside


def _theta_mle(
    logits: Sequence[npt.NDArray[np.float64]],
    chosen: Sequence[npt.NDArray[np.int64]],
    theta0: float,
) -> tuple[float, float, float, int]:
    """(theta_hat, total information, cluster-robust variance of theta_hat, tokens) of the conditional-on-set
    likelihood sum_t [theta l_c - logsumexp_j theta l_j], one cluster per array."""
    rows = [(lg[c >= 0], c[c >= 0]) for lg, c in zip(logits, chosen, strict=True)]
    rows = [(lg, c) for lg, c in rows if len(c)]
    if not rows:
        return float("nan"), 0.0, float("nan"), 0
    lg_all = np.concatenate([lg for lg, _ in rows])
    c_all = np.concatenate([c for _, c in rows])
    cluster = np.concatenate([np.full(len(c), i) for i, (_, c) in enumerate(rows)])
    finite = np.isfinite(lg_all)
    l_safe = np.where(finite, lg_all, 0.0)
    l_c = lg_all[np.arange(len(c_all)), c_all]

    def moments(theta: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        a = np.where(finite, theta * l_safe, -np.inf)
        a = a - a.max(axis=1, keepdims=True)
        w = np.exp(a)
        w /= w.sum(axis=1, keepdims=True)
        mean = (w * l_safe).sum(axis=1)
        var = (w * (l_safe - mean[:, None]) ** 2).sum(axis=1)
        return l_c - mean, var

    # The log-likelihood is concave in theta (its second derivative is minus a variance), so its score falls
    # monotonically: bisect it on log theta within the bounds (Newton from theta0 can overshoot a flat region).
    del theta0
    lo, hi = np.log(_THETA_BOUNDS[0]), np.log(_THETA_BOUNDS[1])
    if float(moments(float(np.exp(hi)))[0].sum()) >= 0:
        theta = float(np.exp(hi))
    elif float(moments(float(np.exp(lo)))[0].sum()) <= 0:
        theta = float(np.exp(lo))
    else:
        for _ in range(64):
            mid = (lo + hi) / 2
            if float(moments(float(np.exp(mid)))[0].sum()) > 0:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-9:
                break
        theta = float(np.exp((lo + hi) / 2))
    score, var = moments(theta)
    info = float(var.sum())
    u_cluster = np.bincount(cluster, weights=score, minlength=len(rows))
    robust = float((u_cluster**2).sum()) / info**2 if info > 0 else float("nan")
    return theta, info, robust, len(c_all)


def _estimate(
    acc: _Token,
    idx: Sequence[tuple[int, npt.NDArray[np.bool_] | None]],
    temperature: float,
    z_crit: float,
) -> TempEstimate:
    """The effect over the chosen (transcript, token mask) pairs."""
    u = [acc.u[i] if m is None else acc.u[i][m] for i, m in idx]
    n = int(sum(len(x) for x in u))
    if n == 0:
        return TempEstimate(
            tokens=0,
            transcripts=0,
            t_eff=None,
            t_low=None,
            t_high=None,
            t_ratio=None,
            top1_observed=None,
            top1_expected=None,
            z_mean=None,
        )
    from scipy.stats import norm

    lgs = [acc.logits[i] if m is None else acc.logits[i][m] for i, m in idx]
    chs = [acc.chosen[i] if m is None else acc.chosen[i][m] for i, m in idx]
    theta, _info, var, _ = _theta_mle(lgs, chs, 1.0 / temperature)
    t_eff = t_low = t_high = None
    if np.isfinite(theta):
        t_eff = 1.0 / theta
        if np.isfinite(var) and var > 0:
            half = z_crit * float(np.sqrt(var))
            t_high = 1.0 / max(theta - half, 1e-9)
            t_low = 1.0 / (theta + half)
    top1 = np.concatenate([acc.top1[i] if m is None else acc.top1[i][m] for i, m in idx])
    p1 = np.concatenate([acc.p1[i] if m is None else acc.p1[i][m] for i, m in idx])
    z = float(norm.ppf(np.concatenate(u)).sum() / np.sqrt(n))
    return TempEstimate(
        tokens=n,
        transcripts=sum(1 for x in u if len(x)),
        t_eff=t_eff,
        t_low=t_low,
        t_high=t_high,
        t_ratio=None if t_eff is None else t_eff / temperature,
        top1_observed=float(top1.mean()),
        top1_expected=float(p1.mean()),
        z_mean=z,
    )


def check(
    transcripts: Sequence[ScoredTranscript],
    *,
    temperature: float,
    top_p: float = 1.0,
    alpha: float = 0.01,
    margin: float = 0.05,
    min_tokens: int = 200,
    nucleus_tol: float = 0.01,
    vocab_size: int | None = None,
    seed: int = 0,
    fail_when: FailWhen = "detected",
) -> LosslessResult:
    """The losslessness check of one window's scored transcripts at the served (temperature, top_p).

    `seed` seeds the PIT's randomization (independent of the data, so any seed gives an exact test; a fixed
    one makes a re-score reproduce the verdict). `fail_when`: "detected" FAILs a detected deviation not shown
    within the margin (a card's gate); "beyond_margin" FAILs only one shown larger than the margin (T_eff / T or
    the top-1 ratio with its whole interval outside 1 +- margin) and PASSes a smaller one, saying so: a smoke's
    bar, which must catch a broken sampler on a short window and not flag a lane whose sampling differs from
    its own prefill by a few percent (the real lane's CPU build, with or without speculative decoding).
    """
    from scipy.stats import chi2, norm

    if temperature <= 0:
        raise ValueError(
            f"temperature {temperature}: the check reads a sampled window (temperature > 0); "
            "greedy outputs are checked by the parity gate"
        )
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p {top_p}: must be in (0, 1]")
    rng = np.random.default_rng(seed)
    acc = _Token()
    tail_n = undetermined = outside = 0
    for tr in transcripts:
        a, b, c = _form(tr, temperature, top_p, nucleus_tol, vocab_size, rng, acc)
        tail_n, undetermined, outside = tail_n + a, undetermined + b, outside + c
    exact = temperature == 1.0 and top_p >= 1.0
    z_crit = float(norm.ppf(1 - alpha / 2))
    all_idx: list[tuple[int, npt.NDArray[np.bool_] | None]] = [(i, None) for i in range(len(acc.u))]
    overall = _estimate(acc, all_idx, temperature, z_crit)
    per_class = {
        klass: _estimate(acc, [(i, None) for i in range(len(acc.u)) if acc.cls[i] == klass], temperature, z_crit)
        for klass in sorted(set(acc.cls))
    }
    per_position: dict[str, TempEstimate] | None = None
    if acc.pos and all(p is not None for p in acc.pos):
        positions = sorted({int(x) for p in acc.pos if p is not None for x in p})
        per_position = {
            str(j): _estimate(
                acc, [(i, np.asarray(p) == j) for i, p in enumerate(acc.pos) if p is not None], temperature, z_crit
            )
            for j in positions
        }
        note = "per verify-block position, as the engine reported each token's position"
    else:
        note = (
            "not reported: the engine did not say which block position emitted each token, and a token's "
            "index mod (k + 1) is not its position (a rejection ends a block early)"
        )
    test = (
        f"randomized PIT of each token (descending probability, top-k + tail), iid U(0,1) under exact sampling; "
        f"Bonferroni of the mean (Stouffer Z), dispersion (chi-square) and top-1 calibration tests, "
        f"false-FAIL <= alpha = {alpha}; FAIL also needs t_eff/T or the top-1 ratio outside 1 +- {margin}"
    )
    n = overall.tokens
    base = dict(
        test=test,
        temperature=temperature,
        top_p=top_p,
        alpha=alpha,
        margin=margin,
        exact=exact,
        tokens_scored=n,
        transcripts=overall.transcripts,
        tail_tokens=tail_n,
        undetermined_tokens=undetermined,
        outside_nucleus=outside,
        overall=overall,
        per_class=per_class,
        per_position=per_position,
        per_position_note=note,
    )
    if n == 0 or overall.transcripts < 2 or n < min_tokens:
        return LosslessResult(
            status="INCONCLUSIVE",
            statistic=None,
            p=None,
            p_mean=None,
            p_dispersion=None,
            p_top1=None,
            reason=f"{n} tokens scored in {overall.transcripts} transcripts; the check needs >= {min_tokens} "
            "tokens in >= 2 transcripts (a longer window, or more requests)",
            **base,
        )
    s = norm.ppf(np.concatenate(acc.u))
    z = float(s.sum() / np.sqrt(n))
    p_mean = float(2 * norm.sf(abs(z)))
    q = float((s**2).sum())
    p_disp = float(min(1.0, 2 * min(chi2.cdf(q, n), chi2.sf(q, n))))
    top1 = np.concatenate(acc.top1)
    p1 = np.concatenate(acc.p1)
    vv = float((p1 * (1 - p1)).sum())
    z1 = float((top1 - p1).sum() / np.sqrt(vv)) if vv > 0 else 0.0
    p_top1 = float(2 * norm.sf(abs(z1)))
    p = float(min(1.0, 3 * min(p_mean, p_disp, p_top1)))
    stats = dict(statistic=z, p=p, p_mean=p_mean, p_dispersion=p_disp, p_top1=p_top1)
    effect = _describe(overall, temperature)
    if outside:
        return LosslessResult(
            status="FAIL",
            reason=f"{outside} tokens sampled outside the top_p={top_p} nucleus "
            f"(impossible under exact sampling); {effect}",
            **stats,
            **base,
        )
    if p >= alpha:
        return LosslessResult(
            status="PASS", reason=f"no deviation at alpha={alpha} (p={p:.3g}, {n} tokens); {effect}", **stats, **base
        )
    if _within_margin(overall, margin, z_crit):
        return LosslessResult(
            status="PASS",
            reason=f"a deviation is detected (p={p:.3g}) but shown within the margin {margin}; {effect}",
            **stats,
            **base,
        )
    if fail_when == "beyond_margin" and not _beyond_margin(overall, margin, z_crit):
        return LosslessResult(
            status="PASS",
            reason=f"a deviation is detected (p={p:.3g}) but not shown beyond the margin {margin} (this bar FAILs "
            f"only a deviation shown larger); {effect}",
            **stats,
            **base,
        )
    worst = _worst_class(per_class, temperature)
    where = _worst_position(per_position, temperature)
    return LosslessResult(
        status="FAIL",
        reason=f"not the target's distribution (p={p:.3g}, {n} tokens): {effect}"
        + (f"; most off: class {worst}" if worst else "")
        + (f"; most off: block position {where}" if where else ""),
        **stats,
        **base,
    )


def _beyond_margin(est: TempEstimate, margin: float, z_crit: float) -> bool:
    """Whether the t_eff interval or the top-1 ratio's interval lies wholly outside 1 +- margin."""
    if est.t_low is not None and est.t_high is not None and est.t_eff:
        t = est.t_ratio or 1.0
        lo, hi = est.t_low / est.t_eff * t, est.t_high / est.t_eff * t
        if lo > 1 + margin or hi < 1 - margin:
            return True
    e = est.top1_expected
    if e and est.top1_observed is not None and 0 < e < 1:
        se = float(np.sqrt(e * (1 - e) / max(est.tokens, 1)))
        lo, hi = (est.top1_observed - z_crit * se) / e, (est.top1_observed + z_crit * se) / e
        if lo > 1 + margin or hi < 1 - margin:
            return True
    return False


def _within_margin(est: TempEstimate, margin: float, z_crit: float) -> bool:
    """Whether the t_eff interval and the top-1 ratio's interval both lie within 1 +- margin."""
    if est.t_low is None or est.t_high is None or est.top1_expected in (None, 0.0) or est.top1_observed is None:
        return False
    t = est.t_ratio or 1.0
    ratio_lo, ratio_hi = est.t_low / (est.t_eff or 1.0) * t, est.t_high / (est.t_eff or 1.0) * t
    if not (1 - margin <= ratio_lo and ratio_hi <= 1 + margin):
        return False
    e = est.top1_expected
    se = float(np.sqrt(e * (1 - e) / max(est.tokens, 1)))
    lo, hi = (est.top1_observed - z_crit * se) / e, (est.top1_observed + z_crit * se) / e
    return 1 - margin <= lo and hi <= 1 + margin


def _describe(est: TempEstimate, temperature: float) -> str:
    """'samples as if at temperature 0.93 (0.90-0.96) served at 1; top token 61.0% vs 58.2% expected'.

    A sampler that is off the target's distribution in a way no temperature describes (an interval that runs to
    the estimator's bound, or a top-token rate far from the expected where the temperature's interval holds the
    served one: the tokens are neither sharper nor flatter than the target's, just not its) is named as such first.
    """
    parts = []
    unexplained = False
    if est.t_eff is not None:
        t_min, t_max = 1.0 / _THETA_BOUNDS[1], 1.0 / _THETA_BOUNDS[0]
        hi = est.t_high
        iv = (
            f" ({est.t_low:.3g}-{'inf' if hi > 100 * t_max else f'{hi:.3g}'})"
            if est.t_low is not None and hi is not None
            else ""
        )
        parts.append(f"samples as if at temperature {est.t_eff:.3g}{iv}, served at {temperature:g}")
        at_bound = est.t_eff >= 0.99 * t_max or est.t_eff <= 1.01 * t_min or (hi is not None and hi > 100 * t_max)
        covers = est.t_low is not None and hi is not None and est.t_low <= temperature <= hi
        ratio = (est.top1_observed / est.top1_expected) if est.top1_observed is not None and est.top1_expected else 1.0
        unexplained = at_bound or (covers and not 0.8 <= ratio <= 1.25)
    if est.top1_observed is not None and est.top1_expected is not None:
        parts.append(f"top token {100 * est.top1_observed:.1f}% vs {100 * est.top1_expected:.1f}% expected")
    if unexplained:
        parts.insert(0, "no temperature explains the sampled tokens")
    return "; ".join(parts) or "no effect estimate"


def _worst_position(per_position: dict[str, TempEstimate] | None, temperature: float) -> str:
    """The verify-block position whose tokens stray furthest from the target's (in standard errors: the PIT mean's
    Z, or the top-token rate's against the rate expected), with two or more positions reported."""
    if not per_position or len(per_position) < 2:
        return ""

    def strays(e: TempEstimate) -> float:
        z = abs(e.z_mean or 0.0)
        if e.top1_observed is not None and e.top1_expected and 0 < e.top1_expected < 1 and e.tokens:
            se = float(np.sqrt(e.top1_expected * (1 - e.top1_expected) / e.tokens))
            z = max(z, abs(e.top1_observed - e.top1_expected) / se)
        return z

    pos, est = max(
        ((k, e) for k, e in per_position.items() if k != "0"), key=lambda x: strays(x[1]), default=("", None)
    )
    if est is None:
        return ""
    return f"{pos} ({strays(est):.1f} standard errors off: {_describe(est, temperature)})"


def _worst_class(per_class: dict[str, TempEstimate], temperature: float) -> str:
    """The class whose t_eff is furthest from the served temperature (with two or more classes)."""
    if len(per_class) < 2:
        return ""
    scored = [(abs((e.t_ratio or 1.0) - 1), k, e) for k, e in per_class.items() if e.t_ratio is not None]
    if not scored:
        return ""
    _, klass, est = max(scored)
    return f"{klass} ({_describe(est, temperature)})"


def t_difference(b: TempEstimate, control: TempEstimate, *, alpha: float = 0.01) -> TempDifference:
    """t_ratio(B) - t_ratio(control), its Wald interval from each arm's own interval (arms independent)."""
    from scipy.stats import norm

    parts = (b.t_ratio, b.t_low, b.t_high, control.t_ratio, control.t_low, control.t_high)
    if any(x is None for x in parts):
        return TempDifference(difference=None, low=None, high=None)
    z = float(norm.ppf(1 - alpha / 2))
    z_arm = z  # each arm's interval was formed at the same alpha
    se_b = ((b.t_high or 0.0) - (b.t_low or 0.0)) / (2 * z_arm) / (b.t_eff or 1.0) * (b.t_ratio or 1.0)
    se_c = (
        ((control.t_high or 0.0) - (control.t_low or 0.0))
        / (2 * z_arm)
        / (control.t_eff or 1.0)
        * (control.t_ratio or 1.0)
    )
    d = (b.t_ratio or 0.0) - (control.t_ratio or 0.0)
    half = z * float(np.hypot(se_b, se_c))
    return TempDifference(difference=d, low=d - half, high=d + half)


def simulate_transcripts(
    rng: np.random.Generator,
    *,
    transcripts: int,
    tokens: int,
    vocab: int = 400,
    top_k: int = 20,
    sample_temperature: float = 1.0,
    top_p: float = 1.0,
    klass: str = "chat",
    concentration: float = 1.5,
) -> list[ScoredTranscript]:
    """Synthetic referee scores: per token a target distribution over `vocab` tokens (Zipf-like logits with a
    random depth), the token drawn at `sample_temperature` from the raw logits (the served temperature: exact). The instrument check of `check` and its calibration benchmark use it."""
    out = []
    for i in range(transcripts):
        logits = rng.gumbel(size=(tokens, vocab)) * concentration
        logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        theta = 1.0 / sample_temperature
        a = theta * logp
        a -= a.max(axis=1, keepdims=True)
        w = np.exp(a)
        w /= w.sum(axis=1, keepdims=True)
        order = np.argsort(-logp, axis=1)
        if top_p < 1.0:  # vLLM's nucleus: keep a token while the more-probable mass is below top_p
            ws = np.take_along_axis(w, order, axis=1)
            kept = (np.cumsum(ws, axis=1) - ws) < top_p
            ws = np.where(kept, ws, 0.0)
            w = np.zeros_like(w)
            np.put_along_axis(w, order, ws, axis=1)
            w /= w.sum(axis=1, keepdims=True)
        cdf = np.cumsum(w, axis=1)
        draw = (cdf < rng.random(tokens)[:, None]).sum(axis=1).clip(max=vocab - 1)
        rank = np.argsort(order, axis=1)[np.arange(tokens), draw] + 1
        top = np.take_along_axis(logp, order[:, :top_k], axis=1)
        out.append(
            ScoredTranscript(
                klass=klass,
                sampled_rank=rank.astype(np.int64),
                sampled_logprob=logp[np.arange(tokens), draw],
                top_logprobs=top,
                label=f"{klass}-{i}",
            )
        )
    return out
