"""Synthetic arms built with the real bench and lane models, and a fake lane for card runs.

Values are chosen by the tests: each arm's per-transcript decode rate is
`base * factor * (1 + round_jitter)` so a test can place the candidate, the
controls and the rounds exactly where a gate should pass or fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from gb300lane.bench.models import CellResult, RequestRecord, RequestSpecDecode, RetriedCell, SpecStats, WindowResult
from gb300lane.bench.stats import Percentiles
from gb300lane.cards.record.models import ForeignCount
from gb300lane.lane.checks import CheckResult
from gb300lane.lane.report import BootReport
from gb300lane.recipes import fingerprint, load_recipe


def _record(
    tid: str, cls: str, conc: int, rnd: int, rate: float, text: str = "x", tps: float | None = None
) -> RequestRecord:
    drafts = 40
    spec = (
        None
        if tps is None
        else RequestSpecDecode(
            num_drafts=drafts, num_draft_tokens=5 * drafts, num_accepted_tokens=int(round((tps - 1.0) * drafts))
        )
    )
    return RequestRecord(
        spec_decode=spec,
        transcript_id=tid,
        cls=cls,
        round=rnd,
        concurrency=conc,
        seed=1,
        kind="completion",
        worker=0,
        start_s=0.0,
        ok=True,
        error=None,
        http_status=200,
        expected_tokens=64,
        output_tokens=64,
        prompt_tokens=10,
        chunks=20,
        token_attribution="usage",
        ttft_s=0.01,
        e2e_s=0.5,
        done_s=0.5,
        token_times_s=[],
        engine=None,
        clock="modelled",
        decode_tok_s=rate,
        tpot_s=1 / rate,
        text=text,
    )


def window_result(
    window: Any,
    *,
    factor: float = 1.0,
    round_jitter: dict[int, float] | None = None,
    a_p: tuple[float, ...] = (0.8, 0.6, 0.45, 0.3, 0.2),
    n_transcripts: int = 6,
    class_factor: dict[str, float] | None = None,
    flip: set[str] = frozenset(),
    tps_factor: float = 1.0,
    noise: float = 0.0,
) -> WindowResult:
    """`noise` > 0 adds per-request Gaussian noise (relative sd), seeded by the window's seed base."""
    cells, records = [], []
    jitter = round_jitter or {}
    rng = np.random.default_rng(window.seed_base if window.seed_base is not None else 0)
    for rnd in range(1, window.rounds + 1):
        for cls in window.classes:
            for conc in window.concurrency:
                base = 100.0 * conc * (class_factor or {}).get(cls, 1.0)
                recs = []
                for i in range(n_transcripts):
                    # transcripts differ a lot from each other; the pairing removes that
                    rate = (base + 7.0 * i) * factor * (1 + jitter.get(rnd, 0.0))
                    tps = (1 + sum(a_p)) * (1 + 0.02 * i) * tps_factor
                    if noise:
                        rate *= 1 + noise * rng.standard_normal()
                        tps *= 1 + noise * rng.standard_normal()
                    tid = f"{cls}-{i:03d}"
                    recs.append(_record(tid, cls, conc, rnd, rate, text="flipped" if tid in flip else "x", tps=tps))
                agg = sum(r.decode_tok_s for r in recs) / len(recs)
                drafts = 1000
                spec = SpecStats(
                    num_drafts=drafts,
                    num_draft_tokens=drafts * len(a_p),
                    num_accepted_tokens=int(round(drafts * sum(a_p))),
                    tokens_per_step=1 + sum(a_p),
                    mean_drafts_per_step=float(len(a_p)),
                    a_p=list(a_p),
                    a_p_exact=True,
                    marginal=[None] * len(a_p),
                    vllm_per_position=list(a_p),
                    draft_acceptance_rate=sum(a_p) / len(a_p),
                )
                pct = Percentiles.from_values([r.decode_tok_s for r in recs])
                cells.append(
                    CellResult(
                        cls=cls,
                        concurrency=conc,
                        round=rnd,
                        valid=True,
                        invalid_reasons=[],
                        notes=[],
                        requests=len(recs),
                        errors=0,
                        expected_tokens=64 * len(recs),
                        output_tokens=64 * len(recs),
                        clock="modelled",
                        span_s=1.0,
                        wall_span_s=1.0,
                        decode_tok_s=agg,
                        decode_tok_s_per_stream=pct,
                        ttft_s=pct,
                        tpot_s=pct,
                        itl_s=pct,
                        generation_tokens_delta=None,
                        spec=spec,
                        spec_absent_reason=None,
                        counters_delta=None,
                    )
                )
                records.extend(recs)
    return WindowResult(
        tool_version="t",
        python="3",
        platform="p",
        created_at="2026-10-26T00:00:00+00:00",
        endpoint="http://127.0.0.1:1",
        model="m",
        server_version=None,
        recipe=None,
        fingerprint=None,
        window=window.model_dump(mode="json"),
        valid=True,
        cells=cells,
        records=records,
    )


