"""The fault switch: a verifier made lossy on purpose, refused when misnamed, announced when on.

The statistical tests run the engine core in process with fixed seeds and
pinned numerics, so they are deterministic: the statistic is the same number
on every run, and the tolerance says how far an exact sampler may sit from
its expectation (4 standard deviations) while a fault sits far outside it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from gb300lane.engine.args import parse_serve_args
from gb300lane.engine.config import parse_spec_config
from gb300lane.engine.core import EngineCore, Sequence
from gb300lane.engine.faults import FAULT_ENV, Faults, parse_faults
from gb300lane.engine.logprobs import score_positions
from gb300lane.engine.model import load_model
from gb300lane.engine.sampling import SamplingParams
from gb300lane.errors import EngineError
from gb300lane.spec.verification import biased_token_verify, token_verify

from engines import http_get, http_post, running_engine

PROMPTS = ("The report says that", "def main(args):\n    ", "ls -la /var/log\n", '{"name": "', "Shipping dates: ")


def _spec(method: str):
    spec, _ = parse_spec_config(
        json.dumps(
            {
                "method": "dspark",
                "num_speculative_tokens": 5,
                "draft_sample_method": "probabilistic",
                "rejection_sample_method": method,
            }
        )
    )
    return spec


def top1_z(fault: str | None, method: str, *, seqs: int = 32, tokens: int = 64) -> float:
    """(count of tokens that were the target's top-1 - sum of p_max) / sd, over seqs x tokens sampled at T = 1.

    An exact sampler draws the top-1 token with probability p_max at every
    position, so the count's expectation is the sum of p_max and its variance
    the sum of p_max (1 - p_max); the logprobs (top-1 entry and rank) give both.
    """
    model = load_model()
    core = EngineCore(
        model,
        _spec(method),
        max_num_seqs=seqs,
        seed=7,
        boot_seed=11,
        numerics_jitter=0.0,
        faults=parse_faults([fault]) if fault else None,
    )
    running = []
    for i in range(seqs):
        seq = Sequence(
            f"r{i}",
            model.tokenizer.encode(PROMPTS[i % len(PROMPTS)]),
            SamplingParams(temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=1000 + i),
        )
        core.add(seq)
        running.append(seq)
    while core.has_work:
        core.step()
    hits = expected = variance = 0.0
    for seq in running:
        ids = seq.prompt_ids + seq.output_ids
        for s in score_positions(model, core.numerics, seq.cls, ids, len(seq.prompt_ids), len(ids), 1):
            p_max = float(np.exp(s.top[0][1]))
            hits += s.rank == 1
            expected += p_max
            variance += p_max * (1.0 - p_max)
    return (hits - expected) / variance**0.5


@pytest.mark.parametrize("method", ["standard", "block"])
def test_an_exact_engine_samples_its_own_distribution_at_temperature_1(method):
    assert abs(top1_z(None, method)) < 4.0


@pytest.mark.parametrize("fault, sign", [("temperature=0.7", 1), ("accept_bias=0.5", -1)])
def test_a_faulted_engine_deviates_from_its_distribution(fault, sign):
    z = top1_z(fault, "standard")
    assert sign * z > 6.0, z


def test_faults_change_nothing_when_off():
    """The fault-free engine takes the support path and no fault code: the same tokens with faults=None as before."""
    model = load_model()
    outs = []
    for faults in (None, Faults()):
        core = EngineCore(
            model, _spec("block"), max_num_seqs=4, seed=2, boot_seed=3, numerics_jitter=0.0, faults=faults
        )
        seqs = [
            Sequence(f"r{i}", model.tokenizer.encode(PROMPTS[i]), SamplingParams(max_tokens=30, seed=i))
            for i in range(4)
        ]
        for s in seqs:
            core.add(s)
        while core.has_work:
            core.step()
        outs.append([s.output_ids for s in seqs])
    # Faults() with nothing on still routes every row through the reference path: the same tokens, because the
    # reference and the support paths sample the same distribution with the same draws.
    assert outs[0] == outs[1]


def test_biased_verification_at_bias_1_is_the_token_rule():
    rng = np.random.default_rng(0)
    batch, k, vocab = 64, 4, 50
    p = rng.dirichlet(np.full(vocab, 0.3), size=(batch, k + 1)).astype(np.float32)
    q = rng.dirichlet(np.full(vocab, 0.3), size=(batch, k)).astype(np.float32)
    drafts = np.array([[rng.choice(vocab, p=q[b, i] / q[b, i].sum()) for i in range(k)] for b in range(batch)])
    greedy = np.arange(batch) % 7 == 0
    exact = token_verify(p, q, drafts, np.random.default_rng(5), greedy=greedy)
    same = biased_token_verify(p, q, drafts, np.random.default_rng(5), bias=np.ones(k), greedy=greedy)
    assert np.array_equal(exact.tokens, same.tokens) and np.array_equal(exact.accepted, same.accepted)
    more = biased_token_verify(p, q, drafts, np.random.default_rng(5), bias=np.full(k, 3.0), greedy=greedy)
    assert more.accepted.sum() > exact.accepted.sum()


def test_faults_parse_and_describe_themselves():
    faults = parse_faults(
        ["accept_bias=1.2,position_bias=3:1.05", "temperature=0.9", "top_p_ignored_in_verify", "draft_temperature_only"]
    )
    assert faults == Faults(
        accept_bias=1.2,
        position_bias=(3, 1.05),
        temperature=0.9,
        top_p_ignored_in_verify=True,
        draft_temperature_only=True,
    )
    assert parse_faults([faults.describe()]) == faults
    assert parse_faults([]) is None and parse_faults([""]) is None
    params = SamplingParams(temperature=0.5, top_p=0.8)
    assert faults.target_params(params) == SamplingParams(temperature=1.0, top_p=1.0)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("bogus", "unknown fault 'bogus'; the faults are: accept_bias=X"),
        ("accept_bias", "--fault accept_bias: needs a value; pass accept_bias=X"),
        ("accept_bias=-1", "must be a finite number > 0"),
        ("temperature=hot", "'hot' is not a number"),
        ("position_bias=0:1.1", "position_bias takes I:X with I a draft position >= 1"),
        ("position_bias=2", "position_bias takes I:X"),
        ("top_p_ignored_in_verify=1", "takes no value; pass --fault top_p_ignored_in_verify"),
        ("temperature=0.9,temperature=0.8", "given twice"),
    ],
)
def test_a_bad_fault_is_refused_with_the_fix(spec, message):
    with pytest.raises(EngineError) as err:
        parse_serve_args(["--fault", spec])
    assert message in str(err.value)


def test_the_fault_comes_from_the_environment_when_no_flag_is_given(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "accept_bias=1.2")
    assert parse_serve_args([]).faults == "accept_bias=1.2"
    assert parse_serve_args(["--fault", "temperature=0.9"]).faults == "temperature=0.9"
    monkeypatch.delenv(FAULT_ENV)
    assert parse_serve_args([]).faults == ""


def test_a_faulted_engine_says_so_in_its_boot_log_version_and_answers():
    flags = [
        "--model",
        "builtin",
        "--served-model-name",
        "lane",
        "--fault",
        "accept_bias=1.2",
        "--speculative-config",
        json.dumps({"method": "dspark", "num_speculative_tokens": 3}),
    ]
    with running_engine(flags) as eng:
        assert "FAULTS ON: accept_bias=1.2" in eng.log.getvalue()
        status, raw = http_get(eng.url + "/version")
        assert status == 200 and json.loads(raw)["faults"] == "accept_bias=1.2"
        status, body = http_post(eng.url + "/v1/completions", {"prompt": "The report", "max_tokens": 3})
        assert status == 200 and body["gb300lane"]["faults"] == "accept_bias=1.2"
