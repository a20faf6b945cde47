"""The engine under bad input and bad clients: JSON 400s, disconnects, slow clients, huge prompts, bad boots.

Each test serves a real engine on a free 127.0.0.1 port from its own event loop
thread (tests/engines.py) and talks to it over sockets.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from gb300lane.engine.args import parse_serve_args
from gb300lane.errors import EngineError

from engines import http_get, http_post, running_engine

SPEC = json.dumps({"method": "dspark", "num_speculative_tokens": 5})


@contextmanager
def engine(*, header_read_timeout_s: float = 15.0, body_read_timeout_s: float = 60.0):
    flags = ["--served-model-name", "lane", "--speculative-config", SPEC, "--max-num-seqs", "8"]
    with running_engine(flags, header_read_timeout_s=header_read_timeout_s,
                        body_read_timeout_s=body_read_timeout_s) as eng:  # fmt: skip
        yield eng.url, eng.port, eng.server, eng.log


def test_seeds_take_vllms_range_and_out_of_range_is_a_400():
    with engine() as (url, _, server, _log):
        assert http_post(url + "/v1/completions", {"prompt": "x", "max_tokens": 3, "seed": -1})[0] == 200
        assert http_post(url + "/v1/completions", {"prompt": "x", "max_tokens": 3, "seed": 2**63 - 1})[0] == 200
        for seed in (2**63, -(2**63) - 1, 10**30):
            code, body = http_post(url + "/v1/completions", {"prompt": "x", "max_tokens": 3, "seed": seed})
            assert code == 400 and body["error"]["param"] == "seed" and body["error"]["type"] == "BadRequestError"
        assert server._streams == {} and not server.core.has_work


def test_a_deep_json_body_is_a_json_400_and_leaks_nothing():
    with engine() as (url, _, server, log):
        deep = b"[" * 100_000 + b"]" * 100_000
        for path in ("/v1/completions", "/v1/chat/completions"):
            code, body = http_post(url + path, deep)
            assert code == 400 and "nested too deeply" in body["error"]["message"]
        code, body = http_post(url + "/v1/completions", b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")
        assert code == 400
        assert server._streams == {} and not server.core.has_work
        assert "Traceback" not in log.getvalue()


def test_an_unexpected_failure_is_a_json_500_and_one_log_line():
    class Broken:
        vocab_size = 3

        def encode(self, text: str) -> list[int]:
            raise RuntimeError("tokenizer exploded")

    with engine() as (url, _, server, log):
        server.tokenizer = Broken()
        code, body = http_post(url + "/v1/completions", {"prompt": "x", "max_tokens": 3})
        assert code == 500 and body["error"]["type"] == "InternalServerError"
        assert "tokenizer exploded" in body["error"]["message"]
        lines = [line for line in log.getvalue().splitlines() if "tokenizer exploded" in line]
        assert len(lines) == 1 and lines[0].startswith("ERROR ")
        assert server._streams == {}


def test_a_client_that_disconnects_mid_stream_is_one_log_line_and_its_request_is_aborted(caplog):
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    with engine() as (url, port, server, log):
        body = json.dumps(
            {"model": "lane", "prompt": "import os\n", "max_tokens": 5000, "ignore_eos": True, "stream": True}
        ).encode()
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                got = b""
                while b"data: " not in got:  # the stream started
                    got += sock.recv(65536)
        end = time.monotonic() + 30
        while server.core.has_work or server._streams:
            assert time.monotonic() < end, "the abandoned requests are still running"
            time.sleep(0.05)
        # A non-streamed request whose client leaves is aborted too, long before its max_tokens.
        body = json.dumps(
            {"model": "lane", "prompt": "import os\n", "max_tokens": 100_000, "ignore_eos": True}
        ).encode()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            while not server.core.has_work:
                time.sleep(0.01)
        end = time.monotonic() + 30
        while server.core.has_work or server._streams:
            assert time.monotonic() < end, "the abandoned request is still running"
            time.sleep(0.05)
        assert server.core.counters.generation_tokens < 100_000
    lines = [line for line in log.getvalue().splitlines() if "client disconnected" in line]
    assert len(lines) == 4 and all(line.startswith("INFO ") for line in lines)
    assert "Traceback" not in log.getvalue()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.slow
def test_health_answers_while_a_large_prompt_is_tokenized():
    with engine() as (url, _, server, _log):
        # 16 MB (the body limit is 64 MiB): tokenizing it takes about four times the 0.3 s waited below here
        prompt = ("The quick brown fox jumps over the lazy dog, 42 times. " * 320_000)[:16_000_000]
        done: dict[str, float] = {}

        def big() -> None:
            code, _ = http_post(url + "/v1/completions", {"prompt": prompt, "max_tokens": 1})
            done["big"] = time.monotonic()
            done["code"] = code

        thread = threading.Thread(target=big)
        thread.start()
        try:
            time.sleep(0.3)  # the body is in and tokenization under way
            assert http_get(url + "/health")[0] == 200
            health_at = time.monotonic()
        finally:
            thread.join(120)
        # /health answered before the prompt finished tokenizing: the loop was not blocked.
        assert health_at < done["big"]
        assert done["code"] == 400  # longer than --max-model-len, found after tokenizing


@pytest.mark.slow
def test_a_client_that_trickles_its_headers_is_closed():
    with engine(header_read_timeout_s=1.0) as (_, port, _server, _log):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(20)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            for _ in range(3):
                time.sleep(0.1)
                sock.sendall(b"X-Slow: 1\r\n")
            assert sock.recv(1024) == b""  # closed by the server, not by our timeout
            assert time.monotonic() - started < 15


@pytest.mark.slow
def test_a_body_that_does_not_arrive_is_a_408():
    with engine(body_read_timeout_s=1.0) as (_, port, server, _log):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(20)
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"prompt":'
            )
            reply = sock.recv(65536).decode()
        assert reply.startswith("HTTP/1.1 408")
        assert json.loads(reply.split("\r\n\r\n", 1)[1])["error"]["code"] == 408
        assert server._streams == {}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["--speculative-config", '{"method": "dspark", "num_speculative_tokens": 1000000000000}'],
            "num_speculative_tokens = 1000000000000; the embedded engine drafts at most 64",
        ),
        (["--time-scale", "inf"], "--time-scale inf: must be a finite number"),
        (["--time-scale", "nan"], "--time-scale nan: must be a finite number"),
        (["--time-scale", "1e9"], "--time-scale 1000000000.0: must be <= 100"),
    ],
)
def test_unservable_boot_values_are_refused_before_anything_binds(argv, needle):
    with pytest.raises(EngineError) as info:
        parse_serve_args(argv)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_long_prompt_is_tokenized_in_slices_to_the_same_ids_and_counted_past_the_limit(monkeypatch):
    import random

    import gb300lane.engine.server as server_mod
    from gb300lane.engine.model import load_model

    tok = load_model().tokenizer
    monkeypatch.setattr(server_mod, "ENCODE_SLICE_CHARS", 40)
    rng = random.Random(0)
    alphabet = ["a", "b", " ", "  ", "\t", "\n", "1", ".", "<|endoftext|>", "word", " x", "é", "\r\n", "=="]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 150)))
        full = tok.encode(text)
        assert server_mod.encode_within(tok, text, 10**9) == full, repr(text)
        bounded = server_mod.encode_within(tok, text, 5)
        assert (bounded == len(full) > 5) if isinstance(bounded, int) else bounded == full
