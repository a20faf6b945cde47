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

Where the compiled kernels are built (`kernels.py`, `_kernels.c`), the
accept tests and the correction draw run there in fused passes; the numpy
paths below stay as the definition and the fallback. Sampling is the same
bit for bit; block verification's residual sums are grouped differently, so
a draw within a few roundings of a threshold could be decided differently
(`tests/spec/test_kernels.py` holds the two to the same tokens).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from gb300lane.errors import EngineError
from gb300lane.spec import kernels as _kernels


@functools.lru_cache(maxsize=8)
def _zeros(vocab: int, dtype: np.dtype) -> np.ndarray:
    """A read-only zero row: np.maximum against an array runs vectorised, against a scalar it does not."""
    zeros = np.zeros(vocab, dtype=dtype)
    zeros.flags.writeable = False
    return zeros


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
    if draft_tokens.dtype.kind not in "iu":  # not an integer dtype
        if draft_tokens.size:
            raise ValueError(f"draft_tokens must be integers; got dtype {draft_tokens.dtype}")
        draft_tokens = draft_tokens.astype(np.int64)
    if draft_tokens.size and (draft_tokens.min() < 0 or draft_tokens.max() >= vocab):
        raise ValueError(f"draft_tokens must lie in [0, V={vocab}); got [{draft_tokens.min()}, {draft_tokens.max()}]")
    if isinstance(greedy, np.ndarray) and greedy.dtype == bool and greedy.shape == (batch,):
        greedy_rows = greedy  # already one flag per row
    else:
        greedy_rows = np.broadcast_to(np.asarray(greedy, dtype=bool), (batch,))
    return p, q, draft_tokens.astype(np.int64, copy=False), greedy_rows


def _leading_true(mask: np.ndarray) -> np.ndarray:
    """Length of the all-True prefix of each row."""
    if mask.shape[1] == 0:
        return np.zeros(mask.shape[0], dtype=np.int64)
    return cast(np.ndarray, np.cumprod(mask, axis=1, dtype=np.int64).sum(axis=1))


def _sample_rows(dist: np.ndarray, u: np.ndarray, fallback) -> np.ndarray:
    """Draw one index per row of non-negative `dist` by inverse CDF (`_sample_rows_numpy`).

    The compiled kernel, where built, draws the same index bit for bit (the
    same float64 running sum, left to right) in two fused passes per row;
    rows it finds without mass, and inputs it does not take, go to numpy.
    """
    compiled = _kernels.active()
    if compiled is not None and dist.ndim == 2 and dist.dtype in _KERNEL_DTYPES and dist.flags.c_contiguous:
        out = np.empty(dist.shape[0], dtype=np.int64)
        compiled.sample_rows(dist, np.ascontiguousarray(u, dtype=np.float64), out)
        empty = np.flatnonzero(out < 0)
        if empty.size:
            rows = np.asarray(fallback(empty))
            out[empty] = _sample_rows_numpy(rows, u[empty], lambda again: rows[again])
        return out
    return _sample_rows_numpy(dist, u, fallback)


#: Dtypes the compiled kernels take (anything else stays on the numpy path).
_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _sample_rows_numpy(dist: np.ndarray, u: np.ndarray, fallback) -> np.ndarray:
    """Draw one index per row of non-negative `dist` by inverse CDF.

    Large batches search per row, because a binary search is O(log V)
    where a vectorised comparison is another pass over V; small ones
    (`_COUNT_ELEMENTS`) count in one vectorised pass, where numpy's per-call
    cost outweighs the pass.
    A column of zero mass is never chosen: its CDF equals its left
    neighbour's, so a threshold below it picks the neighbour first. Rows with
    no mass take `fallback(row_indices)` instead.
    """
    # The CDF accumulates in float64 whatever the input precision: a float32 running sum
    # over a 129k vocabulary would bias the tail of the distribution.
    # Widened first, then summed: the same running sum as cumsum(dtype=float64), with a faster cast.
    cdf = np.cumsum(dist.astype(np.float64), axis=1)
    empty = np.flatnonzero(~(cdf[:, -1] > 0.0))
    if empty.size:
        cdf[empty] = np.cumsum(fallback(empty), axis=1)
    threshold = u * cdf[:, -1]
    if cdf.size <= _COUNT_ELEMENTS:
        # A CDF never decreases, so the entries at or below the threshold are searchsorted's "right" index.
        out = np.add.reduce(cdf <= threshold[:, None], axis=1, dtype=np.int64)
    else:
        out = np.array([row.searchsorted(t, side="right") for row, t in zip(cdf, threshold)], dtype=np.int64)
    return cast(np.ndarray, np.minimum(out, dist.shape[1] - 1))


