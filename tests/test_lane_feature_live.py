"""feature_live: a feature the recipe asks for must run in the model runner the engine logged."""

from __future__ import annotations

from gb300lane.lane import checks, logparse

V1 = ("(APIServer pid=14122) WARNING 12-01 15:13:49 [vllm.py:725] Model Runner V2 requires Triton; "
      "using the V1 model runner instead.\n")
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
    line = ("WARNING 12-01 [vllm.py:733] Model Runner V2 does not yet support dspark speculative decoding; "
            "using the V1 model runner instead.")
    facts = logparse.parse(line)
    assert facts.model_runner == "v1"
