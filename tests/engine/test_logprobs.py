"""Logprobs, prompt_logprobs and echo: vLLM's response shapes, and numbers that are the target's own.

The shapes are checked over HTTP on a real engine (tests/engines.py); the
numbers against the rows the verifier's target side reads in a step, and
against a second request that scores the same tokens as its prompt.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gb300lane.engine.api import ApiError, parse_request
from gb300lane.engine.config import parse_spec_config
from gb300lane.engine.core import EngineCore, Sequence
from gb300lane.engine.logprobs import MAX_LOGPROBS, score_positions
from gb300lane.engine.model import load_model
from gb300lane.engine.sampling import SamplingParams
from gb300lane.spec import verify

from engines import http_get, http_post, running_engine

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
    "--seed",
    "3",
    "--boot-seed",
    "5",
    "--numerics-jitter",
    "0.01",
]
PROMPT = "The report on the quarterly results says that"


@pytest.fixture(scope="module")
def lane():
    with running_engine(FLAGS) as eng:
        yield eng


def _post(lane, path: str, body: dict) -> dict:
    status, answer = http_post(lane.url + path, {"model": "lane", **body})
    assert status == 200, answer
    return answer


def test_completion_logprobs_have_vllms_shape(lane):
    body = _post(lane, "/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "logprobs": 3, "seed": 4})
    choice = body["choices"][0]
    lp = choice["logprobs"]
    assert list(lp) == ["text_offset", "token_logprobs", "tokens", "top_logprobs"]
    n = body["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert "prompt_logprobs" not in choice  # only when asked for, as an echo or prompt_logprobs request
    assert "".join(lp["tokens"]) == choice["text"]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(n)]
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert logprob <= 0.0 and top[token] == logprob
        # The token's own entry, then the top 3: 3 entries when it is among them, else 4.
        assert len(top) in (3, 4) and (len(top) == 3) == (logprob >= sorted(top.values())[-3])


def test_echo_puts_the_prompt_and_its_logprobs_first(lane):
    body = _post(lane, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "logprobs": 1, "echo": True, "seed": 4})
    choice = body["choices"][0]
    plain = _post(lane, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "seed": 4})["choices"][0]
    assert choice["text"] == PROMPT + plain["text"]
    lp = choice["logprobs"]
    prompt_tokens = body["usage"]["prompt_tokens"]
    assert len(lp["tokens"]) == prompt_tokens + body["usage"]["completion_tokens"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    assert "".join(lp["tokens"]) == choice["text"]
    # vLLM scores the echoed prompt at the answer's count and returns it as prompt_logprobs too.
    assert len(choice["prompt_logprobs"]) == prompt_tokens
    echo_text = _post(lane, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "echo": True, "seed": 4})
    assert echo_text["choices"][0]["text"] == choice["text"] and echo_text["choices"][0]["logprobs"] is None


def test_chat_logprobs_have_vllms_shape(lane):
    body = _post(
        lane,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Describe the shipping schedule."}],
            "max_tokens": 6,
            "logprobs": True,
            "top_logprobs": 2,
            "seed": 9,
        },
    )
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == body["usage"]["completion_tokens"]
    assert "".join(c["token"] for c in content) == body["choices"][0]["message"]["content"]
    for entry in content:
        assert list(entry) == ["token", "logprob", "bytes", "top_logprobs"]
        assert entry["bytes"] == list(entry["token"].encode("utf-8"))
        assert len(entry["top_logprobs"]) == 2 and entry["top_logprobs"][0]["token"] == entry["token"]
        assert entry["top_logprobs"][0]["logprob"] == entry["logprob"]
    bare = _post(
        lane,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2, "logprobs": True},
    )
    assert all(e["top_logprobs"] == [] for e in bare["choices"][0]["logprobs"]["content"])
    off = _post(lane, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2})
    assert off["choices"][0]["logprobs"] is None and "prompt_logprobs" not in off


def test_prompt_logprobs_have_vllms_shape(lane):
    body = _post(lane, "/v1/completions", {"prompt": PROMPT, "max_tokens": 1, "prompt_logprobs": 2})
    plp = body["choices"][0]["prompt_logprobs"]
    status, tok = http_post(lane.url + "/tokenize", {"prompt": PROMPT})
    ids = tok["tokens"]
    assert len(plp) == len(ids) and plp[0] is None
    for tid, entry in zip(ids[1:], plp[1:]):
        keys = list(entry)
        assert keys[0] == str(tid)  # the prompt's own token first, then the top 2
        assert len(entry) in (2, 3)
        for key, value in entry.items():
            assert list(value) == ["logprob", "rank", "decoded_token"]
            assert value["decoded_token"] == lane.server.tokenizer.pieces[int(key)]
        assert {1, 2} <= {v["rank"] for v in entry.values()}  # the top 2 (the prompt's token may be one of them)
    chat = _post(
        lane,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 1, "prompt_logprobs": 0},
    )
    assert chat["prompt_logprobs"][0] is None and all(len(e) == 1 for e in chat["prompt_logprobs"][1:])


def test_prompt_logprobs_of_a_text_equal_the_logprobs_its_generation_reported(lane):
    """Scoring prompt + answer as a prompt gives the answer's tokens the logprobs the answer reported."""
    gen = _post(lane, "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "logprobs": 5, "seed": 21})
    lp = gen["choices"][0]["logprobs"]
    model = lane.server.model
    prompt_ids = lane.server.tokenizer.encode(PROMPT)
    out_ids = [lane.server.tokenizer.index[t] for t in lp["tokens"]]
    # The target conditions on the class the prompt reads as: both requests must read as the same one.
    assert model.classify(prompt_ids) == model.classify(prompt_ids + out_ids)
    ref = _post(lane, "/v1/completions", {"prompt": prompt_ids + out_ids, "max_tokens": 1, "prompt_logprobs": 5})
    scored = ref["choices"][0]["prompt_logprobs"][len(prompt_ids) :]
    assert len(scored) == len(out_ids)
    for tid, token, logprob, top, entry in zip(out_ids, lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], scored):
        assert entry[str(tid)]["logprob"] == logprob
        assert {v["decoded_token"]: v["logprob"] for v in entry.values()} == top