#: Rows x vocabulary up to which a batch samples by one vectorised count rather than a search per row.
_COUNT_ELEMENTS = 1 << 15


def _residual_rows(p, q, rows, tau, scale) -> np.ndarray:
    """max(0, scale * p_tau - q_tau) per row (p_k itself where tau == k), in p's precision."""
    k = q.shape[1]
    dist = p[rows, tau]
    if k > 0:
        has_draft = tau < k
        if scale is not None:
            # Only rows whose scale is not 1: a product with 1.0 is exact, and most rows have it.
            scaled = np.flatnonzero(scale != 1.0)
            if scaled.size == rows.size:
                dist *= scale[:, None]
            elif scaled.size:
                dist[scaled] *= scale[scaled, None]
        if np.any(has_draft):
            q_rows = q[rows, np.minimum(tau, k - 1)]
            q_rows[~has_draft] = 0.0
            np.subtract(dist, q_rows, out=dist)
            np.maximum(dist, _zeros(dist.shape[-1], dist.dtype), out=dist)
    return cast(np.ndarray, dist)


#: Rows x vocabulary up to which the correction recomputes known residuals rather than splicing them in.
_MERGE_ELEMENTS = 1 << 18


def _correction(p, q, rows, tau, scale, u, known: list[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """The target's own token for `rows`: from max(0, scale * p_tau - q_tau), or p_k when tau == k.

    `known` carries residuals block verification already computed for its
    accept test, as (local row indices, rows of mass), so they are not
    recomputed. A residual with no mass (the draft covered the target
    exactly, or rounding left nothing) falls back to p_tau itself, which is
    what the residual is proportional to in that limit. Small batches copy
    the known rows into the one matrix they sample from (they were formed
    by `_residuals`, the same arithmetic as `_residual_rows`, so the same
    values); large ones sample them where they lie.
    """
    if not known or rows.size * p.shape[2] <= _MERGE_ELEMENTS:
        if known:
            dist = np.empty((rows.size, p.shape[2]), dtype=p.dtype)
            need = np.ones(rows.size, dtype=bool)
            for idx, mass in known:
                dist[idx] = mass
                need[idx] = False
            todo = np.flatnonzero(need)
            if todo.size:
                dist[todo] = _residual_rows(p, q, rows[todo], tau[todo], None if scale is None else scale[todo])
        else:
            # Recomputed with the rest: one pass and one sampling call.
            dist = _residual_rows(p, q, rows, tau, scale)
        return _sample_rows(dist, u, lambda empty: p[rows[empty], tau[empty]])
    need = np.ones(rows.size, dtype=bool)
    # Sampled chunk by chunk: merging into one matrix would cost a copy of every known row.
    out = np.empty(rows.size, dtype=np.int64)
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
    tokens = np.empty((batch, k + 1), dtype=np.int64)
    tokens[:, :k] = draft_tokens
    tokens[np.arange(k + 1) > accepted[:, None]] = -1
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
        compiled = _kernels.active()
        if compiled is not None and not (
            p.dtype == q.dtype and p.dtype in _KERNEL_DTYPES and p.flags.c_contiguous and q.flags.c_contiguous
        ):
            compiled = None
        if compiled is not None:
            tau, scale = _accept_compiled(compiled, method == "block", p, q, draft_tokens, r_rows, u_accept[r_rows])
            known = None
        elif method == "block":
            tau, scale, known = _block_accept(p, q, draft_tokens, r_rows, u_accept[r_rows])
        else:
            tau, scale, known = _token_accept(p, q, draft_tokens, r_rows, u_accept[r_rows]), None, None
        accepted[r_rows] = tau
        if compiled is not None:
            final[r_rows] = _correction_compiled(compiled, p, q, r_rows, tau, scale, u_sample[r_rows])
        else:
            final[r_rows] = _correction(p, q, r_rows, tau, scale, u_sample[r_rows], known)
    return VerifyResult(accepted=accepted, tokens=_emit(draft_tokens, accepted, final))


def _accept_compiled(compiled, block: bool, p, q, draft_tokens, rows, u):
    """`_block_accept` or `_token_accept` in the compiled kernel: (accepted length, prefix joint there or None)."""
    tau = np.empty(rows.size, dtype=np.int64)
    scale = np.empty(rows.size)
    compiled.accept(
        block,
        p,
        q,
        np.ascontiguousarray(draft_tokens),
        rows.astype(np.int64, copy=False),
        np.ascontiguousarray(u, dtype=np.float64),
        tau,
        scale,
    )
    return tau, scale if block else None


def _correction_compiled(compiled, p, q, rows, tau, scale, u) -> np.ndarray:
    """`_correction` in the compiled kernel: each row's residual formed and sampled in two fused passes."""
    out = np.empty(rows.size, dtype=np.int64)
    scale = np.ones(rows.size) if scale is None else np.ascontiguousarray(scale, dtype=np.float64)
    compiled.sample_correction(
        p,
        q,
        rows.astype(np.int64, copy=False),
        tau.astype(np.int64, copy=False),
        scale,
        np.ascontiguousarray(u, dtype=np.float64),
        out,
    )
    return out


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
    return cast(np.ndarray, np.exp(cum - np.maximum.accumulate(cum, axis=1)))


_TINY = 1e-300

#: Open positions x vocabulary up to which all residuals are computed in one batched pass.
_EAGER_ELEMENTS = 1 << 18

#: From this vocabulary up, a residual is computed row by row on views of p and q: a gathered
#: batch of rows would be copied once more and evicted from cache between its passes.
_ROW_VOCAB = 1 << 13


def _block_accept(
    p: np.ndarray, q: np.ndarray, draft_tokens: np.ndarray, rows: np.ndarray, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]] | None]:
    """Accepted length and prefix_joint at it, per row, by Sun et al.'s block rule.

    Most thresholds are decided without the residual mass (a pass over V):
    h_i <= prefix_joint_i always (because r_i <= prefix_joint_i), so u_i >
    prefix_joint_i rejects position i outright, and prefix_joint_i = 1 gives
    h_i = 1. Only open positions above a row's last sure accept need their
    residual, highest first, and a row stops at its first pass: the accepted
    length is the last i with u_i <= h_i, so nothing below it matters. Small
    batches take every such position in one batched pass instead, where
    numpy's per-call overhead outweighs the passes saved; wide vocabularies
    go row by row on views, settling most failures with a float32 bound
    first (`_surely_fails`). The result is the eager rule's, exactly; a
    passing position's residual is handed on as the correction's
    distribution.
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
    # Sure accepts: prefix_joint = 1 (h = 1), and the last position, where h_k = prefix_joint_k;
    # joint_k > 0 keeps a u of exactly 0 from accepting a token the target gives no mass.
    # Columns run reversed (highest position first) so that nonzero lists each row's
    # candidates in the order the rule needs them.
    sure = pj >= 1.0
    sure[:, k - 1] = (u[:, k - 1] <= pj[:, k - 1]) & (pj[:, k - 1] > 0.0)
    reached = np.logical_or.accumulate(sure[:, ::-1], axis=1)
    tau = reached.sum(axis=1)  # the last sure accept; 0 where there is none
    # Open positions (0 < prefix_joint < 1, u below it) above the last sure accept; a sure
    # position is never open, and one at or below the last sure accept cannot matter.
    open_rev = ((pj > 0.0) & (u <= pj))[:, ::-1]
    open_rev &= ~reached
    cand_r, cand_rev = np.nonzero(open_rev)
    known: list[tuple[np.ndarray, np.ndarray]] = []
    if cand_r.size:
        cand_c = k - 1 - cand_rev  # 0-based column; the residual is at position col + 1
        if p.shape[2] >= _ROW_VOCAB:
            _decide_row_by_row(p, q, rows, pj, u, cand_r, cand_c, tau, known)
        elif cand_r.size * p.shape[2] <= _EAGER_ELEMENTS:
            _decide_all_at_once(p, q, rows, pj, u, cand_r, cand_c, tau, known)
        else:
            _decide_in_rounds(p, q, rows, pj, u, cand_r, cand_c, tau, known)
    tau = tau.astype(np.int64, copy=False)
    return tau, joint[np.arange(n), tau], known


def _residuals(p, q, rows, r, c, joint) -> tuple[np.ndarray, np.ndarray]:
    """max(0, prefix_joint * p_(c+1) - q_(c+1)) for local rows r, and its mass in float64."""
    # With every row on the random path, local and global row numbers coincide.
    at = r if rows.size == p.shape[0] else rows[r]
    pos = c + 1
    mass = p[at, pos]
    mass *= joint[:, None]
    np.subtract(mass, q[at, pos], out=mass)
    np.maximum(mass, _zeros(mass.shape[-1], mass.dtype), out=mass)
    return mass, mass.sum(axis=1, dtype=np.float64)


def _passes(u: np.ndarray | float, pj: np.ndarray | float, residual: np.ndarray | float) -> np.ndarray:
    # 1 - pj > 0 here (open positions have pj < 1), so the denominator never vanishes.
    return cast(np.ndarray, u <= residual / (residual + 1.0 - pj))


def _decide_all_at_once(p, q, rows, pj, u, cand_r, cand_c, tau, known) -> None:
    joint = pj[cand_r, cand_c]
    mass, residual = _residuals(p, q, rows, cand_r, cand_c, joint)
    hits = np.flatnonzero(_passes(u[cand_r, cand_c], joint, residual))
    if hits.size == 0:
        return
    # Candidates run highest first within a row, so a row's first hit is its accepted length.
    hit_r = cand_r[hits]
    first = np.ones(hits.size, dtype=bool)
    np.not_equal(hit_r[1:], hit_r[:-1], out=first[1:])
    hits = hits[first]
    tau[hit_r[first]] = cand_c[hits] + 1
    known.append((hit_r[first], mass[hits]))


def _decide_in_rounds(p, q, rows, pj, u, cand_r, cand_c, tau, known) -> None:
    # Rank of each candidate within its row (0 = highest); round j tests rank j of undecided rows.
    starts = np.r_[True, cand_r[1:] != cand_r[:-1]]
    first_of_row = np.maximum.accumulate(np.where(starts, np.arange(cand_r.size), 0))
    rank = np.arange(cand_r.size) - first_of_row
    decided = np.zeros(tau.size, dtype=bool)
    for j in range(int(rank.max()) + 1):
        sel = np.flatnonzero(rank == j)
        sel = sel[~decided[cand_r[sel]]]
        if sel.size == 0:
            break
        r, c = cand_r[sel], cand_c[sel]
        joint = pj[r, c]
        mass, residual = _residuals(p, q, rows, r, c, joint)
        passed = _passes(u[r, c], joint, residual)
        if np.any(passed):
            tau[r[passed]] = c[passed] + 1
            decided[r[passed]] = True
            known.append((r[passed], mass[passed]))


def _decide_row_by_row(p, q, rows, pj, u, cand_r, cand_c, tau, known) -> None:
    # Views, not gathered copies: each residual's passes then run over one row that stays in cache.
    # The exact product takes prefix_joint as a numpy float64 scalar, so it is formed in
    # float64 as the batched paths form it. Passing residuals land in one matrix, so the
    # correction samples them in a single call.
    vocab = p.shape[2]
    joint = pj[cand_r, cand_c]
    screen = p.dtype == np.float32 and q.dtype == np.float32
    if screen:
        scratch = np.empty(vocab, dtype=np.float32)
        # prefix_joint rounded up to float32, for `_surely_fails`.
        up = joint.astype(np.float32)
        low = up < joint
        up[low] = np.nextafter(up[low], np.float32(np.inf))
        up_list, joint_list, u_list = up.tolist(), joint.tolist(), u[cand_r, cand_c].tolist()
    masses = np.empty((np.unique(cand_r).size, vocab), dtype=p.dtype)
    passed: list[int] = []
    done = -1
    for j, (r, c) in enumerate(zip(cand_r.tolist(), cand_c.tolist())):
        if r == done:
            continue
        row = int(rows[r])
        p_row, q_row = p[row, c + 1], q[row, c + 1]
        if screen and _surely_fails(p_row, q_row, np.float32(up_list[j]), joint_list[j], u_list[j], scratch):
            continue
        mass = np.multiply(p_row, joint[j], out=masses[len(passed)])
        np.subtract(mass, q_row, out=mass)
        np.maximum(mass, _zeros(vocab, mass.dtype), out=mass)
        residual = mass.sum(dtype=np.float64)
        if _passes(u[r, c], joint[j], residual):
            tau[r] = c + 1
            passed.append(r)
            done = r
    if passed:
        known.append((np.array(passed, dtype=np.int64), masses[: len(passed)]))


_U32 = 2.0**-24  # float32 unit roundoff


def _surely_fails(p_row, q_row, up: np.float32, joint: float, u: float, scratch) -> bool:
    """True when u_i > h_i is certain from a float32 upper bound on the residual mass.

    Most tested positions fail, and a failure needs no residual for the
    correction, so one float32 pass settles them. With prefix_joint rounded
    up to float32 (`up`), each float32 product, difference and max(0, .) is at
    least the exact path's element (rounding is monotone and a float32 x
    float32 product is exact in float64), so only the float32 sum's own
    rounding separates the bound from the exact mass, and it is allowed for.
    Anything within that allowance (or not finite) falls through to the exact
    computation, so every accepted length is the exact rule's.
    """
    if np.minimum.reduce(p_row) < 0.0:
        return False  # the bound needs p >= 0; out-of-contract input takes the exact path
    np.multiply(p_row, up, out=scratch)
    np.subtract(scratch, q_row, out=scratch)
    np.maximum(scratch, _zeros(scratch.shape[-1], scratch.dtype), out=scratch)
    # Pairwise float32 summation errs by well under (64 + V / 4096) roundings of the total.
    high = float(np.add.reduce(scratch)) * (1.0 + (64.0 + scratch.size / 4096.0) * _U32) * (1.0 + 1e-12) + 1e-30
    if not np.isfinite(high):
        return False
    return bool(u > (high / (high + 1.0 - joint)) * (1.0 + 1e-9))


#: Below this many draft positions per call, per-row Python arithmetic beats numpy's per-call overhead.
_SCALAR_LIMIT = 48


def _residual_mass(p, q, row: int, pos: int, joint: float) -> np.ndarray:
    # joint is a Python float, so NumPy rounds it to p's precision and multiplies there (a weak
    # scalar): the same bits as scaling a copy of the row in place, in one pass instead of two.
    mass = np.multiply(p[row, pos], p.dtype.type(joint))
    np.subtract(mass, q[row, pos], out=mass)
    np.maximum(mass, _zeros(mass.shape[-1], mass.dtype), out=mass)
    return cast(np.ndarray, mass)


def _block_accept_scalar(
    p: np.ndarray, q: np.ndarray, rows: np.ndarray, px: np.ndarray, qx: np.ndarray, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]] | None]:
    """`_block_accept` for small batches, row by row: the same rule and the same pruning."""
    n, k = px.shape
    wide = n * p.shape[2] > _MERGE_ELEMENTS
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
                    if wide:  # small batches recompute the correction's residuals (`_correction`)
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


def biased_token_verify(
    p,
    q,
    draft_tokens,
    rng: np.random.Generator,
    *,
    bias: np.ndarray,
    greedy: bool | np.ndarray = False,
) -> VerifyResult:
    """The token rule with draft i accepted when u * q_i(x_i) <= bias[i] * p_i(x_i): lossy unless bias is all 1.

    A deliberate fault (the embedded engine's `--fault accept_bias` and
    `position_bias`) for checking that a losslessness test catches a verifier
    that lets drafts through too often (bias > 1) or too rarely (< 1). The
    draws, the greedy branch and the correction are `token_verify`'s, so with
    bias 1 the outcome is the same.
    """
    p, q, draft_tokens, greedy_rows = _check_inputs(p, q, draft_tokens, greedy)
    batch, k = draft_tokens.shape
    bias = np.asarray(bias, dtype=np.float64)
    if bias.shape != (k,) or not np.all(bias > 0.0):
        raise ValueError(f"bias must be (k,) = ({k},) positive multipliers; got {bias!r}")
    u_accept = rng.random((batch, k))
    u_sample = rng.random(batch)
    accepted = np.zeros(batch, dtype=np.int64)
    final = np.zeros(batch, dtype=np.int64)
    g_rows = np.flatnonzero(greedy_rows)
    if g_rows.size:
        accepted[g_rows], final[g_rows] = _greedy_rows(p, draft_tokens, g_rows)
    r_rows = np.flatnonzero(~greedy_rows)
    if r_rows.size:
        px, qx = _drafted_probs(p, q, draft_tokens, r_rows)
        tau = _leading_true((px > 0.0) & (u_accept[r_rows] * qx <= bias[None, :] * px))
        accepted[r_rows] = tau
        final[r_rows] = _correction(p, q, r_rows, tau, None, u_sample[r_rows])
    return VerifyResult(accepted=accepted, tokens=_emit(draft_tokens, accepted, final))


def _support_correction(compiled, target_rows, cand, q_sup, drafts, tau, scale, u_sample) -> VerifyResult:
    """`verify_support`'s correction in the compiled kernel: the residual formed and sampled in two fused passes
    per row, the target's rows read in place."""
    batch, k = drafts.shape
    rows = np.arange(batch)
    at = np.minimum(tau, k - 1)
    final = np.empty(batch, dtype=np.int64)
    compiled.sample_support(
        np.ascontiguousarray(target_rows(rows, tau), dtype=np.float32),
        np.ones(batch) if scale is None else np.ascontiguousarray(scale, dtype=np.float64),
        np.ascontiguousarray(cand[rows, at], dtype=np.int64),
        np.ascontiguousarray(q_sup[rows, at], dtype=np.float32),
        (tau < k).astype(np.int64),
        np.ascontiguousarray(u_sample, dtype=np.float64),
        final,
    )
    return VerifyResult(accepted=tau, tokens=_emit(drafts, tau, final))


