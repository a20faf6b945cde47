"""Task-quality checks without a model: what each shipped transcript asks for, and each check's pass and fail."""

from __future__ import annotations

import json
from collections import Counter

import jsonschema
import pytest

from gb300lane.bench.quality import Ask, QualityOutcome, ToolCall, asks_for, calls_in_content, check, recheck
from gb300lane.bench.transcripts import BASE_CLASSES, Transcript, load_transcripts


def _transcript(tid: str) -> Transcript:
    cls = tid.rsplit("-", 1)[0]
    return next(t for t in load_transcripts(cls) if t.id == tid)


def test_the_shipped_transcripts_ask_for_what_their_prompts_say() -> None:
    asked = Counter()
    for cls in BASE_CLASSES:
        for t in load_transcripts(cls):
            a = asks_for(t)
            asked[(cls, a.check if a else None, a.container if a else None)] += 1
    assert asked == {
        ("prose", None, None): 40,
        ("shell_ops", None, None): 40,
        ("tool_json", "tool_call", None): 40,
        ("structured", "csv", None): 4,
        ("structured", "json", "array"): 4,
        ("structured", "json", "object"): 2,
        ("structured", "yaml", "array"): 4,
        ("structured", "yaml", "object"): 2,
        ("structured", None, None): 24,
        ("code", "python", None): 18,
        ("code", None, None): 22,
    }
    assert asks_for(_transcript("structured-024")).heading and not asks_for(_transcript("structured-004")).heading
    assert asks_for(_transcript("code-001")).open_fence and not asks_for(_transcript("code-021")).open_fence
    assert asks_for(_transcript("code-003")) is None  # Rust: nothing the tool compiles


def test_every_shipped_tool_declares_a_valid_json_schema() -> None:
    for t in load_transcripts("tool_json"):
        for tool in t.tools or ():
            jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])


