"""The boot checks as pure functions, the ledger's prediction, and the boot report."""

from __future__ import annotations

import json
from pathlib import Path

from gb300lane import paths
from gb300lane.lane import checks, facts, logparse
from gb300lane.lane import hash_ledger as ledger
from gb300lane.lane.report import BootReport, latest_report, write_report
from gb300lane.recipes import load_recipe
from gb300lane.recipes.containers import key_rendering
from gb300lane.redact import is_secret, redact
from gb300lane.spec.counters import parse_request_counts

DATA = Path(__file__).parents[1] / "data" / "lane"
HIT = logparse.parse((DATA / "vllm-0.33-hit.log").read_text())
MISS = logparse.parse((DATA / "vllm-0.33-miss.log").read_text())


def test_autotune_pass_when_prediction_matches_the_log() -> None:
    pred = checks.Prediction(outcome="hit", known_hash="5c0e9a1d27", cache_dir_exists=True, reason="cached")
    r = checks.check_autotune(pred, HIT, 5.3)
    assert r.status == "pass" and r.evidence["observed"] == "hit" and r.evidence["boot_seconds"] == 5.3


def test_autotune_fails_on_a_surprise_miss_and_on_a_new_hash() -> None:
    pred = checks.Prediction(outcome="hit", known_hash="9f31c2b7aa", cache_dir_exists=True, reason="cached")
    assert checks.check_autotune(pred, MISS, 19.0).status == "fail"
    moved = checks.Prediction(outcome="hit", known_hash="0000000000", cache_dir_exists=True, reason="cached")
    r = checks.check_autotune(moved, HIT, 5.0)
    assert r.status == "fail" and "hash_inputs" in r.summary


def test_autotune_an_unexpected_hit_is_no_fault() -> None:
    pred = checks.Prediction(outcome="miss", reason="fingerprint never booted")
    r = checks.check_autotune(pred, HIT, 5.0)
    assert r.status == "pass" and "already held" in r.summary


def test_autotune_unknown_without_log_evidence_even_when_fast() -> None:
    pred = checks.Prediction(outcome="hit", reason="cached")
    r = checks.check_autotune(pred, logparse.parse("nothing here\n"), 0.1)
    assert r.status == "unknown"


def test_flags_zero_one_zero_across_a_bracket() -> None:
    spec_a = json.dumps({"method": "dspark", "num_speculative_tokens": 5})
    spec_b = json.dumps({"method": "dspark", "num_speculative_tokens": 5, "rejection_sample_method": "block"})
    argv_a = ["python3", "-m", "gb300lane.engine", "serve", "--speculative-config", spec_a]
    argv_b = ["python3", "-m", "gb300lane.engine", "serve", "--speculative-config", spec_b]
    key = "speculative.rejection_sample_method"
    ren = {key: key_rendering(load_recipe("local-v26"), key)}
    a = checks.check_flags(argv_a, {key: None}, ren)
    b = checks.check_flags(argv_b, {key: "block"}, ren)
    a2 = checks.check_flags(argv_a, {key: None}, ren)
    assert [r.status for r in (a, b, a2)] == ["pass"] * 3
    assert [r.evidence["keys"][0]["present"] for r in (a, b, a2)] == [0, 1, 0]
    # The B recipe booted with A's args is caught.
    wrong = checks.check_flags(argv_a, {key: "block"}, ren)
    assert wrong.status == "fail" and key in wrong.summary


def test_env_is_compared_as_a_set_not_a_list() -> None:
    expected = {"A": "1", "B": "2", "PATH": "/usr/bin"}
    actual = dict(reversed(list(expected.items())))
    assert checks.check_env(actual, expected).status == "pass"
    r = checks.check_env({"A": "1", "PATH": "/usr/bin", "C": "3", "B": "x"}, expected)
    assert r.status == "fail"
    assert r.evidence["extra"] == ["C"] and r.evidence["missing"] == []
    assert r.evidence["different"] == [{"name": "B", "expected": "2", "actual": "x"}]
    assert checks.check_env({"A": "1"}, expected).evidence["missing"] == ["B", "PATH"]


