"""The streaming client against a real local SSE server: parsing, token attribution, faults."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from gb300lane.bench.client import SSEParser, scrape_metrics, stream_request
from gb300lane.bench.stats import Percentiles, decode_rate, gaps_from_token_times, tpot

sys.path.insert(0, str(Path(__file__).parent / "data" / "bench"))
import fake_lane  # noqa: E402


@pytest.fixture
def lane():
    server = fake_lane.FakeLane().start()
    yield server
    server.stop()


def _post(url: str, body: dict) -> object:
    async def go():
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, url, body, read_timeout_s=10)

    return asyncio.run(go())


def _body(n: int = 16, **extra) -> dict:
    return {
        "model": "fake-model",
        "prompt": "hello",
        "max_tokens": n,
        "min_tokens": n,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        **extra,
    }


def test_sse_parser_joins_split_events_and_ignores_comments():
    p = SSEParser()
    assert p.feed(b"data: {\"a\"") == []
    assert p.feed(b": 1}\r\n\r\n: keepalive\n\ndata: [DONE]\n") == ['{"a": 1}']
    assert p.pending == b"data: [DONE]\n"
    assert p.feed(b"\n") == ["[DONE]"]
    assert p.feed(b"event: x\ndata: one\ndata: two\n\n") == ["one\ntwo"]


def test_single_token_chunks(lane):
    out = _post(lane.url + "/v1/completions", _body(16))
    assert out.ok, out.error
    assert out.output_tokens == 16 and out.chunks == 16
    assert out.token_attribution == "usage"
    assert len(out.token_times_s) == 16
    assert out.ttft_s == out.token_times_s[0] and out.e2e_s == out.token_times_s[-1]
    assert out.done_s >= out.e2e_s
    assert out.text == "".join(lane._tokens(_body(16), 16)) and len(out.text.split()) == 16


def test_multi_token_chunks_share_arrival_time(lane):
    lane.behaviour.tokens_per_step = 4
    lane.behaviour.step_sleep_s = 0.002
    out = _post(lane.url + "/v1/completions", _body(18))
    assert out.ok, out.error
    assert out.chunks == 5  # 4+4+4+4+2
    assert len(out.token_times_s) == 18
    gaps = gaps_from_token_times(out.token_times_s)
    # within a chunk the gaps are zero; 4 chunk boundaries carry the real gaps
    assert sum(1 for g in gaps if g == 0.0) >= 18 - 5
    times = out.token_times_s
    assert len(set(times[0:4])) == 1 and len(set(times[16:18])) == 1
    assert 2 <= len(set(times)) <= 5  # the network may coalesce chunks, never split one


def test_without_continuous_usage_multi_token_chunks_fall_back_to_chunk_times(lane):
    lane.behaviour.tokens_per_step = 3
    lane.behaviour.continuous_usage = False
    out = _post(lane.url + "/v1/completions", _body(9))
    assert out.ok and out.output_tokens == 9 and out.token_attribution == "chunks_only"
    assert len(out.token_times_s) == 3
    lane.behaviour.tokens_per_step = 1
    out = _post(lane.url + "/v1/completions", _body(9))
    assert out.token_attribution == "one_per_chunk" and len(out.token_times_s) == 9


def test_chat_stream_and_engine_timing_extension(lane):
    lane.behaviour.engine_ext = True
    lane.behaviour.tokens_per_step = 2
    body = _body(8)
    del body["prompt"]
    body["messages"] = [{"role": "user", "content": "hi"}]
    out = _post(lane.url + "/v1/chat/completions", body)
    assert out.ok, out.error
    assert out.engine is not None
    assert out.engine.modelled_token_times_s == pytest.approx([0.05, 0.05, 0.06, 0.06, 0.07, 0.07, 0.08, 0.08])
    assert len(out.engine.wall_token_times_s) == 8
    assert out.text


@pytest.mark.parametrize(
    ("fault", "expect"),
    [
        ({"fail_requests": {0: 503}}, "HTTP 503"),
        ({"fail_requests": {0: 400}}, "HTTP 400"),
        ({"malformed": {0}}, "malformed SSE event"),
        ({"no_done": {0}}, "truncated stream"),
        ({"cut": {0}}, "truncated stream"),
    ],
)
def test_faults_become_errors_not_exceptions(lane, fault, expect):
    for key, value in fault.items():
        setattr(lane.behaviour, key, value)
    out = _post(lane.url + "/v1/completions", _body(16))
    assert not out.ok
    assert expect in out.error


def test_a_stalled_stream_times_out_with_a_reason(lane):
    lane.behaviour.stall = {0}

    async def go():
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, lane.url + "/v1/completions", _body(8), read_timeout_s=0.2)

    out = asyncio.run(go())
    assert not out.ok and "stream stalled" in out.error and out.chunks >= 1


def test_short_output_is_reported_by_usage(lane):
    lane.behaviour.short = {0: 5}
    out = _post(lane.url + "/v1/completions", _body(16))
    assert out.ok and out.output_tokens == 5


def test_unreachable_endpoint_is_an_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _post(f"http://127.0.0.1:{port}/v1/completions", _body(4))
    assert not out.ok and "cannot connect" in out.error


def test_metrics_scrape_missing(lane):
    lane.behaviour.metrics = "missing"

    async def go():
        async with aiohttp.ClientSession() as session:
            return await scrape_metrics(session, lane.url)

    scrape = asyncio.run(go())
    assert scrape.text is None and "HTTP 404" in scrape.reason


def test_percentiles_and_rates():
    p = Percentiles.from_values([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert (p.count, p.p50, p.min, p.max) == (10, 5.5, 1, 10)
    assert p.p90 == pytest.approx(9.1) and p.p99 == pytest.approx(9.91)
    assert Percentiles.from_values([]).p50 is None
    assert decode_rate(256, 0.1, 2.65) == pytest.approx(255 / 2.55)
    assert tpot(256, 0.1, 2.65) == pytest.approx(2.55 / 255)
    assert decode_rate(1, 0.1, 0.2) is None and decode_rate(10, 0.2, 0.2) is None
