"""`gb300lane bench export`: vllm bench serve keys (checked against the snapshot derived from vLLM 0.33) and CSV."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gb300lane.bench.export import METRIC_PERCENTILES, PERCENTILE_METRICS, cell_records, vllm_bench_keys
from gb300lane.bench.store import load_result
from gb300lane.cli.main import app
from gb300lane.paths import shipped

from fakes import lane as fake_lane

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> Path:
    server = fake_lane.FakeLane().start()
    server.behaviour.tokens_per_step = 2
    server.behaviour.step_sleep_s = 0.002
    out = tmp_path_factory.mktemp("export") / "w.json"
    try:
        res = runner.invoke(
            app,
            [
                "bench",
                "--endpoint",
                server.url,
                "--window",
                "primary-t1",
                "--transcripts",
                "3",
                "--tokens",
                "9",
                "--rounds",
                "1",
                "--concurrency",
                "1,2",
                "--classes",
                "prose,code",
                "--out",
                str(out),
            ],
        )
    finally:
        server.stop()
    assert res.exit_code == 0, res.output
    return out


def _expected_vllm_keys() -> set[str]:
    s = vllm_bench_keys()["save_result"]
    percentiles = [str(int(float(p))) if float(p) == int(float(p)) else p for p in s["default_metric_percentiles"]]
    per_metric = {
        t.format(metric=m, p=p) for t in s["percentile_key_templates"] for m in PERCENTILE_METRICS for p in percentiles
    }
    return (
        set(s["header_keys"])
        | (set(s["generation_keys"]) - set(s["detailed_only_keys"]))
        | set(s["spec_decode_keys"])
        | per_metric
    )


def test_the_snapshot_is_vllm_0_33_and_the_export_asks_for_what_vllm_can_write() -> None:
    data = vllm_bench_keys()
    assert data["vllm_version"] == "0.33.0" and data["source"]["wheel"].startswith("vllm-0.33.0-")
    s = data["save_result"]
    assert set(PERCENTILE_METRICS) <= set(s["percentile_metrics"])
    assert set(s["default_percentile_metrics_generation"]) <= set(PERCENTILE_METRICS)  # the defaults, plus e2el
    assert [float(p) for p in s["default_metric_percentiles"]] == list(METRIC_PERCENTILES)
    for key in ("request_throughput", "output_throughput", "total_token_throughput", "duration", "completed"):
        assert key in s["generation_keys"]
    assert {
        "spec_decode_acceptance_rate",
        "spec_decode_acceptance_length",
        "spec_decode_num_drafts",
        "spec_decode_per_position_acceptance_rates",
    } <= set(s["spec_decode_keys"])


@pytest.mark.slow
def test_vllm_export_has_exactly_vllms_keys_and_recomputed_values(window: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.vllm.jsonl"
    res = runner.invoke(app, ["bench", "export", str(window), "--format", "vllm", "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = load_result(window)
    lines = out.read_text().splitlines()
    assert len(lines) == len(result.cells) == 2 * 2  # one vllm run per cell
    expected = _expected_vllm_keys()
    for line, cell in zip(lines, result.cells):
        row = json.loads(line)
        own = {k for k in row if k.startswith("gb300lane_")}  # vLLM's --metadata KEY=VALUE keys
        assert set(row) - own == expected
        recs = [r for r in cell_records(result, cell) if r.ok]
        assert row["completed"] == cell.requests == len(recs) and row["failed"] == 0
        assert row["num_prompts"] == cell.requests and row["max_concurrency"] == cell.concurrency
        assert row["request_rate"] == "inf" and row["gb300lane_class"] == cell.cls
        assert row["total_output_tokens"] == cell.output_tokens
        assert row["duration"] == pytest.approx(cell.wall_span_s)
        assert row["output_throughput"] == pytest.approx(cell.output_tokens / cell.wall_span_s)
        assert row["request_throughput"] == pytest.approx(cell.requests / cell.wall_span_s)
        # vLLM's definitions, over every event with choices: ttft to the first, e2el to the last (the
        # finish chunk), one ITL gap before each later event.
        assert all(r.event_times_s and r.event_times_s[0] == r.ttft_s for r in recs)
        assert row["mean_ttft_ms"] == pytest.approx(np.mean([r.event_times_s[0] for r in recs]) * 1e3)
        assert row["p99_e2el_ms"] == pytest.approx(np.percentile([r.event_times_s[-1] for r in recs], 99) * 1e3)
        tpots = [(r.event_times_s[-1] - r.event_times_s[0]) / (r.output_tokens - 1) for r in recs]
        assert row["median_tpot_ms"] == pytest.approx(np.median(tpots) * 1e3)
        gaps = [b - a for r in recs for a, b in zip(r.event_times_s, r.event_times_s[1:])]
        assert row["mean_itl_ms"] == pytest.approx(np.mean(gaps) * 1e3)
        assert row["p99_itl_ms"] == pytest.approx(np.percentile(gaps, 99) * 1e3)
        assert len(row["latencies"]) == len(recs)
        assert row["spec_decode_num_drafts"] == cell.spec.num_drafts
        assert row["spec_decode_acceptance_length"] == pytest.approx(cell.spec.tokens_per_step)
        assert row["spec_decode_acceptance_rate"] == pytest.approx(cell.spec.draft_acceptance_rate * 100)
        assert row["spec_decode_per_position_acceptance_rates"] == pytest.approx(cell.spec.vllm_per_position)
    again = runner.invoke(app, ["bench", "export", str(window), "--format", "vllm", "--out", str(out)])
    assert again.exit_code == 1 and "already exists" in again.output


def test_csv_export_is_one_row_per_cell(window: Path) -> None:
    res = runner.invoke(app, ["bench", "export", str(window), "--format", "csv"])
    assert res.exit_code == 0, res.output
    result = load_result(window)
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == len(result.cells)
    for row, cell in zip(rows, result.cells):
        assert (row["class"], int(row["concurrency"]), int(row["round"])) == (cell.cls, cell.concurrency, cell.round)
        assert row["valid"] == "True" and int(row["output_tokens"]) == cell.output_tokens
        assert float(row["wall_decode_tok_s"]) == pytest.approx(
            cell.decode_tok_s if cell.clock == "wall" else cell.other_clock.decode_tok_s
        )
        assert float(row["tokens_per_step"]) == pytest.approx(cell.spec.tokens_per_step)
        assert [float(v) for v in row["a_p"].split()] == pytest.approx(cell.spec.a_p, rel=1e-5)


@pytest.mark.slow
def test_export_errors_are_one_line(tmp_path: Path, window: Path) -> None:
    bad = runner.invoke(app, ["bench", "export", str(window), "--format", "guidellm"])
    assert bad.exit_code == 2 and "expected one of vllm, csv" in bad.output
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    res = runner.invoke(app, ["bench", "export", str(junk), "--format", "csv"])
    assert res.exit_code == 1 and "not a window result" in res.output and "gb300lane bench --out" in res.output


def _script():
    spec = importlib.util.spec_from_file_location(
        "snapshot_vllm_bench_keys", ROOT / "scripts" / "snapshot_vllm_bench_keys.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(
    not os.environ.get("GB300LANE_VLLM_WHEEL"), reason="set GB300LANE_VLLM_WHEEL to a vllm 0.33.0 wheel"
)
def test_committed_key_snapshot_regenerates_identically(tmp_path: Path) -> None:
    out = tmp_path / "keys.json"
    _script().main([os.environ["GB300LANE_VLLM_WHEEL"], "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(shipped("vllm-0.33.0-bench-serve-keys.json").read_text())


def test_every_export_format_has_a_writer() -> None:
    from gb300lane.bench.export import EXPORTERS, FORMATS

    assert set(EXPORTERS) == set(FORMATS)
