"""Delivered load and counter attribution from recorded request values (bench/delivered.py)."""

from __future__ import annotations

from gb300lane.bench.delivered import LOAD_TOLERANCE, counter_attribution, delivered_load
from gb300lane.bench.models import RequestRecord, RequestSpecDecode


def _rec(
    worker: int,
    start: float,
    done: float,
    *,
    sent: float | None = None,
    tokens: int = 10,
    spec: RequestSpecDecode | None = None,
    rate: float | None = None,
    scheduled: float | None = None,
):
    return RequestRecord(
        transcript_id=f"t{worker}-{start}",
        cls="prose",
        round=1,
        concurrency=0 if rate else 4,
        request_rate=rate,
        seed=1,
        kind="completion",
        worker=worker,
        start_s=start,
        scheduled_s=scheduled,
        ok=True,
        error=None,
        http_status=200,
        expected_tokens=tokens,
        output_tokens=tokens,
        prompt_tokens=3,
        chunks=tokens,
        token_attribution="usage",
        ttft_s=0.01,
        e2e_s=done - 0.001,
        done_s=done,
        token_times_s=[0.01] * tokens,
        engine=None,
        clock="wall",
        decode_tok_s=None,
        tpot_s=None,
        text="",
        spec_decode=spec,
        sent_s=sent,
    )


def test_a_closed_loop_client_that_holds_its_concurrency_delivers_it():
    # Four streams, three requests each, back to back; the client pauses 0.1 ms between requests.
    recs = [_rec(w, start=i * 1.0001 + w * 0.001, done=1.0) for w in range(4) for i in range(3)]
    load, reasons, _ = delivered_load(recs, concurrency=4)
    assert reasons == [] and load.delivered_concurrency == 4 and load.peak_in_flight == 4
    assert 3.9 < load.mean_in_flight <= 4 and load.configured_concurrency == 4


def test_a_client_that_holds_two_of_four_is_refused_with_the_reason():
    # Two connections for four streams: each request waits for a connection before its head goes out.
    recs = []
    for i in range(16):
        sent = (i // 2) * 1.0
        recs.append(_rec(i % 4, start=0.0, done=sent + 1.0, sent=sent))
    load, reasons, _ = delivered_load(recs, concurrency=4)
    assert load.delivered_concurrency == 2
    (reason,) = reasons
    assert (
        f"delivered concurrency 2 is below the configured 4 by more than the registered {LOAD_TOLERANCE:.0%}" in reason
    )


def test_an_open_loop_client_that_falls_behind_its_schedule_is_refused():
    schedule = [i * 0.1 for i in range(20)]
    on_time = [_rec(i, start=s + 0.0005, done=0.05, rate=10.0, scheduled=s) for i, s in enumerate(schedule)]
    load, reasons, _ = delivered_load(on_time, concurrency=None, request_rate=10.0, schedule=schedule)
    assert reasons == [] and abs(load.delivered_rate - 10.0) < 0.1 and load.scheduled_rate == 10.0
    late = [_rec(i, start=s * 1.5, done=0.05, rate=10.0, scheduled=s) for i, s in enumerate(schedule)]
    load, reasons, _ = delivered_load(late, concurrency=None, request_rate=10.0, schedule=schedule)
    (reason,) = reasons
    assert "delivered arrival rate 6.67/s is off the schedule's 10/s" in reason


def test_a_short_schedule_is_judged_on_its_span_not_on_a_rate_its_few_gaps_cannot_resolve():
    # four requests 40 ms apart: a first start 15 ms late (a scheduler tick) moves the rate 14%, the span 15 ms
    schedule = [0.0, 0.04, 0.08, 0.12]
    starts = [0.015, 0.041, 0.081, 0.121]
    recs = [_rec(i, start=b, done=0.05, rate=25.0, scheduled=s) for i, (b, s) in enumerate(zip(starts, schedule))]
    load, reasons, _ = delivered_load(recs, concurrency=None, request_rate=25.0, schedule=schedule)
    assert reasons == [] and load.delivered_rate > 25.0 * 1.1
    # the same schedule sent at half the rate is off by 120 ms: refused
    slow = [_rec(i, start=s * 2, done=0.05, rate=25.0, scheduled=s) for i, s in enumerate(schedule)]
    _, reasons, _ = delivered_load(slow, concurrency=None, request_rate=25.0, schedule=schedule)
    assert len(reasons) == 1 and "delivered arrival rate" in reasons[0]


def test_a_cell_too_short_for_a_steady_state_is_noted_not_refused():
    # Four streams of one request each, the last starting as the first ends: no request runs between the
    # ramp and the drain, so there is no steady state to judge; the shortfall is a note.
    recs = [_rec(w, start=w * 0.5, done=1.0) for w in range(4)]
    load, reasons, notes = delivered_load(recs, concurrency=4)
    assert reasons == [] and load.peak_in_flight < 4
    assert any("not judged" in n for n in notes)


def test_counters_that_moved_for_someone_else_mark_the_cell_contaminated():
    recs = [_rec(w, 0.0, 1.0, tokens=40) for w in range(2)]
    own = {"num_drafts": 20, "num_accepted_tokens": 58, "num_draft_tokens": 100, "drafts_by_length": {"5": 20}}
    assert counter_attribution(recs, own) == ([], [])
    foreign = {**own, "num_drafts": 40, "num_accepted_tokens": 120}
    (reason,), _ = counter_attribution(recs, foreign)
    assert reason.startswith("spec-decode counters contaminated: 40 drafts and 120 accepted tokens account for")
    per = [
        _rec(w, 0.0, 1.0, tokens=40, spec=RequestSpecDecode(num_drafts=10, num_draft_tokens=50, num_accepted_tokens=29))
        for w in range(2)
    ]
    assert counter_attribution(per, own)[0] == []
    (reason,), _ = counter_attribution(per, {**own, "num_accepted_tokens": 59})
    assert "num_accepted_tokens 58 where the counter moved 59" in reason
