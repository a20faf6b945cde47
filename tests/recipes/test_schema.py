"""Window keys of the recipe schema: a forced length, or requests that stop at EOS under a cap."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gb300lane.bench.transcripts import load_transcripts
from gb300lane.bench.window import build_request
from gb300lane.recipes.schema import WindowSpec

BASE = {"name": "w", "classes": ["tool_json"], "transcripts_per_class": 2, "concurrency": [1], "temperature": 1.0}


def test_a_window_forces_its_length_or_lets_requests_stop_at_eos() -> None:
    forced = WindowSpec.model_validate({**BASE, "forced_tokens": 64})
    assert (forced.stops_at_eos, forced.token_cap, forced.length_label()) == (False, 64, "64 tokens")
    free = WindowSpec.model_validate({**BASE, "forced_tokens": None, "max_tokens": 256})
    assert (free.stops_at_eos, free.token_cap, free.length_label()) == (True, 256, "up to 256 tokens (stops at EOS)")
    with pytest.raises(ValidationError, match="set forced_tokens .* or, with forced_tokens null, max_tokens"):
        WindowSpec.model_validate(BASE)
    with pytest.raises(ValidationError, match="forced_tokens 64 and max_tokens 256 both set"):
        WindowSpec.model_validate({**BASE, "forced_tokens": 64, "max_tokens": 256})


def test_a_forced_window_dumps_as_it_always_did() -> None:
    forced = WindowSpec.model_validate({**BASE, "forced_tokens": 64})
    assert "max_tokens" not in forced.model_dump(mode="json") and "tool_choice" not in forced.model_dump()


def test_requests_of_a_window_that_stops_at_eos_carry_no_forced_length() -> None:
    t = load_transcripts("tool_json")[0]
    forced = WindowSpec.model_validate({**BASE, "forced_tokens": 64, "seed_base": 1})
    _, body, _ = build_request(t, forced, model="m", round=1)
    assert (body["max_tokens"], body["min_tokens"], body["ignore_eos"]) == (64, 64, True)
    assert "tool_choice" not in body
    free = WindowSpec.model_validate({**BASE, "max_tokens": 200, "tool_choice": "required", "seed_base": 1})
    path, body, seed = build_request(t, free, model="m", round=1)
    assert path == "/v1/chat/completions" and body["max_tokens"] == 200 and body["tool_choice"] == "required"
    assert "min_tokens" not in body and "ignore_eos" not in body and body["tools"] == t.tools
    prose = load_transcripts("prose")[0]
    _, body, _ = build_request(prose, free, model="m", round=1)
    assert "tool_choice" not in body  # only transcripts that carry tools get one
