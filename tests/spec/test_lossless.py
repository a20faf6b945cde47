"""Losslessness, tested statistically: both verifiers emit the target's own distribution.

The toy model is context-dependent: the target is a first-order Markov chain
T over a six-token vocabulary and the drafter is a different chain D, so every
draft position conditions on the draft before it, as DSpark's Markov head
does. Speculative decoding with a correct verifier emits exactly a sample path
of T. Two chi-square tests check that:

- unigram: the token at fixed positions of independent sequences against the
  exact marginal start @ T^t;
- bigram: transition counts (prev -> next) over every sequence against T.

False-failure rate: each assertion rejects a correct verifier with probability
at most ALPHA = 1e-3 at a random seed (Bonferroni-corrected where one
assertion covers several positions); the seeds are fixed, so the suite is
deterministic and these tests either always pass or always fail for a given
implementation. `test_the_test_can_fail` shows the same statistics reject an
unverified drafter.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from gb300lane.spec import block_verify, expected_accepted, kernels, token_verify

ALPHA = 1e-3
V, K = 6, 3


def chi2_sf(x: float, dof: int) -> float:
    """P(chi2_dof >= x): the regularised upper incomplete gamma Q(dof/2, x/2), numpy-free."""
    a, z = dof / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    log_front = -z + a * math.log(z) - math.lgamma(a)
    if z < a + 1.0:  # series for P(a, z)
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1.0
            term *= z / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    # Lentz's continued fraction for Q(a, z)
    tiny = 1e-300
    b = z + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h


def chi2_pvalue(observed: np.ndarray, expected: np.ndarray) -> float:
    keep = expected > 0
    assert observed[~keep].sum() == 0, "a token with zero target probability was emitted"
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    return chi2_sf(stat, int(keep.sum()) - 1)


def _chains(seed: int = 20241026, reduced: int = 0):
    rng = np.random.default_rng(seed)
    # Peaked rows and a drafter that only partly agrees: prefixes often end with
    # prefix_joint < 1, the case where block verification's residual differs from token's.
    target = rng.dirichlet(np.full(V, 0.3), size=V)
    draft = 0.2 * target + 0.8 * rng.dirichlet(np.full(V, 0.3), size=V)
    if reduced:
        # A reduced-vocabulary drafter: mass on its top candidates only, scattered into target columns.
        cut = np.sort(draft, axis=1)[:, -reduced][:, None]
        draft = np.where(draft >= cut, draft, 0.0)
        draft /= draft.sum(axis=1, keepdims=True)
    return target, draft


def _sample(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cdf = np.cumsum(rows, axis=1)
    u = rng.random(rows.shape[0])[:, None] * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), rows.shape[1] - 1)


def generate(verify_fn, target, draft, *, n_seq=20000, length=12, seed=1, greedy=False, skip_verify=False):
    """Speculative decoding of n_seq independent sequences from start token 0.

    Returns the (n_seq, length) token matrix and the accepted length of every verify step.
    """
    rng = np.random.default_rng(seed)
    seqs = np.full((n_seq, length), -1, dtype=np.int64)
    filled = np.zeros(n_seq, dtype=np.int64)
    rows_all = np.arange(n_seq)
    last = np.zeros(n_seq, dtype=np.int64)
    accepted_log = []
    while filled.min() < length:
        ctx = np.empty((n_seq, K + 1), dtype=np.int64)
        ctx[:, 0] = last
        drafts = np.empty((n_seq, K), dtype=np.int64)
        for i in range(K):
            rows = draft[ctx[:, i]]
            drafts[:, i] = rows.argmax(axis=1) if greedy else _sample(rows, rng)
            ctx[:, i + 1] = drafts[:, i]
        p = target[ctx]
        q = np.eye(V)[drafts] if greedy else draft[ctx[:, :K]]
        if skip_verify:  # what a drafter alone would emit: the test must reject it
            tokens = np.concatenate([drafts, _sample(p[:, K], rng)[:, None]], axis=1)
            accepted = np.full(n_seq, K)
        else:
            res = verify_fn(p, q, drafts, rng, greedy=greedy)
            tokens, accepted = res.tokens, res.accepted
        accepted_log.append(accepted)
        for j in range(K + 1):
            emitted = (j <= accepted) & (filled + j < length)
            seqs[rows_all[emitted], filled[emitted] + j] = tokens[emitted, j]
        last = tokens[rows_all, accepted]
        filled += accepted + 1
    return seqs, np.concatenate(accepted_log)


def unigram_pvalue(seqs, target, positions=(0, 2, 4, 7)) -> float:
    """Bonferroni-combined p-value of the token marginal at several positions."""
    start = np.zeros(V)
    start[0] = 1.0
    worst = 1.0
    for t in positions:
        marginal = start @ np.linalg.matrix_power(target, t + 1)
        observed = np.bincount(seqs[:, t], minlength=V).astype(float)
        worst = min(worst, chi2_pvalue(observed, marginal * seqs.shape[0]))
    return min(1.0, worst * len(positions))


def bigram_pvalue(seqs, target) -> float:
    """Transition counts prev -> next against T, one chi-square over all rows."""
    counts = np.zeros((V, V))
    prev = np.concatenate([np.zeros((seqs.shape[0], 1), dtype=np.int64), seqs[:, :-1]], axis=1)
    np.add.at(counts, (prev.ravel(), seqs.ravel()), 1.0)
    expected = counts.sum(axis=1, keepdims=True) * target
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a transition with zero target probability was emitted"
    stat = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    dof = sum(int(keep[r].sum()) - 1 for r in range(V) if counts[r].sum() > 0)
    return chi2_sf(stat, dof)


def test_chi2_sf_matches_tabulated_quantiles():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, abs=1e-9)
    assert chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, abs=1e-9)
    assert chi2_sf(124.3421134, 100) == pytest.approx(0.05, abs=1e-7)
    assert chi2_sf(0.0, 3) == 1.0


@pytest.mark.parametrize("verify_fn", [token_verify, block_verify], ids=["token", "block"])
@pytest.mark.parametrize("reduced", [0, 2], ids=["full-vocab-draft", "top2-draft"])
def test_emitted_tokens_follow_the_target(verify_fn, reduced):
    target, draft = _chains(reduced=reduced)
    seqs, _ = generate(verify_fn, target, draft, seed=7 + reduced)
    assert unigram_pvalue(seqs, target) > ALPHA
    assert bigram_pvalue(seqs, target) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("path", ["numpy-batched", "row-by-row", "batched-rounds"])
def test_block_is_lossless_on_every_evaluation_path(path, monkeypatch):
    """The default path (the compiled kernels, where built) is covered above; these force
    numpy's three, with their residual reuse."""
    module = sys.modules[block_verify.__module__]
    monkeypatch.setattr(kernels, "active", lambda: None)
    monkeypatch.setattr(module, "_SCALAR_LIMIT", 10**9 if path == "row-by-row" else 0)
    monkeypatch.setattr(module, "_EAGER_ELEMENTS", 10**9 if path == "numpy-batched" else 0)
    target, draft = _chains()
    seqs, _ = generate(block_verify, target, draft, seed=17, n_seq=6000 if path == "row-by-row" else 20000)
    assert unigram_pvalue(seqs, target) > ALPHA
    assert bigram_pvalue(seqs, target) > ALPHA


