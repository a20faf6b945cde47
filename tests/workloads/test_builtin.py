"""The shipped transcripts are the workload builtin, byte for byte: the files, their ids and the content hash."""

from __future__ import annotations

import json

from gb300lane.bench.transcripts import CLASSES, load_transcripts
from gb300lane.canonical import sha256_bytes
from gb300lane.recipes.schema import WindowSpec
from gb300lane.workloads import BUILTIN, load_workload
from gb300lane.workloads.folders import content_hash, transcript_line

#: The sha256 of each shipped class file, as they were under gb300lane/bench/transcripts/ before workloads.
SHIPPED = {
    "prose": "dd201770e00b73d7d6d6ee68581c843ad79dd9550477fab831be0eb844749f64",
    "structured": "8f97b8f8295abce111c81580620131c7ee3f75255c53705a4621b6cf07af3aab",
    "code": "19f12a2cc2d2e01f0ab2ce466ef22dbe0912d404899d1ac0cd3f2107291c3c9b",
    "shell_ops": "5c75beb59389ada19e8a48949d8a711b65fe6c41bd13110073db89ba65d3071a",
    "tool_json": "48a9923894e81c9be0c7537512d5cd4283c606633c784515fd94d10185581aad",
}
#: The builtin workload's content hash (what a registration on it would freeze).
BUILTIN_SHA256 = "0a50386e3f0804cec2ef922178b86f9b975aa79d96923a1228e14844d2bf38da"


def test_builtin_is_the_shipped_files_byte_for_byte() -> None:
    w = load_workload(BUILTIN)
    assert w.classes == tuple(SHIPPED)
    for c in w.manifest.classes:
        data = (w.folder / c.file).read_bytes()
        assert sha256_bytes(data) == SHIPPED[c.name] == c.sha256
        assert "".join(transcript_line(t) + "\n" for t in w.by_class[c.name]).encode() == data
    assert w.manifest.split is None
    assert content_hash(w.manifest.classes, None) == w.manifest.content_sha256 == BUILTIN_SHA256


def test_ids_and_mixed_order_are_as_shipped() -> None:
    assert [t.id for t in load_transcripts("prose")][:2] == ["prose-001", "prose-002"]
    assert [t.id for t in load_transcripts("mixed")][:6] == [
        "prose-001",
        "structured-001",
        "code-001",
        "shell_ops-001",
        "tool_json-001",
        "prose-002",
    ]
    assert CLASSES == ("prose", "structured", "code", "shell_ops", "tool_json", "mixed")


def test_a_window_on_builtin_dumps_as_before() -> None:
    data = {
        "name": "w",
        "classes": ["prose"],
        "transcripts_per_class": 2,
        "concurrency": [1],
        "temperature": 0.0,
        "forced_tokens": 8,
    }
    w = WindowSpec.model_validate(data)
    assert "workload" not in w.model_dump() and "held_out" not in w.model_dump(mode="json")
    named = WindowSpec.model_validate({**data, "workload": "ops", "classes": ["support-bots"]})
    assert json.loads(named.model_dump_json())["workload"] == "ops"


def test_builtin_is_found_whatever_the_workloads_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GB300LANE_WORKLOADS_DIR", str(tmp_path))
    assert load_workload(BUILTIN).manifest.content_sha256 == BUILTIN_SHA256
