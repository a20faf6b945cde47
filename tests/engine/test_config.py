"""Command line and speculative config: validation with clear errors, ignored vLLM flags, the compile hash."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gb300lane.engine.args import parse_serve_args, split_known
from gb300lane.engine.config import compile_hash, default_capture_sizes, parse_spec_config
from gb300lane.errors import EngineError

BR1 = {
    "method": "dspark",
    "num_speculative_tokens": 5,
    "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 3], [9, 32, 3]],
    "draft_sample_method": "probabilistic",
    "rejection_sample_method": "block",
}


def test_the_br1_config_resolves_with_its_schedule():
    spec, warnings = parse_spec_config(json.dumps(BR1))
    assert warnings == []
    assert [spec.k_for_batch(b) for b in (1, 4, 5, 8, 9, 32, 33)] == [5, 5, 3, 3, 3, 3, 5]
    assert spec.rejection_sample_method == "block"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"method": "ngram"}, "use dspark or mtp"),
        ({"method": "eagel"}, "not a vLLM method"),
        ({"num_speculative_tokens": 0}, "must be an integer > 0"),
        ({"num_speculative_tokens_per_batch_size": [[2, 4, 5]]}, "must start at 1"),
        ({"num_speculative_tokens_per_batch_size": [[1, 4, 5], [3, 8, 3]]}, "must not overlap"),
        ({"num_speculative_tokens_per_batch_size": [[1, 4, -1]]}, "k must be >= 0"),
        ({"num_speculative_tokens_per_batch_size": [[1, 0, 5]]}, "<= range_end"),
        ({"rejection_sample_method": "fly"}, "use standard or block"),
        ({"draft_sample_method": "topk"}, "greedy or probabilistic"),
        ({"dspark_draft_topk": 0}, "dspark_draft_topk"),
        ({"num_speculativ_tokens": 5}, "check the spelling"),
    ],
)
def test_bad_speculative_configs_name_the_key_and_the_fix(change, words):
    with pytest.raises(EngineError) as err:
        parse_spec_config(json.dumps({**BR1, **change}))
    assert "--speculative-config" in str(err.value) and words in str(err.value)


def test_schedule_k_above_num_speculative_tokens_is_clamped_with_a_warning():
    spec, warnings = parse_spec_config(json.dumps({**BR1, "num_speculative_tokens_per_batch_size": [[1, 4, 7]]}))
    assert spec.k_for_batch(1) == 5 and any("clamped" in w for w in warnings)


def test_mtp_aliases_and_dspark_default_k():
    spec, warnings = parse_spec_config('{"method": "deepseek_mtp", "num_speculative_tokens": 3}')
    assert spec.method == "mtp" and warnings
    assert parse_spec_config('{"method": "dspark"}')[0].num_speculative_tokens == 5


def test_unmodelled_vllm_flags_are_accepted_and_reported():
    args = parse_serve_args(
        [
            "builtin",
            "--port",
            "30006",
            "--enforce-eager",
            "--swap-space",
            "4",
            "--trust-remote-code",
            "--block-size=64",
            "--max-num-seqs",
            "8",
        ]
    )
    assert args.ignored == ("--enforce-eager", "--swap-space 4", "--trust-remote-code", "--block-size=64")
    assert args.max_num_seqs == 8 and args.port == 30006
    assert args.non_default["max_num_seqs"] == 8


def test_split_known_keeps_values_with_their_flags():
    known, ignored = split_known(["--seed", "-1", "--x", "--y", "v", "--served-model-name", "a", "b"])
    assert known == ["--seed", "-1", "--served-model-name", "a", "b"]
    assert ignored == ["--x", "--y v"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--model", "deepseek-ai/x"], "only the builtin model"),
        (["--kv-pool-tokens", "1000"], "cannot hold one request"),
        (["--port", "http"], "not an integer"),
        (["--time-scale", "-1"], "must be >= 0"),
        (["--compilation-config", '{"cudagraph_capture_sizes": [0]}'], "positive integers"),
        (["--per-request-spec-decode-metrics", "all"], "none, summary or detailed"),
    ],
)
def test_bad_serve_flags_are_one_line_errors(argv, words):
    with pytest.raises(EngineError, match=words):
        parse_serve_args(argv)


def test_sidecar_url_comes_from_the_flag_or_the_environment(monkeypatch):
    monkeypatch.setenv("EXPERT_SIDECAR_URL", "http://127.0.0.1:30107/")
    assert parse_serve_args([]).expert_sidecar_url == "http://127.0.0.1:30107"
    assert parse_serve_args(["--expert-sidecar-url", "http://h:1"]).expert_sidecar_url == "http://h:1"


def _hash(spec_cfg, **over):
    spec = parse_spec_config(json.dumps(spec_cfg))[0]
    kw = {
        "model": "builtin",
        "spec": spec,
        "compilation_config": {},
        "max_num_seqs": 32,
        "max_model_len": 131072,
        "dtype": "auto",
        "tensor_parallel_size": 1,
    }
    kw.update(over)
    return compile_hash(**kw)[0]


def test_compile_hash_ignores_the_rejection_method_and_the_schedule():
    base = _hash({**BR1, "rejection_sample_method": "standard"})
    assert _hash(BR1) == base
    assert _hash({**BR1, "num_speculative_tokens_per_batch_size": [[1, 32, 5]]}) == base
    assert _hash({**BR1, "draft_sample_method": "greedy"}) == base
    assert _hash({**BR1, "enable_adaptive_verification": True}) != base
    assert _hash(BR1, max_num_seqs=16) != base


def test_k_changes_the_hash_only_through_default_capture_sizes():
    assert default_capture_sizes(32, 5)[-1] == 192 and default_capture_sizes(32, 9)[-1] == 320
    assert _hash({**BR1, "num_speculative_tokens": 9}) != _hash(BR1)
    pinned = {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128]}
    assert _hash({**BR1, "num_speculative_tokens": 9}, compilation_config=pinned) == _hash(
        BR1, compilation_config=pinned
    )


@pytest.mark.slow
def test_a_bad_config_exits_1_before_binding():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gb300lane.engine",
            "serve",
            "--model",
            "builtin",
            "--port",
            "1",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 3}',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: --speculative-config: method = 'ngram'")
    assert "Starting vLLM server" not in proc.stdout


def test_the_boot_seed_and_the_numerics_jitter_come_from_flags_or_the_environment(monkeypatch):
    from gb300lane.engine.args import parse_serve_args
    from gb300lane.engine.core import NUMERICS_JITTER

    monkeypatch.delenv("GB300LANE_BOOT_SEED", raising=False)
    monkeypatch.delenv("GB300LANE_NUMERICS_JITTER", raising=False)
    args = parse_serve_args([])
    assert args.boot_seed is None and args.numerics_jitter == NUMERICS_JITTER
    args = parse_serve_args(["--boot-seed", "12", "--numerics-jitter", "0"])
    assert args.boot_seed == 12 and args.numerics_jitter == 0.0
    monkeypatch.setenv("GB300LANE_BOOT_SEED", "5")
    monkeypatch.setenv("GB300LANE_NUMERICS_JITTER", "0.002")
    args = parse_serve_args([])
    assert args.boot_seed == 5 and args.numerics_jitter == 0.002
    for bad in (["--numerics-jitter", "2"], ["--numerics-jitter", "nan"], ["--boot-seed", "-3"]):
        with pytest.raises(EngineError, match=bad[0]):
            parse_serve_args(bad)
