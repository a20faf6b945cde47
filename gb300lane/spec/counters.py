"""vLLM's `/metrics` text and `SpecDecoding metrics:` log line, read into counters.

Parsing is pure (text in, models out) so recorded scrapes and log lines are
the test fixtures. Counters are summed over the `engine` label (data-parallel
engines of one lane); a scrape that serves several `model_name`s must be
narrowed to one.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from pydantic import Field

from gb300lane.errors import MetricsError
from gb300lane.models import FrozenModel
from gb300lane.spec.acceptance import SpecCounters

if TYPE_CHECKING:  # prometheus-client is imported when a scrape is parsed: `status` and `--help` never pay for it
    from prometheus_client.metrics_core import Metric

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
SUCCESS = "vllm:request_success_total"
DRAFTS_BY_LENGTH = "gb300lane_engine_drafts_by_length_total"
ENGINE_PREFIX = "gb300lane_engine_"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
#: The spec-decode counters come together: a scrape that serves one of them and not another has renamed or
#: dropped it, and reading the missing one as zero would turn a rename into "nothing was drafted".
SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED)
#: Every vLLM scrape serves these; their absence from a scrape that serves `vllm:` families is a rename (the
#: foreign-client check reads request_success and says "unknown" without it).
ALWAYS = (GENERATION, PROMPT)


class MetricsScrape(FrozenModel):
    """The counters of one `/metrics` scrape (or the delta of two)."""

    spec: SpecCounters = Field(description="speculative-decoding counters (zeros when the lane drafts nothing)")
    generation_tokens: int = Field(ge=0, description="vllm:generation_tokens_total")
    prompt_tokens: int = Field(ge=0, description="vllm:prompt_tokens_total")
    requests_success: int = Field(ge=0, description="vllm:request_success_total, summed over finished_reason")
    model_name: str | None = Field(default=None, description="the model_name label the counters were read for")
    extras: dict[str, float] = Field(
        default_factory=dict, description="the embedded engine's gb300lane_engine_* counters, summed over labels"
    )


def _families(text: str, source: str) -> list[Metric]:
    """The one call into prometheus-client's parser; its bare errors become a MetricsError naming the source."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises bare ValueError/TypeError on bad lines
        raise MetricsError(f"{source}: not Prometheus text exposition ({exc}); save the body of GET /metrics") from exc


def _sample_name(name: str) -> str:
    return name if name.endswith("_total") else name + "_total"


def parse_metrics_text(text: str, *, model_name: str | None = None, source: str = "/metrics") -> MetricsScrape:
    """Read one Prometheus text scrape into counters.

    `model_name` narrows a scrape that serves several models; `source` names
    the file or URL in errors.
    """
    families = _families(text, source)
    require_families(families_served(families), source)
    samples = [s for fam in families for s in fam.samples if not s.name.endswith(("_created", "_bucket"))]
    models = sorted({s.labels["model_name"] for s in samples if "model_name" in s.labels})
    if model_name is None and len(models) > 1:
        raise MetricsError(f"{source}: counters for several models ({', '.join(models)}); pass the model name to read")
    chosen = model_name if model_name is not None else (models[0] if models else None)
    if model_name is not None and models and model_name not in models:
        raise MetricsError(f"{source}: no counters for model_name={model_name!r}; the scrape has {', '.join(models)}")

    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    by_length: dict[int, float] = {}
    for s in samples:
        if chosen is not None and s.labels.get("model_name", chosen) != chosen:
            continue
        if not math.isfinite(s.value) or s.value < 0:
            raise MetricsError(f"{source}: {s.name}{s.labels} = {s.value} is not a counter value")
        name = _sample_name(s.name) if s.name.startswith(("vllm:", ENGINE_PREFIX)) else s.name
        if name == ACCEPTED_PER_POS:
            pos = _int_label(s.labels, "position", name, source)
            per_pos[pos] = per_pos.get(pos, 0.0) + s.value
        elif name == DRAFTS_BY_LENGTH:
            length = _int_label(s.labels, "length", name, source)
            by_length[length] = by_length.get(length, 0.0) + s.value
        else:
            totals[name] = totals.get(name, 0.0) + s.value

    if per_pos and sorted(per_pos) != list(range(len(per_pos))):
        raise MetricsError(f"{source}: {ACCEPTED_PER_POS} positions {sorted(per_pos)} are not 0..k-1")
    spec = SpecCounters(
        num_drafts=int(totals.get(DRAFTS, 0)),
        num_draft_tokens=int(totals.get(DRAFT_TOKENS, 0)),
        num_accepted_tokens=int(totals.get(ACCEPTED, 0)),
        accepted_per_pos=tuple(int(per_pos[p]) for p in range(len(per_pos))),
        drafts_by_length={k: int(v) for k, v in sorted(by_length.items())} if by_length else None,
    )
    return MetricsScrape(
        spec=spec,
        generation_tokens=int(totals.get(GENERATION, 0)),
        prompt_tokens=int(totals.get(PROMPT, 0)),
        requests_success=int(totals.get(SUCCESS, 0)),
        model_name=chosen,
        extras={k: v for k, v in sorted(totals.items()) if k.startswith(ENGINE_PREFIX)},
    )


