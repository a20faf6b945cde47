"""Sampling at every temperature: log space, greedy below vLLM's resolution, limits as limits, no NaN."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gb300lane.engine.config import parse_spec_config
from gb300lane.engine.core import EngineCore, Sequence
from gb300lane.engine.model import CLASSES, corpus_texts, load_model
from gb300lane.engine.sampling import SamplingParams, shape_rows
from gb300lane.errors import EngineError


@pytest.fixture(scope="module")
def model():
    return load_model()


def _spec(method="block"):
    return parse_spec_config(
        json.dumps(
            {
                "method": "dspark",
                "num_speculative_tokens": 5,
                "draft_sample_method": "probabilistic",
                "rejection_sample_method": method,
            }
        )
    )[0]


def _prompts(model, per_class=3, length=40):
    out = []
    for cls in CLASSES:
        docs = [d for d in corpus_texts()[cls].split("<|endoftext|>") if d.strip()]
        out += [model.tokenizer.encode(docs[(i * 7) % len(docs)])[:length] for i in range(per_class)]
    return out


def _texts(model, prompts, temperature, method="block"):
    core = EngineCore(model, _spec(method), max_num_seqs=8, seed=0, boot_seed=3)
    seqs = [
        Sequence(f"r{i}", p, SamplingParams(temperature=temperature, max_tokens=64, ignore_eos=True, seed=i))
        for i, p in enumerate(prompts)
    ]
    for s in seqs:
        core.add(s)
    while core.has_work:
        core.step()
    return core, [s.output_ids for s in seqs]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["standard", "block"])
def test_at_temperature_1e_4_the_text_follows_the_temperature_0_text_except_at_ties(model, method):
    # A count-based target has ties: tokens seen equally often, split only by smoothing
    # (1e-5 to 1e-4 nats apart). At T = 1e-4 a tie within a few T is a fair coin, as it
    # would be on any sampler; anything wider must never flip (exp(-20) is below 1e-8).
    temperature = 1e-4
    prompts = _prompts(model)
    core, greedy = _texts(model, prompts, 0.0, method)
    _, cold = _texts(model, prompts, temperature, method)
    identical = 0
    for prompt, g, c in zip(prompts, greedy, cold):
        first = next((i for i, (a, b) in enumerate(zip(g, c)) if a != b), None)
        if first is None:
            identical += 1
            continue
        c2, c1 = (prompt + g)[len(prompt) + first - 2 : len(prompt) + first]
        cls = np.array([model.classify(prompt)])
        p = model.target_probs(cls, np.array([c2]), np.array([c1]), core._numerics)[0].astype(np.float64)
        assert g[first] == int(p.argmax())
        gap = math.log(p[g[first]]) - math.log(p[c[first]])
        assert 0.0 <= gap < 20 * temperature, (first, g[first], c[first], gap)
    assert identical >= len(prompts) - 3, f"only {identical} of {len(prompts)} texts identical"


def test_shape_rows_never_underflows_and_tiny_temperatures_keep_the_top_token():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(512, 0.3), size=4).astype(np.float32)
    for temperature in (1e-5, 1e-4, 1e-3, 0.05, 1.0, 7.0, 1e6):
        out = shape_rows(p, SamplingParams(temperature=temperature))
        assert np.isfinite(out).all() and np.allclose(out.sum(axis=1), 1.0, atol=1e-5)
        if temperature <= 1e-3:
            assert (out.argmax(axis=1) == p.argmax(axis=1)).all() and (out.max(axis=1) > 0.999).all()
    hot = shape_rows(p, SamplingParams(temperature=1e6))
    assert hot.max() < 2.0 / 512  # the limit T -> inf is uniform


def test_truncation_limits_behave_as_limits_ties_included():
    row = np.array([[0.1, 0.3, 0.3, 0.2, 0.1]], dtype=np.float32)
    for top_p in (1e-300, 1e-12, 0.01):
        assert shape_rows(row, SamplingParams(top_p=top_p)).tolist() == [[0.0, 1.0, 0.0, 0.0, 0.0]]
    tied = shape_rows(row, SamplingParams(min_p=1.0))[0]
    assert tied[1] == tied[2] == pytest.approx(0.5) and tied[[0, 3, 4]].sum() == 0.0
    nucleus = shape_rows(row, SamplingParams(top_p=0.5))[0]  # 0.3 + 0.3 reaches it
    assert nucleus[[1, 2]].tolist() == pytest.approx([0.5, 0.5]) and nucleus[[0, 3, 4]].sum() == 0.0
    assert shape_rows(row, SamplingParams(top_k=3))[0, [0, 4]].sum() == 0.0


def test_min_tokens_bans_eos_unless_eos_is_all_a_row_allows():
    row = np.full((2, 4), 0.25, dtype=np.float32)
    only_eos = np.array([[True, True, False, False], [True, False, False, False]])
    out = shape_rows(row, SamplingParams(), ban_eos=2, allowed=only_eos)
    assert out[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert out[1].tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", float("nan")),
        ("temperature", float("inf")),
        ("temperature", -0.5),
        ("top_p", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("min_p", float("nan")),
        ("min_p", -1e-9),
        ("top_k", 0),
        ("top_k", -2),
        ("max_tokens", -1),
        ("seed", 1.5),
    ],
)
def test_non_finite_or_out_of_range_values_never_reach_the_sampler(model, field, value):
    seq = Sequence("r", [1, 2, 3], SamplingParams(**{field: value}))
    core = EngineCore(model, _spec(), boot_seed=0)
    with pytest.raises(EngineError, match=field):
        core.add(seq)
    assert not core.has_work
