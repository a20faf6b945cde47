"""Speculative verification: the accept rule that turns k drafts into emitted tokens.

Two lossless rules over the same batched inputs, plus the greedy path that
both share:

- `token_verify`: Leviathan et al. (2023). Draft i is accepted with
  probability min(1, p_i(x_i) / q_i(x_i)); the first rejection emits a token
  from the normalised residual max(0, p_i - q_i).
- `block_verify`: Sun et al. (2024), as vLLM's Model Runner V2 kernel does it.
  A cumulative prefix ratio `prefix_joint_i = min(1, prefix_joint_{i-1} *
  p_i(x_i) / q_i(x_i))`, a residual mass `r_i = sum_x max(0, prefix_joint_i *
  p_{i+1}(x) - q_{i+1}(x))`, a threshold `h_i = r_i / (r_i + 1 -
  prefix_joint_i)` (1 where the denominator is 0) and `h_k = prefix_joint_k`;
  the accepted length is the last i with u_i <= h_i, and the correction token
  is drawn from max(0, prefix_joint_tau * p_{tau+1} - q_{tau+1}).
- greedy rows (temperature 0) accept a draft iff it equals the target argmax
  and emit the argmax; the branch comes first, so both methods agree exactly.

Array contract: p is (B, k+1, V) target probabilities with temperature
applied (the last row is the bonus position), q is (B, k, V) draft
probabilities (one-hot for greedy drafts; a reduced-vocabulary draft is
zero outside its candidate columns), draft_tokens is (B, k). Both methods
draw exactly `rng.random((B, k))` then `rng.random(B)` and nothing else,
greedy rows included, so a caller may serve each row from its own generator
and one seed gives one outcome per row where the rules coincide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from gb300lane.errors import EngineError

VerifyMethod = Literal["standard", "block"]

#: The values of `speculative.rejection_sample_method` this module verifies.
VERIFY_METHODS: tuple[str, ...] = ("standard", "block")


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of one verify step for a batch of drafts.

    `accepted[b]` counts the drafts kept on row b (0..k); `tokens[b]` holds
    the emitted tokens (the accepted drafts, then the target's correction or
    bonus token) padded with -1 past `accepted[b] + 1`.
    """

    accepted: np.ndarray
    tokens: np.ndarray

    @property
    def num_emitted(self) -> np.ndarray:
        """Tokens emitted per row: the accepted drafts plus the target's own token."""
        return self.accepted + 1


