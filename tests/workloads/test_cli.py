"""`gb300lane workload ...`: thin commands over the library, errors as one line and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import cli

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GB300LANE_WORKLOADS_DIR", raising=False)


def test_import_list_show_stats_split_and_pad() -> None:
    ran = cli(
        "workload",
        "import",
        str(DATA / "openai.jsonl"),
        "--name",
        "ops",
        "--format",
        "openai",
        "--class-field",
        "metadata.team",
    )
    assert ran.returncode == 0, ran.stderr
    assert "records 7: kept 4, dropped 3" in ran.stdout and "class support-bots: 2 transcripts" in ran.stdout
    rows = json.loads(cli("workload", "list", "--json").stdout)
    assert [r["name"] for r in rows] == ["builtin", "ops"]
    assert cli("workload", "split", "ops", "--held-out", "0.5").returncode == 0
    shown = json.loads(cli("workload", "show", "ops", "--json").stdout)
    assert len(shown["split"]["held_out_ids"]) == 2 and shown["source"]["class_field"] == "metadata.team"
    stats = json.loads(cli("workload", "stats", "ops", "--part", "held-out", "--json").stdout)
    assert [s["transcripts"] for s in stats] == [1, 1]
    assert cli("workload", "pad", "ops", "--name", "ops-1k", "--words", "1000").returncode == 0
    assert cli("workload", "pad", "ops", "--name", "x").returncode == 2  # neither --words nor --tokens
    diff = json.loads(cli("workload", "diff", "ops", "ops-1k", "--json").stdout)
    assert not diff["same_content"] and diff["split_differs"]
    assert [(c["name"], c["same"], len(c["only_a"]), len(c["only_b"])) for c in diff["classes"]] == [
        ("support-bots", 0, 2, 2),
        ("search", 0, 2, 2),
    ]
    assert "class search: 0 in both, 2 only in ops, 2 only in ops-1k" in cli("workload", "diff", "ops", "ops-1k").stdout


def test_errors_are_one_line_naming_the_file() -> None:
    leak = Path("leak.jsonl")
    leak.write_text('{"prompt": "curl -H \'Authorization: Bearer abcdefghijklmnop12345\' https://x"}\n')
    ran = cli("workload", "import", str(leak), "--name", "leak", "--format", "vllm-custom")
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert "leak.jsonl:1: field prompt looks like it holds a bearer token" in ran.stderr
    ran = cli("workload", "show", "nope")
    assert ran.returncode == 1 and "no workload named 'nope'" in ran.stderr
