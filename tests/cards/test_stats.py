"""The noise floor and paired statistic, and the adapters from bench/lane files to scoring data."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane.cards.cardfile import load_card
from gb300lane.cards.decide.data import (
    marginal,
    merged_cells,
    tokens_per_step_from_a_p,
)
from gb300lane.cards.decide.stats import paired_bootstrap, spread
from gb300lane.cards.record.arms import boot_facts_from_report, window_data_from_result

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"


def test_spread_is_one_minus_min_over_max() -> None:
    assert spread([374.0, 385.5]) == pytest.approx(1 - 374.0 / 385.5)
    assert spread([1.0]) is None and spread([]) is None


def test_paired_bootstrap_is_seeded_and_pairs_by_transcript() -> None:
    ctrl = {f"t{i}": 100.0 + 40 * i for i in range(12)}  # wide between transcripts
    cand = {t: v * 1.02 for t, v in ctrl.items()}
    a = paired_bootstrap(cand, [ctrl, ctrl])
    b = paired_bootstrap(cand, [ctrl, ctrl])
    assert a == b  # seeded
    assert a.n == 12 and 0.01 < a.low_rel < a.mean_rel < a.high_rel < 0.03
    # a transcript missing from one arm is left out of the pairing
    assert paired_bootstrap(cand, [{k: v for k, v in ctrl.items() if k != "t0"}]).n == 11
    assert paired_bootstrap({"t0": 1.0}, [ctrl]) is None


def test_a_p_identities_match_the_write_up() -> None:
    assert round(tokens_per_step_from_a_p([0.717, 0.476, 0.310, 0.205, 0.145]), 2) == 2.85
    m = marginal([0.717, 0.476, 0.310, 0.205, 0.145])
    assert m[0] == 0.717 and round(m[4], 3) == 0.707


def test_window_result_adapter_keeps_rounds_and_transcripts() -> None:
    card, _ = load_card(DATA / "mini.yaml")
    w = card.window("primary")
    res = fakes.window_result(w, factor=1.0, round_jitter={2: 0.04}).model_dump(mode="json")
    data = window_data_from_result(res, "primary")
    assert data.clock == "modelled" and len(data.cells) == 8
    assert data.tokens_per_step == pytest.approx(1 + 0.8 + 0.6 + 0.45 + 0.3 + 0.2)
    cells = merged_cells(data)
    c = cells[("prose", 1)]
    assert len(c.rounds) == 2 and spread(c.rounds) == pytest.approx(1 - 1 / 1.04)
    assert len(c.per_transcript) == 6


def test_boot_report_adapter_reads_the_lane_checks() -> None:
    rep = fakes.boot_report("B", "local-v27", hit=False, rejection="block", kv=123, foreign=2)
    f = boot_facts_from_report(rep.model_dump(mode="json"), None)
    assert f.hash_hit is False and f.kv_pool_tokens == 123 and f.foreign_clients == 2
    assert f.flags == {"speculative.rejection_sample_method": "block"}
    assert f.env is None and f.env_set_digest == "abc123"
    # the card's own foreign count (before and after the windows) wins over the boot-time one
    assert boot_facts_from_report(rep.model_dump(mode="json"), 0).foreign_clients == 0
