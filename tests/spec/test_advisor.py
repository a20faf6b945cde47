"""The k advisor, the `spec` CLI group, and the pinned public API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gb300lane.spec as spec
from gb300lane.cli.main import app
from gb300lane.errors import LaneError
from gb300lane.spec import AcceptanceCurve, StepTimePoint, advise, fit_step_time, load_advisor_input

DATA = Path(__file__).parents[1] / "data" / "spec"
K5 = AcceptanceCurve(k=5, a_p=(0.717, 0.476, 0.310, 0.205, 0.145))
K9 = AcceptanceCurve(k=9, a_p=(0.612, 0.379, 0.235, 0.147, 0.097, 0.063, 0.036, 0.020, 0.011))
STEPS = [StepTimePoint(k=5, ms=11.0), StepTimePoint(k=9, ms=12.2)]


def test_public_api_is_pinned():
    assert spec.__all__ == [
        "AcceptanceCurve",
        "AcceptanceStats",
        "Advice",
        "AdvisorInput",
        "KPrediction",
        "MetricsScrape",
        "SpecCounters",
        "SpecLogLine",
        "StepTimeModel",
        "StepTimePoint",
        "VERIFY_METHODS",
        "VerifyResult",
        "a_p_from_marginals",
        "acceptance",
        "advise",
        "block_verify",
        "delta",
        "expected_accepted",
        "fit_step_time",
        "load_advisor_input",
        "marginals",
        "parse_metrics_text",
        "parse_spec_log_line",
        "ratio_to_control_mean",
        "token_verify",
        "tokens_per_second",
        "tokens_per_step_from_a_p",
        "verify",
        "verify_support",
    ]
    assert spec.__all__ == sorted(spec.__all__)
    assert all(hasattr(spec, name) for name in spec.__all__)


def test_step_time_fit_is_least_squares():
    m = fit_step_time(STEPS)
    assert m.intercept_ms == pytest.approx(9.5) and m.slope_ms == pytest.approx(0.3)
    noisy = fit_step_time(
        [StepTimePoint(k=k, ms=10 + 0.5 * k + e) for k, e in ((1, 0.1), (3, -0.1), (5, 0.1), (7, -0.1))]
    )
    # slope = 0.5 + sum((k - 4) e) / sum((k - 4)^2) = 0.5 - 0.4 / 20; intercept = mean(ms) - 4 slope
    assert noisy.slope_ms == pytest.approx(0.48) and noisy.intercept_ms == pytest.approx(10.08)
    with pytest.raises(LaneError, match="two different k"):
        fit_step_time([StepTimePoint(k=5, ms=11.0)])


def test_writeup_prose_numbers_prefer_five_to_nine():
    advice = advise([K5, K9], STEPS, trained_block=5)
    assert advice.recommended_k == 5
    rows = {r.k: r for r in advice.predictions}
    assert round(rows[5].tokens_per_step, 3) == 2.853 and round(rows[9].tokens_per_step, 3) == 2.600
    assert rows[5].tok_s > rows[9].tok_s and not rows[5].extrapolated and rows[9].outside_trained_block
    # Only the k=9 curve: still five, on the step-time slope alone, and the advice says it extrapolated.
    only9 = advise([K9], STEPS, trained_block=5, candidates=[5, 9])
    assert only9.recommended_k == 5 and only9.predictions[0].extrapolated
    assert any("truncates the k = 9 curve" in w for w in only9.warnings)


def test_warns_when_recommending_past_the_trained_block():
    flat = AcceptanceCurve(k=8, marginal=(0.95,) * 8)
    advice = advise([flat], [StepTimePoint(k=1, ms=10.0), StepTimePoint(k=8, ms=10.7)], trained_block=5)
    assert advice.recommended_k == 8
    assert any("exceeds the trained block (dspark_block_size = 5)" in w for w in advice.warnings)


def test_curve_validation():
    with pytest.raises(ValueError, match="exactly one of"):
        AcceptanceCurve(k=2, a_p=(0.5, 0.2), marginal=(0.5, 0.4))
    with pytest.raises(ValueError, match="2 positions but k = 3"):
        AcceptanceCurve(k=3, a_p=(0.5, 0.2))


def test_receipts_file_and_its_errors(tmp_path):
    data = load_advisor_input(DATA / "advisor_prose_c1.json")
    assert data.trained_block == 5 and len(data.curves) == 2
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"schema_version": 1, "curves": [{"k": 2, "a_p": [0.5]}], "step_ms": [{"k": 1, "ms": 1}]})
    )
    with pytest.raises(LaneError, match=r"bad.json: curves\.0"):
        load_advisor_input(bad)
    with pytest.raises(LaneError, match="no such receipts file"):
        load_advisor_input(tmp_path / "missing.json")


runner = CliRunner()


def test_cli_from_metrics_table_and_json():
    res = runner.invoke(
        app,
        [
            "spec",
            "from-metrics",
            str(DATA / "vllm_k5_after.txt"),
            "--before",
            str(DATA / "vllm_k5_before.txt"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert round(out["acceptance"]["tokens_per_step"], 3) == 2.853
    assert out["counters"]["accepted_per_pos"] == [717, 476, 310, 205, 145]
    res = runner.invoke(app, ["spec", "from-metrics", str(DATA / "vllm_k5_after.txt")])
    assert res.exit_code == 0 and "tokens/step" in res.stdout and "0.679" in res.stdout


def test_cli_from_metrics_restart_is_one_error():
    res = runner.invoke(
        app, ["spec", "from-metrics", str(DATA / "vllm_k5_restarted.txt"), "--before", str(DATA / "vllm_k5_after.txt")]
    )
    assert res.exit_code == 1
    assert "probably restarted" in res.output and len(res.output.strip().splitlines()) == 1


def test_cli_advise_from_receipts_and_flags():
    res = runner.invoke(app, ["spec", "advise", "--receipts", str(DATA / "advisor_prose_c1.json"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["recommended_k"] == 5
    res = runner.invoke(
        app,
        [
            "spec",
            "advise",
            "--a-p",
            "0.717,0.476,0.310,0.205,0.145",
            "--a-p",
            "0.612,0.379,0.235,0.147,0.097,0.063,0.036,0.020,0.011",
            "--step",
            "5:11.0",
            "--step",
            "9:12.2",
            "--trained-block",
            "5",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "recommended k = 5" in res.stdout


def test_every_spec_command_has_help():
    for cmd in (["spec", "--help"], ["spec", "from-metrics", "--help"], ["spec", "advise", "--help"]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 0 and len(res.stdout) > 100
