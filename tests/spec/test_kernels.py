"""The compiled verification kernels (gb300lane/spec/_kernels.c) against the numpy paths they fuse.

The sampler is the same arithmetic in the same order, so the same index bit for
bit; the block kernel sums a residual in a different order than numpy's pairwise
sum, so it agrees except where u lies within a few roundings of a threshold,
which none of these cases comes near.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

from gb300lane.spec import block_verify, kernels, token_verify, verification


@pytest.fixture
def compiled(monkeypatch):
    if kernels.active() is None:
        if os.environ.get("GB300LANE_SKIP_KERNELS") == "1":
            pytest.skip("GB300LANE_SKIP_KERNELS=1: the compiled kernels are not built here")
        pytest.fail(
            f"verification runs on {kernels.describe()}; `python3 -m pip install -e .` builds the kernels "
            "where a C compiler is present (set GB300LANE_SKIP_KERNELS=1 to skip where none is)"
        )
    return kernels.active()


def _case(rng, batch, k, vocab, dtype, *, sparse=False):
    p = rng.dirichlet(np.full(vocab, 0.3), size=(batch, k + 1))
    q = 0.6 * p[:, :k] + 0.4 * rng.dirichlet(np.full(vocab, 0.3), size=(batch, k))
    if sparse:  # a reduced-vocabulary draft, and target columns with no mass
        q[..., vocab // 2 :] = 0.0
        q /= q.sum(axis=2, keepdims=True)
        p[..., : vocab // 4] = 0.0
        p /= p.sum(axis=2, keepdims=True)
    drafts = np.array([[rng.choice(vocab, p=q[b, i]) for i in range(k)] for b in range(batch)], dtype=np.int64)
    return p.astype(dtype), q.astype(dtype), drafts.reshape(batch, k)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", [token_verify, block_verify], ids=["token", "block"])
def test_the_kernels_verify_as_numpy_does(compiled, monkeypatch, fn, dtype):
    rng = np.random.default_rng(5)
    for case in range(60):
        batch, k, vocab = int(rng.integers(1, 40)), int(rng.integers(0, 10)), int(rng.choice([2, 7, 64, 3072]))
        p, q, d = _case(rng, batch, k, vocab, dtype, sparse=case % 3 == 0)
        greedy = rng.random(batch) < 0.2
        with kernels.numpy_only():
            expected = fn(p, q, d, np.random.default_rng(case), greedy=greedy)
        got = fn(p, q, d, np.random.default_rng(case), greedy=greedy)
        assert np.array_equal(got.accepted, expected.accepted), (case, batch, k, vocab)
        assert np.array_equal(got.tokens, expected.tokens), (case, batch, k, vocab)


def test_the_sampler_draws_numpys_index_bit_for_bit(compiled):
    rng = np.random.default_rng(9)
    for case in range(400):
        n, vocab = int(rng.integers(1, 11)), int(rng.integers(1, 5000))
        dist = rng.random((n, vocab)) ** 8
        dist[rng.random((n, vocab)) < 0.3] = 0.0
        dist = dist.astype(np.float32 if case % 2 else np.float64)
        if case % 5 == 0:
            dist[0] = 0.0  # no mass: the fallback row
        if case % 7 == 0:
            dist[-1, 0] = np.nan
        u = rng.random(n)
        fallback = lambda rows: np.ones((rows.size, vocab))  # noqa: E731
        assert np.array_equal(
            verification._sample_rows(dist, u, fallback), verification._sample_rows_numpy(dist, u, fallback)
        ), case


def test_an_empty_residual_falls_back_to_the_targets_row_in_the_kernel(compiled):
    # q covers p exactly at the correction position, so the residual has no mass.
    p = np.tile(np.array([0.25, 0.75, 0.0], dtype=np.float32), (4000, 2, 1))
    q = p[:, :1].copy()
    drafts = np.zeros((4000, 1), dtype=np.int64)
    res = token_verify(p, q, np.full_like(drafts, 2), np.random.default_rng(1))  # a draft p gives no mass
    counts = np.bincount(res.tokens[:, 0], minlength=3)
    assert np.all(res.accepted == 0) and counts[2] == 0 and abs(counts[1] / 4000 - 0.75) < 0.03


def test_the_kernels_refuse_what_they_do_not_take(compiled):
    p = np.full((2, 3, 4), 0.25, dtype=np.float32)
    q = np.full((2, 2, 4), 0.25, dtype=np.float64)  # mixed precision
    with pytest.raises(ValueError, match="one float dtype"):
        compiled.accept(
            True,
            p,
            q,
            np.zeros((2, 2), dtype=np.int64),
            np.arange(2),
            np.zeros((2, 2)),
            np.empty(2, dtype=np.int64),
            np.empty(2),
        )
    with pytest.raises(IndexError, match="out of range"):
        compiled.sample_correction(
            p, p[:, :2].copy(), np.array([5]), np.array([0]), np.ones(1), np.zeros(1), np.empty(1, dtype=np.int64)
        )
    with pytest.raises(TypeError, match="writable"):
        out = np.empty(2, dtype=np.int64)
        out.flags.writeable = False
        compiled.sample_rows(np.ones((2, 4)), np.zeros(2), out)
    with pytest.raises(TypeError, match="expected 35 arguments"):
        compiled.draft_block(np.ones((2, 4)))
    with pytest.raises(ValueError, match="row_index: row"):
        compiled.row_index(np.ones(4), 0.5)  # float64: the numpy path's


def test_mixed_precision_inputs_take_the_numpy_path():
    rng = np.random.default_rng(2)
    p, q, d = _case(rng, 6, 3, 16, np.float64)
    res = block_verify(p.astype(np.float32), q, d, np.random.default_rng(0))
    assert res.tokens.shape == (6, 4) and np.all(res.accepted <= 3)


def test_verifying_on_the_support_in_the_kernel_is_numpys_rule(compiled):
    from gb300lane.spec import verify_support

    rng = np.random.default_rng(4)
    for case in range(40):
        batch, k, width, vocab = int(rng.integers(1, 12)), int(rng.integers(1, 10)), 16, 256
        full = rng.dirichlet(np.full(vocab, 0.2), size=(batch, k + 1)).astype(np.float32)
        cand = np.stack([np.stack([rng.choice(vocab, width, replace=False) for _ in range(k)]) for _ in range(batch)])
        p_sup = np.take_along_axis(full[:, :k], cand, axis=2)
        q_sup = rng.dirichlet(np.full(width, 0.5), size=(batch, k)).astype(np.float32)
        if case % 4 == 0:
            q_sup = (p_sup / p_sup.sum(axis=2, keepdims=True)).astype(np.float32)  # a draft close to the target
        choice = np.array(
            [[rng.choice(width, p=q_sup[b, i] / q_sup[b, i].sum()) for i in range(k)] for b in range(batch)]
        )
        u_accept, u_sample = rng.random((batch, k)), rng.random(batch)

        def rows(r, pos, full=full):
            return full[r, pos]

        for method in ("block", "standard"):
            got = verify_support(method, p_sup, q_sup, cand, choice, u_accept, u_sample, rows)
            with kernels.numpy_only():
                expected = verify_support(method, p_sup, q_sup, cand, choice, u_accept, u_sample, rows)
            assert np.array_equal(got.accepted, expected.accepted), (case, method)
            assert np.array_equal(got.tokens, expected.tokens), (case, method)


@pytest.mark.parametrize("k", [5, 9])
def test_the_drafter_draws_the_same_blocks_with_the_kernels(compiled, k):
    from gb300lane.engine.drafter import DSparkDrafter
    from gb300lane.engine.model import MIXED, load_model

    model = load_model()
    drafter = DSparkDrafter(model, topk=32, block_size=5)
    rng = np.random.default_rng(k)
    batch = 64
    # Frequent anchor pairs (table rows) and arbitrary contexts (computed rows), several classes.
    keys = model.pair_keys[rng.integers(0, model.pair_keys.size, batch)]
    vocab = model.vocab_size
    classes, prev2, prev = keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab
    odd = rng.random(batch) < 0.3
    prev2[odd], prev[odd] = rng.integers(0, vocab, odd.sum()), rng.integers(0, vocab, odd.sum())
    classes[rng.random(batch) < 0.1] = MIXED
    stepwise = DSparkDrafter(model, topk=32, block_size=5, tabulate=False)  # no tables: every slot computed
    # Greedy rows among them; then rows at their own temperature too (the tables hold temperature 1 only).
    for temps in (np.where(rng.random(batch) < 0.15, 0.0, 1.0), rng.choice([0.0, 0.7, 1.0, 1.3], batch)):
        for probabilistic in (True, False):
            u = rng.random((batch, k))
            got = drafter.draft_block(
                classes, prev2, prev, k, temps, u, probabilistic=probabilistic, numerics=(7, 0.01)
            )
            with kernels.numpy_only():
                expected = drafter.draft_block(
                    classes, prev2, prev, k, temps, u, probabilistic=probabilistic, numerics=(7, 0.01)
                )
            computed = stepwise.draft_block(
                classes, prev2, prev, k, temps, u, probabilistic=probabilistic, numerics=(7, 0.01)
            )
            for field in ("tokens", "cand", "q", "p", "choice"):
                assert np.array_equal(getattr(got, field), getattr(expected, field)), (probabilistic, field)
                assert np.array_equal(getattr(got, field), getattr(computed, field)), (probabilistic, field)


_ENGINE_TOKENS = """
import json, sys
from gb300lane.engine.config import parse_spec_config
from gb300lane.engine.core import EngineCore, SamplingParams, Sequence
from gb300lane.engine.model import load_model
from gb300lane.spec import kernels