def families_served(families: list[Metric]) -> dict[str, str]:
    """{family name as its samples read (a counter with `_total`): type} for every family a scrape declares, with
    or without samples yet (a counter nothing has counted is still served)."""
    out: dict[str, str] = {}
    for fam in families:
        name = _sample_name(fam.name) if fam.type == "counter" else fam.name
        if fam.type in ("gauge", "unknown") and fam.name.endswith("_created"):
            continue  # prometheus-client's creation-time series of a counter, not a family of its own
        out[name] = fam.type
    return out


def served_families(text: str, *, source: str = "/metrics") -> dict[str, str]:
    """The families a scrape serves (see `families_served`), for comparing a live server with a golden."""
    return families_served(_families(text, source))


def require_families(served: dict[str, str], source: str) -> None:
    """A renamed counter fails loudly, never reads as an empty field: a scrape that serves `vllm:` families must
    serve every family of `ALWAYS`, and one that serves any spec-decode family every one of `SPEC_COUNTERS`."""
    names = set(served)
    if not any(n.startswith("vllm:") for n in names):
        return  # not a vLLM scrape (a test double's, or an exporter's): nothing to hold it to
    missing = [n for n in ALWAYS if n not in names]
    if any(n.startswith("vllm:spec_decode") for n in names):
        missing += [n for n in SPEC_COUNTERS if n not in names]
    if missing:
        import difflib

        hints = []
        for name in missing:
            close = difflib.get_close_matches(name, sorted(n for n in names if n.startswith("vllm:")), n=1, cutoff=0.75)
            hints.append(f"{name} (nearest served: {close[0]})" if close else name)
        raise MetricsError(
            f"{source}: the scrape serves vLLM families but not {', '.join(hints)}; a renamed or dropped counter is "
            "never read as zero: compare the engine with its golden (`gb300lane engine drift`) and update "
            "gb300lane.spec.counters for the new name"
        )


def _int_label(labels: dict[str, str], key: str, name: str, source: str) -> int:
    try:
        return int(labels[key])
    except (KeyError, ValueError) as exc:
        raise MetricsError(f"{source}: {name} needs an integer {key!r} label; got {labels}") from exc


#: Names whose growth since boot means a client asked the engine for work.
REQUEST_SERIES = {
    "vllm:request_success_total": "requests_finished",
    "vllm:num_requests_running": "requests_running",
    "vllm:num_requests_waiting": "requests_waiting",
    "vllm:prompt_tokens_total": "prompt_tokens",
}


