"""One corrupt instance record is quarantined with a message; status, promote's view of the lane and logs keep working."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gb300lane import lane
from gb300lane.cli.main import app
from gb300lane.lane import records as instances
from gb300lane.promote.live import LiveOps
from gb300lane.testing.free_ports import free_port


def _recipe(folder: Path, name: str) -> str:
    ports = [free_port(), free_port()]
    body = {
        "schema_version": 1, "name": name, "extends": "local-v27", "description": f"test recipe {name}",
        "lane": {"port": ports[0]}, "sidecar": {"port": ports[1], "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0},
    }  # fmt: skip
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return name


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.slow  # end to end: boots the engine as processes twice
def test_a_corrupt_record_is_quarantined_and_the_others_keep_working(recipes: Path) -> None:
    good = _recipe(recipes, "t-good")
    bad = _recipe(recipes, "t-bad-record")
    lane.up(good)
    lane.up(bad)
    bad_path = instances.instances_dir() / "local-t-bad-record.json"
    bad_path.write_bytes(b'{"schema_version": 1, "name": "local-t-bad-rec\xff')  # a torn, non-UTF-8 record
    ghost = instances.instances_dir() / "local-ghost.json"
    ghost.write_text(json.dumps({"schema_version": 1, "name": "local-ghost"}))  # valid JSON, missing keys

    code, out = _cli("status")
    assert code == 0, out
    assert "warning:" in out and "unreadable instance record" in out and "moved to" in out
    assert "local-t-good" in out and "healthy" in out
    # The instance whose record was bad is still found by its containers' labels, as an unrecorded leftover.
    assert "local-t-bad-record" in out
    assert not bad_path.exists() and not ghost.exists()
    moved = sorted(p.name for p in instances.quarantine_dir().iterdir())
    assert any(n.startswith("local-t-bad-record.json.") and not n.endswith(".why.txt") for n in moved)
    assert any(n.startswith("local-ghost.json.") and n.endswith(".why.txt") for n in moved)
    notes = instances.quarantined()
    assert len(notes) == 2
    assert any("local-ghost.json: unreadable instance record (lane: missing)" in n for n in notes), notes
    assert any("local-t-bad-record.json: unreadable instance record ((top level): Invalid JSON" in n for n in notes)
    assert "quarantined:" in out  # status keeps saying so until the files are deleted

    facts = {f.name: f for f in LiveOps().instances()}  # what promote reads
    assert facts["local-t-good"].running and facts["local-t-bad-record"].running
    code, out = _cli("logs", good)
    assert code == 0 and "Application startup complete." in out
    code, out = _cli("logs", "--name", "t-bad-record")
    assert code == 0 and "Application startup complete." in out
    assert sorted(lane.down(all=True)) == ["local-t-bad-record", "local-t-good"]
    assert lane.list_instances() == []


def test_a_quarantined_record_loses_nothing(tmp_path: Path) -> None:
    instances.instances_dir().mkdir(parents=True)
    raw = b"not json at all"
    (instances.instances_dir() / "local-x.json").write_bytes(raw)
    assert instances.load("local-x") is None
    [kept] = [p for p in instances.quarantine_dir().iterdir() if not p.name.endswith(".why.txt")]
    assert kept.read_bytes() == raw
    why = kept.with_name(kept.name + ".why.txt").read_text()
    assert why.startswith(
        f"{instances.instances_dir() / 'local-x.json'}: unreadable instance record ((top level): Invalid JSON"
    )
