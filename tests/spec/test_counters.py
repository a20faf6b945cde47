"""Recorded /metrics scrapes and log lines, parsed into counters; deltas refuse restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane.errors import MetricsError
from gb300lane.spec import acceptance, delta, parse_metrics_text, parse_spec_log_line

DATA = Path(__file__).parents[1] / "data" / "spec"


def scrape(name: str, **kw):
    return parse_metrics_text((DATA / name).read_text(encoding="utf-8"), source=name, **kw)


def test_vllm_scrape_sums_engines_and_reads_labels():
    s = scrape("vllm_k5_after.txt")
    assert s.model_name == "deepseek-v4.1-flash"
    assert s.spec.num_drafts == 4000 and s.spec.num_draft_tokens == 20000
    assert s.spec.accepted_per_pos == (2717, 1876, 1210, 805, 565)
    assert s.spec.num_accepted_tokens == sum(s.spec.accepted_per_pos)
    assert s.spec.drafts_by_length is None
    assert s.generation_tokens == 13853 and s.prompt_tokens == 52000 and s.requests_success == 40
    assert s.extras == {}


def test_delta_of_two_scrapes_gives_the_window():
    d = delta(scrape("vllm_k5_before.txt"), scrape("vllm_k5_after.txt"))
    assert d.spec.num_drafts == 1000 and d.spec.accepted_per_pos == (717, 476, 310, 205, 145)
    stats = acceptance(d.spec)
    assert round(stats.tokens_per_step, 3) == 2.853
    assert d.generation_tokens == 2853


def test_delta_refuses_a_restarted_engine():
    with pytest.raises(MetricsError, match=r"vllm:spec_decode_num_drafts_total went backwards .*probably restarted"):
        delta(scrape("vllm_k5_after.txt"), scrape("vllm_k5_restarted.txt"))


def test_embedded_engine_drafts_by_length_gives_exact_a_p():
    s = scrape("embedded_schedule.txt")
    assert s.spec.drafts_by_length == {3: 400, 5: 600}
    assert s.extras["gb300lane_engine_verify_steps_total"] == 1000.0
    stats = acceptance(s.spec)
    assert stats.a_p_exact and stats.a_p == pytest.approx((0.7, 0.48, 0.3, 0.2, 0.14))
    same = delta(s, s)
    assert same.spec.drafts_by_length == {3: 0, 5: 0} and same.extras["gb300lane_engine_modelled_seconds_total"] == 0


def test_model_name_selection():
    # Two lanes' scrapes in one text (comment lines dropped so HELP/TYPE do not repeat).
    text = (DATA / "vllm_k5_after.txt").read_text() + (DATA / "embedded_schedule.txt").read_text()
    two = "\n".join(line for line in text.splitlines() if not line.startswith("#")) + "\n"
    with pytest.raises(MetricsError, match="several models"):
        parse_metrics_text(two)
    assert parse_metrics_text(two, model_name="lane-model").spec.num_drafts == 1000
    with pytest.raises(MetricsError, match="no counters for model_name='other'"):
        parse_metrics_text(two, model_name="other")


def test_garbage_is_refused_with_the_source_named():
    with pytest.raises(MetricsError, match="^scrape.txt: not Prometheus text"):
        parse_metrics_text("this is { not metrics\n", source="scrape.txt")


def test_spec_log_lines():
    lines = (DATA / "spec_log_lines.txt").read_text().splitlines()
    first = parse_spec_log_line(lines[0])
    assert first.mean_acceptance_length == 2.85 and first.accepted_tokens == 1853 and first.drafted_tokens == 5000
    assert first.per_position == (0.717, 0.476, 0.310, 0.205, 0.145)
    assert first.draft_acceptance_rate == pytest.approx(0.371)
    counters = first.to_counters()
    assert counters.num_drafts == 1000 and counters.accepted_per_pos == (717, 476, 310, 205, 145)
    assert parse_spec_log_line(lines[1]) is None
    third = parse_spec_log_line(lines[2])  # a prefixed line with thousands separators
    assert third.accepted_throughput == 1440.0 and len(third.per_position) == 9
    assert round(acceptance(third.to_counters()).tokens_per_step, 2) == 2.60
    with pytest.raises(MetricsError, match="lacks"):
        parse_spec_log_line("SpecDecoding metrics: Mean acceptance length: 2.85")
