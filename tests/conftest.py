"""Test isolation and the `docker` marker.

Every test gets its own state directory, results directory and vLLM cache root,
so no test sees another's lane. Tests marked `docker` need a Docker engine:
where none answers they fail with a message that says so, unless
GB300LANE_SKIP_DOCKER=1 is set, in which case they are skipped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

_docker_state: dict[str, str | None] = {}


def _docker_problem() -> str | None:
    if "problem" not in _docker_state:
        try:
            import docker

            client = docker.from_env(timeout=10)
            client.ping()
            client.close()
            _docker_state["problem"] = None
        except Exception as exc:  # any failure to reach the engine
            _docker_state["problem"] = f"{type(exc).__name__}: {exc}"
    return _docker_state["problem"]


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker") is None:
        return
    if os.environ.get("GB300LANE_SKIP_DOCKER") == "1":
        pytest.skip("GB300LANE_SKIP_DOCKER=1: Docker tests skipped")
    problem = _docker_problem()
    if problem:
        pytest.fail(
            "this test needs a Docker engine and none answers "
            f"(DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}: {problem}); "
            "start the engine, or set GB300LANE_SKIP_DOCKER=1 to skip Docker tests",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _isolated_lane(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path_factory.mktemp("lane")
    monkeypatch.setenv("GB300LANE_STATE_DIR", str(base / "state"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(base / "vllm-cache"))
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(base / "results"))


@pytest.fixture
def recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A writable copy of the shipped recipes as GB300LANE_RECIPES_DIR; every lane it booted is taken down after."""
    from gb300lane import lane, paths

    folder = tmp_path / "recipes"
    folder.mkdir()
    for f in (paths.PROJECT_ROOT / "recipes").glob("*.yaml"):
        shutil.copy(f, folder / f.name)
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(folder))
    yield folder
    lane.down(all=True)
