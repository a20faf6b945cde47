"""The lane's HTTP probes: readiness (`/health` 200 and `/v1/models` lists the model) and /metrics scrapes.

This and the bench client are the only code that speaks HTTP to the engine.
The readiness wait is a strategy with a timeout and a poll interval; between
polls it asks a `watch` callable whether a container died, so a crash is
reported at once rather than after the timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
from pydantic import Field

from gb300lane.errors import MetricsError
from gb300lane.models import FrozenModel


class ReadyOutcome(FrozenModel):
    """How a readiness wait ended."""

    ready: bool = Field(description="Every URL answered as required.")
    elapsed_s: float = Field(description="Seconds from the start of the wait.")
    last_reason: str = Field(default="", description="Why the last poll was not ready.")
    died: str | None = Field(default=None, description="A container's exit description, when one died.")


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int | None, str]:
    try:
        async with session.get(url) as resp:
            return resp.status, await resp.text()
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _poll_once(session: aiohttp.ClientSession, endpoint: str, model: str, extra_health: list[str]) -> str:
    """'' when ready, else the reason it is not."""
    for url in [f"{endpoint}/health", *extra_health]:
        status, body = await _get(session, url)
        if status != 200:
            return f"GET {url}: " + (f"HTTP {status}" if status is not None else body)
    status, body = await _get(session, f"{endpoint}/v1/models")
    if status != 200:
        return f"GET {endpoint}/v1/models: " + (f"HTTP {status}" if status is not None else body)
    if f'"{model}"' not in body:
        return f"GET {endpoint}/v1/models does not list {model!r} yet"
    return ""


async def _wait(
    endpoint: str,
    model: str,
    extra_health: list[str],
    timeout_s: float,
    poll_s: float,
    watch: Callable[[], str | None],
    progress: Callable[[float], None] | None,
) -> ReadyOutcome:
    start = time.monotonic()
    reason = "not polled yet"
    timeout = aiohttp.ClientTimeout(total=max(1.0, min(5.0, poll_s * 20)))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            elapsed = time.monotonic() - start
            died = watch()
            if died:
                return ReadyOutcome(ready=False, elapsed_s=elapsed, last_reason=reason, died=died)
            reason = await _poll_once(session, endpoint, model, extra_health)
            elapsed = time.monotonic() - start
            if progress is not None:
                progress(elapsed)
            if not reason:
                return ReadyOutcome(ready=True, elapsed_s=elapsed)
            if elapsed >= timeout_s:
                return ReadyOutcome(ready=False, elapsed_s=elapsed, last_reason=reason)
            await asyncio.sleep(poll_s)


def wait_ready(
    endpoint: str,
    model: str,
    *,
    extra_health: list[str] | None = None,
    timeout_s: float,
    poll_s: float = 0.05,
    watch: Callable[[], str | None] = lambda: None,
    progress: Callable[[float], None] | None = None,
) -> ReadyOutcome:
    """Poll until ready, a container dies, or the timeout passes."""
    return asyncio.run(_wait(endpoint, model, list(extra_health or []), timeout_s, poll_s, watch, progress))


async def _fetch(url: str, timeout_s: float) -> tuple[int | None, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        return await _get(session, url)


def scrape_metrics(endpoint: str, *, timeout_s: float = 5.0) -> str:
    """The /metrics text; MetricsError naming the URL when it cannot be read."""
    url = f"{endpoint}/metrics"
    status, body = asyncio.run(_fetch(url, timeout_s))
    if status != 200:
        raise MetricsError(
            f"GET {url}: {f'HTTP {status}' if status is not None else body}; is the lane up? (`gb300lane status`)"
        )
    return body


def health(endpoint: str, *, timeout_s: float = 2.0) -> str:
    """`healthy`, `unhealthy (HTTP n)` or `unreachable` for status displays."""
    status, _ = asyncio.run(_fetch(f"{endpoint}/health", timeout_s))
    if status == 200:
        return "healthy"
    return f"unhealthy (HTTP {status})" if status is not None else "unreachable"
