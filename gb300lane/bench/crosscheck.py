"""Tokens per verify step three ways: the engine's /metrics counters against two witnesses it does not control.

Over a window's valid cells:

- counters: `vllm:spec_decode_num_drafts_total` and `..._num_accepted_tokens_total`, delta across each cell
  (what `bench` reports as tokens/step = 1 + accepted / drafts);
- per request: the sum of every request's own `metrics.speculative_decoding` (vLLM's
  `--per-request-spec-decode-metrics`), which must equal the counter deltas exactly when the cell held only
  the bench's requests;
- client: the tokens the client received. A request's first token comes from its prefill; every later
  verify step emits its accepted drafts plus one token, so the decode tokens of a window are
  accepted + drafts, and `(received - requests) / drafts` is tokens per step from the client's own count.
  The last step of a request can accept drafts past its `max_tokens`, which vLLM counts and never sends,
  so the client's count may fall short of the counters by at most k per request, never exceed them.

`cross_check` is pure: a WindowResult in, a CounterCheck out.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gb300lane.bench.models import WindowResult
from gb300lane.models import FrozenModel


class CounterCheck(FrozenModel):
    """The engine's counters against the per-request counters and the client's token count."""

    requests: int = Field(description="Successful requests in the valid cells.")
    received_tokens: int = Field(description="Completion tokens the client received (usage), summed.")
    counter_drafts: int = Field(description="Verify steps with drafts, from the /metrics deltas.")
    counter_accepted: int = Field(description="Accepted draft tokens, from the /metrics deltas.")
    request_drafts: int | None = Field(description="Sum of the requests' own num_drafts; None when none reported.")
    request_accepted: int | None = Field(description="Sum of the requests' own num_accepted_tokens.")
    counters_tokens_per_step: float | None = Field(description="1 + accepted / drafts from the counters.")
    client_tokens_per_step: float | None = Field(description="(received - requests) / drafts: the client's count.")
    per_request: Literal["equal", "differ", "absent"] = Field(description="Per-request sums against the counters.")
    client: Literal["agree", "differ", "unknown"] = Field(
        description="agree: counters' decode tokens minus the client's within [0, k x requests]."
    )
    shortfall_tokens: int | None = Field(
        description="accepted + drafts - (received - requests): tokens the "
        "engine counted and did not send (drafts accepted past max_tokens)."
    )
    max_shortfall: int = Field(description="The bound on the shortfall: k x requests.")

    @property
    def ok(self) -> bool:
        return self.per_request != "differ" and self.client == "agree"

    def line(self) -> str:
        counters = "—" if self.counters_tokens_per_step is None else f"{self.counters_tokens_per_step:.3f}"
        client = "—" if self.client_tokens_per_step is None else f"{self.client_tokens_per_step:.3f}"
        per = {
            "equal": "per-request counters sum to the same drafts and accepted",
            "differ": f"per-request counters DIFFER ({self.request_drafts} drafts, {self.request_accepted} accepted)",
            "absent": "no per-request counters",
        }[self.per_request]
        return (
            f"tokens/step cross-check: counters {counters} ({self.counter_accepted} accepted / "
            f"{self.counter_drafts} drafts), client {client} ({self.received_tokens} tokens received over "
            f"{self.requests} requests, {self.shortfall_tokens} counted and not sent, bound "
            f"{self.max_shortfall}): {self.client}; {per}"
        )


def cross_check(result: WindowResult, k: int) -> CounterCheck | None:
    """The window's counters against its requests and its client count; None without spec counters."""
    cells = [c for c in result.cells if c.valid and c.spec is not None]
    if not cells:
        return None
    keys = {(c.cls, c.concurrency, c.round, c.request_rate) for c in cells}
    records = [r for r in result.records if r.ok and (r.cls, r.concurrency, r.round, r.request_rate) in keys]
    drafts = sum(c.spec.num_drafts for c in cells if c.spec is not None)
    accepted = sum(c.spec.num_accepted_tokens for c in cells if c.spec is not None)
    received = sum(r.output_tokens or 0 for r in records)
    n = len(records)
    sds = [r.spec_decode for r in records]
    if any(sd is None for sd in sds):
        per: Literal["equal", "differ", "absent"] = "absent"
        r_drafts = r_acc = None
    else:
        r_drafts = sum(sd.num_drafts for sd in sds if sd is not None)
        r_acc = sum(sd.num_accepted_tokens for sd in sds if sd is not None)
        per = "equal" if (r_drafts, r_acc) == (drafts, accepted) else "differ"
    shortfall = accepted + drafts - (received - n) if drafts else None
    bound = k * n
    client: Literal["agree", "differ", "unknown"] = (
        "unknown" if shortfall is None else ("agree" if 0 <= shortfall <= bound else "differ")
    )
    return CounterCheck(
        requests=n, received_tokens=received, counter_drafts=drafts, counter_accepted=accepted,
        request_drafts=r_drafts, request_accepted=r_acc,
        counters_tokens_per_step=1.0 + accepted / drafts if drafts else None,
        client_tokens_per_step=(received - n) / drafts if drafts else None,
        per_request=per, client=client, shortfall_tokens=shortfall, max_shortfall=bound,
    )  # fmt: skip
