"""Readiness strategies, the instance context manager, and the protected set `up`/`down` are handed.

Readiness is tested against a real local HTTP server (a thread on 127.0.0.1)
and a log the test writes; the context manager and protection on the process
runtime with the embedded engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp  # noqa: F401  (the readiness wait loads it on first use: loaded here, the timings below time the wait)
import pytest
import yaml

from gb300lane import lane
from gb300lane.errors import BootError, StateError
from gb300lane.lane import ContainerDied, Died, HttpReady, LogReady, Protected, ReadinessTimeout, wait_ready
from gb300lane.runtime import ProcessRuntime
from gb300lane.testing.free_ports import free_port


class _Server:
    """A tiny server whose /health status and /v1/models body a test can change."""

    def __init__(self) -> None:
        self.health = 503
        self.models = '{"data": []}'
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                status, body = (outer.health, "ok") if self.path == "/health" else (200, outer.models)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.close()


def test_http_readiness_waits_for_200_and_the_body(server: _Server) -> None:
    checks = [HttpReady(url=f"{server.url}/health"), HttpReady(url=f"{server.url}/v1/models", contains='"m1"')]

    def later() -> None:
        time.sleep(0.3)
        server.health = 200
        time.sleep(0.2)
        server.models = '{"data": [{"id": "m1"}]}'

    threading.Thread(target=later, daemon=True).start()
    seen: list[float] = []
    elapsed = wait_ready(checks, timeout_s=10, poll_s=0.02, progress=seen.append)
    assert 0.4 < elapsed < 10 and len(seen) > 3 and seen == sorted(seen)


def test_a_timeout_names_the_url_elapsed_limit_hint_and_log_tail(server: _Server) -> None:
    log = "\n".join(f"line {i}" for i in range(100))
    with pytest.raises(ReadinessTimeout) as exc:
        wait_ready([HttpReady(url=f"{server.url}/health")], timeout_s=0.3, poll_s=0.05,
                   logs=lambda _c: log, hint="pass --timeout")  # fmt: skip
    err = exc.value
    msg = str(err)
    assert msg.startswith(f"{server.url}/health not ready after ") and "(limit 0.3 s)" in msg
    assert f"GET {server.url}/health: HTTP 503" in msg and "hint: pass --timeout" in msg
    assert err.target == f"{server.url}/health" and err.limit_s == 0.3 and 0.3 <= err.elapsed_s < 5
    assert err.log_tail.splitlines() == [f"line {i}" for i in range(60, 100)] and "line 99" in msg


def test_an_unreachable_url_says_why(tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(ReadinessTimeout, match=rf"GET http://127.0.0.1:{port}/health: Client"):
        wait_ready([HttpReady(url=f"http://127.0.0.1:{port}/health")], timeout_s=0.2, poll_s=0.05)


def test_log_readiness_and_a_death_reported_at_once(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("starting\n")

    def later() -> None:
        time.sleep(0.2)
        with log.open("a") as fh:
            fh.write("INFO: Application startup complete.\n")

    threading.Thread(target=later, daemon=True).start()
    read = lambda _c: log.read_text()  # noqa: E731
    assert wait_ready([LogReady(pattern=r"startup complete\.$")], timeout_s=10, poll_s=0.02, logs=read) >= 0.15
    t0 = time.monotonic()
    with pytest.raises(ContainerDied) as exc:
        wait_ready([LogReady(pattern="never")], timeout_s=30, poll_s=0.02, logs=read,
                   watch=lambda: Died(description="x-main exited during boot (exit 1)", container="x-main"),
                   died_hint="the others were stopped")  # fmt: skip
    assert time.monotonic() - t0 < 5  # not after the 30 s limit
    assert str(exc.value).startswith("x-main exited during boot (exit 1); the others were stopped.")
    assert "startup complete" in exc.value.log_tail


def _recipe(folder: Path, name: str, **over: object) -> str:
    ports = [free_port(), free_port()]
    body: dict[str, object] = {
        "schema_version": 1, "name": name, "extends": "local-v27", "description": f"test recipe {name}",
        "lane": {"port": ports[0]}, "sidecar": {"port": ports[1], "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0},
    }  # fmt: skip
    body.update(over)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return name


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_instance_is_removed_after_the_block_even_when_it_raises(recipes: Path) -> None:
    name = _recipe(recipes, "t-cm")
    with pytest.raises(RuntimeError, match="inside the block"), lane.instance(name, dark=True) as booted:
        assert booted.instance == "local-t-cm" and booted.ok
        assert [i.state for i in lane.list_instances()] == ["running"]
        raise RuntimeError("inside the block")
    assert lane.list_instances() == [] and ProcessRuntime().list() == []


@pytest.mark.slow
def test_instance_tears_down_when_the_boot_fails(recipes: Path) -> None:
    name = _recipe(recipes, "t-cm-bad", model={"path": "no-such-model"})
    with pytest.raises(BootError, match="exited during boot"), lane.instance(name):
        pytest.fail("the block must not run when the boot fails")
    assert lane.list_instances() == [] and ProcessRuntime().list() == []
    # keep=True stops and keeps instead, for the logs.
    with pytest.raises(BootError), lane.instance(name, keep=True):
        pass
    [info] = lane.list_instances()
    assert info.state == "failed" and "serves only the builtin model" in lane.logs(name)


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_a_refused_boot_leaves_what_runs_alone(recipes: Path) -> None:
    name = _recipe(recipes, "t-cm-twice")
    with lane.instance(name) as first:
        with pytest.raises(StateError, match="already up"), lane.instance(name):
            pass
        assert lane.status().instances[0].health == "healthy" and first.instance == "local-t-cm-twice"
    assert lane.list_instances() == []


@pytest.mark.slow  # end to end: boots the engine as processes twice
def test_down_and_up_honour_the_protected_set(recipes: Path) -> None:
    name = _recipe(recipes, "t-prod")
    lane.up(name)
    lane.stop_instance("local-t-prod")
    held = Protected(instances={"local-t-prod": "rollback pair"})
    with pytest.raises(StateError, match="refusing to take down local-t-prod: it is the lane's rollback pair"):
        lane.down(name, protected=held)
    assert lane.down(all=True, protected=held) == []
    with pytest.raises(StateError, match="local-t-prod exists and booting it again would replace it"):
        lane.up(name, protected=held)
    unknown = Protected(unknown="promote.sqlite3 is corrupt; restore it")
    with pytest.raises(StateError, match="cannot be read: promote.sqlite3 is corrupt"):
        lane.down(all=True, protected=unknown)
    with pytest.raises(StateError, match="cannot be read"):
        lane.up(name, protected=unknown)
    # An instance that does not exist yet can boot while the set is unknown: nothing is replaced.
    other = _recipe(recipes, "t-new")
    with lane.instance(other, protected=unknown) as booted:
        assert booted.ok
    assert [i.name for i in lane.list_instances()] == ["local-t-prod"]
    assert lane.down(all=True) == ["local-t-prod"]