class RequestCounts(FrozenModel):
    """Work clients asked of the engine, summed over labels; None where the series is absent."""

    requests_finished: float | None = Field(default=None, description="vllm:request_success_total, all reasons.")
    requests_running: float | None = Field(default=None, description="vllm:num_requests_running.")
    requests_waiting: float | None = Field(default=None, description="vllm:num_requests_waiting.")
    prompt_tokens: float | None = Field(default=None, description="vllm:prompt_tokens_total.")

    @property
    def requests_seen(self) -> float | None:
        """Finished plus in flight: every request a client has sent, or None when unmeasurable."""
        parts = [self.requests_finished, self.requests_running, self.requests_waiting]
        if self.requests_finished is None:
            return None
        return sum(p for p in parts if p is not None)


def parse_request_counts(text: str, *, source: str = "/metrics") -> RequestCounts:
    """Sum the request series of a /metrics scrape (the foreign-client check reads these).

    A declared family with no samples yet (a labelled counter never incremented)
    has counted zero; a series that is not declared at all stays unknown (None).
    """
    families = _families(text, source)
    sums: dict[str, float] = {}
    for family in families:
        for name in (family.name, family.name + "_total"):
            if name in REQUEST_SERIES:
                sums.setdefault(REQUEST_SERIES[name], 0.0)
        for sample in family.samples:
            if sample.name in REQUEST_SERIES:
                field = REQUEST_SERIES[sample.name]
                sums[field] = sums.get(field, 0.0) + float(sample.value)
    return RequestCounts(**sums)


def _backwards(name: str, old: float, new: float) -> MetricsError:
    return MetricsError(
        f"{name} went backwards between the scrapes ({old:g} -> {new:g}): the engine probably restarted; "
        "take both scrapes from one engine run"
    )


def _sub(name: str, old: float, new: float) -> float:
    if new < old:
        raise _backwards(name, old, new)
    return new - old


def delta(before: MetricsScrape, after: MetricsScrape) -> MetricsScrape:
    """Counters accumulated between two scrapes of one engine run; MetricsError if any went backwards."""
    if before.model_name and after.model_name and before.model_name != after.model_name:
        raise MetricsError(
            f"the scrapes are of different models ({before.model_name!r} then {after.model_name!r}); "
            "take both from the same lane"
        )
    b, a = before.spec, after.spec
    k = max(len(a.accepted_per_pos), len(b.accepted_per_pos))
    pad_b = b.accepted_per_pos + (0,) * (k - len(b.accepted_per_pos))
    pad_a = a.accepted_per_pos + (0,) * (k - len(a.accepted_per_pos))
    by_length = None
    if a.drafts_by_length is not None and b.drafts_by_length is not None:
        lengths = sorted(set(a.drafts_by_length) | set(b.drafts_by_length))
        by_length = {
            n: int(
                _sub(f'{DRAFTS_BY_LENGTH}{{length="{n}"}}', b.drafts_by_length.get(n, 0), a.drafts_by_length.get(n, 0))
            )
            for n in lengths
        }
    spec = SpecCounters(
        num_drafts=int(_sub(DRAFTS, b.num_drafts, a.num_drafts)),
        num_draft_tokens=int(_sub(DRAFT_TOKENS, b.num_draft_tokens, a.num_draft_tokens)),
        num_accepted_tokens=int(_sub(ACCEPTED, b.num_accepted_tokens, a.num_accepted_tokens)),
        accepted_per_pos=tuple(
            int(_sub(f'{ACCEPTED_PER_POS}{{position="{p}"}}', pad_b[p], pad_a[p])) for p in range(k)
        ),
        drafts_by_length=by_length,
    )
    return MetricsScrape(
        spec=spec,
        generation_tokens=int(_sub(GENERATION, before.generation_tokens, after.generation_tokens)),
        prompt_tokens=int(_sub(PROMPT, before.prompt_tokens, after.prompt_tokens)),
        requests_success=int(_sub(SUCCESS, before.requests_success, after.requests_success)),
        model_name=after.model_name,
        extras={name: _sub(name, before.extras.get(name, 0.0), value) for name, value in sorted(after.extras.items())},
    )


