"""The engine_build check: a vLLM 0.32.0 run from an interpreter must carry the real lane's fixes."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import pytest

from gb300lane.errors import BootError
from gb300lane.lane.boot import plan_boot
from gb300lane.lane.enginebuild import ACCEPT_ENV, RECORD_NAME, REQUIRED_FIXES, boots_anyway, check_engine_build
from gb300lane.recipes.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "requirements" / "real-lane-patches"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lane(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A real-lane directory with an interpreter path (never run) and a site-packages of patched files."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    return {"GB300LANE_REAL_LANE_DIR": str(tmp_path), "HOME": str(tmp_path)}, venv


def _record(venv: Path, patches: list[str]) -> list[Path]:
    files = []
    rows = []
    for name in patches:
        f = venv / "site" / f"{name}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"# patched by {name}\n")
        rows.append({"patch": name, "file": str(f), "sha256": hashlib.sha256(f.read_bytes()).hexdigest()})
        files.append(f)
    (venv / RECORD_NAME).write_text(json.dumps({"schema_version": 1, "patches": rows}))
    return files


def test_every_required_fix_is_a_shipped_patch() -> None:
    shipped = {p.stem for p in PATCHES.glob("*.patch")}
    assert set(REQUIRED_FIXES["0.32.0"]) == shipped
    for p in PATCHES.glob("*.patch"):
        text = p.read_text()
        assert "\n--- a/vllm/" in text and "\n+++ b/vllm/" in text, p


def test_without_the_record_the_build_is_refused(tmp_path: Path) -> None:
    env, _ = _lane(tmp_path)
    check = check_engine_build(load_recipe("cpu-v26"), env)
    assert check.status == "fail"
    assert "is missing" in check.summary and "make real-lane" in check.summary


def test_with_every_fix_recorded_and_unchanged_it_passes(tmp_path: Path) -> None:
    env, venv = _lane(tmp_path)
    _record(venv, sorted(REQUIRED_FIXES["0.32.0"]))
    check = check_engine_build(load_recipe("cpu-v26"), env)
    assert check.status == "pass", check.summary
    assert check.evidence["record"] == str(venv / RECORD_NAME)


def test_a_missing_fix_is_named_with_what_it_fixes(tmp_path: Path) -> None:
    env, venv = _lane(tmp_path)
    _record(venv, ["vllm-0.32.0-cpu-aot-load"])
    check = check_engine_build(load_recipe("cpu-v26"), env)
    assert check.status == "fail"
    assert "lacks vllm-0.32.0-cpu-expand-float" in check.summary and "temperature" in check.summary


def test_a_file_changed_since_it_was_patched_is_refused(tmp_path: Path) -> None:
    env, venv = _lane(tmp_path)
    files = _record(venv, sorted(REQUIRED_FIXES["0.32.0"]))
    files[0].write_text("# vLLM reinstalled over the fix\n")
    check = check_engine_build(load_recipe("cpu-v26"), env)
    assert check.status == "fail"
    assert "changed since" in check.summary


def test_an_unreadable_record_is_named(tmp_path: Path) -> None:
    env, venv = _lane(tmp_path)
    (venv / RECORD_NAME).write_text("{not json")
    check = check_engine_build(load_recipe("cpu-v26"), env)
    assert check.status == "fail" and "unreadable" in check.summary


def test_image_and_embedded_recipes_have_nothing_to_check(tmp_path: Path) -> None:
    env, _ = _lane(tmp_path)
    for name in ("local-v26", "v27"):
        assert check_engine_build(load_recipe(name), env).status == "pass"


def test_up_refuses_the_unpatched_build_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, _ = _lane(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GB300LANE_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(BootError, match="cannot boot .*vllm-0.32.0-cpu|cannot boot .*is missing"):
        plan_boot("cpu-v26", dark=True, runtime="process", port=_free_port())


def test_an_accepted_missing_fix_boots_and_still_fails_the_check(tmp_path: Path) -> None:
    env, venv = _lane(tmp_path)
    _record(venv, ["vllm-0.32.0-cpu-aot-load"])
    check = check_engine_build(load_recipe("cpu-v26"), {**env, ACCEPT_ENV: "vllm-0.32.0-cpu-expand-float"})
    assert check.status == "fail" and boots_anyway(check)
    assert "WITHOUT vllm-0.32.0-cpu-expand-float on purpose" in check.summary and "promote refuses" in check.summary
    assert check.evidence["accepted"] == ["vllm-0.32.0-cpu-expand-float"]


def test_accepting_one_defect_does_not_accept_another_or_changed_files(tmp_path: Path) -> None:
    env, venv = _lane(tmp_path)
    _record(venv, [])
    accepted = {**env, ACCEPT_ENV: "vllm-0.32.0-cpu-expand-float"}
    assert not boots_anyway(check_engine_build(load_recipe("cpu-v26"), accepted))  # aot-load is missing too
    files = _record(venv, ["vllm-0.32.0-cpu-aot-load"])
    files[0].write_text("# vLLM reinstalled over the fix\n")
    check = check_engine_build(load_recipe("cpu-v26"), accepted)
    assert check.status == "fail" and not boots_anyway(check) and "changed since" in check.summary
    (venv / RECORD_NAME).unlink()
    assert not boots_anyway(
        check_engine_build(load_recipe("cpu-v26"), {**env, ACCEPT_ENV: ",".join(REQUIRED_FIXES["0.32.0"])})
    )
