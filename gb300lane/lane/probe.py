"""Plain GETs to a lane: `/health`, `/v1/models`, `/version` and the one `/metrics` scraper.

This and the bench client (streamed completions) are the only code that
speaks HTTP to the engine. The async functions take the caller's session (a
bench window keeps one open for hours); the sync ones open their own. None
raises for a bad server: each returns the status and body, or why there is
none; `metrics_text` alone raises, for callers that need the text.

aiohttp is imported by the calls that use it, not with the module: `status`
asks each instance for `/health` with one plain stdlib GET and starts without
an event loop or aiohttp (and, with no instance running, without the HTTP
client or the SSH forwarder at all).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import Field, JsonValue

from gb300lane.errors import LaneError, MetricsError
from gb300lane.models import FrozenModel

if TYPE_CHECKING:
    import aiohttp


class Scrape(FrozenModel):
    """One /metrics scrape: the text, or why there is none."""

    text: str | None = Field(description="The body of GET /metrics when it answered 200.")
    reason: str | None = Field(description="Why there is no text (HTTP status or connection error).")


def _why(url: str, exc: BaseException) -> str:
    reason = getattr(exc, "os_error", None) or exc
    return (
        f"GET {url} failed: {type(exc).__name__}: {reason}"
        if str(reason)
        else f"GET {url} failed: {type(exc).__name__}"
    )


async def get(session: aiohttp.ClientSession, url: str, *, timeout_s: float | None = None) -> tuple[int | None, str]:
    """(HTTP status, body), or (None, why no response came)."""

    import aiohttp

    from gb300lane.runtime import ssh

    timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else None
    try:
        # A loopback URL on a remote box goes through an SSH forward; everything else as given.
        target = ssh.reach(url)
    except LaneError as exc:
        return None, f"GET {url} failed: {exc}"
    try:
        async with session.get(target, timeout=timeout) as resp:
            return resp.status, await resp.text(errors="replace")
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return None, _why(url, exc)


async def scrape_metrics(session: aiohttp.ClientSession, base_url: str, *, timeout_s: float = 10.0) -> Scrape:
    """GET `<base>/metrics`; a missing or failing endpoint gives a reason, not an exception."""
    url = f"{base_url}/metrics"
    status, body = await get(session, url, timeout_s=timeout_s)
    if status is None:
        return Scrape(text=None, reason=body)
    if status != 200:
        return Scrape(text=None, reason=f"GET {url} answered HTTP {status}")
    return Scrape(text=body, reason=None)


async def get_json(
    session: aiohttp.ClientSession, url: str, *, timeout_s: float = 10.0
) -> tuple[JsonValue, str | None]:
    """GET a JSON document (arbitrary JSON, for the caller to read); returns (body, None) or (None, reason)."""
    status, body = await get(session, url, timeout_s=timeout_s)
    if status is None:
        return None, body
    if status != 200:
        return None, f"GET {url} answered HTTP {status}"
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        return None, f"GET {url} failed: JSONDecodeError: {exc}"


async def get_status(session: aiohttp.ClientSession, url: str, *, timeout_s: float = 10.0) -> int | str:
    """The HTTP status of GET `url`, or why no response came."""
    status, body = await get(session, url, timeout_s=timeout_s)
    return body if status is None else status


def metrics_text(endpoint: str, *, timeout_s: float = 5.0) -> str:
    """The /metrics text; MetricsError naming the URL when it cannot be read."""

    import asyncio

    import aiohttp

    async def scrape() -> Scrape:
        async with aiohttp.ClientSession() as session:
            return await scrape_metrics(session, endpoint, timeout_s=timeout_s)

    got = asyncio.run(scrape())
    if got.text is None:
        raise MetricsError(f"{got.reason}; is the lane up? (`gb300lane status`)")
    return got.text


def engine_version(endpoint: str, *, timeout_s: float = 5.0) -> tuple[JsonValue, str | None]:
    """GET `/version`: (the engine's answer, None) or (None, why there is none)."""
    import asyncio

    import aiohttp

    async def ask() -> tuple[JsonValue, str | None]:
        async with aiohttp.ClientSession() as session:
            return await get_json(session, f"{endpoint}/version", timeout_s=timeout_s)

    return asyncio.run(ask())


def health(endpoint: str, *, timeout_s: float = 2.0) -> str:
    """`healthy`, `unhealthy (HTTP n)` or `unreachable` for status displays."""
    import http.client
    import urllib.error
    import urllib.request

    from gb300lane.runtime import ssh

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # as aiohttp: no proxy from the environment
    try:
        url = ssh.reach(f"{endpoint}/health")  # a dark lane on a remote box: through an SSH forward
    except LaneError:
        return "unreachable"
    try:
        with direct.open(url, timeout=timeout_s) as resp:
            status: int | None = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        status = None
    if status == 200:
        return "healthy"
    return f"unhealthy (HTTP {status})" if status is not None else "unreachable"