def test_the_sampled_tokens_logprob_is_the_verifiers_target_row():
    """Each emitted token's logprob is log p of the row the verify step sampled or accepted it from."""
    model = load_model()
    spec, _ = parse_spec_config(SPEC)
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def watching(method, p, q, drafts, rng, *, greedy):
        res = verify(method, p, q, drafts, rng, greedy=greedy)
        seen.append((p.copy(), res.tokens.copy()))
        return res

    core = EngineCore(model, spec, max_num_seqs=1, seed=1, boot_seed=8, numerics_jitter=0.01, verifier=watching)
    seq = Sequence(
        "r", model.tokenizer.encode(PROMPT), SamplingParams(temperature=1.0, max_tokens=40, seed=6, ignore_eos=True)
    )
    core.add(seq)
    while core.has_work:
        core.step()
    from_verifier = [float(np.log(np.float64(p[0, j, t]))) for p, toks in seen for j, t in enumerate(toks[0]) if t >= 0]
    from_verifier = from_verifier[:40]  # the last step may emit past max_tokens; the request keeps 40
    ids = seq.prompt_ids + seq.output_ids
    scored = score_positions(model, core.numerics, seq.cls, ids, len(seq.prompt_ids), len(ids), 0)
    assert len(from_verifier) == len(scored) == 40
    assert [s.logprob for s in scored] == from_verifier
    # A token outside the top-k still gets its own logprob, and its rank counts the tokens at least as likely.
    row = np.log(
        model.target_probs(np.array([seq.cls]), np.array(ids[-3:-2]), np.array(ids[-2:-1]), core.numerics)[0].astype(
            np.float64
        )
    )
    assert scored[-1].rank == int((row >= row[ids[-1]]).sum())
    assert math.isclose(np.exp(row).sum(), 1.0, rel_tol=1e-5)


