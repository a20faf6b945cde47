"""The k schedule check on the embedded engine: live where the engine runs it, a FAIL where it drops it.

vLLM drops `num_speculative_tokens_per_batch_size` with a warning when data parallel size > 1; the embedded
engine does the same, so the check is tested against an engine that really ignores the schedule.
"""

from __future__ import annotations

import json

import pytest

from gb300lane.bench.schedule import check_schedule, k_at, predicted_k
from gb300lane.bench.window import run_window
from gb300lane.recipes.schema import WindowSpec

from engines import running_engine

SCHEDULE = ((1, 4, 5), (5, 8, 3), (9, 32, 3))
SPEC = {
    "method": "dspark",
    "num_speculative_tokens": 5,
    "draft_sample_method": "probabilistic",
    "num_speculative_tokens_per_batch_size": [list(r) for r in SCHEDULE],
}
WINDOW = WindowSpec(
    name="sched",
    classes=["prose"],
    transcripts_per_class=8,
    rounds=1,
    concurrency=[1, 8],
    temperature=1.0,
    top_p=1.0,
    seed_base=3,
    forced_tokens=24,
)


def test_the_schedules_prediction_weights_batch_sizes_by_their_drafts() -> None:
    assert [k_at(SCHEDULE, 5, b) for b in (1, 4, 5, 8, 9, 40)] == [5, 5, 3, 3, 3, 5]
    assert k_at(((1, 32, 9),), 5, 1) == 5  # clamped to num_speculative_tokens, as vLLM clamps
    assert predicted_k(SCHEDULE, 5, {8: 1.0}) == 3
    # One second alone and one at eight: eight of every nine drafts ran at k=3.
    assert predicted_k(SCHEDULE, 5, {1: 1.0, 8: 1.0}) == pytest.approx((5 + 8 * 3) / 9)
    assert predicted_k(None, 5, {8: 1.0}) == 5


@pytest.mark.slow
@pytest.mark.parametrize("dp", [1, 2])
def test_the_schedule_is_live_unless_the_engine_drops_it(dp: int) -> None:
    flags = [
        "--model",
        "builtin",
        "--served-model-name",
        "m",
        "--speculative-config",
        json.dumps(SPEC),
        "--per-request-spec-decode-metrics",
        "summary",
        "--data-parallel-size",
        str(dp),
    ]
    with running_engine(flags) as engine:
        result = run_window(engine.url, WINDOW, model="m")
        warned = " ".join(engine.server.args.warnings)
    check = check_schedule(result, SCHEDULE, 5)
    assert check is not None
    cells = {c.cell.split()[1]: c for c in check.cells}
    assert cells["C1"].status == "not_decisive"  # k=5 at batch 1 either way
    if dp == 1:
        assert check.status == "pass", check.summary
        assert cells["C8"].status == "pass" and cells["C8"].measured_k < 4
        assert "Disabling num_speculative_tokens_per_batch_size" not in warned
    else:
        assert "Disabling num_speculative_tokens_per_batch_size" in warned
        assert check.status == "fail" and cells["C8"].status == "fail", check.summary
        assert cells["C8"].measured_k == 5.0 and cells["C8"].live_k < 4
        assert "does not run the schedule" in check.summary or "never gives" in check.summary


def test_a_boot_that_logs_the_schedule_dropped_fails_its_schedule_check() -> None:
    from gb300lane.engine.args import parse_serve_args
    from gb300lane.lane import checks, logparse

    args = parse_serve_args(
        ["--model", "builtin", "--speculative-config", json.dumps(SPEC), "--data-parallel-size", "2"]
    )
    assert args.spec is not None and args.spec.num_speculative_tokens_per_batch_size is None
    log = "".join(f"WARNING 12-04 10:00:00 [speculative.py:430] {w}\n" for w in args.warnings)
    key = "speculative.num_speculative_tokens_per_batch_size"
    dropped = checks.check_schedule_boot(SCHEDULE, key, logparse.parse(log))
    assert dropped.status == "fail" and "disabled it" in dropped.summary
    assert checks.check_schedule_boot(SCHEDULE, key, logparse.parse("")).status == "pass"
    assert checks.check_schedule_boot(None, key, logparse.parse(log)).status == "pass"
