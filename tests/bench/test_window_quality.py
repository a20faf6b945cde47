"""Quality windows end to end: the client joins streamed tool calls, and a window that stops at EOS records
each request's outcome, through the engine's server and through the in-process lane alike."""

from __future__ import annotations

import json

import pytest

from gb300lane.bench.client import _StreamState
from gb300lane.bench.quality import ToolCall
from gb300lane.bench.window import run_window
from gb300lane.cards.record.arms import window_data_from_result
from gb300lane.instrument.simulate import InProcessLane
from gb300lane.recipes.schema import WindowSpec

from engines import running_engine


def _chunk(delta: dict, finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def test_streamed_tool_calls_are_joined_by_index_apart_from_the_content() -> None:
    state = _StreamState()
    for i, data in enumerate(
        [
            _chunk({"role": "assistant", "content": "Calling. "}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c0",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"ci'},
                        }
                    ]
                }
            ),
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "function": {"arguments": 'ty": "Porto"}'}},
                        {"index": 1, "id": "c1", "function": {"name": "get_time", "arguments": "{}"}},
                    ]
                }
            ),
            _chunk({}, finish="tool_calls"),
            "[DONE]",
        ]
    ):
        state.event(data, float(i))
    out = state.out
    assert out.content == "Calling. " and out.finish_reason == "tool_calls"
    assert out.tool_calls == [
        ToolCall(name="get_weather", arguments='{"city": "Porto"}'),
        ToolCall(name="get_time", arguments="{}"),
    ]
    assert out.text == 'Calling. {"city": "Porto"}{}'  # the text every other reader reads, as before


FLAGS = [
    "--model",
    "builtin",
    "--served-model-name",
    "deepseek-v4.1-flash",
    "--time-scale",
    "0",
    "--speculative-config",
    json.dumps({"method": "dspark", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"}),
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "deepseek_v41",
]


@pytest.mark.slow
def test_a_window_that_stops_at_eos_records_each_requests_outcome() -> None:
    # One user: requests that stop at EOS can be a few tokens long, and at C2 on a busy host the client's own gap
    # between them reads as a delivered concurrency below 2 (an invalid cell); C1 holds its load by construction.
    window = WindowSpec(
        name="q",
        classes=("tool_json", "structured"),
        transcripts_per_class=4,
        rounds=1,
        concurrency=(1,),
        temperature=1.0,
        seed_base=7,
        max_tokens=160,
        tool_choice="required",
    )
    with running_engine(FLAGS) as eng:
        result = run_window(eng.url, window, model="deepseek-v4.1-flash")
    assert result.valid, [c.invalid_reasons for c in result.cells]
    by_id = {r.transcript_id: r for r in result.records}
    calls = [by_id[f"tool_json-00{i}"].quality for i in range(1, 5)]
    # tool_choice required: the engine holds decoding to a declared tool's schema, and the server's calls validate.
    assert all(q is not None and q.passed and q.source == "tool_calls" and q.tool_calls for q in calls)
    assert by_id["structured-001"].quality is None  # a markdown table: nothing checkable
    assert by_id["structured-002"].quality is not None and by_id["structured-002"].quality.ask.check == "csv"
    assert all(r.expected_tokens is None and 1 <= (r.output_tokens or 0) <= 160 for r in result.records)
    rates = {(r.cls, r.check): (r.passed, r.checked) for r in result.quality_rates()}
    assert rates[("tool_json", "tool_call")] == (4, 4)
    cells = window_data_from_result(result, "q").cells
    assert {t: ok for c in cells if c.cls == "tool_json" for t, ok in c.quality.items()} == {
        f"tool_json-00{i}": True for i in range(1, 5)
    }


def test_the_in_process_lane_checks_outcomes_as_the_server_answers() -> None:
    lane = InProcessLane()
    window = WindowSpec(
        name="q",
        classes=("tool_json",),
        transcripts_per_class=3,
        rounds=1,
        concurrency=(2,),
        temperature=1.0,
        seed_base=7,
        max_tokens=160,
    )
    auto = lane.run_window(lane.boot("local-v26", 1), window)
    required = lane.run_window(lane.boot("local-v26", 1), window.model_copy(update={"tool_choice": "required"}))
    assert all(r.quality is not None for r in auto.records + required.records)
    assert all(r.quality.passed and r.quality.source == "tool_calls" for r in required.records)
    # The builtin model writes no valid call unasked: under auto its answers are text the parser leaves alone.
    assert not any(r.quality.passed for r in auto.records)
    assert all(r.ok and r.expected_tokens is None for r in auto.records)
