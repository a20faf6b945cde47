"""Exact expected accepted drafts by enumeration, against closed forms and the paper's example."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from gb300lane.spec import expected_accepted


def test_paper_example():
    p, q = [F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)]
    assert expected_accepted(p, q, 2, "standard") == F(10, 9)
    assert expected_accepted(p, q, 2, "token") == F(10, 9)
    assert expected_accepted(p, q, 2, "block") == F(11, 9)
    assert expected_accepted(["1/3", "2/3"], [2 / 3, 1 / 3], 2, "block") == F(11, 9)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_token_matches_the_geometric_closed_form(k):
    p, q = [F(1, 2), F(1, 3), F(1, 6)], [F(1, 4), F(1, 4), F(1, 2)]
    beta = sum(min(a, b) for a, b in zip(p, q))
    assert expected_accepted(p, q, k, "standard") == sum(beta**i for i in range(1, k + 1))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_block_is_never_worse_and_equal_at_one_draft(k):
    p, q = [F(1, 2), F(1, 3), F(1, 6)], [F(1, 4), F(1, 4), F(1, 2)]
    token, block = expected_accepted(p, q, k, "standard"), expected_accepted(p, q, k, "block")
    assert block >= token
    if k == 1:
        assert block == token


def test_identical_distributions_accept_everything():
    assert expected_accepted([F(1, 2), F(1, 2)], [F(1, 2), F(1, 2)], 3, "block") == 3
    assert expected_accepted([F(1, 2), F(1, 2)], [F(1, 2), F(1, 2)], 3, "standard") == 3


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="sum to 1"):
        expected_accepted([0.5, 0.4], [0.5, 0.5], 2, "block")
    with pytest.raises(ValueError, match="method"):
        expected_accepted([0.5, 0.5], [0.5, 0.5], 2, "fly")
    with pytest.raises(ValueError, match="enumeration limit"):
        expected_accepted([F(1, 10)] * 10, [F(1, 10)] * 10, 9, "block")
