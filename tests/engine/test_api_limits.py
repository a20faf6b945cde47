"""The engine API under oversized numbers, and what a seeded request repeats (the boot log says exactly that)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from engines import http_post, running_engine

FIXED_K = json.dumps({"method": "dspark", "num_speculative_tokens": 5})
SCHEDULE = json.dumps(
    {"method": "dspark", "num_speculative_tokens": 5, "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 3]]}
)


def _flags(spec: str) -> list[str]:
    return ["--served-model-name", "lane", "--speculative-config", spec, "--max-num-seqs", "8"]


def test_a_five_thousand_digit_max_tokens_is_a_400_not_a_500() -> None:
    with running_engine(_flags(FIXED_K)) as eng:
        body = b'{"prompt": "x", "max_tokens": ' + b"9" * 5000 + b"}"
        code, answer = http_post(eng.url + "/v1/completions", body)
        assert code == 400, answer
        assert "digits" in answer["error"]["message"] and answer["error"]["type"] == "BadRequestError"
        code, answer = http_post(eng.url + "/v1/completions", {"prompt": "x", "max_tokens": 10**100})
        assert code == 400 and answer["error"]["param"] == "max_tokens", answer
        assert "Traceback" not in eng.log.getvalue()


def _texts(url: str, n: int) -> list[str]:
    req = {"prompt": "The lane", "max_tokens": 24, "temperature": 1.0, "seed": 1234, "ignore_eos": True}
    with ThreadPoolExecutor(n) as pool:
        got = list(pool.map(lambda _: http_post(url + "/v1/completions", req), range(n)))
    assert all(code == 200 for code, _ in got), got
    return [body["choices"][0]["text"] for _, body in got]


def test_seeded_requests_repeat_alone_and_concurrently_at_a_fixed_k_and_the_log_says_so() -> None:
    with running_engine(_flags(FIXED_K)) as eng:
        solo = _texts(eng.url, 1)[0]
        assert _texts(eng.url, 8) == [solo] * 8
        line = next(ln for ln in eng.log.getvalue().splitlines() if "seeded request" in ln)
        assert "whatever the batch" in line, line


def test_under_a_batch_size_k_schedule_the_log_says_what_does_not_repeat() -> None:
    with running_engine(_flags(SCHEDULE)) as eng:
        line = next(ln for ln in eng.log.getvalue().splitlines() if "seeded request" in ln)
        assert "batch-size k schedule" in line and "greedy" in line, line
