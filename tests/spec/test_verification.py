"""Token and block verification: the array contract, the greedy path, edge cases,
and block verification against a line-by-line reading of Sun et al.'s rule."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from gb300lane.errors import EngineError
from gb300lane.spec import VerifyResult, block_verify, kernels, token_verify, verify


def _random_case(rng, batch, k, vocab, *, reduced=0, sharp=1.0):
    p = rng.dirichlet(np.full(vocab, sharp), size=(batch, k + 1))
    q = 0.6 * p[:, :k] + 0.4 * rng.dirichlet(np.full(vocab, sharp), size=(batch, k))
    if reduced:
        # A reduced-vocabulary draft: mass only on its top candidates, scattered into target columns.
        cut = np.sort(q, axis=2)[:, :, -reduced][..., None]
        q = np.where(q >= cut, q, 0.0)
        q /= q.sum(axis=2, keepdims=True)
    drafts = np.empty((batch, k), dtype=np.int64)
    for b in range(batch):
        for i in range(k):
            drafts[b, i] = rng.choice(vocab, p=q[b, i])
    return p, q, drafts


def _block_reference(p, q, drafts, u):
    """Sun et al. (2024), Algorithm 2, written out position by position for one row."""
    k = drafts.shape[0]
    joint, tau = 1.0, 0
    joints = [1.0]
    for i in range(1, k + 1):
        x = drafts[i - 1]
        ratio = p[i - 1, x] / q[i - 1, x] if q[i - 1, x] > 0 else (np.inf if p[i - 1, x] > 0 else 0.0)
        joint = min(1.0, joint * ratio) if joint > 0 else 0.0
        joints.append(joint)
        if i < k:
            residual = np.maximum(joint * p[i] - q[i], 0.0).sum()
            denom = residual + 1.0 - joint
            h = residual / denom if denom > 0 else 1.0
        else:
            h = joint
        if u[i - 1] <= h:
            tau = i
    return tau, joints[tau]


def test_result_shapes_and_padding():
    rng = np.random.default_rng(3)
    p, q, d = _random_case(rng, 16, 4, 12)
    for fn in (token_verify, block_verify):
        res = fn(p, q, d, np.random.default_rng(5))
        assert isinstance(res, VerifyResult)
        assert res.accepted.shape == (16,) and res.tokens.shape == (16, 5)
        assert np.array_equal(res.num_emitted, res.accepted + 1)
        for b in range(16):
            a = res.accepted[b]
            assert np.array_equal(res.tokens[b, :a], d[b, :a])
            assert 0 <= res.tokens[b, a] < 12
            assert np.all(res.tokens[b, a + 1 :] == -1)


def test_k_zero_samples_the_bonus_from_p():
    p = np.zeros((4000, 1, 3))
    p[:, 0] = [0.5, 0.0, 0.5]
    res = block_verify(p, np.zeros((4000, 0, 3)), np.zeros((4000, 0), dtype=int), np.random.default_rng(0))
    assert np.all(res.accepted == 0)
    counts = np.bincount(res.tokens[:, 0], minlength=3)
    assert counts[1] == 0 and abs(counts[0] - 2000) < 200


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("path", ["compiled", "row-by-row", "batched-all-open", "batched-rounds", "vocab-rows"])
def test_block_matches_the_written_out_rule_exactly(path, dtype, monkeypatch):
    """Same uniforms in, same accepted length out, on each evaluation path (the compiled
    kernel, and numpy's, including the large-vocabulary path with its float32 pre-check):
    pruning and batching change the cost, never the result."""
    module = sys.modules[block_verify.__module__]
    if path == "compiled":
        if kernels.active() is None:
            pytest.skip("the compiled kernels are not built (tests/spec/test_kernels.py says why)")
    else:
        monkeypatch.setattr(kernels, "active", lambda: None)
    monkeypatch.setattr(module, "_SCALAR_LIMIT", 10**9 if path == "row-by-row" else 0)
    monkeypatch.setattr(module, "_EAGER_ELEMENTS", 10**9 if path == "batched-all-open" else 0)
    if path == "vocab-rows":
        monkeypatch.setattr(module, "_ROW_VOCAB", 1)
    rng = np.random.default_rng(11)
    for reduced in (0, 3):
        p, q, d = _random_case(rng, 300, 5, 10, reduced=reduced)
        p, q = p.astype(dtype), q.astype(dtype)
        res = block_verify(p, q, d, np.random.default_rng(7))
        u = np.random.default_rng(7).random((300, 5))
        expected = [_block_reference(p[b], q[b], d[b], u[b])[0] for b in range(300)]
        assert np.array_equal(res.accepted, expected)
        assert len(set(expected)) > 3  # the case exercises several accepted lengths


def test_greedy_rows_take_the_argmax_and_agree_across_methods():
    rng = np.random.default_rng(2)
    p, q, d = _random_case(rng, 64, 3, 8, sharp=0.3)
    target = p.argmax(axis=2)
    d[:32] = target[:32, :3]  # half the rows draft the argmax: all accepted
    t = token_verify(p, q, d, np.random.default_rng(1), greedy=True)
    b = block_verify(p, q, d, np.random.default_rng(99), greedy=True)
    assert np.array_equal(t.tokens, b.tokens) and np.array_equal(t.accepted, b.accepted)
    assert np.all(t.accepted[:32] == 3) and np.array_equal(t.tokens[:32, 3], target[:32, 3])
    for row in range(64):
        a = t.accepted[row]
        assert np.all(d[row, :a] == target[row, :a])
        assert a == 3 or d[row, a] != target[row, a]
        assert t.tokens[row, a] == target[row, a]


def test_greedy_mask_per_row_leaves_other_rows_alone():
    rng = np.random.default_rng(4)
    p, q, d = _random_case(rng, 20, 3, 6)
    mask = np.arange(20) % 2 == 0
    mixed = block_verify(p, q, d, np.random.default_rng(8), greedy=mask)
    random_only = block_verify(p, q, d, np.random.default_rng(8))
    greedy_only = block_verify(p, q, d, np.random.default_rng(8), greedy=True)
    assert np.array_equal(mixed.tokens[~mask], random_only.tokens[~mask])
    assert np.array_equal(mixed.tokens[mask], greedy_only.tokens[mask])


def test_draft_token_outside_the_draft_support_gives_no_nan():
    p = np.full((2, 3, 4), 0.25)
    q = np.zeros((2, 2, 4))
    q[:, :, 0] = 1.0
    d = np.array([[1, 2], [3, 3]])  # q(x) = 0 for every draft: ratio is infinite
    for fn in (token_verify, block_verify):
        res = fn(p, q, d, np.random.default_rng(0))
        assert np.all(res.accepted == 2)
    p0 = p.copy()
    p0[:, 0] = [1.0, 0.0, 0.0, 0.0]  # the target gives the first draft no mass at all
    for fn in (token_verify, block_verify):
        res = fn(p0, q, d, np.random.default_rng(0))
        assert np.all(res.accepted == 0) and np.all(res.tokens[:, 0] == 0)


def test_empty_residual_falls_back_to_the_target():
    # q covers p at position 1 with a different draft token, so max(0, p - q) has no mass.
    p = np.zeros((500, 2, 3))
    p[:, 0] = [0.0, 0.5, 0.5]
    p[:, 1] = [1 / 3, 1 / 3, 1 / 3]
    q = np.zeros((500, 1, 3))
    q[:, 0] = [0.5, 0.25, 0.25]
    d = np.zeros((500, 1), dtype=int)  # drafted 0, which the target never emits
    for fn in (token_verify, block_verify):
        res = fn(p, q, d, np.random.default_rng(1))
        assert np.all(res.accepted == 0)
        assert set(np.unique(res.tokens[:, 0])) == {1, 2}


def test_verify_dispatches_and_refuses_lossy_methods():
    rng = np.random.default_rng(6)
    p, q, d = _random_case(rng, 8, 2, 5)
    assert np.array_equal(
        verify("block", p, q, d, np.random.default_rng(1)).tokens,
        block_verify(p, q, d, np.random.default_rng(1)).tokens,
    )
    assert np.array_equal(
        verify("standard", p, q, d, np.random.default_rng(1)).tokens,
        token_verify(p, q, d, np.random.default_rng(1)).tokens,
    )
    with pytest.raises(EngineError, match="rejection_sample_method = 'fly'"):
        verify("fly", p, q, d, np.random.default_rng(1))


def test_bad_shapes_are_refused():
    p = np.full((2, 3, 4), 0.25)
    with pytest.raises(ValueError, match="q must be"):
        token_verify(p, np.full((2, 3, 4), 0.25), np.zeros((2, 2), dtype=int), np.random.default_rng(0))
    with pytest.raises(ValueError, match="draft_tokens must lie"):
        token_verify(p, np.full((2, 2, 4), 0.25), np.full((2, 2), 4), np.random.default_rng(0))


def test_float32_inputs_verify():
    rng = np.random.default_rng(9)
    p, q, d = _random_case(rng, 8, 3, 50)
    res = block_verify(p.astype(np.float32), q.astype(np.float32), d, np.random.default_rng(0))
    assert np.all(res.tokens[np.arange(8), res.accepted] >= 0)
