"""Tool calls and structured output on the embedded engine, through the official `openai` client.

`tool_choice` required and named force a call whose arguments fit the tool's
schema; `response_format` json_object / json_schema give JSON (schema-valid);
what vLLM 0.33 refuses is refused with its message. The prompts are tool
transcripts (the builtin model reads them as its tool_json class).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import numpy as np
import openai
import pytest

from gb300lane.engine.config import parse_spec_config
from gb300lane.engine.core import EngineCore, Sequence
from gb300lane.engine.grammar import Grammar, compile_json_schema, strict
from gb300lane.engine.model import load_model
from gb300lane.engine.sampling import SamplingParams
from gb300lane.engine.tools import AutoToolStream, parse_required, parse_tool_calls

sys.path.insert(0, str(Path(__file__).parents[1]))
from engine.test_server import engine  # noqa: E402

from engines import http_post  # noqa: E402

TOOLS_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v41", "--boot-seed", "7")
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"], "type": "string"}},
    "required": ["city"],
}
FLIGHTS = {
    "type": "object",
    "properties": {
        "origin": {"type": "string"},
        "destination": {"type": "string"},
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["origin", "destination", "passengers"],
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Current weather for a city", "parameters": WEATHER},
    },
    {
        "type": "function",
        "function": {"name": "search_flights", "description": "Search flights", "parameters": FLIGHTS},
    },
]
SCHEMAS = {"get_weather": WEATHER, "search_flights": FLIGHTS}
MESSAGES = [
    {
        "role": "assistant",
        "content": '{"tool_calls": [{"id": "call_1", "type": "function", "function": '
        '{"name": "get_weather", "arguments": {"city": "Porto"}}}]}',
    },
    {
        "role": "tool",
        "content": '{"tool_call_id": "call_1", "role": "tool", "content": {"ok": true, "elapsed_ms": 523}}',
    },
]


@pytest.fixture(scope="module")
def lane():
    with engine(*TOOLS_FLAGS) as (url, server, log):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0), url, server, log


def _strict_valid(arguments: str, schema: dict) -> dict:
    value = json.loads(arguments)
    jsonschema.validate(value, strict(schema))
    return value


def test_required_returns_tool_calls_whose_arguments_fit_the_schema(lane):
    client, *_ = lane
    for seed in range(3):
        resp = client.chat.completions.create(
            model="lane", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=300, seed=seed
        )
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls, choice.message
        for call in choice.message.tool_calls:
            assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
            _strict_valid(call.function.arguments, SCHEMAS[call.function.name])


def test_a_named_function_is_called_with_arguments_that_fit_its_schema(lane):
    client, *_ = lane
    for seed in range(3):
        resp = client.chat.completions.create(
            model="lane",
            messages=MESSAGES,
            tools=TOOLS,
            max_tokens=300,
            seed=seed,
            tool_choice={"type": "function", "function": {"name": "search_flights"}},
        )
        choice = resp.choices[0]
        assert choice.finish_reason == "stop"
        (call,) = choice.message.tool_calls
        assert call.function.name == "search_flights"
        args = _strict_valid(call.function.arguments, FLIGHTS)
        assert isinstance(args["passengers"], int)


def test_json_object_returns_json(lane):
    client, *_ = lane
    finished = 0
    for seed in range(5):
        resp = client.chat.completions.create(
            model="lane", messages=MESSAGES, max_tokens=400, seed=seed, response_format={"type": "json_object"}
        )
        choice = resp.choices[0]
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
            finished += 1
        else:  # an object still open at max_tokens, as on vLLM; what was written is still JSON's
            assert choice.finish_reason == "length" and choice.message.content.startswith("{")
    assert finished >= 3


def test_json_schema_output_validates(lane):
    client, *_ = lane
    schema = {
        "type": "object",
        "properties": {
            "status": {"enum": ["ok", "degraded", "down"]},
            "latency_ms": {"type": "integer", "minimum": 0, "maximum": 60000},
            "host": {"type": "string"},
        },
        "required": ["status", "latency_ms", "host"],
    }
    for seed in range(3):
        resp = client.chat.completions.create(
            model="lane",
            messages=MESSAGES,
            max_tokens=300,
            seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "probe", "schema": schema}},
        )
        choice = resp.choices[0]
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), strict(schema))
    # The completions route takes response_format too.
    resp = client.completions.create(
        model="lane",
        prompt='{"tool_call_id": "call_9", "content": ',
        max_tokens=300,
        seed=1,
        extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "probe", "schema": schema}}},
    )
    jsonschema.validate(json.loads(resp.choices[0].text), strict(schema))


def test_streamed_forced_calls_carry_the_same_calls_and_exact_usage(lane):
    client, *_ = lane
    stream = client.chat.completions.create(
        model="lane",
        messages=MESSAGES,
        tools=TOOLS,
        max_tokens=300,
        seed=2,
        stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls[0].function.name == "get_weather" and calls[0].id
    assert all(tc.index == 0 and tc.function.name is None for tc in calls[1:])
    _strict_valid("".join(tc.function.arguments for tc in calls), WEATHER)
    assert chunks[-1].usage.completion_tokens == max(c.usage.completion_tokens for c in chunks if c.usage)
    stream = client.chat.completions.create(
        model="lane", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=300, seed=2, stream=True
    )
    chunks = list(stream)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls and chunks[-1].choices[0].finish_reason == "tool_calls"
    for call in calls:
        _strict_valid(call.function.arguments, SCHEMAS[call.function.name])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tool_choice": "auto"}, "When using `tool_choice`, `tools` must be set."),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "Invalid value for `tool_choice`: sometimes!"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
        ),
        ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "Invalid value for `function`"),
        (
            {"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
            "You can only either use constraints for structured outputs or tools, not both.",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format.type 'yaml'"),
        ({"response_format": {"type": "json_schema"}}, "json_schema must be an object with a name and a schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
            "cannot be used for structured output",
        ),
    ],
)
def test_what_vllm_refuses_is_a_400(lane, body, message):
    _, url, server, _log = lane
    code, payload = http_post(
        url + "/v1/chat/completions", {"model": "lane", "messages": MESSAGES, "max_tokens": 5, **body}
    )
    assert code == 400 and message in payload["error"]["message"], payload
    assert server._streams == {}


def test_tools_without_the_parser_flags_get_vllms_400():
    with engine() as (url, _server, _log):
        code, payload = http_post(url + "/v1/chat/completions", {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 5})
        assert code == 400
        assert payload["error"]["message"] == (
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
        code, payload = http_post(
            url + "/v1/chat/completions",
            {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 5, "tool_choice": "required"},
        )
        assert code == 400 and "requires --tool-call-parser to be set" in payload["error"]["message"]
        # tool_choice none needs no parser: the answer is text.
        code, payload = http_post(
            url + "/v1/chat/completions", {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 5, "tool_choice": "none"}
        )
        assert code == 200 and payload["choices"][0]["message"]["tool_calls"] == []


def test_the_parser_reads_the_builtin_models_call_format():
    text = (
        '{"tool_calls": [{"id": "call_7", "type": "function", "function": {"name": "run_command", '
        '"arguments": {"command": "uptime", "timeout_s": 60}}}]}\nafter'
    )
    content, calls = parse_tool_calls(text)
    assert content == "\nafter" and len(calls) == 1
    assert calls[0]["function"] == {"name": "run_command", "arguments": '{"command": "uptime", "timeout_s": 60}'}
    assert parse_tool_calls('{"ok": true}') == ('{"ok": true}', [])
    assert parse_tool_calls('{"tool_calls": [{"function": {"name": ')[1] == []
    assert parse_required('[{"name": "f", "parameters": {"a": 1}}]')[0]["function"]["arguments"] == '{"a": 1}'
    assert parse_required('[{"name": "f", "para') is None
    # Streamed: held while it can still become a call, then the call whole, then the rest as content.
    auto = AutoToolStream()
    out = [d for piece in (text[:5], text[5:40], text[40:]) for d in auto.feed(piece)] + auto.finish()
    assert out[0]["tool_calls"][0]["function"]["name"] == "run_command" and out[1] == {"content": "\nafter"}
    auto = AutoToolStream()
    assert auto.feed('{"to') == [] and auto.feed('ols": 1') == [{"content": '{"tools": 1'}]
    assert auto.feed(" more") == [{"content": " more"}] and not auto.called
    auto = AutoToolStream()
    assert auto.feed('{"tool_calls": [{"id"') == [] and auto.finish() == [{"content": '{"tool_calls": [{"id"'}]


def _run(core: EngineCore, seqs: list[Sequence]) -> None:
    for seq in seqs:
        core.add(seq)
    while core.has_work:
        core.step()


@pytest.mark.parametrize("draft", ["greedy", "probabilistic"])
def test_greedy_constrained_text_is_the_masked_targets_argmax_chain_whatever_the_drafts(draft):
    """Greedy is the masked target's argmax chain: drafting (k=5) must change nothing, token for token."""
    model = load_model()
    tok = model.tokenizer
    grammar = compile_json_schema(tok, FLIGHTS)
    prompts = [tok.encode(m["content"]) for m in MESSAGES] + [tok.encode('{"tool_calls": [')]
    spec, _ = parse_spec_config(
        json.dumps(
            {
                "method": "dspark",
                "num_speculative_tokens": 5,
                "draft_sample_method": draft,
                "rejection_sample_method": "block",
            }
        )
    )
    texts = []
    for config in (spec, None):
        core = EngineCore(model, config, boot_seed=3)
        seqs = [
            Sequence(request_id=str(i), prompt_ids=list(p), params=SamplingParams(temperature=0.0, max_tokens=120))
            for i, p in enumerate(prompts)
        ]
        for seq in seqs:
            seq.grammar = Grammar(tok, grammar)
        _run(core, seqs)
        texts.append([tok.decode(s.output_ids) for s in seqs])
        for seq in seqs:  # every token inside the grammar (greedy n-gram text may loop to max_tokens)
            assert seq.error is None and Grammar(tok, grammar).commit(seq.output_ids)
        if config is not None:
            assert core.counters.num_accepted > 0  # the drafts did get accepted inside the grammar
    assert texts[0] == texts[1]