def test_secret_values_are_compared_by_hash_and_never_shown() -> None:
    token = "hf_verysecretvalue123"
    expected = {"HF_TOKEN": token, "API_KEY": "k1"}
    assert checks.check_env({"HF_TOKEN": token, "API_KEY": "k1"}, expected).status == "pass"
    # A stored (redacted) expectation still compares equal to the live value.
    stored = {k: redact(k, v) for k, v in expected.items()}
    assert stored["HF_TOKEN"].startswith("hmac-sha256:") and token not in stored["HF_TOKEN"]
    assert checks.check_env({"HF_TOKEN": token, "API_KEY": "k1"}, stored).status == "pass"
    r = checks.check_env({"HF_TOKEN": "hf_other", "API_KEY": "k1"}, expected)
    assert r.status == "fail" and "HF_TOKEN" in r.summary
    dumped = json.dumps(r.model_dump())
    assert token not in dumped and "hf_other" not in dumped
    assert is_secret("db_password") and not is_secret("PATH")


def test_kv_pool() -> None:
    assert checks.check_kv_pool(HIT, 4_400_013).status == "pass"
    r = checks.check_kv_pool(HIT, 4_000_000)
    assert r.status == "fail" and "4,400,013" in r.summary
    assert checks.check_kv_pool(HIT, None).status == "unknown"
    assert checks.check_kv_pool(logparse.parse(""), 5).status == "unknown"


def test_dark_bind_and_foreign_clients() -> None:
    loopback, everywhere = (
        facts.Listener(address="127.0.0.1", port=30106),
        facts.Listener(address="0.0.0.0", port=30107),
    )
    assert checks.check_bind([loopback, loopback.model_copy(update={"address": "::1"})], 30106).status == "pass"
    open_ = checks.check_bind([everywhere], 30107)
    assert open_.status == "fail" and "0.0.0.0" in open_.summary
    assert checks.check_bind([], 30106).status == "fail"
    assert checks.check_bind(None, 30106).status == "unknown"
    clean = parse_request_counts((DATA / "metrics-clean.txt").read_text())
    dirty = parse_request_counts((DATA / "metrics-foreign.txt").read_text())
    assert checks.check_foreign(clean).status == "pass"
    r = checks.check_foreign(dirty)
    assert r.status == "fail" and r.evidence["foreign_requests"] == 4
    assert checks.check_foreign(dirty, sent_by_tool=4).status == "pass"


def test_ledger_predicts_hit_only_while_the_cache_dir_exists(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    assert ledger.predict("fp1", root).outcome == "miss"
    ledger.record_boot("fp1", "abc123", "miss", 19.1)
    assert ledger.predict("fp1", root).outcome == "miss"  # hash known, directory gone
    (root / "torch_compile_cache" / "abc123").mkdir(parents=True)
    p = ledger.predict("fp1", root)
    assert p.outcome == "hit" and p.known_hash == "abc123" and p.cache_dir_exists
    assert ledger.predict("fp1", None).outcome == "unknown"
    ledger.record_boot("fp1", "abc123", "hit", 5.0)
    ledger.record_boot("fp1", "abc123", "hit", 7.0)
    assert ledger.expected_boot_seconds("fp1", "hit") == 6.0
    assert ledger.expected_boot_seconds("fp1", "miss") == 19.1
    assert ledger.expected_boot_seconds("other", "hit") is None
    # Embedded boots at another pace do not set expectations for this one.
    assert ledger.expected_boot_seconds("fp1", "hit", time_scale=0.01) is None
    ledger.record_boot("fp1", "abc123", "hit", 5.3, time_scale=0.01)
    assert ledger.expected_boot_seconds("fp1", "hit", time_scale=0.01) == 5.3
    assert ledger.ledger_path().is_relative_to(paths.state_dir())


def test_boot_report_roundtrip_and_text() -> None:
    pred = checks.Prediction(outcome="hit", known_hash="5c0e9a1d27", cache_dir_exists=True, reason="cached")
    report = BootReport(
        instance="local-B", lane="local", recipe="local-v27", arm="B", run="r1", runtime="process",
        fingerprint="0123456789abcdef", compile_hash="5c0e9a1d27", endpoint="http://127.0.0.1:30106",
        served_model="m", dark=True, containers=("local-B-main",), started_at=0.0, boot_seconds=5.2,
        checks=(checks.check_autotune(pred, HIT, 5.2), checks.check_kv_pool(HIT, 1)),
    )  # fmt: skip
    stored = write_report(report)
    assert stored.path and Path(stored.path).is_file()
    again = latest_report("local-B")
    assert again == stored and not again.ok
    text = again.to_text()
    assert "FAIL  kv_pool" in text and "PASS  autotune" in text and "[dark]" in text
    assert len(text.splitlines()) <= 24


def test_secret_flag_values_never_reach_the_evidence() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "sk-live-123", "--hf-token=hf_abc", "--port", "1"]
    r = checks.check_flags(argv, {"lane.port": 1}, {"lane.port": key_rendering(load_recipe("v26"), "lane.port")})
    assert r.status == "pass"
    shown = json.dumps(r.evidence)
    assert "sk-live-123" not in shown and "hf_abc" not in shown
    assert r.evidence["argv"][4].startswith("hmac-sha256:") and r.evidence["argv"][-1] == "1"