def test_a_response_format_asks_for_json_and_its_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    t = Transcript(
        id="x-001",
        cls="prose",
        kind="completion",
        prompt="count",
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    ask = asks_for(t)
    assert ask == Ask(check="json", json_schema=schema)
    assert check(ask, text='{"n": 3}').passed
    bad = check(ask, text='{"n": "three"}')
    assert not bad.passed and bad.error == "the JSON values fail the schema at $.n: 'three' is not of type 'integer'"
    assert asks_for(t.model_copy(update={"response_format": {"type": "json_object"}})) == Ask(
        check="json", container="object"
    )


WEATHER = asks_for(_transcript("tool_json-001"))  # get_weather(city: str required, unit: c|f)


@pytest.mark.parametrize(
    ("calls", "text", "source", "error"),
    [
        ([ToolCall(name="get_weather", arguments='{"city": "Lisbon", "unit": "c"}')], "", "tool_calls", None),
        (
            [ToolCall(name="get_weather", arguments='{"unit": "k"}')],
            "",
            "tool_calls",
            "arguments of get_weather fail the schema at $ (top level): 'city' is a required property",
        ),
        (
            [ToolCall(name="get_weather", arguments='{"city": "Lisbon", "unit": "k"}')],
            "",
            "tool_calls",
            "arguments of get_weather fail the schema at $.unit: 'k' is not one of ['c', 'f']",
        ),
        (
            [ToolCall(name="get_weather", arguments='{"city": "Lis')],
            "",
            "tool_calls",
            'arguments of get_weather are not JSON: Unterminated string starting at in \'{"city": "Lis\'',
        ),
        (
            [ToolCall(name="get_weather", arguments='["Lisbon"]')],
            "",
            "tool_calls",
            "arguments of get_weather are a list, not a JSON object",
        ),
        (
            [ToolCall(name="run_command", arguments="{}")],
            "",
            "tool_calls",
            "calls 'run_command', which the request does not declare (declared: get_weather)",
        ),
        ([], '<tool_call>{"name": "get_weather", "arguments": {"city": "Porto"}}</tool_call>', "content", None),
        (
            [],
            '{"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", '
            '"arguments": "{\\"city\\": \\"Porto\\"}"}}]}',
            "content",
            None,
        ),
        ([], '```json\n{"name": "get_weather", "parameters": {"city": "Porto"}}\n```', "content", None),
        ([], "It is sunny in Lisbon.", "content", "no tool call: the answer is text"),
    ],
)
def test_a_tool_call_is_valid_against_the_tools_own_schema(
    calls: list[ToolCall], text: str, source: str, error: str | None
) -> None:
    got = check(WEATHER, text=text, tool_calls=calls, finish_reason="tool_calls")
    assert (got.passed, got.source, got.error) == (error is None, source, error)
    assert got.tool_calls == tuple(calls)  # what the response carried, as it carried it


def test_calls_in_content_take_only_whole_calls() -> None:
    assert calls_in_content('{"tool_calls": [{"function": {"name": "a"}}, {"oops": 1}]}') == []
    assert calls_in_content('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]') == [
        ToolCall(name="a", arguments="{}"),
        ToolCall(name="b", arguments='{"x": 1}'),
    ]
    assert calls_in_content('{"name": "a", "arguments": {}} and then some text') == [ToolCall(name="a", arguments="{}")]
    assert calls_in_content('  ]\n}\n  "content": "tool"') == []


@pytest.mark.parametrize(
    ("tid", "text", "error"),
    [
        ("structured-004", '[{"sku": "A1", "name": "nails", "quantity": 3, "unit_price": 0.1}]', None),
        ("structured-004", '```json\n[{"sku": 1}]\n```\nThat is the inventory.', None),
        ("structured-004", '{"sku": 1}', "the JSON is a JSON object, not a JSON array as asked"),
        ("structured-004", '[{"sku": 1},', "not JSON: Expecting value at line 1 column 13 of '[{\"sku\": 1},'"),
        ("structured-024", "# Inventory\n\n[1, 2]", None),  # the heading the prompt asked for comes off
        ("structured-014", '{"kale": {"kcal": 49}}', None),
        ("structured-003", "- title: Opening\n  room: A\n- title: Close\n  room: B\n", None),
        ("structured-003", "title: Opening\n", "the YAML is a YAML mapping, not a YAML list as asked"),
        (
            "structured-003",
            "- a: [\n",
            "not YAML: expected the node content, but found '<stream end>' at line 1 of '- a: ['",
        ),
        (
            "structured-003",
            "- a: 1\n  a: 2\n",
            "not YAML: duplicate key 'a' (first at line 1) at line 2 of '- a: 1\\n  a: 2'",
        ),  # the tool's one strict YAML reader
        ("structured-011", "just words", "the YAML is a str, not a YAML mapping as asked"),
        (
            "structured-002",
            "name,mean_radius_km,moons,orbital_period_days\nMercury,2439.7,0,88\nVenus,6051.8,0,225\n",
            None,
        ),
        (
            "structured-022",
            "Planets\n```csv\nName, Mean_Radius_km,moons,orbital_period_days\nEarth,6371,1,365\n```",
            None,
        ),
        (
            "structured-002",
            "3,14\nbuild-02,37",
            "not the CSV asked for: the header is '3,14', the prompt names "
            "'name,mean_radius_km,moons,orbital_period_days'",
        ),
        ("structured-002", "name,moons\nEarth,1\nMars,2,extra\n", "not a CSV table: row 3 has 3 fields, the header 2"),
        (
            "structured-002",
            "| name | moons |\n|---|---|\n| Earth | 1 |",
            "not a CSV table: the header '| name | moons |' has one field (no comma-separated columns)",
        ),
        ("structured-002", "name,moons", "not a CSV table: 1 row(s), a header and at least one row are needed"),
    ],
)
def test_structured_data_parses_as_the_format_asked_for(tid: str, text: str, error: str | None) -> None:
    got = check(asks_for(_transcript(tid)), text=text)
    assert (got.passed, got.error, got.source) == (error is None, error, "text")


@pytest.mark.parametrize(
    ("tid", "text", "error"),
    [
        ("code-001", "def merge(xs):\n    return sorted(xs)\n```\nThis sorts.", None),  # up to the fence's close
        ("code-001", "    return x\n", "IndentationError: unexpected indent (line 1)"),
        ("code-001", "def f(x:\n", "SyntaxError: '(' was never closed (line 1)"),
        ("code-021", "Here it is:\n```python\ndef f():\n    return 1\n```\nTests:\n```py\nassert f() == 1\n```", None),
        ("code-021", "def f():\n    return 1\n", None),  # no fence: the whole answer is the code
        ("code-021", "Here it is: def f() return 1", "SyntaxError: invalid syntax (line 1)"),
        ("code-021", "```python\n```", "no code: the output holds no Python"),
    ],
)
def test_python_compiles_and_is_never_run(tid: str, text: str, error: str | None) -> None:
    got = check(asks_for(_transcript(tid)), text=text)
    assert (got.passed, got.error) == (error is None, error)


def test_compiling_runs_nothing(tmp_path) -> None:
    marker = tmp_path / "ran"
    got = check(asks_for(_transcript("code-001")), text=f"open({str(marker)!r}, 'w').write('x')\n")
    assert got.passed and not marker.exists()


def test_an_outcome_rechecks_to_itself_from_what_it_kept() -> None:
    text = "# Inventory\n[1, 2"
    first = check(asks_for(_transcript("structured-024")), text=text, finish_reason="length")
    kept = QualityOutcome.model_validate(json.loads(first.model_dump_json()))
    assert recheck(kept, text) == first and not first.passed and first.finish_reason == "length"
    call = check(WEATHER, text="", tool_calls=[ToolCall(name="get_weather", arguments='{"city": "x"}')])
    assert recheck(QualityOutcome.model_validate(json.loads(call.model_dump_json())), "") == call
