"""The embedded engine over HTTP: the OpenAI client, errors, metrics, readiness, boot lines, pacing.

Each test starts a real server on a free 127.0.0.1 port in a background
thread (tests/engines.py; time-scale 0 unless a test says otherwise) and stops it after.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
import urllib.request
from contextlib import contextmanager

import openai
import pytest
from aiohttp import web

from gb300lane.engine.args import parse_serve_args
from gb300lane.engine.modelled_boot import VllmLog, plan_boot, run_boot
from gb300lane.engine.sidecar import build_sidecar_app
from gb300lane.spec import parse_metrics_text, parse_spec_log_line
from gb300lane.testing.free_ports import free_port

from engines import http_get, http_post, running_engine

SPEC = json.dumps(
    {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 3], [9, 32, 3]],
        "draft_sample_method": "probabilistic",
        "rejection_sample_method": "block",
    }
)


class _Background:
    """An aiohttp app served from its own event loop thread."""

    def __init__(self, app: web.Application, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = port
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.call(self._start())

    async def _start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.call(self._runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@contextmanager
def engine(*extra: str, wait_ready: bool = True):
    flags = ["--model", "builtin", "--served-model-name", "lane", "--speculative-config", SPEC, "--max-num-seqs", "8",
             "--seed", "3", *extra]  # fmt: skip
    with running_engine(flags, wait_ready=wait_ready) as eng:
        yield eng.url, eng.server, eng.log


def _wait(cond, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_the_openai_client_streams_a_chat_completion():
    with engine() as (url, _, _log):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        stream = client.chat.completions.create(
            model="lane",
            messages=[{"role": "user", "content": "List the running containers."}],
            max_tokens=24,
            temperature=1.0,
            seed=5,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        extension = chunks[-1].model_extra["gb300lane"]
        assert len(extension["modelled_token_times_s"]) == 24 == len(extension["wall_token_times_s"])
        assert client.models.list().data[0].id == "lane"


def test_completions_are_deterministic_and_carry_modelled_times():
    with engine("--per-request-spec-decode-metrics", "detailed") as (url, _, _log):
        body = {
            "model": "lane",
            "prompt": "def parse(self, text):\n",
            "max_tokens": 40,
            "seed": 11,
            "temperature": 1.0,
            "ignore_eos": True,
        }
        status, first = http_post(url + "/v1/completions", body)
        assert status == 200
        _, second = http_post(url + "/v1/completions", body)
        assert first["choices"][0]["text"] == second["choices"][0]["text"]
        assert first["usage"]["completion_tokens"] == 40
        times = first["gb300lane"]["modelled_token_times_s"]
        assert len(times) == 40 and times == sorted(times) and times[0] == first["gb300lane"]["modelled_ttft_s"]
        spec = first["metrics"]["speculative_decoding"]
        assert spec["num_draft_tokens"] == 5 * spec["num_drafts"]
        assert sum(spec["num_accepted_tokens_per_pos"]) == spec["num_accepted_tokens"]
        version = json.loads(http_get(url + "/version")[1])
        assert {k: version[k] for k in ("version", "engine", "time_scale")} == {
            "version": "0.33.0",
            "engine": "gb300lane-embedded",
            "time_scale": 0.0,
        }
        # The builtin checkpoint's identity, as a provenance record reads it.
        assert version["checkpoint"]["path"] == "builtin" and len(version["checkpoint"]["config_sha256"]) == 64


@pytest.fixture(scope="module")
def refusing_engine():
    """One engine for every bad request below: each is refused before it reaches the engine's state."""
    with engine() as (url, server, _log):
        yield url
        assert server._streams == {} and not server.core.has_work


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"prompt": "x", "temperature": -1}, 400, "temperature"),
        ({"prompt": "x", "top_p": 0}, 400, "top_p"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": 5, "min_tokens": 9}, 400, "min_tokens"),
        ({"prompt": "x", "max_tokens": 200000}, 400, "max_tokens"),
        ({"prompt": "x", "n": 2}, 400, "n"),
        ({"prompt": "x", "seed": 1.5}, 400, "seed"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"prompt": ""}, 400, "prompt"),
        ({"prompt": [99999999]}, 400, "prompt"),
        ({"prompt": {"a": 1}}, 400, "prompt"),
        ({"prompt": "x", "model": "other"}, 404, "model"),
    ],
)
def test_bad_parameters_are_openai_style_errors_never_500(refusing_engine, body, status, param):
    url = refusing_engine
    code, payload = http_post(url + "/v1/completions", body)
    assert code == status
    assert payload["error"]["param"] == param and payload["error"]["code"] == status
    code, payload = http_post(url + "/v1/completions", b"{not json")
    assert code == 400 and "not valid JSON" in payload["error"]["message"]
    code, payload = http_post(url + "/v1/chat/completions", {"messages": "hi"})
    assert code == 400 and payload["error"]["param"] == "messages"


def test_metrics_use_vllm_names_and_agree_with_the_responses():
    with engine() as (url, _, _log):
        generated = 0
        for seed in range(3):
            _, body = http_post(
                url + "/v1/completions", {"prompt": "$ docker ps", "max_tokens": 30, "seed": seed, "ignore_eos": True}
            )
            generated += body["usage"]["completion_tokens"]
        text = http_get(url + "/metrics")[1].decode()
        scrape = parse_metrics_text(text)
        assert scrape.generation_tokens == generated
        assert scrape.spec.num_drafts > 0
        assert sum(scrape.spec.accepted_per_pos) == scrape.spec.num_accepted_tokens
        assert sum(scrape.spec.drafts_by_length.values()) == scrape.spec.num_drafts
        for name in (
            "vllm:time_to_first_token_seconds_bucket",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:request_success_total",
            "gb300lane_engine_modelled_seconds_total",
            "gb300lane_engine_verify_steps_total",
            "gb300lane_engine_sidecar_calls_total",
        ):
            assert name in text


@pytest.mark.slow
def test_readiness_waits_for_the_sidecar_and_lookups_are_counted():
    sidecar_port = free_port()
    with engine("--expert-sidecar-url", f"http://127.0.0.1:{sidecar_port}", wait_ready=False) as (url, server, log):
        _wait(lambda: "Waiting for the expert sidecar" in log.getvalue())
        assert http_get(url + "/health")[0] == 503
        assert http_post(url + "/v1/completions", {"prompt": "x"})[0] == 503
        sidecar = _Background(build_sidecar_app(), sidecar_port)
        try:
            _wait(lambda: http_get(url + "/health")[0] == 200)
            assert http_post(url + "/v1/completions", {"prompt": "ls", "max_tokens": 20})[0] == 200
            _wait(
                lambda: (
                    "gb300lane_engine_sidecar_calls_total" in (t := http_get(url + "/metrics")[1].decode())
                    and parse_metrics_text(t).extras.get("gb300lane_engine_sidecar_calls_total", 0) >= 1
                )
            )
            assert b"gb300lane_sidecar_lookups_total 1.0" in http_get(f"http://127.0.0.1:{sidecar_port}/metrics")[1]
        finally:
            sidecar.close()


def test_boot_is_a_miss_then_a_hit_and_a_killed_miss_stays_a_miss():
    def boot(*extra, scale="0"):
        args = parse_serve_args(["--speculative-config", SPEC, "--time-scale", scale, *extra])
        out = io.StringIO()
        plan = plan_boot(args)
        modelled = asyncio.run(run_boot(args, plan, VllmLog(out)))
        return plan, modelled, out.getvalue()

    plan, miss_s, log = boot()
    assert not plan.hit and "Compiling a graph for compile range" in log and miss_s > 1800
    assert f"Using cache directory: {plan.cache_dir} for vLLM's torch.compile" in log
    assert "GPU KV cache size: 4,400,013 tokens, Maximum concurrency for 131,072 tokens per request: 33.57x" in log
    again, hit_s, log = boot()
    assert again.hit and again.hash == plan.hash and "Directly load the compiled graph(s)" in log
    assert 520 < hit_s < 540
    block_off = SPEC.replace('"block"', '"standard"')
    assert plan_boot(parse_serve_args(["--speculative-config", block_off])).hit

    killed = parse_serve_args(["--speculative-config", SPEC, "--max-num-seqs", "7", "--time-scale", "0.001"])

    async def kill_mid_compile() -> str:
        text = io.StringIO()
        task = asyncio.create_task(run_boot(killed, plan_boot(killed), VllmLog(text)))
        # The cache directory line opens the compile (1.08 s scaled); kill the boot inside it, whatever the load.
        while "for vLLM's torch.compile" not in text.getvalue():
            assert not task.done(), text.getvalue()
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return text.getvalue()

    killed_log = asyncio.run(kill_mid_compile())
    assert "Compiling a graph" not in killed_log  # killed mid-compile, not after it
    assert not plan_boot(killed).hit


