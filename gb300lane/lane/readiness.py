"""Readiness: when is a started lane ready to serve, and what to say when it never is.

A readiness check is a strategy object: `HttpReady` (GET a URL until it answers
200, optionally with a body that names something, such as the served model
in `/v1/models`) or `LogReady` (a regex found in the container's log).
`wait_ready` polls every check at `poll_s` until all hold, within a startup
limit; between polls it asks `watch` whether a container died, so a crash is
reported at once. A timeout raises `ReadinessTimeout` naming the URL (or the
log pattern), the elapsed time and the limit, with a hint and the log tail;
a death raises `ContainerDied` with the dead container's log tail. `up`, the
instance context manager (which cards use) and tests share this one wait.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from gb300lane.errors import BootError
from gb300lane.lane.probe import get
from gb300lane.models import FrozenModel

if TYPE_CHECKING:  # aiohttp is imported when a wait starts, not with the lane package
    import aiohttp

#: Log lines a readiness error carries.
LOG_TAIL_LINES = 40


class HttpReady(FrozenModel):
    """Ready when GET `url` answers `status` (and its body contains `contains`, when given)."""

    kind: Literal["http"] = Field(default="http", description="Strategy kind.")
    url: str = Field(description="URL polled, e.g. http://127.0.0.1:30106/health.")
    status: int = Field(default=200, description="HTTP status that means ready.")
    contains: str | None = Field(default=None, description="Text the body must contain, e.g. '\"local-v27\"'.")

    @property
    def target(self) -> str:
        return self.url


class LogReady(FrozenModel):
    """Ready when the container's log (since this start) matches `pattern`."""

    kind: Literal["log"] = Field(default="log", description="Strategy kind.")
    pattern: str = Field(description="Regular expression searched in the log, e.g. 'Application startup complete'.")

    @property
    def target(self) -> str:
        return f"log line /{self.pattern}/"


Readiness = HttpReady | LogReady


class Died(FrozenModel):
    """A container that exited while the lane was starting."""

    description: str = Field(description="What happened, e.g. 'lane-v27-main exited during boot (exit 1)'.")
    container: str | None = Field(default=None, description="The container whose log explains it (None: the main one).")


class ReadinessTimeout(BootError):
    """The lane did not become ready within its startup limit."""

    def __init__(self, message: str, *, target: str, elapsed_s: float, limit_s: float, log_tail: str) -> None:
        super().__init__(message, log_tail=log_tail)
        self.target = target
        self.elapsed_s = elapsed_s
        self.limit_s = limit_s


class ContainerDied(BootError):
    """A container exited while the lane was starting."""


LogSource = Callable[[str | None], str]
"""(container, or None for the main one) -> that container's log since this start."""


def _tail(text: str, n: int = LOG_TAIL_LINES) -> str:
    lines = text.splitlines()[-n:]
    return "\n".join(lines) + ("\n" if lines else "")


async def _check(session: aiohttp.ClientSession, check: Readiness, logs: LogSource, timeout_s: float) -> str:
    """'' when the check holds, else why it does not yet."""
    if isinstance(check, LogReady):
        return (
            "" if re.search(check.pattern, logs(None), re.MULTILINE) else f"no log line matches /{check.pattern}/ yet"
        )
    status, body = await get(session, check.url, timeout_s=timeout_s)
    if status is None:
        return f"GET {check.url}: {body.removeprefix(f'GET {check.url} failed: ')}"
    if status != check.status:
        return f"GET {check.url}: HTTP {status}"
    if check.contains is not None and check.contains not in body:
        return f"GET {check.url} does not list {check.contains} yet"
    return ""


async def _wait(
    checks: Sequence[Readiness],
    timeout_s: float,
    poll_s: float,
    logs: LogSource,
    watch: Callable[[], Died | None],
    progress: Callable[[float], None] | None,
) -> tuple[float, str, Readiness | None, Died | None]:
    """(elapsed, reason, the check that failed last, a death): reason '' means ready."""
    start = time.monotonic()  # the caller's clock: loading the HTTP client is part of the wait
    import aiohttp

    reason, failing = "not polled yet", checks[0] if checks else None
    per_get = max(1.0, min(5.0, poll_s * 20))
    async with aiohttp.ClientSession() as session:
        while True:
            died = watch()
            if died is not None:
                return time.monotonic() - start, reason, failing, died
            reason, failing = "", None
            for check in checks:
                reason = await _check(session, check, logs, per_get)
                if reason:
                    failing = check
                    break
            elapsed = time.monotonic() - start
            if progress is not None:
                progress(elapsed)
            if not reason or elapsed >= timeout_s:
                return elapsed, reason, failing, None
            await asyncio.sleep(poll_s)


def wait_ready(
    checks: Sequence[Readiness],
    *,
    timeout_s: float,
    poll_s: float = 0.05,
    logs: LogSource = lambda _container: "",
    watch: Callable[[], Died | None] = lambda: None,
    progress: Callable[[float], None] | None = None,
    hint: str = "",
    died_hint: str = "",
) -> float:
    """Poll until every check holds; returns the seconds it took.

    Raises `ReadinessTimeout` after `timeout_s` and `ContainerDied` as soon as
    `watch` reports a death; both carry the relevant log tail.
    """
    elapsed, reason, failing, died = asyncio.run(_wait(checks, timeout_s, poll_s, logs, watch, progress))
    if died is not None:
        tail = _tail(logs(died.container))
        who = f" of {died.container}" if died.container else ""
        raise ContainerDied(
            f"{died.description}{'; ' + died_hint if died_hint else ''}.\nlast {LOG_TAIL_LINES} log lines{who}:\n{tail}",
            log_tail=tail,
        )
    if reason:
        tail = _tail(logs(None))
        target = failing.target if failing is not None else "the lane"
        raise ReadinessTimeout(
            f"{target} not ready after {elapsed:.1f} s (limit {timeout_s:g} s): {reason}"
            f"{'; hint: ' + hint if hint else ''}\nlast {LOG_TAIL_LINES} log lines:\n{tail}",
            target=target, elapsed_s=elapsed, limit_s=timeout_s, log_tail=tail,
        )  # fmt: skip
    return elapsed
