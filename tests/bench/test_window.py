"""Windows end to end against a real local SSE server: seeds, cells, validity, spec counters, faults."""

from __future__ import annotations

import pytest

from gb300lane.bench.models import WindowResult
from gb300lane.bench.transcripts import BASE_CLASSES, load_transcripts, select_transcripts
from gb300lane.bench.window import build_request, derive_seed, run_window
from gb300lane.errors import BenchError
from gb300lane.recipes.schema import WindowSpec
from gb300lane.testing.free_ports import free_port

from fakes import lane as fake_lane


@pytest.fixture
def lane():
    server = fake_lane.FakeLane().start()
    yield server
    server.stop()


def _window(**kw) -> WindowSpec:
    base = dict(
        name="t",
        classes=["prose", "tool_json"],
        transcripts_per_class=4,
        rounds=2,
        concurrency=[1, 2],
        temperature=1.0,
        top_p=1.0,
        seed_base=7,
        forced_tokens=12,
    )
    base.update(kw)
    return WindowSpec(**base)


def test_transcripts_shipped_with_stable_ids():
    for cls in BASE_CLASSES:
        items = load_transcripts(cls)
        assert len(items) == 40
        assert [t.id for t in items] == [f"{cls}-{i:03d}" for i in range(1, 41)]
        assert all(t.kind == ("chat" if cls == "tool_json" else "completion") for t in items)
    assert all(t.tools for t in load_transcripts("tool_json"))
    mixed = select_transcripts("mixed", 10)
    assert [t.cls for t in mixed] == list(BASE_CLASSES) * 2
    with pytest.raises(BenchError, match="ships 40"):
        select_transcripts("prose", 41)
    with pytest.raises(BenchError, match="unknown traffic class"):
        load_transcripts("poetry")


def test_seed_is_a_stable_hash_of_base_id_and_round():
    assert derive_seed(1000, "prose-001", 1) == 951612649  # pinned: changing it changes every arm's requests
    assert derive_seed(1000, "prose-001", 1) != derive_seed(1000, "prose-001", 2)
    assert derive_seed(1000, "prose-001", 1) != derive_seed(1001, "prose-001", 1)
    assert derive_seed(1000, "prose-001", 1) != derive_seed(1000, "prose-002", 1)
    assert 0 <= derive_seed(5, "x", 3) < 2**31


def test_requests_force_the_length_and_carry_tools():
    w = _window(forced_tokens=256)
    prose = load_transcripts("prose")[0]
    path, body, seed = build_request(prose, w, model="m", round=2)
    assert path == "/v1/completions" and body["prompt"] == prose.prompt
    assert body["max_tokens"] == body["min_tokens"] == 256 and body["ignore_eos"] is True
    assert body["seed"] == seed == derive_seed(7, prose.id, 2)
    assert body["stream"] is True and body["stream_options"]["include_usage"] is True
    tool = load_transcripts("tool_json")[0]
    path, body, _ = build_request(tool, w, model="m", round=1)
    assert path == "/v1/chat/completions" and body["tools"] == tool.tools and "prompt" not in body
    _, body, seed = build_request(prose, _window(seed_base=None, temperature=0.0), model="m", round=1)
    assert seed is None and "seed" not in body


@pytest.mark.slow
def test_window_cells_spec_counters_and_identical_requests(lane):
    lane.behaviour.tokens_per_step = 3
    # Requests of some 80 ms (four steps of 20 ms): a busy host's pause between one stream's requests (a few
    # milliseconds, tens when the client is descheduled) stays small beside them, so the C2 cells hold their load.
    lane.behaviour.step_sleep_s = 0.02
    result = run_window(lane.url, _window(), model="fake-model")
    assert result.valid and result.schema_version == 1 and result.model == "fake-model"
    assert [(c.round, c.cls, c.concurrency) for c in result.cells] == [
        (r, cls, c) for r in (1, 2) for cls in ("prose", "tool_json") for c in (1, 2)
    ]
    assert len(result.records) == 32 and all(r.ok and r.output_tokens == 12 for r in result.records)
    for cell in result.cells:
        assert cell.valid, cell.invalid_reasons
        assert cell.generation_tokens_delta == cell.output_tokens == 48
        assert cell.spec is not None and cell.spec.tokens_per_step == pytest.approx(3.0)
        assert cell.spec.a_p == pytest.approx([1.0, 1.0, 0.0, 0.0])
        assert cell.clock == "wall" and cell.decode_tok_s and cell.ttft_s.count == 4
        # 12 tokens in chunks of 3: 11 gaps per request, 8 of them inside chunks
        assert cell.itl_s.count == 44 and cell.itl_s.p50 == 0.0
    # the same transcript and round get the same request at every concurrency level
    sent = {}
    for body in lane.requests:
        key = (body.get("prompt") or str(body.get("messages")), body["seed"])
        sent[key] = sent.get(key, 0) + 1
    assert set(sent.values()) == {2}
    assert all("tools" in b for b in lane.requests if "messages" in b)
    again = WindowResult.model_validate_json(result.model_dump_json())
    assert again == result


