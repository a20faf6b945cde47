"""An arm's receipts read into the decision's types: bench's `WindowResult` -> `WindowData`, the lane's
`BootReport` -> `BootFacts`.

Both sides are models, so a field renamed in bench or the lane is a type error here, not a key that silently
reads as missing; the boot checks are found by the names `lane.checks` gives them (`CHECK_*`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from gb300lane.bench.models import RequestRecord, WindowResult, load_label
from gb300lane.canonical import sha256_bytes
from gb300lane.cards.decide.data import BootFacts, CellData, WindowData
from gb300lane.lane.checks import (
    CHECK_AUTOTUNE,
    CHECK_ENV,
    CHECK_FEATURE_LIVE,
    CHECK_FLAGS,
    CHECK_FOREIGN_CLIENTS,
    CHECK_KV_POOL,
    CheckResult,
)
from gb300lane.lane.report import BootReport


def _latency(rec: RequestRecord, clock: str) -> tuple[float | None, tuple[float, ...]]:
    """(TTFT, the gaps between successive chunks) of one request on `clock`.

    vLLM's ITL is the gap between chunks: on the wall clock the client's per-event arrival times, on the
    modelled clock the distinct modelled token times (a verify step's tokens arrive as one chunk).
    """
    if clock == "modelled" and rec.engine is not None:
        times = sorted(set(rec.engine.modelled_token_times_s))
        ttft: float | None = rec.engine.modelled_ttft_s
    else:
        times = rec.event_times_s or sorted(set(rec.token_times_s))
        ttft = rec.ttft_s
    return ttft, tuple(b - a for a, b in zip(times, times[1:]))


def window_data_from_result(result: WindowResult | Mapping[str, object], window_name: str) -> WindowData:
    """bench's WindowResult (or its JSON, validated) -> WindowData, keeping per-transcript rates."""
    res = result if isinstance(result, WindowResult) else WindowResult.model_validate(result)
    per: dict[tuple[str, int, int], dict[str, float]] = {}
    tps: dict[tuple[str, int, int], dict[str, float]] = {}
    outs: dict[tuple[str, int, int], dict[str, str]] = {}
    quality: dict[tuple[str, int, int], dict[str, bool]] = {}
    lat: defaultdict[tuple[str, int, int, str], dict[str, tuple[float | None, tuple[float, ...]]]] = defaultdict(dict)
    for rec in res.records:
        key = (rec.cls, int(rec.concurrency), int(rec.round))
        # A concurrency above the transcript count sends each transcript once per pass, each pass its own sample.
        sample = str(rec.transcript_id) + (f"#{rec.repeat}" if rec.repeat else "")
        if rec.ok and rec.decode_tok_s is not None:
            per.setdefault(key, {})[sample] = float(rec.decode_tok_s)
        sd = rec.spec_decode if rec.ok else None
        if sd is not None and sd.num_drafts:
            tps.setdefault(key, {})[sample] = 1.0 + sd.num_accepted_tokens / sd.num_drafts
        if rec.ok and rec.quality is not None:
            quality.setdefault(key, {})[sample] = rec.quality.passed
        if rec.ok:
            outs.setdefault(key, {})[sample] = sha256_bytes(rec.text or "")
            lat[(*key, "wall")][sample] = _latency(rec, "wall")
            if rec.engine is not None:
                lat[(*key, "modelled")][sample] = _latency(rec, "modelled")
    cells = []
    clocks = set()
    accepted = drafts = 0
    ap_weighted: list[float] = []
    ap_weight: list[float] = []
    invalid: list[str] = []
    for cell in res.cells:
        if not cell.valid:
            invalid.append(f"{cell.cls} {load_label(cell)} r{cell.round}: {'; '.join(cell.invalid_reasons)}")
            continue
        clocks.add(cell.clock)
        spec = cell.spec
        key = (cell.cls, int(cell.concurrency), int(cell.round))
        # over all drafts (vLLM's convention) is what sums to tokens/step and merges
        # exactly by weighting with the drafts; the per-length view feeds the marginals
        a_p = tuple(spec.vllm_per_position or spec.a_p) if spec else None
        a_p_given = tuple(spec.a_p) if spec else None
        n = int(spec.num_drafts) if spec else None
        if spec and n:
            drafts += n
            accepted += int(spec.num_accepted_tokens)
            for i, v in enumerate(a_p or ()):
                while len(ap_weighted) <= i:
                    ap_weighted.append(0.0)
                    ap_weight.append(0.0)
                ap_weighted[i] += v * n
                ap_weight[i] += n
        cells.append(
            CellData(
                cls=cell.cls,
                concurrency=int(cell.concurrency),
                round=int(cell.round),
                decode_tok_s=cell.decode_tok_s,
                tokens_per_step=spec.tokens_per_step if spec else None,
                a_p=a_p,
                a_p_given=a_p_given,
                num_drafts=n,
                per_transcript=per.get(key, {}),
                per_transcript_tps=tps.get(key, {}),
                outputs=outs.get(key, {}),
                ttft_s={t: v for t, (v, _) in lat[(*key, cell.clock)].items() if v is not None},
                itl_s={t: gaps for t, (_, gaps) in lat[(*key, cell.clock)].items()},
                quality=quality.get(key, {}),
            )
        )
    clock = clocks.pop() if len(clocks) == 1 else ("mixed" if clocks else None)
    return WindowData(
        window=window_name,
        clock=clock,
        cells=tuple(cells),
        tokens_per_step=(1.0 + accepted / drafts) if drafts else None,
        a_p=tuple(w / n for w, n in zip(ap_weighted, ap_weight) if n) or None,
        invalid_cells=tuple(invalid),
        lossless=res.lossless,
    )


def boot_facts_from_report(report: BootReport | Mapping[str, object], foreign_clients: int | None) -> BootFacts:
    """The lane's BootReport (or its JSON, validated) -> BootFacts.

    The report carries named checks (autotune, flags, env, kv_pool, dark) with
    their evidence; the gates compare that evidence across arms. The runtime's
    env order is kept when the env check has the raw list, else the order-free
    digest stands for the set.
    """
    rep = report if isinstance(report, BootReport) else BootReport.model_validate(report)
    checks: dict[str, CheckResult] = {c.name: c for c in rep.checks if c.name}
    ev = {name: c.evidence for name, c in checks.items()}
    observed = ev.get(CHECK_AUTOTUNE, {}).get("observed")
    # A reload found the hash and compiled again: it paid a compile, so it is no hit.
    hash_hit = {"hit": True, "miss": False, "reload": False}.get(observed) if isinstance(observed, str) else None
    live = checks.get(CHECK_FEATURE_LIVE)
    flags: dict[str, object] = {}
    for row in ev.get(CHECK_FLAGS, {}).get("keys", []) or []:
        if row.get("present"):
            flags[str(row["key"])] = row.get("actual")
    env = ev.get(CHECK_ENV, {}).get("env_list")
    kv = ev.get(CHECK_KV_POOL, {}).get("observed")
    if foreign_clients is None:
        fr = ev.get(CHECK_FOREIGN_CLIENTS, {}).get("foreign_requests")
        foreign_clients = int(fr) if isinstance(fr, (int, float)) else None
    return BootFacts(
        hash_hit=hash_hit,
        boot_seconds=rep.boot_seconds,
        flags=flags,
        env=tuple(str(e) for e in env) if isinstance(env, (list, tuple)) else None,
        env_set_digest=ev.get(CHECK_ENV, {}).get("set_digest"),
        kv_pool_tokens=int(kv) if isinstance(kv, (int, float)) else None,
        foreign_clients=foreign_clients,
        fingerprint=rep.fingerprint,
        feature_live={"pass": True, "fail": False}.get(str(live.status)) if live else None,
        feature_live_summary=str(live.summary) if live else None,
        instance=rep.instance,
        provenance=rep.provenance.fields() if rep.provenance is not None else None,
    )


__all__ = ["boot_facts_from_report", "window_data_from_result"]