def verify_support(
    method: str,
    p_sup: np.ndarray,
    q_sup: np.ndarray,
    cand: np.ndarray,
    choice: np.ndarray,
    u_accept: np.ndarray,
    u_sample: np.ndarray,
    target_rows,
    drafts: np.ndarray | None = None,
) -> VerifyResult:
    """`verify` for drafts given on their support: the same rule, the same draws, O(K) per position.

    The draft at slot i has mass only on its candidates `cand[:, i]` (B, k, K),
    with probabilities `q_sup` and the target's temperature-1 probabilities
    `p_sup` there; `choice` (B, k) indexes the drafted candidate. The accept
    test needs p and q at the drafted tokens; block verification's residual
    mass at a position is prefix_joint * (1 - sum_sup p) + sum_sup max(0,
    prefix_joint * p - q), since q is zero off its support. Only the one token
    the target samples itself needs a full row: `target_rows(rows, positions)`
    returns the (n, V) target distributions at those positions, and the
    residual is formed from it exactly as `verify` forms it (same float32
    operations), so a row's token is the dense rule's whenever its accepted
    length is. Random rows only (temperature 1, nothing truncated); greedy
    and shaped rows take `verify`.
    """
    if method not in VERIFY_METHODS:
        raise EngineError(
            f"speculative.rejection_sample_method = {method!r} cannot be verified losslessly here; "
            f"use one of {', '.join(VERIFY_METHODS)}"
        )
    batch, k, _ = p_sup.shape
    rows = np.arange(batch)
    at = (rows[:, None], np.arange(k)[None, :], choice)
    drafts = (cand[at] if drafts is None else drafts).astype(np.int64, copy=False)
    compiled = _kernels.active()
    scale = None
    if method == "block" and k > 0 and compiled is not None and p_sup.dtype == q_sup.dtype == np.float32:
        tau = np.empty(batch, dtype=np.int64)
        scale = np.empty(batch)
        compiled.support_accept(
            np.ascontiguousarray(p_sup),
            np.ascontiguousarray(q_sup),
            np.ascontiguousarray(choice, dtype=np.int64),
            np.ascontiguousarray(u_accept, dtype=np.float64),
            tau,
            scale,
        )
        return _support_correction(compiled, target_rows, cand, q_sup, drafts, tau, scale, u_sample)
    px = p_sup[at].astype(np.float64)
    qx = q_sup[at].astype(np.float64)
    if method == "block" and k > 0:
        joint = _prefix_joint(px, qx)
        pj = joint[:, 1:]
        u = u_accept
        # A position passes when prefix_joint = 1, or when u <= prefix_joint and u <= h.
        passed = pj >= 1.0
        last = k - 1
        passed[:, last] = (u[:, last] <= pj[:, last]) & (pj[:, last] > 0.0)
        if k > 1:
            # Residual mass at positions 2..k for the prefix joint after 1..k-1 drafts.
            pj_open = pj[:, :last]
            p_next = p_sup[:, 1:].astype(np.float64)
            outside = np.maximum(1.0 - p_next.sum(axis=2), 0.0)
            resid = pj_open * outside + np.maximum(pj_open[:, :, None] * p_next - q_sup[:, 1:], 0.0).sum(axis=2)
            # h = resid / (resid + 1 - prefix_joint) where prefix_joint < 1 (it passes outright at 1).
            h = np.divide(resid, resid + 1.0 - pj_open, out=np.ones_like(resid), where=pj_open < 1.0)
            passed[:, :last] |= (pj_open > 0.0) & (u[:, :last] <= pj_open) & (u[:, :last] <= h)
        # The accepted length is the last passing position (0 where none passes).
        tau = np.maximum.reduce(passed * np.arange(1, k + 1), axis=1)
        scale = joint[rows, tau]
    else:
        tau = _leading_true((px > 0.0) & (u_accept * qx <= px))
    if compiled is not None and k > 0:
        return _support_correction(compiled, target_rows, cand, q_sup, drafts, tau, scale, u_sample)
    dist = np.ascontiguousarray(target_rows(rows, tau), dtype=np.float32)
    if scale is not None and np.minimum.reduce(scale) < 1.0:
        # Every row at once (a product with 1.0 is exact), in float64 then rounded: the bits of the
        # in-place float32 product, which numpy forms the same way in a slower buffered loop.
        dist = np.multiply(dist, scale[:, None], dtype=np.float64).astype(np.float32)
    r = np.flatnonzero(tau < k)
    if r.size:
        cols = cand[r, tau[r]]
        sub = dist[r[:, None], cols] - q_sup[r, tau[r]]
        np.maximum(sub, 0.0, out=sub)
        dist[r[:, None], cols] = sub
    # A residual with no mass falls back to the target's row itself, as `verify` does.
    final = _sample_rows(dist, u_sample, lambda empty: np.asarray(target_rows(rows[empty], tau[empty])))
    return VerifyResult(accepted=tau, tokens=_emit(drafts, tau, final))
