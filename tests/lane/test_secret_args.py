"""A secret in `engine_args.extra_args` (an API key handed to the engine as `--api-key`) is stored as a keyed
digest in every state file, as an env secret is, and a kept instance still starts with the real value.

A real boot (process runtime, embedded engine at time scale 0, dark, free ports).
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import yaml

from gb300lane import lane, paths
from gb300lane.paths import shipped
from gb300lane.runtime import process as process_runtime
from gb300lane.testing.free_ports import free_port

pytestmark = pytest.mark.slow

KEY = "sk-live-" + "Q7x2M9p4R1t8W3z6K5n0"


def _files_holding(value: str) -> list[str]:
    return sorted(str(p) for p in paths.state_dir().rglob("*")
                  if p.is_file() and value.encode() in p.read_bytes())  # fmt: skip


def test_an_extra_args_api_key_is_stored_as_a_digest_and_still_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    for name in ("local-v26", "local-v27"):
        (folder / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    (folder / "t-key.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "t-key", "extends": "local-v27", "description": "an engine api key",
        "lane": {"port": free_port()}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0, "extra_args": {"api_key": KEY}},
    }))  # fmt: skip
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(folder))
    try:
        report = lane.up("t-key", dark=True, runtime="process")
        assert report.ok, report.summary
        assert _files_holding(KEY) == []
        lane.stop_instance("local-t-key")
        process_runtime._CREATED_ENV.clear()  # a later invocation: the value comes from the recipe again
        again = lane.start_instance("local-t-key")
        assert again.ok, again.summary
        assert _files_holding(KEY) == []
        (main,) = [i for i in lane.list_instances() if i.name == "local-t-key"]
        pid = next(int(c) for c in [lane_pid(main.name)] if c)
        assert KEY in psutil.Process(pid).cmdline()  # the engine got the real key, not its digest
    finally:
        lane.down(all=True, yes=True)


def lane_pid(instance: str) -> int | None:
    rt = process_runtime.ProcessRuntime()
    return rt.inspect(f"{instance}-main").pid
