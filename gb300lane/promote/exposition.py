"""The lane's own facts in Prometheus text format, for node_exporter's textfile collector.

What the engine's /metrics cannot say, because it lives in the lane's state:
which recipe serves production (recipe and fingerprint as labels), the kept
rollback pair, an unfinished transition, the ledger's promotions, rollbacks
and failures, every card's newest verdict, boot seconds and compile-cache
hits and misses from the hash ledger. The families are built by a
prometheus_client collector at each collection and written with its own
exposition (`generate_latest`, or `write_to_textfile`, which writes a temp
file and renames it, as the textfile collector needs). A source that cannot
be read is reported as `gb300lane_facts_up{source=...} 0` rather than
failing the export: a monitor should see the lane's state is unreadable.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import get_args

from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from gb300lane.cards.record.receipts import all_receipts
from gb300lane.cards.record.verdicts import newest_verdict
from gb300lane.errors import LaneError
from gb300lane.lane import hash_ledger as hash_ledger
from gb300lane.promote.housekeeping import history
from gb300lane.promote.models import EventKind
from gb300lane.promote.state import current_production

_STATUSES = ("PASS", "FAIL", "INCONCLUSIVE")


def _unix(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LaneFactsCollector(Collector):
    """Reads the lane's state at every collection; see the module docstring for the families."""

    def __init__(self, *, results_dir: Path | None = None) -> None:
        self.results_dir = results_dir

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "gb300lane_facts_up", "1 when the lane's state source could be read, 0 when not.", labels=["source"]
        )
        yield from self._production(up)
        yield from self._events(up)
        yield from self._verdicts(up)
        yield from self._boots(up)
        yield up
        yield GaugeMetricFamily(
            "gb300lane_facts_timestamp_seconds", "When these facts were read (unix time).", value=time.time()
        )

    def _production(self, up: GaugeMetricFamily) -> Iterator[Metric]:
        try:
            state = current_production()
        except LaneError:
            up.add_metric(["promotion_ledger"], 0)
            return
        up.add_metric(["promotion_ledger"], 1)
        info = InfoMetricFamily(
            "gb300lane_production",
            "The recipe serving production.",
            labels=["recipe", "fingerprint", "instance", "endpoint"],
        )
        since = GaugeMetricFamily("gb300lane_production_since_seconds", "When production took its recipe (unix time).")
        pair = InfoMetricFamily(
            "gb300lane_rollback_pair",
            "The stopped-and-kept pair `rollback` restores.",
            labels=["recipe", "fingerprint", "instance"],
        )
        unfinished = GaugeMetricFamily(
            "gb300lane_transition_unfinished",
            "1 while a promotion, rollback or prune has begun and not been recorded as finished.",
            labels=["kind", "crashed"],
        )
        if state is not None and state.recipe:
            info.add_metric([state.recipe, state.fingerprint or "", state.instance or "", state.endpoint or ""], {})
            if (t := _unix(state.since)) is not None:
                since.add_metric([], t)
        if state is not None and state.rollback_pair is not None:
            p = state.rollback_pair
            pair.add_metric([p.recipe, p.fingerprint, p.instance], {})
        if state is not None and state.in_flight is not None:
            unfinished.add_metric([state.in_flight.kind, str(state.in_flight.crashed).lower()], 1)
        else:
            unfinished.add_metric(["none", "false"], 0)
        yield from (info, since, pair, unfinished)

    def _events(self, up: GaugeMetricFamily) -> Iterator[Metric]:
        try:
            events = history()
        except LaneError:
            return  # promotion_ledger is already reported down
        counts = Counter(e.kind for e in events)
        total = CounterMetricFamily(
            "gb300lane_ledger_events",
            "Promotions, rollbacks, failures, recoveries and prunes recorded in the promotion ledger.",
            labels=["kind"],
        )
        last = GaugeMetricFamily(
            "gb300lane_ledger_event_last_timestamp_seconds",
            "When the newest event of each kind was recorded (unix time).",
            labels=["kind", "recipe"],
        )
        for kind in get_args(EventKind):
            total.add_metric([kind], counts.get(kind, 0))
        newest = {e.kind: e for e in events}
        for kind, e in sorted(newest.items()):
            if (t := _unix(e.at)) is not None:
                last.add_metric([kind, e.recipe or ""], t)
        yield from (total, last)

    def _verdicts(self, up: GaugeMetricFamily) -> Iterator[Metric]:
        verdict = GaugeMetricFamily(
            "gb300lane_card_verdict",
            "Each card's newest verdict: 1 on the series whose verdict label it is.",
            labels=["card", "candidate_recipe", "control_recipe", "verdict", "transcribed"],
        )
        number = GaugeMetricFamily(
            "gb300lane_card_verdict_number",
            "The newest verdict's number (1 pre-registered, 2.. re-scores).",
            labels=["card"],
        )
        by_status = GaugeMetricFamily(
            "gb300lane_cards_by_verdict", "Cards whose newest verdict is each status.", labels=["verdict"]
        )
        counts: Counter[str] = Counter()
        ok = 1
        for rec in all_receipts(self.results_dir):
            try:
                ref = newest_verdict(rec)
            except (LaneError, OSError, ValueError):
                ok = 0
                continue
            if ref is None:
                continue
            counts[ref.verdict] += 1
            for status in _STATUSES:
                verdict.add_metric(
                    [ref.card, ref.candidate_recipe, ref.control_recipe, status, str(ref.transcribed).lower()],
                    1 if status == ref.verdict else 0,
                )
            number.add_metric([ref.card], ref.number)
        for status in _STATUSES:
            by_status.add_metric([status], counts.get(status, 0))
        up.add_metric(["cards"], ok)
        yield from (verdict, number, by_status)

    def _boots(self, up: GaugeMetricFamily) -> Iterator[Metric]:
        try:
            ledger = hash_ledger.load()
        except LaneError:
            up.add_metric(["hash_ledger"], 0)
            return
        up.add_metric(["hash_ledger"], 1)
        last = GaugeMetricFamily(
            "gb300lane_boot_seconds",
            "The newest recorded boot of each fingerprint: containers started to ready, seconds.",
            labels=["fingerprint", "outcome"],
        )
        boots = GaugeMetricFamily(
            "gb300lane_boots_recorded",
            "Boots kept in the hash ledger (the most recent per "
            "fingerprint) by compile-cache outcome: hit, miss or unknown.",
            labels=["fingerprint", "outcome"],
        )
        for fp, entry in sorted(ledger.fingerprints.items()):
            if entry.boots:
                newest = entry.boots[-1]
                last.add_metric([fp, newest.outcome], newest.seconds)
            counts = Counter(b.outcome for b in entry.boots)
            for outcome in ("hit", "miss", "unknown"):
                boots.add_metric([fp, outcome], counts.get(outcome, 0))
        yield from (last, boots)


def lane_registry(*, results_dir: Path | None = None) -> CollectorRegistry:
    """A registry holding only the lane's facts."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LaneFactsCollector(results_dir=results_dir))
    return registry


def lane_facts_text(*, results_dir: Path | None = None) -> str:
    """The lane's facts in Prometheus text format."""
    return generate_latest(lane_registry(results_dir=results_dir)).decode("utf-8")


def write_textfile(path: Path, *, results_dir: Path | None = None) -> Path:
    """Write the facts for node_exporter's textfile collector (temp file + rename, as it needs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), lane_registry(results_dir=results_dir))
    return path