def test_modelled_clock_when_the_engine_reports_it(lane):
    lane.behaviour.tokens_per_step = 2
    lane.behaviour.engine_ext = True
    result = run_window(lane.url, _window(classes=["code"], rounds=1, concurrency=[2]), model="fake-model")
    cell = result.cells[0]
    assert cell.clock == "modelled" and all(r.clock == "modelled" for r in result.records)
    # 12 tokens, 2 per step: first token at 0.05, last at 0.05 + 5 * 0.01
    assert cell.decode_tok_s_per_stream.p50 == pytest.approx(11 / 0.05)
    assert cell.ttft_s.p50 == pytest.approx(0.05)
    # closed-loop streams: the span is the busiest stream's requests back to back, 0.10 s modelled each
    busiest = max(sum(1 for r in result.records if r.worker == w) for w in (0, 1))
    assert cell.span_s == pytest.approx(0.1 * busiest) and cell.decode_tok_s == pytest.approx(48 / (0.1 * busiest))
    assert result.records[0].token_times_s  # the wall clock is kept beside it


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ({"fail_requests": {5: 500}}, "HTTP 500"),
        ({"fail_requests": {5: 429}}, "HTTP 429"),
        ({"malformed": {5}}, "malformed SSE event"),
        ({"cut": {5}}, "truncated stream"),
        ({"no_done": {5}}, "truncated stream"),
        ({"short": {5: 7}}, "other than the forced 12 tokens"),
    ],
)
@pytest.mark.slow
def test_a_fault_mid_window_invalidates_only_its_cell(lane, fault, reason):
    for key, value in fault.items():
        setattr(lane.behaviour, key, value)
    result = run_window(lane.url, _window(classes=["prose"], rounds=1, concurrency=[1, 2]), model="fake-model")
    assert not result.valid
    bad = [c for c in result.cells if not c.valid]
    assert len(bad) == 1 and bad[0].concurrency == 2  # request index 5 is the second cell's second request
    assert any(reason in r for r in bad[0].invalid_reasons), bad[0].invalid_reasons
    assert bad[0].decode_tok_s is None  # an invalid cell offers no number to average
    assert not any("foreign traffic" in r for r in bad[0].invalid_reasons)  # the failure explains the counter gap
    assert result.cells[0].valid
    assert len(result.records) == 8  # the failed request is recorded, not dropped
    assert sum(1 for r in result.records if not r.ok) == (0 if "short" in fault else 1)


def test_an_invalid_cell_runs_again_and_its_discarded_try_is_kept(lane):
    lane.behaviour.fail_requests = {5: 429}  # the second cell's second request, on its first try only
    heard = []
    result = run_window(
        lane.url,
        _window(classes=["prose"], rounds=1, concurrency=[1, 2]),
        model="fake-model",
        invalid_retries=2,
        on_retry=lambda cell, n, of: heard.append((cell.concurrency, n, of)),
    )
    assert result.valid and [c.concurrency for c in result.cells] == [1, 2]
    assert heard == [(2, 2, 3)]
    (tried,) = result.retried
    assert not tried.cell.valid and any("HTTP 429" in r for r in tried.cell.invalid_reasons)
    assert len(tried.records) == 4 and sum(1 for r in tried.records if not r.ok) == 1
    assert len(result.records) == 8 and all(r.ok for r in result.records)
    # the try that counts sent the same requests: same transcripts, same seeds
    assert sorted((r.transcript_id, r.seed) for r in tried.records) == sorted(
        (r.transcript_id, r.seed) for r in result.records if r.concurrency == 2
    )
    assert WindowResult.model_validate_json(result.model_dump_json()) == result


