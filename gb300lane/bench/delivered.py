"""Delivered load and counter attribution: what a cell really put on the lane, beside what it was told to.

A client that holds fewer requests in flight than configured (a connection
pool smaller than the concurrency, a worker that stalls) reports a faster,
lighter lane than the one asked about; a spec-decode counter that moved for
someone else's tokens reports acceptance nobody measured. Both are checked
here, per cell, from the raw request records: pure functions, so the rules
are tested with recorded values.

A request is in flight from the moment its head went out on a connection
(`sent_s` when the window traced it, else its send) until its stream closed.

Closed loop: the delivered concurrency is the median, over the requests that
began once the first C had begun (the ramp) and whose midpoint came before
the first stream ran out of work (the drain), of how many were in flight at
each one's midpoint, itself included. A client that holds C has C in flight
in the middle of every request; a client that holds fewer shows it there
every time. The midpoint is immune to the client's own pause between one
request and the next, and to streams that end in the same engine step and
restart one after another (counted at those starts, the first to restart
would see the others not yet back), which the time-weighted mean (reported
beside it) is not. A cell with no request in that span (one request per
stream) counts the most in flight before the drain.

Open loop: the delivered rate is (n - 1) over the span of the begin times,
compared with the same figure of the schedule the client was given (the
seeded Poisson draw, or the even spacing); the configured rate is kept
beside both.

Where the window scraped the lane mid-cell (once the client first counted
C in flight), the lane's own count (vLLM's `num_requests_running` plus
`num_requests_waiting`) is kept beside the client's fewest in flight while
the scrape was out; a lane that counts fewer than that by more than the
tolerance is noted: the client counted requests the lane did not have, or
the lane's gauge (set once per step) lags requests shorter than a scrape.
It is a note, not a rule: the begin times already come from when each
request's head went out, which is what a connection wait would hide.

Tolerances are registered here: a cell whose delivered concurrency or rate
is off by more than `LOAD_TOLERANCE` (relative) is invalid with the reason;
an open-loop cell's span must also be off by more than `RATE_RESOLUTION_S`
(a schedule of a few requests cannot resolve its rate to 10%).
"""

from __future__ import annotations

import bisect
import math

from gb300lane.bench.models import SERIES_POINTS, DeliveredLoad, RequestRecord

#: Largest relative shortfall (or excess) of delivered concurrency or rate before a cell is invalid.
LOAD_TOLERANCE = 0.10
#: An open-loop cell's send span is trusted to this many seconds (a start can be late by a scheduler tick on a
#: loaded host): a short schedule is judged on its span's error beyond this, not on a rate its few gaps cannot
#: resolve to LOAD_TOLERANCE.
RATE_RESOLUTION_S = 0.05


def interval(rec: RequestRecord) -> tuple[float, float]:
    """(begin, end) of one request in flight, seconds since its cell started."""
    begin = rec.start_s + (rec.sent_s if rec.sent_s is not None else 0.0)
    end_rel = rec.done_s if rec.done_s is not None else rec.e2e_s
    end = rec.start_s + end_rel if end_rel is not None else begin
    return begin, max(begin, end)


def _series(spans: list[tuple[float, float]]) -> list[tuple[float, int]]:
    events = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], -x[1]))
    out: list[tuple[float, int]] = []
    n = 0
    for t, d in events:
        n += d
        if out and out[-1][0] == t:
            out[-1] = (t, n)
        else:
            out.append((t, n))
    return out


def _thin(series: list[tuple[float, int]]) -> list[tuple[float, int]]:
    if len(series) <= SERIES_POINTS:
        return [(round(t, 6), n) for t, n in series]
    step = len(series) / SERIES_POINTS
    picked = [series[int(i * step)] for i in range(SERIES_POINTS - 1)] + [series[-1]]
    return [(round(t, 6), n) for t, n in picked]


def _in_flight_at(begins: list[float], ends: list[float], t: float) -> int:
    """Requests with begin <= t < end (begins and ends each sorted)."""
    return bisect.bisect_right(begins, t) - bisect.bisect_right(ends, t)