@pytest.mark.parametrize(
    "body, chat, message",
    [
        (
            {"prompt": "x", "logprobs": MAX_LOGPROBS + 1},
            False,
            "Requested sample logprobs of 21, which is greater than max allowed: 20",
        ),
        ({"prompt": "x", "prompt_logprobs": -1}, False, "Requested prompt logprobs of 3072"),
        ({"prompt": "x", "logprobs": -2}, False, "`logprobs` must be a positive value or -1."),
        ({"prompt": "x", "logprobs": True}, False, "logprobs must be an integer"),
        ({"prompt": "x", "echo": "yes"}, False, "echo must be a boolean"),
        ({"prompt": "x", "prompt_logprobs": 1, "stream": True}, False, "`prompt_logprobs` are not available when"),
        ({"prompt": "x", "logprobs": 1, "stream": True}, False, "send stream=false"),
        (
            {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
            True,
            "when using `top_logprobs`, `logprobs` must be set to true.",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
            True,
            "greater than max allowed: 20",
        ),
    ],
)
def test_logprob_requests_out_of_bounds_are_refused_as_vllm_words_it(body, chat, message):
    with pytest.raises(ApiError) as err:
        parse_request(body, chat=chat, served_model_name="lane", vocab_size=3072)
    assert message in str(err.value) and err.value.status == 400


def test_the_served_version_says_nothing_of_faults_on_an_exact_engine(lane):
    status, raw = http_get(lane.url + "/version")
    assert status == 200 and "faults" not in json.loads(raw)
    body = _post(lane, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert "faults" not in body["gb300lane"]


def test_processed_logprobs_are_the_distribution_the_request_samples_from():
    model = load_model()
    ids = model.tokenizer.encode(PROMPT)
    params = SamplingParams(temperature=0.5, top_k=5)
    raw = score_positions(model, None, 0, ids, 1, len(ids), 5)
    shaped = score_positions(model, None, 0, ids, 1, len(ids), 5, params=params)
    for r, s in zip(raw, shaped):
        assert [t for t, _, _ in r.top] == [t for t, _, _ in s.top]  # tempering keeps the order
        assert math.isclose(sum(math.exp(lp) for _, lp, _ in s.top), 1.0, rel_tol=1e-5)  # top_k = 5 keeps 5
        if s.rank > 5:
            assert s.logprob == -9999.0  # outside top_k: -inf, floored as vLLM's server floors it


def _stream(lane, path: str, body: dict) -> list[dict]:
    import urllib.request

    req = urllib.request.Request(
        lane.url + path,
        data=json.dumps({"model": "lane", "stream": True, **body}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read().decode()
    return [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]


@pytest.mark.parametrize("chat", [False, True])
def test_return_token_ids_gives_the_prompts_and_the_sampled_ids_as_vllm_places_them(lane, chat):
    """vLLM's return_token_ids: whole answers carry both lists; a stream gives the prompt's once (a completion's
    first choice, a chat's first body) and each chunk's own ids, which join to the whole answer's."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    ask = {"messages": [{"role": "user", "content": PROMPT}]} if chat else {"prompt": PROMPT}
    ask.update(max_tokens=24, temperature=1.0, seed=11, return_token_ids=True)
    whole = _post(lane, path, ask)
    choice = whole["choices"][0]
    prompt = whole["prompt_token_ids"] if chat else choice["prompt_token_ids"]
    assert len(prompt) == whole["usage"]["prompt_tokens"] and len(choice["token_ids"]) == 24
    if not chat:
        assert choice["text"].startswith(_post(lane, "/detokenize", {"tokens": choice["token_ids"][:1]})["prompt"])
    events = _stream(lane, path, {**ask, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    chunks = [e for e in events if e["choices"]]
    streamed = [t for e in chunks for t in e["choices"][0]["token_ids"]]
    assert streamed == choice["token_ids"]
    firsts = [e for e in events if "prompt_token_ids" in (e if chat else (e["choices"] or [{}])[0])]
    assert len(firsts) == 1 and firsts[0] is chunks[0]
    assert (chunks[0] if chat else chunks[0]["choices"][0])["prompt_token_ids"] == prompt
    for e in chunks:  # each chunk's ids are the tokens its usage counts
        assert len(e["choices"][0]["token_ids"]) == e["usage"]["completion_tokens"] - sum(
            len(x["choices"][0]["token_ids"]) for x in chunks[: chunks.index(e)]
        )
    plain = _post(lane, path, {k: v for k, v in ask.items() if k != "return_token_ids"})
    assert "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain
