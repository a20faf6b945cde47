"""The engine's /metrics: vLLM's names via prometheus-client, plus the embedded engine's own.

Each engine owns a CollectorRegistry, so several engines in one process (as in
tests) never share a counter. Counters are fed from the core's cumulative
counts when /metrics is read (`sync`), so the exposition and the log line
always agree with the core.

One clock per number: vLLM's latency histograms (`vllm:time_to_first_token_seconds`,
`vllm:inter_token_latency_seconds`, e2e, time per output token, queue time)
observe the wall clock, the one a client, Grafana or a scraper compares them
with: seconds since the request arrived, stamped when the step's tokens were
delivered (after --time-scale pacing). The modelled clock (the lane's
physics, which the wall clock tracks only at --time-scale 1) has its own
families beside them, named for it: `gb300lane_engine_modelled_*_seconds`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Sequence as Values

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.utils import floatToGoString

from gb300lane.engine.core import EngineCounters, Sequence

# vLLM exposes no `_created` series; neither does the embedded engine.
_disable_created: Callable[[], None] = disable_created_metrics  # prometheus-client leaves it unannotated
_disable_created()
#: prometheus-client's float formatting (unannotated there).
_go_float: Callable[[float], str] = floatToGoString

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)


class EngineMetrics:
    """Prometheus families for one engine; see the module docstring."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = {"model_name": model_name, "engine": "0"}
        names = ("model_name", "engine")
        r = self.registry
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", names, registry=r)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", names, registry=r)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", names, registry=r)
        self.accepted_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            (*names, "position"),
            registry=r,
        )
        self.generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", names, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", names, registry=r)
        self.success = Counter(
            "vllm:request_success", "Count of successfully processed requests.", (*names, "finished_reason"), registry=r
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", names, registry=r
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", names, registry=r
        )
        b = _LATENCY_BUCKETS
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency.", names, registry=r, buckets=b
        )
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", names, registry=r, buckets=b)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency.", names, registry=r, buckets=b)
        self.tpot = Histogram(
            "vllm:request_time_per_output_token_seconds", "Time per output token.", names, registry=r, buckets=b
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds", "Time spent waiting in the queue.", names, registry=r, buckets=b
        )
        self.m_e2e = Histogram(
            "gb300lane_engine_modelled_e2e_request_latency_seconds",
            "End-to-end request latency on the modelled clock.",
            names,
            registry=r,
            buckets=b,
        )
        self.m_ttft = Histogram(
            "gb300lane_engine_modelled_time_to_first_token_seconds",
            "Time to first token on the modelled clock.",
            names,
            registry=r,
            buckets=b,
        )
        self.m_itl = Histogram(
            "gb300lane_engine_modelled_inter_token_latency_seconds",
            "Inter-token latency on the modelled clock.",
            names,
            registry=r,
            buckets=b,
        )
        self.m_tpot = Histogram(
            "gb300lane_engine_modelled_request_time_per_output_token_seconds",
            "Time per output token on the modelled clock.",
            names,
            registry=r,
            buckets=b,
        )
        self.m_queue = Histogram(
            "gb300lane_engine_modelled_request_queue_time_seconds",
            "Time spent waiting in the queue on the modelled clock.",
            names,
            registry=r,
            buckets=b,
        )
        self.modelled = Counter(
            "gb300lane_engine_modelled_seconds", "Modelled engine seconds spent in verify steps.", names, registry=r
        )
        self.steps = Counter("gb300lane_engine_verify_steps", "Verify steps run.", names, registry=r)
        self.by_length = Counter(
            "gb300lane_engine_drafts_by_length", "Drafts by their length k.", (*names, "length"), registry=r
        )
        self.sidecar_calls = Counter(
            "gb300lane_engine_sidecar_calls", "Routed-expert lookups sent to the expert sidecar.", names, registry=r
        )
        self.sidecar_failures = Counter(
            "gb300lane_engine_sidecar_failures", "Routed-expert lookups that failed.", names, registry=r
        )
        self._text = TextExposition(r)
        self._seen = EngineCounters()
        self._seen_pos: list[int] = []
        self._seen_len: dict[int, int] = {}
        for fam in (
            self.drafts,
            self.draft_tokens,
            self.accepted,
            self.generation,
            self.prompt,
            self.modelled,
            self.steps,
            self.sidecar_calls,
            self.sidecar_failures,
        ):
            fam.labels(**self.labels)

    def sync(self, c: EngineCounters, running: int, waiting: int) -> None:
        """Bring the counters up to the core's cumulative values."""
        s = self._seen
        lab = self.labels
        for fam, now, attr in (
            (self.drafts, c.num_drafts, "num_drafts"),
            (self.draft_tokens, c.num_draft_tokens, "num_draft_tokens"),
            (self.accepted, c.num_accepted, "num_accepted"),
            (self.generation, c.generation_tokens, "generation_tokens"),
            (self.prompt, c.prompt_tokens, "prompt_tokens"),
            (self.steps, c.verify_steps, "verify_steps"),
            (self.modelled, c.modelled_seconds, "modelled_seconds"),
        ):
            inc = now - getattr(s, attr)
            if inc > 0:
                fam.labels(**lab).inc(inc)
                setattr(s, attr, now)
        for pos, now in enumerate(c.accepted_per_pos):
            if pos >= len(self._seen_pos):
                self._seen_pos.append(0)
                self.accepted_pos.labels(**lab, position=str(pos))
            inc = now - self._seen_pos[pos]
            if inc > 0:
                self.accepted_pos.labels(**lab, position=str(pos)).inc(inc)
                self._seen_pos[pos] = now
        for length, now in c.drafts_by_length.items():
            inc = now - self._seen_len.get(length, 0)
            if inc > 0:
                self.by_length.labels(**lab, length=str(length)).inc(inc)
                self._seen_len[length] = now
        self.running.labels(**lab).set(running)
        self.waiting.labels(**lab).set(waiting)

    def finished(self, seq: Sequence) -> None:
        lab = self.labels
        self.success.labels(**lab, finished_reason=seq.finish_reason or "abort").inc()
        for (ttft, e2e, itl, tpot), times in (
            ((self.ttft, self.e2e, self.itl, self.tpot), seq.token_wall),
            ((self.m_ttft, self.m_e2e, self.m_itl, self.m_tpot), seq.token_modelled),
        ):
            if not times:
                continue
            ttft.labels(**lab).observe(times[0])
            e2e.labels(**lab).observe(times[-1])
            observe_all(itl.labels(**lab), np.diff(np.asarray(times, dtype=np.float64)))
            if len(times) > 1:
                tpot.labels(**lab).observe((times[-1] - times[0]) / (len(times) - 1))
        if seq.admitted_wall is not None:
            self.queue.labels(**lab).observe(seq.admitted_wall - seq.arrival_wall)
        if seq.admitted_modelled is not None:
            self.m_queue.labels(**lab).observe(seq.admitted_modelled - seq.arrival_modelled)

    def sidecar(self, ok: bool) -> None:
        self.sidecar_calls.labels(**self.labels).inc()
        if not ok:
            self.sidecar_failures.labels(**self.labels).inc()

    def exposition(self) -> bytes:
        """`generate_latest(self.registry)`'s bytes; see `TextExposition`."""
        return self._text.render(self.registry)


def observe_all(child, values: Values[float] | np.ndarray) -> None:
    """`child.observe(v)` for each of `values` in order, the per-request ITL's hundreds at once.

    The same sum (added one value at a time, in order, as `observe` adds them:
    numpy's accumulate is that running sum) and the same bucket counts (a
    value counts in the first bucket whose upper bound it does not exceed, a
    NaN in none); the histogram's own `observe` where its layout is not the
    one this reads.
    """
    try:
        total, buckets, bounds = child._sum, child._buckets, child._upper_bounds
    except AttributeError:
        for v in values:
            child.observe(v)
        return
    vals = np.asarray(values, dtype=np.float64)
    if not vals.size:
        return
    total.set(float(np.add.accumulate(np.concatenate(([total.get()], vals)))[-1]))
    counts = np.bincount(
        np.searchsorted(np.asarray(bounds, dtype=np.float64), vals, side="left"), minlength=len(bounds) + 1
    )
    for i, n in enumerate(counts[: len(bounds)].tolist()):
        if n:
            buckets[i].inc(n)


#: The legacy Prometheus names, which the text format writes as they are (no quoting, no escaping).
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram"}


class TextExposition:
    """The Prometheus text format of a registry, the bytes `generate_latest` writes, a few times faster.

    Three /metrics reads per bench window made `generate_latest` a tenth of
    a served window's CPU, most of it re-escaping the same label sets. This
    writes the same lines for what the engine registers (counters, gauges
    and histograms, legacy names, no timestamps or exemplars) with each
    sample's `name{labels} ` prefix built once. Anything else, or a
    prometheus-client whose output differs on the registry as first built
    (checked once, here), is left to `generate_latest`.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._prefixes: dict[tuple[object, ...], str] = {}
        self._same = True
        self._same = self.render(registry) == generate_latest(registry)

    def render(self, registry: CollectorRegistry) -> bytes:
        text = self._lines(registry) if self._same else None
        return generate_latest(registry) if text is None else text.encode("utf-8")

    def _lines(self, registry: CollectorRegistry) -> str | None:
        out: list[str] = []
        prefixes = self._prefixes
        for metric in registry.collect():
            mtype = _TYPES.get(metric.type)
            if mtype is None or not _METRIC_NAME.match(metric.name):
                return None
            mname = metric.name + "_total" if mtype == "counter" else metric.name
            doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {mname} {doc}\n# TYPE {mname} {mtype}\n")
            for sample in metric.samples:
                if sample.timestamp is not None or sample.exemplar is not None:
                    return None
                key = (sample.name, tuple(sample.labels.items()))
                prefix = prefixes.get(key)
                if prefix is None:
                    prefix = self._prefix(metric.name, sample.name, sample.labels)
                    if prefix is None:
                        return None
                    prefixes[key] = prefix
                out.append(f"{prefix}{_go_float(sample.value)}\n")
        return "".join(out)

    @staticmethod
    def _prefix(family: str, name: str, labels: dict[str, str]) -> str | None:
        if name in (family + "_created", family + "_gsum", family + "_gcount") or not _METRIC_NAME.match(name):
            return None  # OpenMetrics-only samples, which generate_latest moves to gauges of their own
        if any(not _LABEL_NAME.match(k) or k.startswith("__") for k in labels):
            return None
        if not labels:
            return f"{name} "
        escaped = ",".join(
            '{}="{}"'.format(k, v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\""))
            for k, v in sorted(labels.items())
        )
        return f"{name}{{{escaped}}} "