@pytest.mark.slow
def test_constrained_sampling_with_drafts_matches_sampling_without():
    """The enum a schema forces is drawn with the same frequencies with and without drafting.

    Chi-square test of homogeneity on the chosen value (4 categories), 600 seeded
    requests per arm, alpha = 0.001: a lossless engine fails it one run in a thousand.
    A drafter whose redraws ignored the mask would emit values outside the enum and
    fail the schema check; one that skewed q without handing it to the verifier shifts
    these frequencies by far more than the test's resolution (about 0.05 per category).
    """
    from scipy.stats import chi2_contingency

    model = load_model()
    tok = model.tokenizer
    schema = {
        "type": "object",
        "properties": {"role": {"enum": ["tool", "assistant", "function", "user"]}},
        "required": ["role"],
    }
    grammar = compile_json_schema(tok, schema)
    prompt = tok.encode(MESSAGES[1]["content"] + "\n")
    spec, _ = parse_spec_config(
        json.dumps({"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "probabilistic"})
    )
    counts = []
    for config in (spec, None):
        core = EngineCore(model, config, boot_seed=5, max_num_seqs=64)
        seqs = [
            Sequence(request_id=str(i), prompt_ids=list(prompt), params=SamplingParams(max_tokens=24, seed=i))
            for i in range(600)
        ]
        for seq in seqs:
            seq.grammar = Grammar(tok, grammar)
        _run(core, seqs)
        values = [json.loads(tok.decode(s.output_ids))["role"] for s in seqs]
        counts.append([values.count(v) for v in schema["properties"]["role"]["enum"]])
    table = np.array(counts)
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 2, counts  # the choice is a real one
    assert chi2_contingency(table).pvalue > 0.001, counts


def test_the_bench_clients_tool_json_requests_run_and_record_tool_calls(lane):
    """The bench's tool_json requests (tools, auto) stream fine; a call's arguments are what it records."""
    import asyncio

    import aiohttp

    from gb300lane.bench.client import stream_request
    from gb300lane.bench.transcripts import load_transcripts
    from gb300lane.bench.window import build_request
    from gb300lane.recipes.schema import WindowSpec

    _, url, _server, _log = lane
    window = WindowSpec(
        name="t",
        classes=["tool_json"],
        transcripts_per_class=2,
        rounds=1,
        concurrency=[1],
        temperature=1.0,
        top_p=1.0,
        seed_base=7,
        forced_tokens=48,
    )
    transcript = load_transcripts("tool_json")[0]
    path, body, _ = build_request(transcript, window, model="lane", round=1)
    assert body["tools"] == transcript.tools and "tool_choice" not in body
    forced = dict(body, tool_choice={"type": "function", "function": {"name": transcript.tools[0]["function"]["name"]}})

    async def go():
        async with aiohttp.ClientSession() as session:
            return [await stream_request(session, url + path, b, read_timeout_s=30) for b in (body, forced)]

    auto, called = asyncio.run(go())
    for out in (auto, called):
        assert out.ok, out.error
        assert out.output_tokens == 48 and len(out.token_times_s) == 48
    # The forced call's arguments are the recorded text, and they fit the tool's declared parameters.
    jsonschema.validate(json.loads(called.text), strict(transcript.tools[0]["function"]["parameters"]))


def test_parallel_tool_calls_false_keeps_the_first_call():
    from gb300lane.engine.api import chat_message, parse_request

    two = (
        '[{"name": "get_weather", "parameters": {"city": "Lisbon"}}, '
        '{"name": "search_flights", "parameters": {"origin": "LIS", "destination": "OPO", "passengers": 1}}]'
    )
    for parallel, count in ((None, 2), (True, 2), (False, 1)):
        body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required"}
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
        req = parse_request(body, chat=True, served_model_name="lane")
        message, finish = chat_message(req, two, "stop")
        assert len(message["tool_calls"]) == count and finish == "tool_calls"
    auto = AutoToolStream(parallel=False)
    text = (
        '{"tool_calls": [{"function": {"name": "a", "arguments": {}}}, {"function": {"name": "b", "arguments": {}}}]}'
    )
    assert [c["function"]["name"] for c in auto.feed(text)[0]["tool_calls"]] == ["a"]
    with pytest.raises(Exception, match="parallel_tool_calls must be a boolean"):
        parse_request({"messages": MESSAGES, "parallel_tool_calls": "no"}, chat=True, served_model_name="lane")


def test_structured_outputs_choice_regex_and_json_hold_the_text(lane):
    import re

    _, url, _server, _log = lane
    for seed in range(3):
        code, body = http_post(
            url + "/v1/completions",
            {
                "prompt": '{"ok": ',
                "max_tokens": 20,
                "seed": seed,
                "structured_outputs": {"choice": ["true", "false", "null"]},
            },
        )
        assert code == 200 and body["choices"][0]["text"] in ("true", "false", "null")
        code, body = http_post(
            url + "/v1/completions",
            {"prompt": '"call_', "max_tokens": 30, "seed": seed, "structured_outputs": {"regex": "call_[0-9]{2,6}"}},
        )
        assert code == 200 and re.fullmatch("call_[0-9]{2,6}", body["choices"][0]["text"]), body
        code, body = http_post(
            url + "/v1/chat/completions",
            {
                "messages": MESSAGES,
                "max_tokens": 200,
                "seed": seed,
                "structured_outputs": {"json": json.dumps(WEATHER)},
            },
        )
        assert code == 200
        jsonschema.validate(json.loads(body["choices"][0]["message"]["content"]), strict(WEATHER))
    for bad, needle in (
        ({"choice": ["a"], "regex": "a"}, "You can only use one kind of constraints"),
        ({"regex": "("}, "cannot be used for structured output"),
        ({"choice": []}, "non-empty list of strings"),
        ({"json": "{"}, "not valid JSON"),
    ):
        code, body = http_post(url + "/v1/completions", {"prompt": "x", "max_tokens": 3, "structured_outputs": bad})
        assert code == 400 and needle in body["error"]["message"], body


def test_a_conversation_carries_earlier_tool_calls_in_the_models_own_format(lane):
    client, url, server, _log = lane
    first = client.chat.completions.create(
        model="lane", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=300, seed=1
    )
    call = first.choices[0].message.tool_calls[0]
    history = [
        {"role": "user", "content": "Weather in Lisbon?"},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"ok": true}'},
    ]
    code, tokens = http_post(url + "/tokenize", {"messages": history, "return_token_strs": True})
    text = "".join(tokens["token_strs"])
    rendered = json.loads(text.split("\n\n")[1])
    assert rendered["tool_calls"][0]["function"] == {
        "name": call.function.name,
        "arguments": json.loads(call.function.arguments),
    }
    resp = client.chat.completions.create(model="lane", messages=history, max_tokens=5, seed=1)
    assert resp.usage.prompt_tokens == tokens["count"]
    code, body = http_post(
        url + "/v1/chat/completions",
        {
            "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}],
            "max_tokens": 2,
        },
    )
    assert code == 400 and "arguments is not valid JSON" in body["error"]["message"]


def test_text_held_for_a_possible_call_still_reports_its_tokens_as_they_come():
    """With continuous usage, tokens the auto parser holds back go out in empty-delta chunks, in step order."""

    class CallOpening:
        """The engine's tokenizer, with its first decoded delta opening a tool call (which never closes)."""

        def __init__(self, inner) -> None:
            self.inner, self.calls = inner, 0

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def decode(self, ids, **kw):
            self.calls += 1
            text = self.inner.decode(ids, **kw)
            return ('{"tool_calls": [{"id": "c", "arguments": "' + text) if self.calls == 1 else text.replace('"', "'")

    with engine(*TOOLS_FLAGS) as (url, server, _log):
        server.tokenizer = CallOpening(server.tokenizer)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        stream = client.chat.completions.create(
            model="lane",
            messages=MESSAGES,
            tools=TOOLS,
            max_tokens=40,
            seed=3,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
            extra_body={"ignore_eos": True, "min_tokens": 40},
        )
        chunks = [c for c in stream if c.choices]
    held = [c for c in chunks if c.usage.completion_tokens and not c.choices[0].delta.content]
    counts = [c.usage.completion_tokens for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 40
    assert len(held) > 3 and len(set(counts)) > 3  # the held tokens arrived over many chunks, not all at the end
    # The call never closed, so the held text ends as content (the answer is not a call).
    contents = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(contents) == 1 and contents[0].startswith('{"tool_calls"')
    assert chunks[-1].choices[0].finish_reason == "length" and not chunks[-1].choices[0].delta.tool_calls


def test_a_grammar_that_gives_up_fails_its_own_request_not_the_batch(monkeypatch):
    model = load_model()
    tok = model.tokenizer
    grammar = compile_json_schema(tok, WEATHER)
    spec, _ = parse_spec_config(json.dumps({"method": "dspark", "num_speculative_tokens": 5}))
    core = EngineCore(model, spec, boot_seed=3)
    prompt = tok.encode(MESSAGES[1]["content"])
    broken, fine, free = (
        Sequence(request_id=n, prompt_ids=list(prompt), params=SamplingParams(max_tokens=60, seed=1))
        for n in ("broken", "fine", "free")
    )
    broken.grammar, fine.grammar = Grammar(tok, grammar), Grammar(tok, grammar)
    free.params.ignore_eos = True
    calls = {"n": 0}
    original = Grammar.advance

    def flaky(self, token):
        if self is broken.grammar:
            calls["n"] += 1
            if calls["n"] == 3:
                self._matcher.consume_token(1)  # UNK: never allowed, leaves the matcher in error
                return False
        return original(self, token)

    monkeypatch.setattr(Grammar, "advance", flaky)
    _run(core, [broken, fine, free])
    assert broken.finish_reason == "abort" and broken.error.startswith("structured output stopped")
    assert fine.error is None and free.error is None and fine.finish_reason in ("stop", "length")
    assert len(free.output_ids) == 60


@pytest.mark.slow
def test_a_forced_call_ends_within_128_tokens_in_99_of_100_seeds(lane):
    """The end-of-value preference: one call that parses, not an array appended to until the limit."""
    client, *_ = lane
    parsed = 0
    lengths = []
    for seed in range(100):
        resp = client.chat.completions.create(
            model="lane", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=128, seed=seed
        )
        choice = resp.choices[0]
        calls = choice.message.tool_calls or []
        try:
            ok = (
                choice.finish_reason == "tool_calls"
                and len(calls) >= 1
                and all(_strict_valid(c.function.arguments, SCHEMAS[c.function.name]) is not None for c in calls)
            )
        except (ValueError, jsonschema.ValidationError):
            ok = False
        parsed += ok
        lengths.append(resp.usage.completion_tokens)
    assert parsed >= 99, (parsed, lengths)
    assert sorted(lengths)[50] < 64  # calls end well inside the limit, not at it
    greedy = client.chat.completions.create(
        model="lane", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=128, temperature=0
    )
    assert greedy.choices[0].finish_reason == "tool_calls" and len(greedy.choices[0].message.tool_calls) == 1


def test_schema_integers_and_object_strings_stay_short(lane):
    client, *_ = lane
    schema = {
        "type": "object",
        "properties": {"count": {"type": "integer"}, "label": {"type": "string"}},
        "required": ["count", "label"],
    }
    for seed in range(10):
        resp = client.chat.completions.create(
            model="lane",
            messages=MESSAGES,
            max_tokens=128,
            seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        )
        value = json.loads(resp.choices[0].message.content)
        assert resp.choices[0].finish_reason == "stop" and len(str(value["count"])) <= 12 and len(value["label"]) < 80
        free = client.chat.completions.create(
            model="lane", messages=MESSAGES, max_tokens=128, seed=seed, response_format={"type": "json_object"}
        )
        assert free.choices[0].finish_reason == "stop" and isinstance(json.loads(free.choices[0].message.content), dict)