@pytest.mark.slow
def test_a_cell_invalid_on_every_try_stays_invalid_with_all_its_tries(lane):
    lane.behaviour.foreign_tokens_per_request = 3
    heard = []
    result = run_window(
        lane.url,
        _window(classes=["prose"], rounds=1, concurrency=[1]),
        model="fake-model",
        invalid_retries=2,
        on_retry=lambda cell, n, of: heard.append((n, of)),
    )
    (cell,) = result.cells
    assert not cell.valid and not result.valid and "foreign traffic" in cell.invalid_reasons[0]
    assert heard == [(2, 3), (3, 3)] and len(result.retried) == 2
    assert all("foreign traffic" in t.cell.invalid_reasons[0] for t in result.retried)


def test_a_negative_retry_count_is_refused(lane):
    with pytest.raises(BenchError, match="invalid_retries -1"):
        run_window(
            lane.url, _window(classes=["prose"], rounds=1, concurrency=[1]), model="fake-model", invalid_retries=-1
        )


def test_foreign_traffic_invalidates_the_cell(lane):
    lane.behaviour.foreign_tokens_per_request = 3
    result = run_window(lane.url, _window(classes=["prose"], rounds=1, concurrency=[1]), model="fake-model")
    (cell,) = result.cells
    assert not cell.valid and "foreign traffic" in cell.invalid_reasons[0]
    assert cell.generation_tokens_delta == 48 + 12


def test_missing_metrics_is_reported_not_fatal(lane):
    lane.behaviour.metrics = "missing"
    result = run_window(lane.url, _window(classes=["prose"], rounds=1, concurrency=[1]), model="fake-model")
    (cell,) = result.cells
    assert cell.valid and cell.spec is None and "HTTP 404" in cell.spec_absent_reason
    assert any("foreign-traffic check not possible" in n for n in cell.notes)


def test_metrics_without_spec_counters(lane):
    lane.behaviour.metrics = "no_spec"
    result = run_window(lane.url, _window(classes=["prose"], rounds=1, concurrency=[1]), model="fake-model")
    (cell,) = result.cells
    assert cell.valid and cell.spec is None and "no spec-decode counters" in cell.spec_absent_reason
    assert cell.generation_tokens_delta == 48


def test_unreachable_endpoint_is_one_clear_error():
    port = free_port()
    with pytest.raises(BenchError, match=r"cannot reach the lane at http://127\.0\.0\.1:\d+.*gb300lane up"):
        run_window(f"http://127.0.0.1:{port}", _window(), model="m")


def test_a_lane_that_is_still_booting_is_one_clear_error(lane):
    lane.behaviour.health = 503
    with pytest.raises(BenchError, match=r"is not ready \(GET /health answered 503\)"):
        run_window(lane.url, _window(), model="fake-model")
    assert lane.requests == []
    lane.behaviour.health = 404  # a server without /health is measured anyway
    assert run_window(lane.url, _window(classes=["prose"], rounds=1, concurrency=[1]), model="fake-model").valid


def test_model_is_discovered_when_not_given(lane):
    result = run_window(lane.url, _window(classes=["prose"], rounds=1, concurrency=[1], transcripts_per_class=1))
    assert result.model == "fake-model" and result.server_version["version"] == "0.33.0"


def test_draft_length_mix_of_a_fresh_engine_counts_from_zero(lane):
    # The first cell's "before" scrape has no drafts_by_length samples yet; a_p must still be exact.
    lane.behaviour.tokens_per_step = 3
    result = run_window(lane.url, _window(classes=["prose"], rounds=1, concurrency=[1]), model="fake-model")
    (cell,) = result.cells
    assert cell.counters_delta["drafts_by_length"] == {"4": 16}
    assert cell.spec.a_p_exact is True


def test_concurrency_above_the_transcripts_cycles_them_with_distinct_recorded_seeds(lane):
    lane.behaviour.step_sleep_s = 0.01  # requests overlap, so all five streams are in flight together
    result = run_window(
        lane.url, _window(classes=["prose"], rounds=1, concurrency=[5], transcripts_per_class=3), model="fake-model"
    )
    (cell,) = result.cells
    assert cell.valid and cell.concurrency == 5 and cell.repeats == 2 and cell.requests == 6
    assert cell.peak_in_flight == 5
    assert any("concurrency 5 is above the 3 transcripts: each was sent 2 times" in n for n in cell.notes)
    seeds = {(r.transcript_id, r.repeat): r.seed for r in result.records}
    assert len(seeds) == 6 and len(set(seeds.values())) == 6
    for (tid, rep), seed in seeds.items():
        assert seed == derive_seed(7, tid, 1, rep)
        if rep == 0:
            assert seed == derive_seed(7, tid, 1)  # the first pass keeps the seeds every arm always had
    assert sorted(b["seed"] for b in lane.requests) == sorted(seeds.values())
    from gb300lane.bench.models import output_key

    assert len({output_key(r) for r in result.records}) == 6


