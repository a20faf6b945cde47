"""A window and the smoke gates against the real embedded engine (`python -m gb300lane.engine serve`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from gb300lane.bench.smoke import run_smoke
from gb300lane.bench.window import run_window
from gb300lane.lane import Died, HttpReady, wait_ready
from gb300lane.recipes import load_recipe
from gb300lane.recipes.schema import WindowSpec
from gb300lane.testing.free_ports import free_port

SPEC = {
    "method": "dspark",
    "num_speculative_tokens": 5,
    "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 3], [9, 32, 3]],
    "draft_sample_method": "probabilistic",
    "rejection_sample_method": "block",
}


def _serve(tmp_path_factory, time_scale: float, cache=None):
    """The embedded engine on a free port at `time_scale` (compile cache `cache`, else a new one); yields its URL."""
    port = free_port()
    cache = cache or tmp_path_factory.mktemp("vllm-cache")
    log = cache / "engine.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gb300lane.engine",
                "serve",
                "--model",
                "builtin",
                "--served-model-name",
                "deepseek-v4.1-flash",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--time-scale",
                str(time_scale),
                "--speculative-config",
                json.dumps(SPEC),
                "--enable-auto-tool-choice",
                "--tool-call-parser",
                "deepseek_v41",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "VLLM_CACHE_ROOT": str(cache)},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        # The lane's own readiness wait: /health and the model listed, a death reported with the log tail.
        wait_ready(
            [HttpReady(url=url + "/health"), HttpReady(url=url + "/v1/models", contains='"deepseek-v4.1-flash"')],
            timeout_s=60, poll_s=0.1, logs=lambda _c: log.read_text(errors="replace"),
            watch=lambda: None if proc.poll() is None else Died(description=f"engine exited ({proc.returncode})"),
        )  # fmt: skip
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    yield from _serve(tmp_path_factory, 0.0)


@pytest.fixture(scope="module")
def paced_engine(tmp_path_factory):
    """The engine on a modelled clock slowed to wall time: a request lasts long against the client's own gap
    between one request's end and its stream's next send, however loaded the host is. A first boot at time scale
    0 fills its compile cache, so the paced boot is a cache hit (a miss is minutes of modelled time)."""
    cache = tmp_path_factory.mktemp("paced-cache")
    for _ in _serve(tmp_path_factory, 0.0, cache):
        pass
    yield from _serve(tmp_path_factory, 0.05, cache)


@pytest.mark.slow
def test_window_on_the_modelled_clock_with_exact_counters(engine):
    window = WindowSpec(
        name="e",
        classes=("prose", "tool_json"),
        transcripts_per_class=3,
        rounds=2,
        concurrency=(1, 4),
        temperature=1.0,
        top_p=1.0,
        seed_base=1000,
        forced_tokens=48,
    )
    result = run_window(engine, window, model="deepseek-v4.1-flash")
    assert result.valid, [c.invalid_reasons for c in result.cells]
    assert result.server_version["engine"] == "gb300lane-embedded"
    for cell in result.cells:
        # C4 over three transcripts cycles them twice, so all four streams run and the label is true
        passes = 2 if cell.concurrency == 4 else 1
        n = 3 * passes
        assert cell.repeats == passes and cell.requests == n
        assert cell.peak_in_flight == min(cell.concurrency, n)
        assert cell.clock == "modelled" and cell.output_tokens == n * 48 == cell.generation_tokens_delta
        assert cell.spec is not None and 1.0 <= cell.spec.tokens_per_step <= 6.0
        assert cell.decode_tok_s and cell.decode_tok_s_per_stream.count == n
        # both clocks: the client's wall view rides beside the modelled one
        assert cell.other_clock is not None and cell.other_clock.clock == "wall"
        assert cell.other_clock.ttft_s.count == n and cell.other_clock.decode_tok_s
        assert cell.request_throughput and cell.e2e_s.count == n
    assert all(len(r.token_times_s) == 48 and len(r.engine.modelled_token_times_s) == 48 for r in result.records)
    # seeded: the same transcript, round and pass give the same text at C1 and C4; a second pass has its own seed
    by_key: dict[tuple[str, int, int], set[str]] = {}
    seeds: dict[tuple[str, int, int], set[int]] = {}
    for r in result.records:
        by_key.setdefault((r.transcript_id, r.round, r.repeat), set()).add(r.text)
        seeds.setdefault((r.transcript_id, r.round, r.repeat), set()).add(r.seed)
    assert all(len(texts) == 1 for texts in by_key.values())
    assert all(len(s) == 1 for s in seeds.values())
    for (tid, rnd, rep), texts in by_key.items():
        if rep == 1:
            assert seeds[(tid, rnd, 1)] != seeds[(tid, rnd, 0)] and texts != by_key[(tid, rnd, 0)]


@pytest.mark.slow
def test_smoke_gates_of_the_local_recipe_pass(engine):
    report = run_smoke(load_recipe("local-v27"), engine)
    assert report.passed, [(g.name, g.status, g.reason) for g in report.gates]
    assert [g.kind for g in report.gates] == ["parity", "bounds"]


_HELD_WINDOW = WindowSpec(
    name="d",
    classes=("prose",),
    transcripts_per_class=24,
    rounds=1,
    concurrency=(8,),
    temperature=1.0,
    top_p=1.0,
    seed_base=1000,
    forced_tokens=640,
)


@pytest.mark.slow
def test_a_client_holding_fewer_in_flight_than_configured_is_refused(engine):
    """Four connections for a C8 cell: about four in flight, and the receipt refuses the cell for it.

    What the pool allows is a fact of the client, whatever the host's load: four requests on the wire at a time
    (a fifth's head may go out in the instant before the fourth's end is stamped), so the delivered concurrency
    is near four, below the configured eight by more than the tolerance. (That a client
    with eight connections delivers eight depends on the requests outlasting the client's own pauses, which a
    busy host stretches: the integration tier's test below.)"""
    import asyncio

    from gb300lane.bench.window import run_window_async

    short = asyncio.run(run_window_async(engine, _HELD_WINDOW, model="deepseek-v4.1-flash", connections=4))
    (cell,) = short.cells
    assert not cell.valid and cell.delivered.delivered_concurrency <= 5, cell.invalid_reasons
    assert re.match(
        r"delivered concurrency \d+(\.\d+)? is below the configured 8 by more than the registered 10%",
        cell.invalid_reasons[0],
    ), cell.invalid_reasons
    # The lane saw it too: its own count mid-cell was about the four the connections carried.
    if cell.delivered.server_running is not None:
        assert cell.delivered.server_running <= 5
    # The requests themselves were fine: only the load they were labelled with was not delivered.
    assert all(r.ok and r.output_tokens == 640 for r in short.records)
    assert all(r.sent_s is not None for r in short.records)
    assert sum(r.sent_s > 0.01 for r in short.records) >= 4  # the second four waited for a connection


@pytest.mark.slow
def test_a_client_holding_its_concurrency_delivers_it_and_the_lane_counts_it(paced_engine):
    """Eight connections for a C8 cell: the engine saw eight in flight, and the receipt says so.

    Three requests a stream, so the cell has a steady state to judge (a request or two per stream is not judged),
    each 640 tokens on the paced engine (about 0.4 s a request): at time scale 0 a request lasts tens of
    milliseconds, and on a busy host the client's own gap between one request's end and the next one's send then
    read as delivered concurrency 7. An end-to-end check of the client, in the integration tier."""
    import asyncio

    from gb300lane.bench.window import run_window_async

    held = asyncio.run(run_window_async(paced_engine, _HELD_WINDOW, model="deepseek-v4.1-flash"))
    (good,) = held.cells
    assert good.valid, good.invalid_reasons
    assert good.delivered.delivered_concurrency == 8 and good.delivered.configured_concurrency == 8
    assert good.delivered.peak_in_flight == 8 and max(n for _, n in good.delivered.in_flight_series) == 8
    # The lane's own count mid-cell (vllm:num_requests_running + waiting) beside the client's; the engine
    # counts a request once its handler has read it, which may be after the scrape at time scale 0.
    assert good.delivered.client_in_flight_at_scrape == 8 and 1 <= good.delivered.server_running <= 8


@pytest.mark.slow
def test_spec_counters_reconcile_with_the_clients_tokens(engine):
    # Requests long enough (160 tokens, four a stream) that the cell holds its two streams steadily: at 40
    # tokens a request lasts a few milliseconds here, and a loaded host's gap between one stream's requests
    # reads as delivered concurrency 1.5 (the delivered-load check is not what this test is about).
    window = WindowSpec(
        name="a",
        classes=("prose",),
        transcripts_per_class=8,
        rounds=1,
        concurrency=(2,),
        temperature=1.0,
        top_p=1.0,
        seed_base=1000,
        forced_tokens=160,
    )
    result = run_window(engine, window, model="deepseek-v4.1-flash")
    (cell,) = result.cells
    assert cell.valid, cell.invalid_reasons
    d = cell.counters_delta
    received = cell.output_tokens
    # Every verify step emits accepted + 1 tokens; only a request's last step is cut by its length.
    assert d["num_drafts"] + d["num_accepted_tokens"] - 5 * cell.requests <= received
    assert received <= d["num_drafts"] + d["num_accepted_tokens"] + cell.requests