def _mean_over(series: list[tuple[float, int]], a: float, b: float) -> float | None:
    if b <= a:
        return None
    area = 0.0
    for (t, n), nxt in zip(series, series[1:] + [(math.inf, 0)]):
        lo, hi = max(t, a), min(nxt[0], b)
        if hi > lo:
            area += n * (hi - lo)
    return area / (b - a)


def delivered_load(
    records: list[RequestRecord],
    *,
    concurrency: int | None,
    request_rate: float | None = None,
    schedule: list[float] | None = None,
    tolerance: float = LOAD_TOLERANCE,
    server: tuple[tuple[float, float], float] | None = None,
) -> tuple[DeliveredLoad, list[str], list[str]]:
    """(the cell's delivered load, why it is invalid for its load (empty when within tolerance), notes)."""
    spans = [interval(r) for r in records]
    series = _series(spans)
    peak = max((n for _, n in series), default=0)
    begins = sorted(b for b, _ in spans)
    ends = sorted(e for _, e in spans)
    reasons: list[str] = []
    notes: list[str] = []
    delivered_c: float | None = None
    mean_c: float | None = None
    sched_rate = deliv_rate = late = None
    if request_rate is None and concurrency and spans:
        ramp = min(concurrency, len(spans))
        last_by_worker: dict[int, float] = {}
        for r, (_, e) in zip(records, spans):
            last_by_worker[r.worker] = max(last_by_worker.get(r.worker, e), e)
        # The first stream to run out of work starts the drain: starts after it are not held load.
        idle = min(last_by_worker.values())
        # Each request after the ramp is counted at its own midpoint (itself included), before the drain.
        after_ramp = begins[ramp - 1]
        counted = [(b + e) / 2 for b, e in spans if b >= after_ramp and (b + e) / 2 < idle]
        if counted:
            counts = sorted(_in_flight_at(begins, ends, t) for t in counted)
            mid = len(counts) // 2
            delivered_c = float(counts[mid]) if len(counts) % 2 else (counts[mid - 1] + counts[mid]) / 2
        else:
            # Every stream had one request and the ramp outlasted the first: the most held at once.
            delivered_c = float(max((n for t, n in series if t < idle), default=0))
        mean_c = _mean_over(series, begins[0], idle)
        low, high = concurrency * (1 - tolerance), concurrency * (1 + tolerance)
        if len(counted) < concurrency and (delivered_c < low or delivered_c > high):
            # Fewer requests between the ramp and the drain than streams (a smoke cell of a request or two per
            # stream): the ramp and the drain are most of the cell, and no median of its steady state exists.
            notes.append(
                f"delivered concurrency {delivered_c:g} against the configured {concurrency} not judged: only "
                f"{len(counted)} requests ran between the ramp and the drain (fewer than the {concurrency} streams)"
            )
        elif delivered_c < low or delivered_c > high:
            which = "below" if delivered_c < low else "above"
            reasons.append(
                f"delivered concurrency {delivered_c:g} is {which} the configured {concurrency} by more than the "
                f"registered {tolerance:.0%} (median in flight at each request's midpoint after the ramp; peak "
                f"{peak}): the client did not hold the load the cell is labelled with"
            )
    if request_rate is not None and len(spans) > 1:
        span = begins[-1] - begins[0]
        deliv_rate = (len(spans) - 1) / span if span > 0 else math.inf
        if schedule is not None and len(schedule) == len(spans):
            s_span = max(schedule) - min(schedule)
            sched_rate = (len(schedule) - 1) / s_span if s_span > 0 else math.inf
            lates = sorted(b - s for (b, _), s in zip(spans, schedule))
            late = lates[min(len(lates) - 1, int(math.ceil(0.99 * len(lates))) - 1)]
        want = sched_rate if sched_rate is not None else request_rate
        want_span = (len(spans) - 1) / want if want > 0 and math.isfinite(want) else 0.0
        if (
            math.isfinite(want)
            and math.isfinite(deliv_rate)
            and abs(deliv_rate / want - 1) > tolerance
            and abs(span - want_span) > RATE_RESOLUTION_S
        ):
            reasons.append(
                f"delivered arrival rate {deliv_rate:.3g}/s is off the schedule's {want:.3g}/s (configured "
                f"{request_rate:g}/s) by more than the registered {tolerance:.0%}: the client did not send on time"
            )
    at_scrape: int | None = None
    if server is not None:
        (asked, answered), lane_count = server
        # The lane counted at some moment between the scrape's send and its answer: the client's fewest in
        # flight over that span is what it must at least have seen.
        at_scrape = min(
            [_in_flight_at(begins, ends, asked)]
            + [_in_flight_at(begins, ends, t) for t in (*begins, *ends) if asked <= t <= answered]
        )
        if lane_count < at_scrape * (1 - tolerance):
            notes.append(
                f"the lane counted {lane_count:g} requests running or waiting (vllm:num_requests_running + "
                f"num_requests_waiting, mid-cell) while the client had at least {at_scrape} in flight: a gauge "
                "set once per step lags a client whose requests are shorter than a scrape"
            )
    load = DeliveredLoad(
        configured_concurrency=concurrency if request_rate is None else None,
        configured_rate=request_rate,
        delivered_concurrency=delivered_c,
        mean_in_flight=mean_c,
        peak_in_flight=peak,
        scheduled_rate=sched_rate,
        delivered_rate=deliv_rate if deliv_rate is None or math.isfinite(deliv_rate) else None,
        late_p99_s=late,
        tolerance=tolerance,
        in_flight_series=_thin(series),
        server_running=server[1] if server is not None else None,
        client_in_flight_at_scrape=at_scrape,
    )
    return load, reasons, notes


