"""Acceptance arithmetic: both conventions, and the write-up's figures computed from its inputs."""

from __future__ import annotations

import pytest

from gb300lane.errors import MetricsError
from gb300lane.spec import (
    SpecCounters,
    a_p_from_marginals,
    acceptance,
    marginals,
    ratio_to_control_mean,
    tokens_per_second,
    tokens_per_step_from_a_p,
)

PROSE_K5 = (0.717, 0.476, 0.310, 0.205, 0.145)
PROSE_K9 = (0.612, 0.379, 0.235, 0.147, 0.097, 0.063, 0.036, 0.020, 0.011)


def test_writeup_tokens_per_step_from_a_p():
    assert round(tokens_per_step_from_a_p(PROSE_K5), 3) == 2.853
    assert round(tokens_per_step_from_a_p(PROSE_K9), 3) == 2.600
    # "Positions 6 through 9 contribute 0.130 tokens between them."
    assert round(tokens_per_step_from_a_p(PROSE_K9) - tokens_per_step_from_a_p(PROSE_K9[:5]), 3) == 0.130


def test_writeup_br1_ratio_against_the_control_mean():
    assert round(ratio_to_control_mean(3.262, 3.204, 3.189), 3) == 1.020
    with pytest.raises(ValueError):
        ratio_to_control_mean(3.262)


def test_writeup_tok_s_from_tokens_per_step_and_step_time():
    k5 = tokens_per_second(2.85, 11.0)
    k9 = tokens_per_second(2.60, 12.2)
    assert round(k5, 1) == 259.1 and round(k9, 1) == 213.1
    # Two multipliers moving apart: 8.8% fewer tokens per step, 11% longer steps, an 18% loss.
    assert round(k9 / k5, 3) == 0.823
    with pytest.raises(ValueError):
        tokens_per_second(2.85, 0.0)


def test_writeup_marginals_first_position_and_the_k9_cliff():
    m5 = marginals(PROSE_K5)
    m9 = marginals(PROSE_K9)
    assert m5[0] == pytest.approx(0.717) and m9[0] == pytest.approx(0.612)
    assert all(0.65 <= m <= 0.72 for m in m5)  # "between 0.65 and 0.72 across all five positions"
    assert all(m < 0.6 for m in m9[6:])  # past the trained block
    assert a_p_from_marginals(m5) == pytest.approx(PROSE_K5)


def test_single_length_counters_give_exact_a_p():
    c = SpecCounters(
        num_drafts=1000, num_draft_tokens=5000, num_accepted_tokens=1853, accepted_per_pos=(717, 476, 310, 205, 145)
    )
    s = acceptance(c)
    assert s.a_p_exact and s.a_p == pytest.approx(PROSE_K5) and s.vllm_per_position == pytest.approx(PROSE_K5)
    assert s.tokens_per_step == pytest.approx(2.853) and s.tokens_per_full_draft == pytest.approx(2.853)
    assert s.mean_drafts_per_step == 5.0 and s.draft_acceptance_rate == pytest.approx(1853 / 5000)
    assert s.marginal[1] == pytest.approx(476 / 717)


def test_k_schedule_conventions_differ_and_are_named():
    # 600 drafts of length 5 (one stream) and 400 of length 3 (batch above 4).
    c = SpecCounters(
        num_drafts=1000,
        num_draft_tokens=4200,
        num_accepted_tokens=1684,
        accepted_per_pos=(700, 480, 300, 120, 84),
        drafts_by_length={3: 400, 5: 600},
    )
    s = acceptance(c)
    assert s.a_p_exact
    assert s.a_p == pytest.approx((0.7, 0.48, 0.3, 0.2, 0.14))
    assert s.vllm_per_position == pytest.approx((0.7, 0.48, 0.3, 0.12, 0.084))
    assert s.tokens_per_step == pytest.approx(2.684)  # 1 + accepted / drafts, vLLM's mean acceptance length
    assert s.tokens_per_full_draft == pytest.approx(2.82)  # 1 + sum(a_p): not the same thing under a schedule
    assert s.mean_drafts_per_step == pytest.approx(4.2)
    unknown = acceptance(c.model_copy(update={"drafts_by_length": None}))
    assert not unknown.a_p_exact and unknown.a_p == pytest.approx(unknown.vllm_per_position)


def test_inconsistent_counters_are_refused_by_name():
    with pytest.raises(MetricsError, match="num_drafts_total is 0"):
        acceptance(SpecCounters(num_drafts=0, num_draft_tokens=0, num_accepted_tokens=0))
    with pytest.raises(MetricsError, match="per_pos_total sums to 10"):
        acceptance(SpecCounters(num_drafts=10, num_draft_tokens=30, num_accepted_tokens=12, accepted_per_pos=(6, 3, 1)))
    with pytest.raises(MetricsError, match="drafts_by_length_total sums to 9"):
        acceptance(
            SpecCounters(
                num_drafts=10,
                num_draft_tokens=30,
                num_accepted_tokens=10,
                accepted_per_pos=(6, 3, 1),
                drafts_by_length={3: 9},
            )
        )
    with pytest.raises(MetricsError, match="implies 29 draft tokens"):
        acceptance(
            SpecCounters(
                num_drafts=10,
                num_draft_tokens=30,
                num_accepted_tokens=10,
                accepted_per_pos=(6, 3, 1),
                drafts_by_length={3: 9, 2: 1},
            )
        )