model = load_model()
spec, _ = parse_spec_config(json.dumps({"method": "dspark", "num_speculative_tokens": 5,
    "draft_sample_method": "probabilistic", "rejection_sample_method": sys.argv[1]}))
core = EngineCore(model, spec, max_num_seqs=4, seed=0, boot_seed=1)
prompts = [model.tokenizer.encode(t) for t in ("def parse(", "The lane boots dark", "SELECT count(*) FROM", "{\\"tool\\":")]
for i, ids in enumerate(prompts):
    core.add(Sequence(f"r{i}", ids, SamplingParams(temperature=(0.0, 1.0)[i % 2], max_tokens=48, ignore_eos=True, seed=i)))
seqs = list(core.waiting)
while core.has_work:
    core.step()
print(json.dumps({"path": kernels.describe(), "tokens": [s.output_ids for s in seqs]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["standard", "block"])
def test_the_engine_on_numpy_alone_gives_the_same_tokens(compiled, method):
    # Where no compiler built the kernels, the engine runs on numpy (GB300LANE_NO_KERNELS=1 is the same path).
    import json
    import subprocess
    import sys

    runs = {}
    for no_kernels in ("0", "1"):
        env = {**os.environ, "GB300LANE_NO_KERNELS": no_kernels}
        done = subprocess.run(
            [sys.executable, "-c", _ENGINE_TOKENS, method], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[no_kernels] = json.loads(done.stdout.splitlines()[-1])
    assert runs["0"]["path"].startswith("compiled kernels") and runs["1"]["path"].startswith("numpy"), runs
    assert all(len(t) == 48 for t in runs["0"]["tokens"])
    assert runs["0"]["tokens"] == runs["1"]["tokens"]


@pytest.mark.parametrize("numerics", [None, (7, 0.01)])
def test_the_targets_rows_in_the_kernel_are_numpys_bit_for_bit(compiled, numerics):
    from gb300lane.engine.model import MIXED, load_model

    model = load_model()
    rng = np.random.default_rng(3)
    vocab = model.vocab_size
    # Trigram contexts the model has, bigram-only contexts, and arbitrary ones, every class.
    tri = model.tri_keys[rng.integers(0, model.tri_keys.size, 300)]
    cls = np.concatenate([tri // (vocab * vocab), rng.integers(0, MIXED + 1, 200)])
    c2 = np.concatenate([(tri // vocab) % vocab, rng.integers(0, vocab, 200)])
    c1 = np.concatenate([tri % vocab, rng.integers(0, vocab, 200)])
    got = model.target_probs(cls, c2, c1, numerics)
    with kernels.numpy_only():
        expected = model.target_probs(cls, c2, c1, numerics)
    assert got.dtype == expected.dtype == np.float32
    assert np.array_equal(got, expected)
    with pytest.raises(IndexError):
        compiled.target_rows(
            np.array([0]),
            np.array([0]),
            np.array([vocab]),
            model.bigram,
            model.bi_keys,
            model.bi_indptr,
            model.bi_cols,
            model.bi_ml,
            model.bi_lambda,
            model.tri_keys,
            model.tri_indptr,
            model.tri_cols,
            model.tri_ml,
            model.tri_lambda,
            np.empty((1, vocab), dtype=np.float32),
        )


@pytest.mark.parametrize("method", ["standard", "block"])
def test_a_fused_support_step_is_verify_support_on_the_targets_rows(compiled, method):
    # A small target of bigram rows only (no sparse layers), so every next row is bigram[c1]; rows whose
    # draft q covers the target's mass leave no residual and take the target's row itself.
    rng = np.random.default_rng(11)
    vocab, width, batch, k = 16, 4, 7, 3
    bigram = rng.dirichlet(np.full(vocab, 0.5), size=vocab).astype(np.float32)
    bigram[:4, 4:] = 0.0  # rows with all their mass on the first four tokens
    bigram /= bigram.sum(axis=1, keepdims=True)
    empty = (
        np.empty(0, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.empty(0, dtype=np.int32),
        np.empty(0, dtype=np.float32),
        np.empty(0, dtype=np.float32),
    )
    for trial in range(30):
        covered = trial % 3 == 0  # the support is the first four tokens and q is above the target there
        cand = np.stack(
            [np.stack([rng.permutation(4 if covered else 8)[:width] for _ in range(k)]) for _ in range(batch)]
        )
        q_sup = rng.dirichlet(np.ones(width), size=(batch, k)).astype(np.float32)
        if covered:
            q_sup[:] = 1.0
        p_sup = rng.random((batch, k, width)).astype(np.float32)
        choice = rng.integers(0, width, (batch, k))
        drafts = np.take_along_axis(cand, choice[:, :, None], axis=2)[:, :, 0]
        full = np.concatenate([rng.integers(0, 4, (batch, 2)), drafts % 4], axis=1)
        u_accept, u_sample = rng.random((batch, k)), rng.random(batch)
        tau, tokens = np.empty(batch, dtype=np.int64), np.empty((batch, k + 1), dtype=np.int64)
        compiled.support_step(
            method == "block",
            p_sup,
            q_sup,
            choice,
            u_accept,
            u_sample,
            cand,
            drafts,
            np.zeros(batch, dtype=np.int64),
            full,
            bigram,
            *empty,
            *empty,
            tau,
            tokens,
            np.empty(batch),
        )
        with kernels.numpy_only():
            expected = verification.verify_support(
                method,
                p_sup,
                q_sup,
                cand,
                choice,
                u_accept,
                u_sample,
                lambda rows, pos: bigram[full[rows, pos + 1]],
                drafts=drafts,
            )
        assert np.array_equal(tau, expected.accepted), trial
        assert np.array_equal(tokens, expected.tokens), trial


def test_a_steps_uniforms_in_the_kernel_are_numpys(compiled):
    from gb300lane.engine import streams

    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**63, 40, dtype=np.uint64)
    positions = rng.integers(0, 2**40, 40)
    for k in (0, 1, 5, 9):
        got = streams.step_uniforms(keys, positions, k)
        with kernels.numpy_only():
            expected = streams.step_uniforms(keys, positions, k)
        for a, b in zip(got, expected):
            assert np.array_equal(a, b)
    for bad in (np.array([-1, 3]), np.array([2**47])):
        with pytest.raises(ValueError, match="positions must lie in"):
            streams.step_uniforms(keys[: bad.size], bad, 5)


def test_a_kept_tables_buffer_reads_the_arrays_current_values(compiled):
    # Read-only arrays of 16 KiB and more keep their buffer between calls: a later call must still see
    # the array's values as they are then, and the same array can still be written where a kernel writes.
    rng = np.random.default_rng(3)
    logp, z, scale = rng.random((100, 32)), rng.random((100, 32)), rng.random(100)
    first, again, fresh = np.empty((100, 32)), np.empty((100, 32)), np.empty((100, 32))
    compiled.anchor_logits(logp, z, scale, first, 1.5)
    logp *= 2.0
    compiled.anchor_logits(logp, z, scale, again, 1.5)
    compiled.anchor_logits(logp.copy(), z.copy(), scale, fresh, 1.5)
    assert np.array_equal(again, fresh) and not np.array_equal(first, again)
    compiled.anchor_logits(z, scale[:, None] * np.ones(32), scale, logp, 1.5)  # the kept array as an output
    compiled.anchor_logits(z, scale[:, None] * np.ones(32), scale, fresh, 1.5)
    assert np.array_equal(logp, fresh)


def _drafter_case(seed: int, batch: int = 16):
    from gb300lane.engine.drafter import DSparkDrafter
    from gb300lane.engine.model import load_model

    model = load_model()
    drafter = DSparkDrafter(model, topk=32, block_size=5)
    rng = np.random.default_rng(seed)
    keys = model.pair_keys[rng.integers(0, model.pair_keys.size, batch)]
    vocab = model.vocab_size
    classes, prev2, prev = keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab
    return model, drafter, classes, prev2, prev


def test_a_drafted_block_refuses_tables_and_tokens_out_of_range(compiled):
    # draft_block checks what it indexes: a class past the keeps, a token past the vocabulary, a wrong shape.
    model, drafter, classes, prev2, prev = _drafter_case(11)
    k, u = 5, np.random.default_rng(1).random((16, 5))
    temps = np.ones(16)
    block = drafter.draft_block(classes, prev2, prev, k, temps, u, probabilistic=True)
    assert block.tokens.shape == (16, 5) and block.cand.dtype == np.int64
    for bad, match in ((classes + 100, "out of the tables' range"), (None, "out of the tables' range")):
        c, p1 = (bad, prev) if bad is not None else (classes, prev + model.vocab_size)
        with pytest.raises(IndexError, match=match):
            drafter.draft_block(c, prev2, p1, k, temps, u, probabilistic=True)
    tables = drafter._tables_for(None)
    slots, keeps = drafter._block_args(tables, k)
    with pytest.raises(TypeError, match="3k-tuple"):
        compiled.draft_block(slots[:-1], keeps, (None, None, None), *([np.empty(1)] * 26), 1, 0, 0, 0.0, 0.0, 0.0)


def test_a_grammars_redraw_in_the_kernel_is_numpys_index(compiled):
    from gb300lane.engine import grammar

    rng = np.random.default_rng(8)
    for case in range(3000):
        vocab = int(rng.integers(1, 3500))
        row = rng.dirichlet(np.full(vocab, rng.choice([0.01, 0.3, 2.0]))).astype(np.float32)
        if case % 3 == 0:
            row[rng.random(vocab) < 0.6] = 0.0  # masked columns, and a zero head
        u = (0.0, 1.0 - 2.0**-53, float(rng.random()))[case % 3 if case < 30 else 2]
        got = grammar._redraw(row, u)
        with kernels.numpy_only():
            expected = grammar._redraw(row, u)
        assert got == expected, (case, vocab, u)


def test_a_requests_uniforms_in_the_kernel_are_numpys(compiled):
    from gb300lane.engine import streams

    rng = np.random.default_rng(9)
    keys = rng.integers(0, 2**63, 40, dtype=np.uint64)
    positions = rng.integers(0, 2**47, 40)
    for use, count in ((streams.GRAMMAR, 5), (streams.DRAFT, 1), (streams.SAMPLE, 17)):
        got = streams.uniforms(keys, positions, use, count)
        with kernels.numpy_only():
            expected = streams.uniforms(keys, positions, use, count)
        assert np.array_equal(got, expected)
    with pytest.raises(ValueError, match="positions must lie in"):
        streams.uniforms(keys[:1], np.array([2**47]), streams.GRAMMAR, 3)


def test_constrained_requests_give_the_same_tokens_on_numpy_alone(compiled):
    # Drafts redrawn inside a json_schema grammar, masked target rows and the dense verifier: the kernels'
    # redraws (row_index), uniforms and drafted blocks must leave every token as the numpy path has it.
    import json

    from gb300lane.engine.config import parse_spec_config
    from gb300lane.engine.core import EngineCore, SamplingParams, Sequence
    from gb300lane.engine.grammar import Grammar, compile_constraint
    from gb300lane.engine.model import load_model

    model = load_model()
    tok = model.tokenizer
    schema = {
        "type": "object",
        "properties": {
            "status": {"enum": ["ok", "down"]},
            "host": {"type": "string"},
            "checks": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["status", "host", "checks"],
    }
    text = compile_constraint(tok, "json", schema)
    spec, _ = parse_spec_config(
        json.dumps({"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "probabilistic"})
    )
    runs = []
    for numpy_alone in (False, True):
        core = EngineCore(model, spec, max_num_seqs=4, seed=0, boot_seed=2)
        seqs = [
            Sequence(
                f"r{i}",
                tok.encode("The report:"),
                SamplingParams(
                    temperature=(1.0, 0.0)[i % 2 and i > 4], max_tokens=64, min_tokens=64, ignore_eos=True, seed=i
                ),
            )
            for i in range(8)
        ]
        for seq in seqs:
            seq.grammar = Grammar(tok, text)
            core.add(seq)
        with kernels.numpy_only() if numpy_alone else contextlib.nullcontext():
            while core.has_work:
                core.step()
        runs.append([s.output_ids for s in seqs])
        assert all(s.error is None for s in seqs)
    assert runs[0] == runs[1]