def _check_inputs(
    p: np.ndarray, q: np.ndarray, draft_tokens: np.ndarray, greedy: bool | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    p = np.asarray(p)
    q = np.asarray(q)
    draft_tokens = np.asarray(draft_tokens)
    if p.ndim != 3:
        raise ValueError(f"p must be (B, k+1, V) target probabilities; got shape {p.shape}")
    batch, k_plus_1, vocab = p.shape
    k = k_plus_1 - 1
    if k < 0:
        raise ValueError("p must have at least one position (the bonus row); got k+1 = 0")
    if q.shape != (batch, k, vocab):
        raise ValueError(f"q must be (B, k, V) = {(batch, k, vocab)} to match p {p.shape}; got {q.shape}")
    if draft_tokens.shape != (batch, k):
        raise ValueError(f"draft_tokens must be (B, k) = {(batch, k)}; got {draft_tokens.shape}")
    if not np.issubdtype(draft_tokens.dtype, np.integer):
        if draft_tokens.size:
            raise ValueError(f"draft_tokens must be integers; got dtype {draft_tokens.dtype}")
        draft_tokens = draft_tokens.astype(np.int64)
    if draft_tokens.size and (draft_tokens.min() < 0 or draft_tokens.max() >= vocab):
        raise ValueError(f"draft_tokens must lie in [0, V={vocab}); got [{draft_tokens.min()}, {draft_tokens.max()}]")
    greedy_rows = np.broadcast_to(np.asarray(greedy, dtype=bool), (batch,))
    return p, q, draft_tokens.astype(np.int64, copy=False), greedy_rows


def _leading_true(mask: np.ndarray) -> np.ndarray:
    """Length of the all-True prefix of each row."""
    if mask.shape[1] == 0:
        return np.zeros(mask.shape[0], dtype=np.int64)
    return np.cumprod(mask, axis=1, dtype=np.int64).sum(axis=1)


def _sample_rows(dist: np.ndarray, u: np.ndarray, fallback) -> np.ndarray:
    """Draw one index per row of non-negative `dist` by inverse CDF.

    The search is per row because a binary search is O(log V) where a
    vectorised comparison would be another pass over V.
    A column of zero mass is never chosen: its CDF equals its left
    neighbour's, so a threshold below it picks the neighbour first. Rows with
    no mass take `fallback(row_indices)` instead.
    """
    # The CDF accumulates in float64 whatever the input precision: a float32 running sum
    # over a 129k vocabulary would bias the tail of the distribution.
    cdf = np.cumsum(dist, axis=1, dtype=np.float64)
    empty = np.flatnonzero(~(cdf[:, -1] > 0.0))
    if empty.size:
        cdf[empty] = np.cumsum(fallback(empty), axis=1)
    out = np.empty(dist.shape[0], dtype=np.int64)
    for row in range(dist.shape[0]):
        out[row] = np.searchsorted(cdf[row], u[row] * cdf[row, -1], side="right")
    return np.minimum(out, dist.shape[1] - 1)


def _residual_rows(p, q, rows, tau, scale) -> np.ndarray:
    """max(0, scale * p_tau - q_tau) per row (p_k itself where tau == k), in p's precision."""
    k = q.shape[1]
    dist = p[rows, tau]
    if k > 0:
        has_draft = tau < k
        if scale is not None and np.any(scale != 1.0):
            dist *= scale[:, None]
        if np.any(has_draft):
            q_rows = q[rows, np.minimum(tau, k - 1)]
            q_rows[~has_draft] = 0.0
            np.subtract(dist, q_rows, out=dist)
            np.maximum(dist, 0.0, out=dist)
    return dist


def _correction(p, q, rows, tau, scale, u, known: list[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """The target's own token for `rows`: from max(0, scale * p_tau - q_tau), or p_k when tau == k.

    `known` carries residuals block verification already computed for its
    accept test, as (local row indices, rows of mass), so they are not
    recomputed. A residual with no mass (the draft covered the target
    exactly, or rounding left nothing) falls back to p_tau itself, which is
    what the residual is proportional to in that limit.
    """
    if not known:
        dist = _residual_rows(p, q, rows, tau, scale)
        return _sample_rows(dist, u, lambda empty: p[rows[empty], tau[empty]])
    # Sampled chunk by chunk: merging into one matrix would cost a copy of every known row.
    out = np.empty(rows.size, dtype=np.int64)
    need = np.ones(rows.size, dtype=bool)
    for idx, mass in known:
        out[idx] = _sample_rows(mass, u[idx], lambda empty, idx=idx: p[rows[idx[empty]], tau[idx[empty]]])
        need[idx] = False
    todo = np.flatnonzero(need)
    if todo.size:
        dist = _residual_rows(p, q, rows[todo], tau[todo], None if scale is None else scale[todo])
        out[todo] = _sample_rows(dist, u[todo], lambda empty: p[rows[todo[empty]], tau[todo[empty]]])
    return out


def _emit(draft_tokens: np.ndarray, accepted: np.ndarray, final: np.ndarray) -> np.ndarray:
    batch, k = draft_tokens.shape
    tokens = np.full((batch, k + 1), -1, dtype=np.int64)
    positions = np.arange(k + 1)[None, :]
    keep = positions[:, :k] < accepted[:, None]
    tokens[:, :k][keep] = draft_tokens[keep]
    tokens[np.arange(batch), accepted] = final
    return tokens


def _greedy_rows(p: np.ndarray, draft_tokens: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = draft_tokens.shape[1]
    # Indexing p by rows would copy it whole; when every row is greedy, don't.
    target_argmax = p.argmax(axis=2) if rows.size == p.shape[0] else p[rows].argmax(axis=2)
    accepted = _leading_true(draft_tokens[rows] == target_argmax[:, :k])
    return accepted, target_argmax[np.arange(rows.size), accepted]


def _drafted_probs(p: np.ndarray, q: np.ndarray, draft_tokens: np.ndarray, rows: np.ndarray):
    k = draft_tokens.shape[1]
    cols = np.arange(k)[None, :]
    toks = draft_tokens[rows]
    r = rows[:, None]
    return p[r, cols, toks].astype(np.float64), q[r, cols, toks].astype(np.float64)


def _run(method: str, p, q, draft_tokens, rng: np.random.Generator, greedy) -> VerifyResult:
    p, q, draft_tokens, greedy_rows = _check_inputs(p, q, draft_tokens, greedy)
    batch, k = draft_tokens.shape
    # Every row draws its uniforms whichever path it takes, so a row's outcome
    # does not depend on which other rows of the batch are greedy.
    u_accept = rng.random((batch, k))
    u_sample = rng.random(batch)
    accepted = np.zeros(batch, dtype=np.int64)
    final = np.zeros(batch, dtype=np.int64)

    g_rows = np.flatnonzero(greedy_rows)
    if g_rows.size:
        accepted[g_rows], final[g_rows] = _greedy_rows(p, draft_tokens, g_rows)

    r_rows = np.flatnonzero(~greedy_rows)
    if r_rows.size:
        if method == "block":
            tau, scale, known = _block_accept(p, q, draft_tokens, r_rows, u_accept[r_rows])
        else:
            tau, scale, known = _token_accept(p, q, draft_tokens, r_rows, u_accept[r_rows]), None, None
        accepted[r_rows] = tau
        final[r_rows] = _correction(p, q, r_rows, tau, scale, u_sample[r_rows], known)
    return VerifyResult(accepted=accepted, tokens=_emit(draft_tokens, accepted, final))


def _token_accept(p, q, draft_tokens, rows, u) -> np.ndarray:
    px, qx = _drafted_probs(p, q, draft_tokens, rows)
    # u * q <= p is u <= p/q without dividing: q(x) = 0 accepts whenever p(x) > 0,
    # and a token the target gives no mass is never accepted.
    return _leading_true((px > 0.0) & (u * qx <= px))


def _prefix_joint(px: np.ndarray, qx: np.ndarray) -> np.ndarray:
    """(R, k+1) prefix_joint_i = min(1, prefix_joint_(i-1) * p(x_i)/q(x_i)), column 0 the empty prefix (1).

    The clamped running product is a Lindley recursion: in logs it is
    S_i - max_(m <= i) S_m with S the cumulative log ratio (S_0 = 0), so it
    needs no loop over positions. A draft the drafter gave no mass divides by
    _TINY instead of 0 (its ratio is then so large that the clamp gives 1, as
    an infinite ratio would); a draft the target gives no mass has log ratio
    -inf, and the prefix stays at 0 from there on.
    """
    ratio = px / np.maximum(qx, _TINY)
    log_ratio = np.full_like(ratio, -np.inf)
    np.log(ratio, out=log_ratio, where=ratio > 0.0)
    cum = np.zeros((px.shape[0], px.shape[1] + 1))
    np.cumsum(log_ratio, axis=1, out=cum[:, 1:])
    return np.exp(cum - np.maximum.accumulate(cum, axis=1))


_TINY = 1e-300

_REJECT, _ACCEPT, _OPEN = 0, 1, 2

#: Open positions x vocabulary up to which all residuals are computed in one batched pass.
_EAGER_ELEMENTS = 1 << 18


def _block_accept(p, q, draft_tokens, rows, u):
    """Accepted length and prefix_joint at it, per row, by Sun et al.'s block rule.

    Most thresholds are decided without the residual mass (a pass over V):
    h_i <= prefix_joint_i always (because r_i <= prefix_joint_i), so u_i >
    prefix_joint_i rejects position i outright, and prefix_joint_i = 1 gives
    h_i = 1. Only open positions above a row's last sure accept need their
    residual: all of them in one batched pass when that is small, otherwise
    the highest open one per row, round by round, until a position passes.
    The result is the eager rule's, exactly, for a fraction of its passes
    over the vocabulary; a passing position's residual is handed on as the
    correction's distribution.
    """
    k = draft_tokens.shape[1]
    n = rows.size
    px, qx = _drafted_probs(p, q, draft_tokens, rows)
    if n * k <= _SCALAR_LIMIT:
        return _block_accept_scalar(p, q, rows, px, qx, u)
    joint = _prefix_joint(px, qx)
    if k == 0:
        return np.zeros(n, dtype=np.int64), joint[:, 0], None
    pj = joint[:, 1:]  # prefix_joint at positions 1..k
    status = np.where(pj >= 1.0, _ACCEPT, np.where((pj > 0.0) & (u <= pj), _OPEN, _REJECT)).astype(np.int8)
    # h_k = prefix_joint_k: the last position never needs a residual. joint_k > 0 keeps a
    # u of exactly 0 from accepting a token the target gives no mass.
    status[:, k - 1] = np.where((u[:, k - 1] <= pj[:, k - 1]) & (pj[:, k - 1] > 0.0), _ACCEPT, _REJECT)
    every = np.arange(n)
    known: list[tuple[np.ndarray, np.ndarray]] = []
    # Open positions below a row's last sure accept cannot change its accepted length.
    accepted_cols = status == _ACCEPT
    floor = np.where(accepted_cols.any(axis=1), k - 1 - np.argmax(accepted_cols[:, ::-1], axis=1), -1)
    open_r, open_c = np.nonzero((status == _OPEN) & (np.arange(k)[None, :] > floor[:, None]))
    if open_r.size and open_r.size * p.shape[2] <= _EAGER_ELEMENTS:
        # Few, short rows: one batched pass over every open position costs less than
        # numpy's per-call overhead of deciding them a round at a time.
        mass = p[rows[open_r], open_c + 1]
        mass *= pj[open_r, open_c][:, None]
        np.subtract(mass, q[rows[open_r], open_c + 1], out=mass)
        np.maximum(mass, 0.0, out=mass)
        residual = mass.sum(axis=1, dtype=np.float64)
        passed = u[open_r, open_c] <= residual / (residual + 1.0 - pj[open_r, open_c])
        status[open_r, open_c] = np.where(passed, _ACCEPT, _REJECT)
        live = status != _REJECT
        last = k - 1 - np.argmax(live[:, ::-1], axis=1)
        mine = passed & (open_c == last[open_r])
        if np.any(mine):
            known.append((open_r[mine], mass[mine]))
    while True:
        live = status != _REJECT
        last = k - 1 - np.argmax(live[:, ::-1], axis=1)
        pending = np.flatnonzero(live.any(axis=1) & (status[every, last] == _OPEN))
        if pending.size == 0:
            break
        col = last[pending]
        pos = col + 1  # 1-based position i; p[:, i] and q[:, i] are the distributions after i drafts
        mass = p[rows[pending], pos]
        mass *= pj[pending, col][:, None]
        np.subtract(mass, q[rows[pending], pos], out=mass)
        np.maximum(mass, 0.0, out=mass)
        residual = mass.sum(axis=1, dtype=np.float64)
        h = residual / (residual + 1.0 - pj[pending, col])
        passed = u[pending, col] <= h
        status[pending, col] = np.where(passed, _ACCEPT, _REJECT)
        if np.any(passed):  # a passing position's residual is the correction's distribution
            known.append((pending[passed], mass[passed]))
    live = status != _REJECT
    tau = np.where(live.any(axis=1), k - np.argmax(live[:, ::-1], axis=1), 0).astype(np.int64)
    return tau, joint[every, tau], known


#: Below this many draft positions per call, per-row Python arithmetic beats numpy's per-call overhead.
_SCALAR_LIMIT = 48


def _residual_mass(p, q, row: int, pos: int, joint: float) -> np.ndarray:
    mass = p[row, pos].copy()
    mass *= joint
    np.subtract(mass, q[row, pos], out=mass)
    np.maximum(mass, 0.0, out=mass)
    return mass


def _block_accept_scalar(p, q, rows, px, qx, u):
    """`_block_accept` for small batches, row by row: the same rule and the same pruning."""
    n, k = px.shape
    tau = np.zeros(n, dtype=np.int64)
    at_tau = np.ones(n)
    known: list[tuple[np.ndarray, np.ndarray]] = []
    for r, (pr, qr, ur) in enumerate(zip(px.tolist(), qx.tolist(), u.tolist())):
        joint, joints = 1.0, [1.0]
        for a, b in zip(pr, qr):
            if joint > 0.0:
                joint = 0.0 if a <= 0.0 else min(1.0, joint * a / max(b, _TINY))
            joints.append(joint)
        if k and ur[k - 1] <= joints[k] and joints[k] > 0.0:
            tau[r] = k
        else:
            for i in range(k - 1, 0, -1):
                pj = joints[i]
                if pj >= 1.0:
                    tau[r] = i
                    break
                if pj <= 0.0 or ur[i - 1] > pj:
                    continue
                mass = _residual_mass(p, q, int(rows[r]), i, pj)
                residual = float(mass.sum())
                if ur[i - 1] <= residual / (residual + 1.0 - pj):
                    tau[r] = i
                    known.append((np.array([r]), mass[None, :]))
                    break
        at_tau[r] = joints[tau[r]]
    return tau, at_tau, known


def token_verify(p, q, draft_tokens, rng: np.random.Generator, *, greedy: bool | np.ndarray = False) -> VerifyResult:
    """Token-by-token verification (Leviathan et al. 2023); greedy rows accept iff draft == argmax p."""
    return _run("standard", p, q, draft_tokens, rng, greedy)


def block_verify(p, q, draft_tokens, rng: np.random.Generator, *, greedy: bool | np.ndarray = False) -> VerifyResult:
    """Block verification (Sun et al. 2024); greedy rows accept iff draft == argmax p."""
    return _run("block", p, q, draft_tokens, rng, greedy)


def verify(
    method: str, p, q, draft_tokens, rng: np.random.Generator, *, greedy: bool | np.ndarray = False
) -> VerifyResult:
    """Verify with the rule named by `speculative.rejection_sample_method` ("standard" or "block")."""
    if method not in VERIFY_METHODS:
        raise EngineError(
            f"speculative.rejection_sample_method = {method!r} cannot be verified losslessly here; "
            f"use one of {', '.join(VERIFY_METHODS)}"
        )
    return _run(method, p, q, draft_tokens, rng, greedy)
