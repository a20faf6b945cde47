"""The lane's dashboard against a real Prometheus: it scrapes the embedded engine and `gb300lane metrics`' textfile.

A short bench runs against the engine; then every PromQL expression of the
shipped Grafana dashboard (panels and annotations, `$__rate_interval`
substituted) goes through Prometheus's HTTP API and must return data, and the
tokens per verify step Prometheus computes must be the bench's own.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.bench.window import run_window
from gb300lane.cli.main import app
from gb300lane.lane import Died, HttpReady, wait_ready
from gb300lane.lane import hash_ledger as hash_ledger
from gb300lane.paths import shipped
from gb300lane.recipes.schema import WindowSpec
from gb300lane.testing.free_ports import free_port
from gb300lane.testing.simlane import SimLane

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SPEC = {
    "method": "dspark",
    "num_speculative_tokens": 5,
    "draft_sample_method": "probabilistic",
    "rejection_sample_method": "block",
}


def _builder():
    spec = importlib.util.spec_from_file_location(
        "build_grafana_dashboard", ROOT / "scripts" / "build_grafana_dashboard.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_dashboard_is_what_the_builder_builds() -> None:
    board = json.loads(shipped("grafana-lane-dashboard.json").read_text())
    assert board == _builder().dashboard()
    exprs = _builder().expressions(board)
    assert len(exprs) >= 20 and all("$__interval" not in e for _, e in exprs)  # only $__rate_interval is Grafana's
    titles = {p["title"] for p in board["panels"]}
    for needle in (
        "Tokens per verify step",
        "Marginal acceptance per position",
        "Draft tokens per draft",
        "Time to first token",
        "Time per output token",
        "End-to-end latency",
        "Generation throughput",
        "Promotion ledger",
    ):
        assert needle in titles


def test_metrics_prints_the_lane_facts_with_prometheus_clients_exposition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    sim = SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}},
        {"local-v27": {"verdict": "PASS", "reference": "card BR1 verdict 2", "rescored": True}},
    )
    monkeypatch.setenv("GB300LANE_LANE_OPS", f"sim:{sim.path}")
    assert runner.invoke(app, ["promote", "local-v26", "--force", "--reason", "first"]).exit_code == 0
    assert runner.invoke(app, ["promote", "local-v27"]).exit_code == 0
    assert runner.invoke(app, ["rollback"]).exit_code == 0
    hash_ledger.record_boot("abcdef0123456789", "h1", "miss", 41.5)
    hash_ledger.record_boot("abcdef0123456789", "h1", "hit", 12.25)
    res = runner.invoke(app, ["metrics"])
    assert res.exit_code == 0, res.output
    fams = {f.name: f for f in text_string_to_metric_families(res.stdout)}
    (prod,) = fams["gb300lane_production_info"].samples
    assert prod.labels["recipe"] == "local-v26" and prod.labels["fingerprint"]
    (pair,) = fams["gb300lane_rollback_pair_info"].samples
    assert pair.labels["recipe"] == "local-v27"
    events = {s.labels["kind"]: s.value for s in fams["gb300lane_ledger_events"].samples}
    assert events["promote"] == 2 and events["rollback"] == 1 and events["promote_failed"] == 0
    boots = {s.labels["outcome"]: s.value for s in fams["gb300lane_boots_recorded"].samples}
    assert boots == {"hit": 1, "miss": 1, "unknown": 0}
    (last,) = fams["gb300lane_boot_seconds"].samples
    assert last.value == 12.25 and last.labels["outcome"] == "hit"
    verdicts = [s for s in fams["gb300lane_card_verdict"].samples if s.value == 1]
    assert {(s.labels["card"], s.labels["verdict"]) for s in verdicts} >= {("br1-block-verification", "PASS")}
    assert all(s.value == 1 for s in fams["gb300lane_facts_up"].samples)
    out = tmp_path / "textfile" / "gb300lane.prom"
    assert runner.invoke(app, ["metrics", "--textfile", str(out)]).exit_code == 0
    assert "gb300lane_production_info{" in out.read_text()


def test_an_unreadable_ledger_is_reported_down_not_a_failed_export() -> None:
    from gb300lane.promote.ledger import ledger_path

    path = ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a database" * 100)
    res = runner.invoke(app, ["metrics"])
    assert res.exit_code == 0, res.output
    assert 'gb300lane_facts_up{source="promotion_ledger"} 0.0' in res.stdout


class _Textfile(http.server.BaseHTTPRequestHandler):
    path_on_disk: Path

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.path_on_disk.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _query(prom: str, expr: str) -> list[dict]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _await(prom: str, expr: str, ok: Callable[[float], bool], timeout_s: float = 90) -> None:
    """Wait until the single value `expr` returns satisfies `ok` (Prometheus scrapes on its own clock)."""
    deadline = time.monotonic() + timeout_s
    rows: list[dict] = []
    while time.monotonic() < deadline:
        rows = _query(prom, expr)
        if rows and ok(float(rows[0]["value"][1])):
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never satisfied {expr} within {timeout_s:.0f} s: {rows}")


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the lane's facts: a promotion and a rollback on record, a boot, the shipped cards' verdicts
    sim = SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}},
        {"local-v27": {"verdict": "PASS", "reference": "card BR1 verdict 2", "rescored": True}},
    )
    monkeypatch.setenv("GB300LANE_LANE_OPS", f"sim:{sim.path}")
    assert runner.invoke(app, ["promote", "local-v26", "--force", "--reason", "first"]).exit_code == 0
    assert runner.invoke(app, ["promote", "local-v27"]).exit_code == 0
    hash_ledger.record_boot("abcdef0123456789", "h1", "hit", 12.25)
    textfile = tmp_path / "textfile" / "gb300lane.prom"
    assert runner.invoke(app, ["metrics", "--textfile", str(textfile)]).exit_code == 0

    handler = type("Handler", (_Textfile,), {"path_on_disk": textfile})
    files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=files.serve_forever, daemon=True).start()

    engine_port, prom_port = free_port(), free_port()
    log = tmp_path / "engine.log"
    with log.open("wb") as out:
        engine = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gb300lane.engine",
                "serve",
                "--model",
                "builtin",
                "--served-model-name",
                "lane",
                "--host",
                "127.0.0.1",
                "--port",
                str(engine_port),
                "--time-scale",
                "0",
                "--seed",
                "0",
                "--speculative-config",
                json.dumps(SPEC),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / "cache")},
        )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(
            {  # YAML is a superset of JSON
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "engine", "static_configs": [{"targets": [f"127.0.0.1:{engine_port}"]}]},
                    {
                        "job_name": "gb300lane",
                        "metrics_path": "/gb300lane.prom",
                        "static_configs": [{"targets": [f"127.0.0.1:{files.server_address[1]}"]}],
                    },
                ],
            }
        )
    )
    prometheus = shutil.which("prometheus")
    prom_log = tmp_path / "prometheus.log"
    with prom_log.open("wb") as out:
        prom_proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    prom = f"http://127.0.0.1:{prom_port}"
    try:
        url = f"http://127.0.0.1:{engine_port}"
        wait_ready(
            [HttpReady(url=url + "/health")],
            timeout_s=120,
            poll_s=0.1,
            logs=lambda _c: log.read_text(errors="replace"),
            watch=lambda: None if engine.poll() is None else Died(description=f"engine exited ({engine.returncode})"),
        )
        wait_ready(
            [HttpReady(url=prom + "/-/ready")],
            timeout_s=60,
            poll_s=0.2,
            logs=lambda _c: prom_log.read_text(errors="replace"),
            watch=lambda: (
                None if prom_proc.poll() is None else Died(description=f"prometheus exited ({prom_proc.returncode})")
            ),
        )
        # One request first, so the per-request series exist, then a few scrapes before the load: every
        # counter and bucket starts from a sample, however slow the machine.
        warm = urllib.request.Request(
            url + "/v1/completions",
            method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "lane", "prompt": "warm", "max_tokens": 8}).encode(),
        )
        with urllib.request.urlopen(warm, timeout=60) as resp:
            assert resp.status == 200
        warmed = time.time()
        _await(prom, 'timestamp(up{job="engine"})', lambda v: v > warmed + 1)
        window = WindowSpec(
            name="dash",
            classes=("prose", "code"),
            transcripts_per_class=3,
            rounds=1,
            concurrency=(1, 3),
            temperature=1.0,
            top_p=1.0,
            seed_base=7,
            forced_tokens=48,
        )
        result = run_window(url, window, model="lane")
        assert result.valid, [c.invalid_reasons for c in result.cells]
        loaded = time.time()
        _await(prom, 'timestamp(up{job="engine"})', lambda v: v > loaded + 1)  # the last counters scraped

        targets = _query(prom, "up")
        assert {t["metric"]["job"]: t["value"][1] for t in targets} == {"engine": "1", "gb300lane": "1"}
        board = json.loads(shipped("grafana-lane-dashboard.json").read_text())
        empty = []
        for where, expr in _builder().expressions(board):
            rows = _query(prom, expr.replace("$__rate_interval", "5m"))
            values = [float(r["value"][1]) for r in rows]
            if not any(math.isfinite(v) for v in values):
                empty.append(f"{where}: {expr[:120]} -> {rows[:3]}")
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)

        # Prometheus's tokens per verify step is the bench's, over the same counters
        drafts = sum(c.spec.num_drafts for c in result.cells)
        accepted = sum(c.spec.num_accepted_tokens for c in result.cells)
        (tps,) = _query(
            prom,
            "1 + sum(increase(vllm:spec_decode_num_accepted_tokens_total[5m])) "
            "/ sum(increase(vllm:spec_decode_num_drafts_total[5m]))",
        )
        assert float(tps["value"][1]) == pytest.approx(1 + accepted / drafts, rel=0.01)
        (prod,) = _query(prom, "gb300lane_production_info")
        assert prod["metric"]["recipe"] == "local-v27"
    finally:
        for proc in (prom_proc, engine):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        files.shutdown()
