"""`gb300lane bench` and `gb300lane smoke` through the CLI against a real local SSE server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.bench.catalog import STANDARD_WINDOWS, resolve_window, standard_window, with_overrides
from gb300lane.cli.main import app
from gb300lane.errors import BenchError
from gb300lane.paths import shipped
from gb300lane.recipes import load_recipe

from fakes import lane as fake_lane

runner = CliRunner()
WINDOW_FILE = Path(__file__).parents[1] / "data" / "bench" / "quick-window.yaml"


@pytest.fixture
def lane():
    server = fake_lane.FakeLane().start()
    server.behaviour.tokens_per_step = 2
    # The shipped recipes' k schedule, drafted as vLLM drafts it (the bench and smoke checks measure it).
    server.behaviour.draft_k = 5
    server.behaviour.schedule = ((1, 4, 5), (5, 8, 3), (9, 32, 3))
    yield server
    server.stop()


def test_standard_windows_match_the_write_up():
    primary = standard_window("primary-t1")
    assert primary.classes == ("prose", "structured", "code", "shell_ops", "tool_json")
    assert (primary.transcripts_per_class, primary.forced_tokens, primary.concurrency, primary.rounds) == (
        40,
        256,
        (1, 8),
        2,
    )
    assert (primary.temperature, primary.top_p) == (1.0, 1.0) and primary.seed_base is not None
    assert standard_window("parity-t0").temperature == 0.0
    assert set(STANDARD_WINDOWS) == {"primary-t1", "parity-t0"}


def test_window_resolution_order_and_errors(tmp_path):
    recipe = load_recipe("v27")
    assert resolve_window("bounds-t1", recipe).name == "t1-seeded"  # gate name
    assert resolve_window("t0-parity", recipe).temperature == 0.0  # window name
    assert resolve_window(str(WINDOW_FILE)).name == "quick"
    with pytest.raises(BenchError, match="no window 'nope'; known: .*primary-t1"):
        resolve_window("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nclasses: [prose]\ntranscripts_per_class: 0\nconcurrency: [1]\ntemperature: 0\nforced_tokens: 4\n"
    )
    with pytest.raises(BenchError, match=r"bad.yaml: invalid window: transcripts_per_class"):
        resolve_window(str(bad))
    with pytest.raises(BenchError, match="missing.yaml: window file not found"):
        resolve_window(str(tmp_path / "missing.yaml"))
    quick = with_overrides(standard_window("primary-t1"), transcripts=2, tokens=16, rounds=1, concurrency=[1, 8])
    assert (quick.transcripts_per_class, quick.forced_tokens, quick.rounds) == (2, 16, 1)
    with pytest.raises(BenchError, match="concurrency"):
        with_overrides(quick, concurrency=[0])


@pytest.mark.slow
def test_bench_prints_tables_and_writes_the_result_once(lane, tmp_path):
    out = tmp_path / "w.json"
    args = [
        "bench",
        "--endpoint",
        lane.url,
        "--window",
        "primary-t1",
        "--transcripts",
        "2",
        "--tokens",
        "9",
        "--concurrency",
        "1,2",
        "--out",
        str(out),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    for needle in (
        "Decode tok/s, temp 1.0",
        "C1 r1",
        "C2 r2",
        "tool_json",
        "tokens/step",
        "TTFT, TPOT, E2E in ms",
        "wall clock (the client's)",
        "req/s",
        "1.800",
    ):
        assert needle in res.output
    data = json.loads(out.read_text())
    assert data["schema_version"] == 1 and data["window"]["forced_tokens"] == 9
    assert len(data["records"]) == 5 * 2 * 2 * 2 and len(data["cells"]) == 5 * 2 * 2
    again = runner.invoke(app, args)
    assert again.exit_code == 1 and "already exists" in again.output


def test_bench_json_and_invalid_cells_exit_nonzero(lane):
    lane.behaviour.fail_requests = {1: 500}
    res = runner.invoke(app, ["bench", "--endpoint", lane.url, "--window", str(WINDOW_FILE), "--json"])
    assert res.exit_code == 1
    summary = json.loads(res.stdout[: res.stdout.rindex("}") + 1])
    assert summary["valid"] is False and "HTTP 500" in summary["cells"][0]["invalid_reasons"][0]


def test_reasons_print_verbatim_even_with_brackets(lane):
    lane.behaviour.no_done = {0}
    res = runner.invoke(app, ["bench", "--endpoint", lane.url, "--window", str(WINDOW_FILE)])
    assert res.exit_code == 1
    assert (
        "invalid prose C1 r1: 1 of 2 requests failed; first: prose-001: truncated stream: ended without data: [DONE]"
        in res.output
    )


def test_bench_usage_errors(lane):
    res = runner.invoke(app, ["bench", "--window", "primary-t1"])
    assert res.exit_code == 2 and "exactly one of --endpoint" in res.output
    res = runner.invoke(app, ["bench", "--endpoint", lane.url, "--window", "primary-t1", "--concurrency", "1,x"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["bench", "--endpoint", "http://127.0.0.1:9", "--window", "primary-t1"])
    assert res.exit_code == 1 and "cannot reach the lane" in res.output


def _small_smoke_recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """local-v26 and local-v27 with their smoke windows cut to 2 transcripts a class, 16 tokens, C1: what the
    smoke command does with its gates is the same at any size, and one stream holds its load on any host."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    text = (shipped("recipes") / "local-v26.yaml").read_text()
    for big, small in (
        ("transcripts_per_class: 4", "transcripts_per_class: 2"),
        ("concurrency: [1, 8]", "concurrency: [1]"),
        ("forced_tokens: 64", "forced_tokens: 16"),
    ):
        assert text.count(big) == 2, big  # the two smoke windows
        text = text.replace(big, small)
    # 90 tokens are too few for the losslessness check (INCONCLUSIVE below 200): this test is about the gates' exit
    text = text.replace("      lossless: {alpha: 0.01, margin: 0.05, min_tokens: 200}\n", "")
    assert "lossless:" not in text
    (recipes / "local-v26.yaml").write_text(text)
    shutil.copy(shipped("recipes") / "local-v27.yaml", recipes / "local-v27.yaml")
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(recipes))
    return recipes