def test_a_secret_under_an_innocuous_name_is_known_by_its_value() -> None:
    value = "sk-live-" + "a1B2c3D4e5F6g7H8i9J0"
    expected = {"GOOD": value, "PLAIN": "x"}
    ok = checks.check_env(dict(expected), expected)
    assert ok.status == "pass" and "GOOD" in ok.evidence["secret_names"]
    bad = checks.check_env({"GOOD": "sk-live-" + "z" * 20, "PLAIN": "x"}, expected)
    assert bad.status == "fail"
    assert value not in json.dumps(bad.model_dump()) and "zzzz" not in json.dumps(bad.model_dump())
    stored = {k: redact(k, v) for k, v in expected.items()}
    assert stored["GOOD"].startswith("hmac-sha256:") and stored["PLAIN"] == "x"
    assert checks.check_env(dict(expected), stored).status == "pass"
    argv = ["x", "--served-model-name", "m", "--token-file=" + value, value]
    shown = json.dumps(checks.check_flags(argv, {}, {}).evidence)
    assert value not in shown


def test_stored_digests_are_keyed_with_the_state_key_not_bare_sha256(monkeypatch, tmp_path: Path) -> None:
    import hashlib
    import stat

    from gb300lane import keyed

    stored = redact("API_KEY", "k1")
    assert hashlib.sha256(b"k1").hexdigest() not in stored
    mode = stat.S_IMODE(keyed.key_path().stat().st_mode)
    assert mode == 0o600
    assert redact("API_KEY", "k1") == stored  # stable under one state directory
    monkeypatch.setenv("GB300LANE_STATE_DIR", str(tmp_path / "other"))
    assert redact("API_KEY", "k1") != stored  # another state directory, another key


def test_the_flag_check_compares_a_recorded_secret_by_its_digest() -> None:
    """An instance record keeps an env secret as its keyed digest; the flag check reads the container's env value."""
    token = "hf_secret_value"
    ren = {"env.HF_TOKEN": key_rendering(load_recipe("v26"), "env.HF_TOKEN")}
    assert ren["env.HF_TOKEN"].rendered_as == "env"
    recorded = redact("HF_TOKEN", token)
    assert checks.check_flags(["vllm"], {"env.HF_TOKEN": recorded}, ren, env={"HF_TOKEN": token}).status == "pass"
    wrong = checks.check_flags(["vllm"], {"env.HF_TOKEN": recorded}, ren, env={"HF_TOKEN": "hf_other"})
    assert wrong.status == "fail" and "env.HF_TOKEN" in wrong.summary
    assert token not in json.dumps(wrong.model_dump()) and "hf_other" not in json.dumps(wrong.model_dump())
