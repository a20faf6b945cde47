"""The served engine's tokens for fixed seeds, pinned: a faster step or stream path must send the same text.

Ten requests share the engine's steps at once (k=5 at every batch size, so a
seeded request's tokens do not depend on who else is in the batch or when it
joined): streamed and whole completions and chats, temperature 1, greedy,
top_p, a stop string, min_tokens with EOS allowed and a json_object response
format (rows that verify on the draft support beside rows that verify on full
rows). Each answer's text, token count, finish reason and spec-decode counters
are hashed; the digests were recorded from the engine before its step and
stream path were batched.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import aiohttp
import pytest

from gb300lane.engine import server

from engines import running_engine

SPEC = json.dumps(
    {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
        "rejection_sample_method": "block",
    }
)
FLAGS = [
    "--model",
    "builtin",
    "--served-model-name",
    "lane",
    "--speculative-config",
    SPEC,
    "--max-num-seqs",
    "8",
    "--seed",
    "3",
    "--boot-seed",
    "11",
    "--per-request-spec-decode-metrics",
    "detailed",
]
PROSE = "The harbour was quiet that morning, and the boats rocked slowly against the old stone wall while"
CODE = "def parse_config(path):\n    with open(path) as handle:\n        data = json.load(handle)\n"

#: (route, body) per request; every request carries its own seed.
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (
        "/v1/completions",
        {
            "prompt": PROSE,
            "max_tokens": 160,
            "min_tokens": 160,
            "ignore_eos": True,
            "seed": 1,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    (
        "/v1/completions",
        {"prompt": CODE, "max_tokens": 120, "seed": 2, "stream": True, "stream_options": {"include_usage": True}},
    ),
    ("/v1/completions", {"prompt": PROSE, "max_tokens": 90, "temperature": 0.0, "stream": True}),
    (
        "/v1/completions",
        {
            "prompt": PROSE,
            "max_tokens": 100,
            "top_p": 0.9,
            "seed": 4,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    ("/v1/completions", {"prompt": CODE, "max_tokens": 140, "stop": ["\n\n"], "seed": 5, "stream": True}),
    ("/v1/completions", {"prompt": PROSE, "max_tokens": 130, "min_tokens": 40, "seed": 6}),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": PROSE}],
            "max_tokens": 150,
            "min_tokens": 150,
            "ignore_eos": True,
            "seed": 7,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": CODE}], "max_tokens": 110, "seed": 8}),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Report the status as JSON."}],
            "max_tokens": 80,
            "seed": 9,
            "stream": True,
            "response_format": {"type": "json_object"},
        },
    ),
    (
        "/v1/completions",
        {
            "prompt": CODE,
            "max_tokens": 200,
            "temperature": 0.7,
            "seed": 10,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
]

#: sha256 (first 16 hex digits) of each request's answer (`_answer`), in REQUESTS' order.
EXPECTED: list[str] = [
    "76b822fadec137f0",
    "9ca8dfe90e128986",
    "b1c6f7ea30ae5345",
    "eca38f349f171e2c",
    "c13ea740cc8cfc75",
    "91071d1064f251d2",
    "3f8e15332a20a73f",
    "dfe418f0609e8809",
    "20d72d587e1bd576",
    "282ec185cfbd6c38",
]


async def _one(session: aiohttp.ClientSession, url: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url + route, json={"model": "lane", **body}) as resp:
        assert resp.status == 200, await resp.text()
        if not body.get("stream"):
            out = await resp.json()
            choice = out["choices"][0]
            text = choice["message"]["content"] if "message" in choice else choice["text"]
            return {"text": text, "finish": choice["finish_reason"], "usage": out["usage"], "spec": out.get("metrics")}
        text, finish, usage, spec, counted = [], None, None, None, []
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                piece = choice["delta"].get("content") if "delta" in choice else choice["text"]
                text.append(piece or "")
                finish = choice["finish_reason"] or finish
            if event.get("usage"):
                usage = event["usage"]
                counted.append(usage["completion_tokens"])
            spec = event.get("metrics", spec)
        if counted:  # per-chunk usage never runs backwards and ends at the total
            assert counted == sorted(counted)
        return {"text": "".join(text), "finish": finish, "usage": usage, "spec": spec}


def _digest(answer: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(answer, sort_keys=True).encode()).hexdigest()[:16]


async def _all(url: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        return await asyncio.gather(*(_one(session, url, route, body) for route, body in REQUESTS))


@pytest.mark.slow
@pytest.mark.parametrize("backed_up", [False, True], ids=["step-loop-writes", "handler-writes"])
def test_served_tokens_for_fixed_seeds_are_pinned(monkeypatch, backed_up):
    if backed_up:  # every socket reads as backed up: the handlers write every chunk, draining
        monkeypatch.setattr(server, "SSE_DIRECT_LIMIT", -1)
    with running_engine(FLAGS) as eng:
        answers = asyncio.run(_all(eng.url))
    digests = [_digest(a) for a in answers]
    assert all(a["text"] for a in answers)
    assert digests == EXPECTED, json.dumps(digests)
