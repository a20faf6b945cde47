"""feature_live: a feature the recipe asks for must run in the model runner the engine logged."""

from __future__ import annotations

from gb300lane.lane import checks, logparse

V1 = (
    "(APIServer pid=14122) WARNING 12-01 15:13:49 [vllm.py:725] Model Runner V2 requires Triton; "
    "using the V1 model runner instead.\n"
)
V2 = "(Worker pid=7) INFO 12-01 15:13:49 [gpu_worker.py:518] Using V2 Model Runner\n"


def test_block_on_the_v1_runner_is_a_fail_that_names_the_line() -> None:
    res = checks.check_features_live("block", logparse.parse(V1))
    assert res.status == "fail"
    assert "V1 runner" in res.summary and "does nothing" in res.summary
    assert res.evidence["model_runner"] == "v1"
    assert "requires Triton" in res.evidence["log_line"]


def test_block_on_the_v2_runner_passes_and_an_unsaid_runner_is_unknown() -> None:
    live = checks.check_features_live("block", logparse.parse(V2))
    assert live.status == "pass"
    unsaid = checks.check_features_live("block", logparse.parse("INFO Application startup complete.\n"))
    assert unsaid.status == "unknown"


def test_standard_rejection_runs_in_either_runner() -> None:
    for method in ("standard", None):
        res = checks.check_features_live(method, logparse.parse(V1))
        assert res.status == "pass" and "either model runner" in res.summary


def test_an_unsupported_feature_line_reads_as_the_v1_runner() -> None:
    line = (
        "WARNING 12-01 [vllm.py:733] Model Runner V2 does not yet support dspark speculative decoding; "
        "using the V1 model runner instead."
    )
    facts = logparse.parse(line)
    assert facts.model_runner == "v1"


def test_a_reload_fails_where_a_hit_was_predicted_and_passes_where_a_miss_was() -> None:
    reload_facts = logparse.parse(
        "[backbone] Compiling model again due to a load failure from /c/torch_compile_cache/torch_aot_compile/h1/"
        "rank_0_0/model, reason: 'function' object has no attribute 'finalize_loading'\n"
        "[backbone] saved AOT compiled function to /c/torch_compile_cache/torch_aot_compile/h1/rank_0_0/model\n"
    )
    hit = checks.Prediction(outcome="hit", known_hash="h1", reason="hash h1 is cached")
    miss = checks.Prediction(outcome="miss", reason="fingerprint f has not booted on this host")
    failed = checks.check_autotune(hit, reload_facts, 40.0)
    assert failed.status == "fail" and "hash reload" in failed.summary and "finalize_loading" in failed.summary
    assert failed.evidence["observed"] == "reload" and failed.evidence["reload_lines"] == 1
    assert checks.check_autotune(miss, reload_facts, 40.0).status == "pass"