def test_an_unseeded_window_cycles_identical_requests_and_says_so(lane):
    result = run_window(
        lane.url,
        _window(classes=["prose"], rounds=1, concurrency=[4], transcripts_per_class=2, temperature=0.0, seed_base=None),
        model="fake-model",
    )
    (cell,) = result.cells
    assert cell.repeats == 2 and cell.requests == 4 and all(r.seed == -1 for r in result.records)
    assert any("unseeded window" in n for n in cell.notes)


def test_arrival_times_constant_and_seeded_poisson():
    from gb300lane.bench.window import arrival_times

    assert arrival_times(4, 20.0, "constant", 0) == pytest.approx([0.0, 0.05, 0.10, 0.15])
    a = arrival_times(4000, 50.0, "poisson", 11)
    assert a == arrival_times(4000, 50.0, "poisson", 11) and a != arrival_times(4000, 50.0, "poisson", 12)
    gaps = [y - x for x, y in zip(a, a[1:])]
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    # exponential gaps: mean 1/rate and coefficient of variation 1 (4000 draws: both within 5%)
    assert mean == pytest.approx(0.02, rel=0.05) and sd / mean == pytest.approx(1.0, rel=0.05)
    assert a[0] == 0.0 and all(g > 0 for g in gaps)
    with pytest.raises(BenchError, match="not a positive finite number"):
        arrival_times(3, 0.0, "poisson", 1)


@pytest.mark.slow  # requests 40 ms apart leave within 30 ms of their arrival: the host's scheduling, not a rule
def test_open_loop_cells_send_on_schedule_and_report_request_throughput(lane):
    from gb300lane.bench.models import LoadSpec

    lane.behaviour.engine_ext = True
    lane.behaviour.step_sleep_s = 0.002
    load = LoadSpec(mode="open", request_rates=[25.0], arrivals="constant")
    result = run_window(
        lane.url, _window(classes=["prose"], rounds=1, transcripts_per_class=4), model="fake-model", load=load
    )
    (cell,) = result.cells
    assert result.load == load and cell.valid
    assert cell.request_rate == 25.0 and cell.concurrency == 0 and cell.arrivals == "constant"
    assert [r.scheduled_s for r in result.records] == pytest.approx([0.0, 0.04, 0.08, 0.12])
    # each request leaves at its arrival, not when an earlier one finished
    assert all(0 <= r.start_s - r.scheduled_s < 0.03 for r in result.records)
    # open loop leads with the wall clock; the engine's modelled latencies ride beside it, without a span
    assert cell.clock == "wall" and cell.request_throughput == pytest.approx(4 / cell.wall_span_s)
    assert cell.e2e_s.count == 4 and cell.e2e_s.p50 > 0
    other = cell.other_clock
    assert other is not None and other.clock == "modelled" and other.span_s is None and other.request_throughput is None
    assert other.ttft_s.p50 == pytest.approx(0.05)
    assert {r.request_rate for r in result.records} == {25.0}


def test_poisson_open_loop_is_reproducible_from_its_recorded_seed(lane):
    from gb300lane.bench.models import LoadSpec
    from gb300lane.bench.window import arrival_times

    load = LoadSpec(mode="open", request_rates=[40.0], arrivals="poisson", arrival_seed=3)
    w = _window(classes=["prose"], rounds=1, transcripts_per_class=5)
    first = run_window(lane.url, w, model="fake-model", load=load)
    second = run_window(lane.url, w, model="fake-model", load=load)
    (c1,), (c2,) = first.cells, second.cells
    assert c1.arrival_seed == c2.arrival_seed is not None
    planned = [r.scheduled_s for r in first.records]
    assert planned == [r.scheduled_s for r in second.records] == arrival_times(5, 40.0, "poisson", c1.arrival_seed)