def test_the_stats_line_reports_spec_decoding(monkeypatch):
    monkeypatch.setenv("VLLM_LOG_STATS_INTERVAL", "0.2")
    with engine() as (url, _, log):
        http_post(url + "/v1/completions", {"prompt": "import os\n", "max_tokens": 40, "ignore_eos": True})
        _wait(lambda: "SpecDecoding metrics:" in log.getvalue())
        line = next(x for x in log.getvalue().splitlines() if "SpecDecoding metrics:" in x)
        parsed = parse_spec_log_line(line)
        assert parsed is not None and parsed.mean_acceptance_length > 1.0
        assert line.startswith("INFO ") and "[metrics.py:" in line


def test_time_scale_paces_wall_time_to_modelled_time():
    with engine() as (url, server, _log):
        server.args = server.args.model_copy(update={"time_scale": 1.0})
        start = time.monotonic()
        _, body = http_post(url + "/v1/completions", {"prompt": "The", "max_tokens": 30, "ignore_eos": True})
        wall = time.monotonic() - start
        modelled = body["gb300lane"]["modelled_e2e_s"]
        assert modelled > 0.05
        assert wall >= 0.9 * modelled
        assert body["gb300lane"]["wall_token_times_s"][-1] >= 0.9 * modelled


def test_stop_strings_end_a_completion_at_the_string():
    with engine() as (url, _, _log):
        _, body = http_post(
            url + "/v1/completions",
            {"prompt": "$ docker ps\n", "max_tokens": 200, "stop": ["\n"], "seed": 1, "min_tokens": 0},
        )
        choice = body["choices"][0]
        assert "\n" not in choice["text"]
        assert choice["finish_reason"] in ("stop", "length")


def test_the_cli_group_shares_the_engine_command_line():
    from typer.testing import CliRunner

    from gb300lane.cli.main import app

    result = CliRunner().invoke(
        app, ["engine", "serve", "--speculative-config", '{"method": "dspark", "num_speculative_tokens": -2}']
    )
    assert result.exit_code == 1
    help_result = CliRunner().invoke(app, ["engine", "serve", "--help"])
    assert help_result.exit_code == 0 and "--speculative-config" in help_result.output


def test_the_public_api_is_pinned():
    import gb300lane.engine as engine_pkg

    assert engine_pkg.__all__ == sorted(engine_pkg.__all__)
    assert {"EngineCore", "load_model", "parse_serve_args", "parse_spec_config"} <= set(engine_pkg.__all__)