def test_the_test_can_fail(monkeypatch):
    target, draft = _chains()
    seqs, _ = generate(None, target, draft, seed=7, skip_verify=True)
    assert bigram_pvalue(seqs, target) < 1e-12
    # A subtle bug: block verification's correction drawn from max(0, p - q) instead of
    # max(0, prefix_joint * p - q). Same accept rule, wrong residual; the bigram test sees it.
    module = sys.modules[block_verify.__module__]
    correct, correct_compiled = module._correction, module._correction_compiled
    monkeypatch.setattr(
        module, "_correction", lambda p, q, rows, tau, scale, u, known: correct(p, q, rows, tau, None, u)
    )
    monkeypatch.setattr(
        module,
        "_correction_compiled",
        lambda kern, p, q, rows, tau, scale, u: correct_compiled(kern, p, q, rows, tau, None, u),
    )
    seqs, _ = generate(block_verify, target, draft, seed=7)
    assert bigram_pvalue(seqs, target) < 1e-6


def test_block_accepts_at_least_as_many_drafts_as_token():
    target, draft = _chains()
    _, acc_token = generate(token_verify, target, draft, seed=3)
    _, acc_block = generate(block_verify, target, draft, seed=4)
    se = math.sqrt(acc_token.var() / acc_token.size + acc_block.var() / acc_block.size)
    # The expected gap on this model is several standard errors wide; block must come out ahead.
    assert acc_block.mean() - acc_token.mean() > 2 * se


def test_mean_accepted_matches_the_exact_expectation():
    """Paper example (target [1/3, 2/3], draft [2/3, 1/3], k=2): 10/9 token, 11/9 block."""
    n = 60_000
    p = np.broadcast_to(np.array([1 / 3, 2 / 3]), (n, 3, 2))
    q = np.broadcast_to(np.array([2 / 3, 1 / 3]), (n, 2, 2))
    drafts = (np.random.default_rng(0).random((n, 2)) >= 2 / 3).astype(np.int64)
    for fn, method in ((token_verify, "standard"), (block_verify, "block")):
        acc = fn(p, q, drafts, np.random.default_rng(1)).accepted
        exact = float(expected_accepted([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2, method))
        assert abs(acc.mean() - exact) < 4.5 * acc.std() / math.sqrt(n)


def test_temperature_zero_is_identical_across_methods_and_is_greedy_decoding():
    target, draft = _chains()
    seq_t, _ = generate(token_verify, target, draft, n_seq=50, seed=5, greedy=True)
    seq_b, _ = generate(block_verify, target, draft, n_seq=50, seed=6, greedy=True)
    assert np.array_equal(seq_t, seq_b)
    expected, tok = [], 0
    for _ in range(seq_t.shape[1]):
        tok = int(target[tok].argmax())
        expected.append(tok)
    assert np.all(seq_t == np.array(expected))