@pytest.mark.slow
def test_smoke_command_exit_code_follows_the_gates(lane, tmp_path, monkeypatch):
    _small_smoke_recipes(tmp_path, monkeypatch)
    res = runner.invoke(app, ["smoke", "local-v27", "--endpoint", lane.url])
    assert res.exit_code == 0, res.output
    assert "PASS" in res.output and "parity-t0" in res.output and "bounds-t1" in res.output
    lane.behaviour.tokens_per_step = 1  # no drafts accepted: tokens/step 1.0 is below the recipe's 1.5
    res = runner.invoke(app, ["smoke", "local-v27", "--endpoint", lane.url, "--json"])
    assert res.exit_code == 1
    report = json.loads(res.stdout)
    assert [g["status"] for g in report["gates"]] == ["PASS", "INCONCLUSIVE"]


def test_every_bench_command_has_help():
    for cmd in ("bench", "smoke"):
        res = runner.invoke(app, [cmd, "--help"])
        assert res.exit_code == 0 and len(res.output) > 100


def test_progress_bar_counts_cells_requests_and_errors(lane):
    import io

    from rich.console import Console

    from gb300lane.bench.progress import RichWindowProgress
    from gb300lane.bench.window import run_window

    lane.behaviour.fail_requests = {0: 500}
    buf = io.StringIO()
    window = resolve_window(str(WINDOW_FILE))
    with RichWindowProgress(console=Console(file=buf, force_terminal=True, width=150)) as bar:
        run_window(lane.url, window, model="fake-model", progress=bar)
    text = buf.getvalue()
    assert "quick" in text and "4/4" in text and "cells 2/2" in text and "1 errors" in text


def test_public_api_is_pinned():
    import gb300lane.bench as bench

    assert bench.__all__ == sorted(bench.__all__)
    assert {"run_window", "run_smoke", "load_transcripts", "WindowResult", "SmokeReport"} <= set(bench.__all__)