@pytest.mark.slow
def test_python_m_serve_boots_answers_and_stops_on_sigterm(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gb300lane.engine",
            "serve",
            "--model",
            "builtin",
            "--port",
            str(port),
            "--speculative-config",
            SPEC,
            "--time-scale",
            "0",
            "--enforce-eager",
        ],
        stdout=open(tmp_path / "engine.log", "w"),
        stderr=subprocess.STDOUT,
        env=dict(os.environ),
    )
    try:
        _wait(lambda: http_get(f"http://127.0.0.1:{port}/health")[0] == 200, timeout=60)
        assert http_post(f"http://127.0.0.1:{port}/v1/completions", {"prompt": "x", "max_tokens": 4})[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    log = (tmp_path / "engine.log").read_text()
    assert rc == 0
    assert "--enforce-eager: accepted and ignored by the embedded engine" in log
    assert "Application startup complete." in log and "non-default args:" in log


def _sse(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read().decode()
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e.strip()]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


class _Blanking:
    """A tokenizer whose decode gives no text for the calls `blank(call number)` picks."""

    def __init__(self, inner, blank) -> None:
        self.inner, self.blank, self.calls = inner, blank, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decode(self, ids, **kw):
        self.calls += 1
        return "" if self.blank(self.calls) else self.inner.decode(ids, **kw)


def _check_continuous_usage(chunks: list[dict], completion_tokens: int) -> list[int]:
    """Per-chunk token counts; asserts they are exact, cumulative and end at the total."""
    body = [c for c in chunks if c["choices"]]
    tail = chunks[-1]
    assert tail["choices"] == [] and tail["usage"]["completion_tokens"] == completion_tokens
    assert all(c.get("usage") for c in body), "every chunk carries usage with continuous_usage_stats"
    cumulative = [c["usage"]["completion_tokens"] for c in body]
    assert cumulative == sorted(cumulative)
    assert cumulative[-1] == completion_tokens  # the finish chunk's usage is the full count
    assert body[-1]["choices"][0]["finish_reason"] is not None
    counts = [b - a for a, b in zip([0] + cumulative, cumulative)]
    assert sum(counts) == completion_tokens
    wall = tail["gb300lane"]["wall_token_times_s"]
    assert len(wall) == completion_tokens and wall == sorted(wall)
    # Tokens sent in one chunk share that chunk's send time; the next chunk's are later.
    edges = [sum(counts[: i + 1]) for i in range(len(counts)) if counts[i]]
    starts = [0] + edges[:-1]
    for lo, hi in zip(starts, edges):
        assert len(set(wall[lo:hi])) == 1
    assert len(set(wall[lo] for lo in starts)) == len(starts)
    return counts


@pytest.mark.parametrize("chat", [False, True])
def test_continuous_usage_counts_each_chunks_own_tokens(chat):
    with engine() as (url, _, _log):
        body = {
            "model": "lane",
            "max_tokens": 48,
            "seed": 7,
            "temperature": 1.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if chat:
            body["messages"] = [{"role": "user", "content": "Show the logs of the api container."}]
        else:
            body["prompt"] = "$ docker logs api\n"
        chunks = _sse(url + ("/v1/chat/completions" if chat else "/v1/completions"), body)
        counts = _check_continuous_usage(chunks, 48)
        assert max(counts) > 1  # speculative steps put several tokens in one chunk
        text = "".join(
            (c["choices"][0].get("delta", {}).get("content") or c["choices"][0].get("text") or "")
            for c in chunks
            if c["choices"]
        )
        _, plain = http_post(
            url + "/v1/completions" if not chat else url + "/v1/chat/completions",
            {k: v for k, v in body.items() if k not in ("stream", "stream_options")},
        )
        assert text == (plain["choices"][0]["text"] if not chat else plain["choices"][0]["message"]["content"])


@pytest.mark.parametrize("pattern", ["alternate", "all_but_first"])
def test_steps_without_text_are_counted_on_the_next_chunk(pattern):
    blank = (lambda n: n % 2 == 0) if pattern == "alternate" else (lambda n: n > 1)
    with engine() as (url, server, _log):
        server.tokenizer = _Blanking(server.tokenizer, blank)
        chunks = _sse(
            url + "/v1/completions",
            {
                "model": "lane",
                "prompt": "import os\n",
                "max_tokens": 40,
                "seed": 2,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
        counts = _check_continuous_usage(chunks, 40)
        if pattern == "all_but_first":
            # Only the first step had text; every later token rides on the finish chunk.
            assert len(counts) == 2 and counts[1] == 40 - counts[0] > 0
            assert chunks[-2]["choices"][0]["text"] == "" and chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_stop_strings_keep_usage_exact_in_the_stream():
    with engine() as (url, _, _log):
        chunks = _sse(
            url + "/v1/completions",
            {
                "model": "lane",
                "prompt": "$ docker ps\n",
                "max_tokens": 200,
                "seed": 1,
                "stop": ["\n"],
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
        total = chunks[-1]["usage"]["completion_tokens"]
        _check_continuous_usage(chunks, total)
        assert "\n" not in "".join(c["choices"][0]["text"] for c in chunks if c["choices"])


def test_tokenize_and_detokenize_answer_as_vllm_does():
    with engine() as (url, server, _log):
        code, body = http_post(url + "/tokenize", {"model": "lane", "prompt": "def parse(self, text):\n"})
        assert code == 200 and set(body) == {"count", "max_model_len", "tokens", "token_strs"}
        assert body["count"] == len(body["tokens"]) and body["max_model_len"] == server.args.max_model_len
        assert body["token_strs"] is None
        code, with_strs = http_post(
            url + "/tokenize", {"prompt": "def parse(self, text):\n", "return_token_strs": True}
        )
        assert with_strs["tokens"] == body["tokens"] and "".join(with_strs["token_strs"]) == "def parse(self, text):\n"
        # The ids are the ones a completion is charged for.
        _, done = http_post(url + "/v1/completions", {"prompt": "def parse(self, text):\n", "max_tokens": 2})
        assert done["usage"]["prompt_tokens"] == body["count"]
        messages = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "Weather in Lisbon?"}]
        _, chat = http_post(url + "/tokenize", {"messages": messages})
        _, done = http_post(url + "/v1/chat/completions", {"messages": messages, "max_tokens": 2})
        assert done["usage"]["prompt_tokens"] == chat["count"]
        code, back = http_post(url + "/detokenize", {"model": "lane", "tokens": body["tokens"]})
        assert code == 200 and back == {"prompt": "def parse(self, text):\n"}
        for bad, param in (
            ({"tokens": [10**9]}, "tokens"),
            ({"tokens": "1 2"}, "tokens"),
            ({"prompt": 3}, "prompt"),
            ({"tokens": [1], "model": "other"}, "model"),
        ):
            path = "/tokenize" if "prompt" in bad else "/detokenize"
            code, err = http_post(url + path, bad)
            assert code in (400, 404) and err["error"]["param"] == param


def _histogram(text: str, name: str) -> tuple[float, float]:
    """(sum, count) of one histogram family in an exposition."""
    total = count = None
    for line in text.splitlines():
        if line.startswith(name + "_sum{"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith(name + "_count{"):
            count = float(line.rsplit(" ", 1)[1])
    assert total is not None and count is not None, name
    return total, count


def test_latency_histograms_observe_the_wall_clock_and_the_modelled_one_is_named_for_it():
    with engine() as (url, _, _log):
        t0 = time.perf_counter()
        code, body = http_post(
            url + "/v1/completions", {"prompt": "$ docker ps", "max_tokens": 40, "seed": 1, "ignore_eos": True}
        )
        wall = time.perf_counter() - t0
        assert code == 200
        text = http_get(url + "/metrics")[1].decode()
    timing = body["gb300lane"]
    e2e_wall, n = _histogram(text, "vllm:e2e_request_latency_seconds")
    e2e_modelled, m = _histogram(text, "gb300lane_engine_modelled_e2e_request_latency_seconds")
    assert n == m == 1
    # The vllm: family is what the client saw; the modelled one is the response's modelled times.
    assert e2e_wall <= wall and e2e_wall == pytest.approx(timing["wall_token_times_s"][-1], abs=0.05)
    assert e2e_modelled == pytest.approx(timing["modelled_e2e_s"]) and e2e_modelled != e2e_wall
    ttft_wall, _ = _histogram(text, "vllm:time_to_first_token_seconds")
    assert ttft_wall <= e2e_wall
    _, gaps = _histogram(text, "vllm:inter_token_latency_seconds")
    _, gaps_m = _histogram(text, "gb300lane_engine_modelled_inter_token_latency_seconds")
    assert gaps == gaps_m == 39


def test_responses_answers_text_as_vllm_does_through_the_official_client():
    with engine() as (url, _, _log):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        resp = client.responses.create(
            model="lane",
            input="$ docker ps",
            instructions="You are a shell.",
            max_output_tokens=24,
            extra_body={"seed": 3},
        )
        assert resp.object == "response" and resp.status == "incomplete"
        assert resp.incomplete_details.reason == "max_output_tokens"
        assert resp.output_text and resp.output[0].type == "message" and resp.output[0].role == "assistant"
        assert resp.usage.output_tokens == 24 and resp.usage.total_tokens == resp.usage.input_tokens + 24
        # The same turn as a chat completion gives the same text.
        chat = client.chat.completions.create(
            model="lane",
            max_tokens=24,
            seed=3,
            messages=[{"role": "system", "content": "You are a shell."}, {"role": "user", "content": "$ docker ps"}],
        )
        assert chat.choices[0].message.content == resp.output_text
        listed = client.responses.create(
            model="lane",
            max_output_tokens=8,
            extra_body={"seed": 1},
            input=[{"role": "user", "content": [{"type": "input_text", "text": "ls -la"}]}],
        )
        assert listed.output_text and listed.usage.output_tokens <= 8
        with pytest.raises(openai.BadRequestError, match="streaming is not served"):
            client.responses.create(model="lane", input="x", stream=True)


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("continuous", [False, True])
def test_a_templated_chunk_is_the_bytes_json_dumps_gives(chat, continuous):
    from gb300lane.engine.api import chunk, parse_request
    from gb300lane.engine.server import SseChunk

    model = 'lane "%s" \u00e9'
    body = {"messages": [{"role": "user", "content": "x"}]} if chat else {"prompt": "x"}
    req = parse_request({**body, "stream": True}, chat=chat, served_model_name=model)
    template = SseChunk(req, model, 17, continuous)
    for text in ("hello", "", 'a%sb%%\n"\\ \u00e9\u4e2d\U0001f600', "%d", "\x00text\x00"):
        obj = chunk(req, model, None, None, fields={"content": text}) if chat else chunk(req, model, text, None)
        obj["created"] = 1_800_000_000
        if continuous:
            obj["usage"] = {"prompt_tokens": 17, "completion_tokens": 5, "total_tokens": 22}
        assert template.render(text, 1_800_000_000, 5) == b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_a_time_list_written_once_per_run_is_the_json_dumps_text():
    import numpy as np

    from gb300lane.engine.server import float_list_json

    a, b = 0.1, np.float64(2.5e-7)
    values = [a, a, b, b, b, 1e22, 0.0, -0.0, 1.0, 3.3333333333333335, a]
    assert float_list_json(values) == json.dumps(values)
    assert float_list_json([]) == json.dumps([])
    for odd in ([float("nan")], [1.0, float("inf")], [1], [True]):
        assert float_list_json(odd) is None


def test_observing_a_requests_gaps_at_once_is_observing_them_one_by_one():
    import random

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from gb300lane.engine.served_metrics import _LATENCY_BUCKETS, observe_all

    one, all_ = CollectorRegistry(), CollectorRegistry()
    h1 = Histogram("gap", "gap", ["m"], registry=one, buckets=_LATENCY_BUCKETS).labels(m="lane")
    h2 = Histogram("gap", "gap", ["m"], registry=all_, buckets=_LATENCY_BUCKETS).labels(m="lane")
    rng = random.Random(1)
    for _ in range(40):
        values = [
            rng.choice([0.0, 0.001, 0.005, 80.0, 100.0, -1.0, float("inf"), rng.random() * 0.1, rng.expovariate(3)])
            for _ in range(rng.randint(0, 300))
        ]
        for v in values:
            h1.observe(v)
        observe_all(h2, values)
    assert generate_latest(one) == generate_latest(all_)


def test_the_engines_exposition_is_generate_latests_bytes():
    from prometheus_client import generate_latest

    from gb300lane.engine.core import EngineCounters, Sequence
    from gb300lane.engine.sampling import SamplingParams
    from gb300lane.engine.served_metrics import EngineMetrics

    metrics = EngineMetrics('lane "a"\\b\nc')  # a label value that needs escaping
    assert metrics._text._same
    for step in range(3):
        counters = EngineCounters(
            num_drafts=10 * step,
            num_draft_tokens=50 * step,
            num_accepted=31 * step,
            accepted_per_pos=[9 * step, 7 * step, 5 * step],
            drafts_by_length={5: 10 * step},
            generation_tokens=400 * step,
            prompt_tokens=90 * step,
            verify_steps=20 * step,
            modelled_seconds=0.3 * step,
        )
        metrics.sync(counters, 8 - step, step)
        seq = Sequence(f"r{step}", [1] * 10, SamplingParams(max_tokens=64))
        seq.finish_reason = ("length", "stop", None)[step]
        seq.token_wall = [0.0013 * i * (step + 1) for i in range(64)]
        seq.token_modelled = [1e7 * i for i in range(64)]  # past every bucket, in Go's exponent notation
        seq.admitted_wall = seq.admitted_modelled = 0.0
        metrics.finished(seq)
        assert metrics.exposition() == generate_latest(metrics.registry)


def test_the_engine_serves_without_a_speculative_config() -> None:
    """No --speculative-config: no drafting, and the boot still says what a seeded request repeats."""
    flags = ["--model", "builtin", "--served-model-name", "lane", "--max-num-seqs", "4", "--seed", "3"]
    with running_engine(flags) as eng:
        status, body = http_post(
            eng.url + "/v1/completions", {"model": "lane", "prompt": "hello", "max_tokens": 8, "temperature": 0}
        )
        assert status == 200, body
        assert body["usage"]["completion_tokens"] == 8
        assert "seeded requests repeat within this boot whatever the batch" in eng.log.getvalue()