class SpecLogLine(FrozenModel):
    """One `SpecDecoding metrics:` line: vLLM's interval summary, rates already rounded by vLLM."""

    mean_acceptance_length: float = Field(description="1 + accepted / drafts over the interval")
    accepted_throughput: float | None = Field(default=None, description="accepted draft tokens per second")
    drafted_throughput: float | None = Field(default=None, description="drafted tokens per second")
    accepted_tokens: int = Field(ge=0, description="accepted draft tokens in the interval")
    drafted_tokens: int = Field(ge=0, description="drafted tokens in the interval")
    per_position: tuple[float, ...] = Field(description="vLLM's per-position rate: accepted at p over all drafts")
    draft_acceptance_rate: float = Field(description="accepted / drafted, as a fraction (the line prints a percent)")

    def to_counters(self) -> SpecCounters:
        """Counters reconstructed from the line; drafts are inferred from rounded rates, so approximate."""
        # The per-position rates carry three decimals where the mean length carries two.
        rate_sum = sum(self.per_position) if self.per_position else self.mean_acceptance_length - 1.0
        drafts = round(self.accepted_tokens / rate_sum) if rate_sum > 0 else 0
        per_pos = [round(r * drafts) for r in self.per_position]
        if per_pos:
            per_pos[0] += self.accepted_tokens - sum(per_pos)  # rounding residue goes to the densest position
        return SpecCounters(
            num_drafts=drafts,
            num_draft_tokens=self.drafted_tokens,
            num_accepted_tokens=self.accepted_tokens,
            accepted_per_pos=tuple(max(0, n) for n in per_pos),
        )


_NUM = r"([-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_FIELDS = {
    "mean_acceptance_length": re.compile(r"Mean acceptance length:\s*" + _NUM),
    "accepted_throughput": re.compile(r"Accepted throughput:\s*" + _NUM),
    "drafted_throughput": re.compile(r"Drafted throughput:\s*" + _NUM),
    "accepted_tokens": re.compile(r"Accepted:\s*" + _NUM + r"\s*tokens"),
    "drafted_tokens": re.compile(r"Drafted:\s*" + _NUM + r"\s*tokens"),
    "draft_acceptance_rate": re.compile(r"Avg Draft acceptance rate:\s*" + _NUM + r"\s*%"),
}
_PER_POS = re.compile(r"Per-position acceptance rate:\s*((?:[\d.]+\s*,\s*)*[\d.]+)")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def parse_spec_log_line(line: str) -> SpecLogLine | None:
    """Parse a `SpecDecoding metrics:` line (any logger prefix); None for any other line."""
    if "SpecDecoding metrics:" not in line:
        return None
    found = {key: rx.search(line) for key, rx in _FIELDS.items()}
    required = ("mean_acceptance_length", "accepted_tokens", "drafted_tokens", "draft_acceptance_rate")
    missing = [k for k in required if found[k] is None]
    if missing:
        raise MetricsError(f"SpecDecoding metrics line lacks {', '.join(missing)}: {line.strip()[:200]}")
    pos = _PER_POS.search(line)
    values = {key: _num(m.group(1)) for key, m in found.items() if m is not None}
    return SpecLogLine(
        mean_acceptance_length=values["mean_acceptance_length"],
        accepted_throughput=values.get("accepted_throughput"),
        drafted_throughput=values.get("drafted_throughput"),
        accepted_tokens=int(values["accepted_tokens"]),
        drafted_tokens=int(values["drafted_tokens"]),
        per_position=tuple(float(x) for x in pos.group(1).split(",")) if pos else (),
        draft_acceptance_rate=values["draft_acceptance_rate"] / 100.0,
    )
