#!/usr/bin/env python3
"""Build the lane's Grafana dashboard: gb300lane/data/grafana-lane-dashboard.json.

Panels read the engine's vLLM metrics (the same names a real vLLM 0.33 lane
exposes) and the lane's own facts from `gb300lane metrics` (node_exporter's
textfile collector): tokens per verify step, per-position acceptance and its
marginal, draft tokens per draft, TTFT / TPOT / E2E percentiles, generation
throughput, requests running and waiting, production and the rollback pair,
verdicts, boots and compile-cache outcomes, and the promotion ledger's events
(as a panel and as annotations). Every query uses only `$__rate_interval`
and `$datasource`, so it runs unchanged in Prometheus once the interval is
substituted (tests/promote/test_exposition_prometheus.py does exactly that).

    python scripts/build_grafana_dashboard.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "gb300lane" / "data" / "grafana-lane-dashboard.json"
RATE = "$__rate_interval"
#: Draft positions the marginal expression covers (0-based, as vLLM labels them); more than any block size in use.
MAX_POSITIONS = 16
DS = {"type": "prometheus", "uid": "${datasource}"}


def _rate(metric: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}[{RATE}]))"


def marginal_expr() -> str:
    """accepted at p / accepted at p-1 per position p >= 1, one series per position (labels shifted by label_replace)."""
    acc = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    shifted = " or ".join(
        f'label_replace(sum by (position) (rate({acc}{{position="{p}"}}[{RATE}])), "position", "{p + 1}", "position", ".*")'
        for p in range(MAX_POSITIONS - 1)
    )
    return f'sum by (position) (rate({acc}{{position!="0"}}[{RATE}])) / on (position) ({shifted})'


def _target(expr: str, legend: str, ref: str, *, instant: bool = False, fmt: str = "time_series") -> dict[str, Any]:
    return {
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "instant": instant,
        "range": not instant,
        "format": fmt,
    }


def _panel(
    pid: int,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    pos: tuple[int, int, int, int],
    *,
    kind: str = "timeseries",
    unit: str = "short",
) -> dict[str, Any]:
    x, y, w, h = pos
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
    }


def _quantiles(metric: str, name: str) -> list[dict[str, Any]]:
    return [
        _target(f"histogram_quantile({q}, {_rate(metric + '_bucket', 'le')})", f"{name} p{int(q * 100)}", ref)
        for q, ref in ((0.5, "A"), (0.9, "B"), (0.99, "C"))
    ]


def dashboard() -> dict[str, Any]:
    drafts = _rate("vllm:spec_decode_num_drafts_total")
    panels = [
        _panel(
            1,
            "Tokens per verify step",
            "1 + accepted draft tokens / drafts: tokens each verify step emits.",
            [_target(f"1 + {_rate('vllm:spec_decode_num_accepted_tokens_total')} / {drafts}", "tokens/step", "A")],
            (0, 0, 8, 8),
        ),
        _panel(
            2,
            "Accepted at position (vLLM's convention)",
            "Accepted at position p over all drafts (vLLM's per-position rate; p is 0-based here). With a "
            "k schedule, drafts shorter than p count as not accepted.",
            [
                _target(
                    f"{_rate('vllm:spec_decode_num_accepted_tokens_per_pos_total', 'position')} "
                    f"/ ignoring (position) group_left {drafts}",
                    "p={{position}}",
                    "A",
                )
            ],
            (8, 0, 8, 8),
            unit="percentunit",
        ),
        _panel(
            3,
            "Marginal acceptance per position",
            "Accepted at p / accepted at p-1: the chance a draft token is accepted given the one before it was "
            "(exact while k is fixed; the write-up's Figure 5).",
            [_target(marginal_expr(), "p={{position}}", "A")],
            (16, 0, 8, 8),
            unit="percentunit",
        ),
        _panel(
            4,
            "Draft tokens per draft",
            "Draft tokens / drafts: the mean draft length the lane runs (its k).",
            [_target(f"{_rate('vllm:spec_decode_num_draft_tokens_total')} / {drafts}", "draft tokens/draft", "A")],
            (0, 8, 8, 8),
        ),
        _panel(
            5,
            "Generation throughput",
            "Generated tokens per second (vllm:generation_tokens_total).",
            [
                _target(_rate("vllm:generation_tokens_total"), "tok/s", "A"),
                _target(_rate("vllm:request_success_total"), "requests/s", "B"),
            ],
            (8, 8, 8, 8),
        ),
        _panel(
            6,
            "Requests running and waiting",
            "The engine's batch and its queue.",
            [
                _target("sum (vllm:num_requests_running)", "running", "A"),
                _target("sum (vllm:num_requests_waiting)", "waiting", "B"),
            ],
            (16, 8, 8, 8),
        ),
        _panel(
            7,
            "Time to first token",
            "Percentiles of vllm:time_to_first_token_seconds.",
            _quantiles("vllm:time_to_first_token_seconds", "TTFT"),
            (0, 16, 8, 8),
            unit="s",
        ),
        _panel(
            8,
            "Time per output token",
            "Percentiles of vllm:request_time_per_output_token_seconds.",
            _quantiles("vllm:request_time_per_output_token_seconds", "TPOT"),
            (8, 16, 8, 8),
            unit="s",
        ),
        _panel(
            9,
            "End-to-end latency",
            "Percentiles of vllm:e2e_request_latency_seconds.",
            _quantiles("vllm:e2e_request_latency_seconds", "E2E"),
            (16, 16, 8, 8),
            unit="s",
        ),
        _panel(
            10,
            "Production",
            "The recipe serving production and the kept rollback pair (gb300lane metrics).",
            [
                _target("gb300lane_production_info", "{{recipe}} {{fingerprint}}", "A", instant=True, fmt="table"),
                _target("gb300lane_rollback_pair_info", "{{recipe}} {{fingerprint}}", "B", instant=True, fmt="table"),
            ],
            (0, 24, 12, 6),
            kind="table",
        ),
        _panel(
            11,
            "Verdicts",
            "Each card's newest verdict (1 on its verdict) and its number.",
            [
                _target("gb300lane_card_verdict == 1", "{{card}} {{verdict}}", "A", instant=True, fmt="table"),
                _target("gb300lane_card_verdict_number", "{{card}}", "B", instant=True, fmt="table"),
            ],
            (12, 24, 12, 6),
            kind="table",
        ),
        _panel(
            12,
            "Promotion ledger",
            "Promotions, rollbacks, failures, recoveries and prunes on record.",
            [
                _target("gb300lane_ledger_events_total", "{{kind}}", "A"),
                _target("gb300lane_transition_unfinished", "unfinished {{kind}}", "B"),
            ],
            (0, 30, 8, 8),
        ),
        _panel(
            13,
            "Boot seconds",
            "The newest boot of each fingerprint, containers started to ready.",
            [_target("gb300lane_boot_seconds", "{{fingerprint}} ({{outcome}})", "A")],
            (8, 30, 8, 8),
            unit="s",
        ),
        _panel(
            14,
            "Compile-cache outcomes of recorded boots",
            "Hits and misses of the boots the hash ledger keeps.",
            [
                _target("sum by (outcome) (gb300lane_boots_recorded)", "{{outcome}}", "A"),
                _target("gb300lane_facts_up", "facts readable: {{source}}", "B"),
            ],
            (16, 30, 8, 8),
        ),
    ]
    return {
        "title": "gb300lane lane",
        "uid": "gb300lane-lane",
        "description": "One serving lane: speculative decoding, latency, throughput and the lane's own events.",
        "tags": ["gb300lane", "vllm"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "timezone": "utc",
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
        },
        "annotations": {
            "list": [
                {
                    "name": "Lane events",
                    "datasource": DS,
                    "enable": True,
                    "iconColor": "orange",
                    "expr": "gb300lane_ledger_event_last_timestamp_seconds * 1000",
                    "useValueForTime": True,
                    "titleFormat": "{{kind}}",
                    "textFormat": "{{recipe}}",
                    "step": "60s",
                },
            ]
        },
        "panels": panels,
    }


def expressions(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every query in a dashboard: panel targets and annotations."""
    out = [(f"panel {p['id']} {p['title']} / {t['refId']}", t["expr"]) for p in board["panels"] for t in p["targets"]]
    out += [(f"annotation {a['name']}", a["expr"]) for a in board["annotations"]["list"] if "expr" in a]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed file differs from what this builds")
    args = ap.parse_args(argv)
    text = json.dumps(dashboard(), indent=2) + "\n"
    if args.check:
        same = OUT.is_file() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs; run scripts/build_grafana_dashboard.py'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"{OUT}: {len(expressions(dashboard()))} queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