def counter_attribution(
    records: list[RequestRecord], counters: dict[str, object] | None
) -> tuple[list[str], list[str]]:
    """(why the cell's spec-decode counters are contaminated, notes): the counter deltas against the client's tokens.

    Every verify step with a draft emits its accepted tokens and one more,
    and a request's last step may be cut by its length (losing at most the
    step's draft length), so the tokens the cell received lie between
    drafts + accepted - k x requests and drafts + accepted + requests (a
    prefill step emits a token without a draft). Where the server returned
    per-request spec-decode metrics, their sums must equal the deltas.
    """
    if not counters:
        return [], []
    drafts = int(counters.get("num_drafts") or 0)  # type: ignore[call-overload]
    accepted = int(counters.get("num_accepted_tokens") or 0)  # type: ignore[call-overload]
    drafted = int(counters.get("num_draft_tokens") or 0)  # type: ignore[call-overload]
    if drafts <= 0:
        return [], []
    ok = [r for r in records if r.ok]
    received = sum(r.output_tokens or 0 for r in ok)
    by_length = counters.get("drafts_by_length")
    if isinstance(by_length, dict) and by_length:
        k = max(int(x) for x in by_length)
    else:
        k = math.ceil(drafted / drafts)
    n = len(ok)
    lo, hi = drafts + accepted - k * n, drafts + accepted + n
    reasons: list[str] = []
    if not lo <= received <= hi:
        reasons.append(
            f"spec-decode counters contaminated: {drafts} drafts and {accepted} accepted tokens account for "
            f"{lo}..{hi} tokens over {n} requests (k <= {k}), but this cell received {received}"
        )
    per = [r.spec_decode for r in ok]
    notes: list[str] = []
    if per and all(p is not None for p in per):
        sums = {
            "num_drafts": sum(p.num_drafts for p in per if p is not None),
            "num_draft_tokens": sum(p.num_draft_tokens for p in per if p is not None),
            "num_accepted_tokens": sum(p.num_accepted_tokens for p in per if p is not None),
        }
        off = {
            name: (v, int(counters.get(name) or 0))  # type: ignore[call-overload]
            for name, v in sums.items()
            if v != int(counters.get(name) or 0)  # type: ignore[call-overload]
        }
        if off:
            reasons.append(
                "spec-decode counters contaminated: the requests' own spec-decode metrics sum to "
                + ", ".join(f"{name} {mine} where the counter moved {theirs}" for name, (mine, theirs) in off.items())
            )
        else:
            notes.append("spec-decode counter deltas equal the sums of the requests' own spec-decode metrics")
    return reasons, notes