@pytest.mark.slow
def test_smoke_with_reference_and_unreachable_lane(lane, tmp_path, monkeypatch):
    recipes = _small_smoke_recipes(tmp_path, monkeypatch)
    control = tmp_path / "control.json"
    res = runner.invoke(app, ["bench", "--endpoint", lane.url, "--window", "t0-parity", "--lane", "local-v26"])
    assert res.exit_code == 2  # --endpoint and --lane together
    window = load_recipe("local-v26", recipes).smoke.gates[0].window
    from gb300lane.bench.store import save_result
    from gb300lane.bench.window import run_window

    save_result(run_window(lane.url, window, model="fake-model"), control)
    res = runner.invoke(app, ["smoke", "local-v27", "--endpoint", lane.url, "--reference", str(control), "--json"])
    report = json.loads(res.stdout)
    parity = report["gates"][0]
    assert parity["status"] == "PASS" and parity["details"]["control"] == str(control)
    assert parity["details"]["flips"] == 0 and parity["details"]["compared"] == 6  # 3 classes x 2 transcripts at C1
    res = runner.invoke(app, ["smoke", "local-v27", "--endpoint", "http://127.0.0.1:9"])
    assert res.exit_code == 1 and "cannot reach the lane at http://127.0.0.1:9" in res.output


@pytest.mark.slow
def test_bench_lane_resolves_endpoint_model_and_fingerprint_from_the_recipe(lane, tmp_path, monkeypatch):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    text = (shipped("recipes") / "local-v26.yaml").read_text()
    assert "port: 30106" in text
    (recipes / "local-v26.yaml").write_text(text.replace("port: 30106", f"port: {lane.port}"))
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(recipes))
    out = tmp_path / "w.json"
    res = runner.invoke(
        app,
        ["bench", "--lane", "local-v26", "--window", "bounds-t1", "--transcripts", "1", "--out", str(out), "--json"],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    from gb300lane.recipes import fingerprint

    assert data["recipe"] == "local-v26" and data["fingerprint"] == fingerprint(load_recipe("local-v26", recipes))
    assert data["model"] == "deepseek-v4.1-flash" and data["endpoint"] == lane.url
    assert data["window"]["name"] == "t1-seeded" and data["window"]["transcripts_per_class"] == 1
    assert {body["model"] for body in lane.requests} == {"deepseek-v4.1-flash"}


def test_lane_endpoint_prefers_the_running_instance(monkeypatch):
    import gb300lane.lane as lane_pkg
    from gb300lane.bench.catalog import lane_endpoint
    from gb300lane.lane import InstanceInfo

    recipe = load_recipe("local-v27")

    def info(name: str, state: str, port: int) -> InstanceInfo:
        return InstanceInfo(
            name=name,
            recipe="local-v27",
            arm=None,
            runtime="process",
            state=state,
            endpoint=f"http://127.0.0.1:{port}",
            fingerprint=None,
            phase="up",
            containers={},
            labels={},
            recorded=True,
        )

    monkeypatch.setattr(lane_pkg, "list_instances", lambda: [info("local-local-v27", "running", 31999)])
    assert lane_endpoint(recipe) == ("http://127.0.0.1:31999", "running instance local-local-v27")
    monkeypatch.setattr(lane_pkg, "list_instances", lambda: [info("a", "stopped", 31999)])
    assert lane_endpoint(recipe)[0] == "http://127.0.0.1:30106"
    monkeypatch.setattr(lane_pkg, "list_instances", lambda: [info("a", "running", 1), info("b", "running", 2)])
    endpoint, how = lane_endpoint(recipe)
    assert endpoint == "http://127.0.0.1:30106" and "pass --endpoint" in how


def test_bench_open_loop_from_the_cli(lane, tmp_path):
    out = tmp_path / "open.json"
    args = [
        "bench",
        "--endpoint",
        lane.url,
        "--window",
        "primary-t1",
        "--transcripts",
        "3",
        "--tokens",
        "6",
        "--classes",
        "prose",
        "--rounds",
        "1",
        "--request-rate",
        "30,60",
        "--arrivals",
        "constant",
        "--out",
        str(out),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    for needle in ("open loop at 30, 60 requests/s (constant arrivals)", "30/s r1", "60/s r1", "req/s", "E2E"):
        assert needle in res.output
    saved = json.loads(out.read_text())
    assert saved["load"] == {
        "mode": "open",
        "request_rates": [30.0, 60.0],
        "arrivals": "constant",
        "arrival_seed": None,
    }
    assert [c["request_rate"] for c in saved["cells"]] == [30.0, 60.0]
    both = runner.invoke(
        app, ["bench", "--endpoint", lane.url, "--window", "primary-t1", "--concurrency", "1", "--request-rate", "2"]
    )
    assert both.exit_code == 2 and "cannot be combined" in both.output
    bad = runner.invoke(app, ["bench", "--endpoint", lane.url, "--window", "primary-t1", "--request-rate", "0"])
    assert bad.exit_code == 2 and "positive finite" in bad.output