def boot_report(
    arm: str,
    recipe: str,
    *,
    hit: bool = True,
    rejection: str = "standard",
    env_digest: str = "abc123",
    kv: int = 4400013,
    foreign: int = 0,
) -> BootReport:
    checks = (
        CheckResult(name="autotune", status="pass", summary="s", evidence={"observed": "hit" if hit else "miss"}),
        CheckResult(
            name="flags",
            status="pass",
            summary="s",
            evidence={
                "keys": [
                    {
                        "key": "speculative.rejection_sample_method",
                        "expected": rejection,
                        "present": 1,
                        "actual": rejection,
                        "ok": True,
                    }
                ],
                "argv": [],
            },
        ),
        CheckResult(name="env", status="pass", summary="s", evidence={"set_digest": env_digest, "count": 3}),
        CheckResult(name="kv_pool", status="pass", summary="s", evidence={"observed": kv, "expected": kv}),
        CheckResult(name="foreign_clients", status="pass", summary="s", evidence={"foreign_requests": foreign}),
    )
    # The fingerprint the recipe has: the chain of custody checks that each arm booted what was registered.
    return BootReport(
        instance=f"{recipe}-{arm}",
        lane="local",
        recipe=recipe,
        arm=arm,
        run="r1",
        runtime="process",
        fingerprint=fingerprint(load_recipe(recipe)),
        endpoint=f"http://127.0.0.1:1/{arm}",
        served_model="m",
        dark=True,
        containers=(f"{recipe}-{arm}-main",),
        started_at=0.0,
        boot_seconds=1.0,
        checks=checks,
    )


class FakeLane:
    """Records every call; `fail_window_on` makes run_window raise for that arm once."""

    def __init__(
        self,
        card: Any,
        factors: dict[str, float],
        *,
        fail_window_on: str | None = None,
        jitter: dict[str, dict[int, float]] | None = None,
        flips: dict[str, set[str]] | None = None,
        tps: dict[str, float] | None = None,
        noise: float = 0.0,
        n_transcripts: int = 6,
        invalid: dict[str, set[tuple[str, int, int]]] | None = None,
    ) -> None:
        """`invalid`: per arm, the (class, concurrency, round) cells that come back invalid on every try."""
        self.card = card
        self.invalid = invalid or {}
        self.factors = factors
        self.tps = tps or {}
        self.noise = noise
        self.n_transcripts = n_transcripts
        self.windows: list[tuple[str, Any]] = []
        self.fail_window_on = fail_window_on
        self.jitter = jitter or {}
        self.flips = flips or {}
        self.calls: list[tuple[str, ...]] = []
        self._arm_by_endpoint: dict[str, str] = {}

    def ops(self) -> FakeLane:
        """The fake is itself a `gb300lane.cards.ArmOps`."""
        return self

    @contextmanager
    def instance(self, recipe: str, *, arm: str, check_keys: Any = None, **kw: Any) -> Iterator[BootReport]:
        self.calls.append(("up", arm, recipe))
        cand = self.card.candidate
        rep = boot_report(arm, recipe, rejection="block" if arm == cand.name else "standard")
        self._arm_by_endpoint[rep.endpoint] = arm
        try:
            yield rep
        finally:
            self.calls.append(("stop", rep.instance))

    def discard(self, recipe: str, arm: str) -> None:
        self.calls.append(("discard", arm))

    def foreign(self, endpoint: str, sent: float) -> ForeignCount:
        return ForeignCount(foreign_clients=0, check={"sent": sent})

    def run_window(self, endpoint: str, window: Any, **kw: Any) -> WindowResult:
        arm = self._arm_by_endpoint[endpoint]
        self.calls.append(("window", arm, window.name))
        self.windows.append((arm, window))
        if self.fail_window_on == arm:
            self.fail_window_on = None
            raise KeyboardInterrupt("interrupted")
        res = window_result(
            window,
            factor=self.factors.get(arm, 1.0),
            round_jitter=self.jitter.get(arm),
            flip=self.flips.get(arm, frozenset()),
            tps_factor=self.tps.get(arm, 1.0),
            noise=self.noise,
            n_transcripts=self.n_transcripts,
        )
        bad = self.invalid.get(arm, set())
        if not bad:
            return res
        reason = "delivered concurrency 1 is below the configured 2 by more than the registered 10%"
        cells = [
            c.model_copy(update={"valid": False, "invalid_reasons": [reason]})
            if (c.cls, c.concurrency, c.round) in bad
            else c
            for c in res.cells
        ]
        tries = [
            RetriedCell(
                cell=c,
                records=[r for r in res.records if (r.cls, r.concurrency, r.round) == (c.cls, c.concurrency, c.round)],
            )
            for c in cells
            if not c.valid
        ]
        return res.model_copy(update={"cells": cells, "valid": False, "retried": tries})
