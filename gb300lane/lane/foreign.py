"""Foreign clients: requests a lane's /metrics counted that the tool did not send.

A dark lane must see none; `up --dark` checks at boot and a card calls this
again right before and after its windows.
"""

from __future__ import annotations

from gb300lane.errors import MetricsError
from gb300lane.lane import checks, probe
from gb300lane.spec.counters import parse_request_counts


def foreign_clients(endpoint: str, *, sent_by_tool: float = 0) -> checks.CheckResult:
    """Requests counted in /metrics since boot that the tool did not send; `unknown` with the reason when unreadable."""
    try:
        counts = parse_request_counts(probe.metrics_text(endpoint), source=f"{endpoint}/metrics")
    except MetricsError as exc:
        return checks.CheckResult(
            name=checks.CHECK_FOREIGN_CLIENTS, status="unknown", summary=str(exc), evidence={"endpoint": endpoint}
        )
    return checks.check_foreign(counts, sent_by_tool)
