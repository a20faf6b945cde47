"""Test isolation and the component markers.

Every test gets its own state directory, results directory and vLLM cache root,
so no test sees another's lane; a test of the fast tier also gets a DOCKER_HOST
where nothing answers, so it never sees this machine's containers. Tests marked `docker` need a Docker engine,
tests marked `compose` need `docker compose` or `docker-compose`, tests marked
`podman` need podman: where the component is missing they fail with a message
that says so, unless the skip variable (GB300LANE_SKIP_DOCKER=1,
GB300LANE_SKIP_COMPOSE=1, GB300LANE_SKIP_PODMAN=1) is set, in which case they
are skipped.

Two tiers. `make test` runs every test that needs nothing but Python (`-m "not integration"`).
`make test-integration` runs the rest (`-m integration`): this file adds the `integration` marker
to every test that carries a component marker (docker, compose, podman, mounts, chromium,
prometheus, aarch64, real_vllm, registry), starts an OpenSSH server (the `ssh_server` fixture) or is an end-to-end run marked
`slow`. CI runs both.

Tests live in `tests/<package>/test_<module>.py` (new ones; the flat `tests/test_*.py` files move there), each
folder with an empty `__init__.py`: pytest's default `prepend` import mode puts `tests/` on sys.path (the
helpers `fakes`, `engines`, `clirun` import from it) and names a test module by its folder, so two folders may
hold the same basename (`tests/house/test_layout.py` checks every folder is a package).

Both run in parallel (pytest-xdist, `--dist loadgroup`): Docker tests run one at a time on one
worker, podman tests likewise; every other test owns its state directory, its ports
(`gb300lane.testing.free_ports.free_port`) and its files, so it may run beside any other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

_docker_state: dict[str, str | None] = {}
_podman_state: dict[str, str | None] = {}


def _docker_problem() -> str | None:
    if "problem" not in _docker_state:
        try:
            import docker

            client = docker.from_env(timeout=10)
            client.ping()
            client.close()
            _docker_state["problem"] = None
        except Exception as exc:  # noqa: BLE001 - any failure to reach the engine is the problem to report
            _docker_state["problem"] = f"{type(exc).__name__}: {exc}"
    return _docker_state["problem"]


def _compose_problem() -> str | None:
    if shutil.which("docker-compose"):
        return None
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return None
    return "neither `docker compose` (the v2 plugin) nor `docker-compose` is installed"


def _podman_problem() -> str | None:
    if "problem" not in _podman_state:
        if shutil.which("podman") is None:
            _podman_state["problem"] = "podman is not installed"
        else:
            try:
                probe = subprocess.run(
                    ["podman", "info", "--format", "{{.Version.Version}}"], capture_output=True, text=True, timeout=60
                )
                _podman_state["problem"] = None if probe.returncode == 0 else probe.stderr.strip()[-500:]
            except (OSError, subprocess.TimeoutExpired) as exc:
                _podman_state["problem"] = f"{type(exc).__name__}: {exc}"
    return _podman_state["problem"]


def _mounts_problem() -> str | None:
    """Whether this process may make a private mount namespace with a tmpfs (root, or CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    try:
        probe = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if probe.returncode == 0 else (probe.stderr.strip() or f"exit {probe.returncode}")[-300:]


def _chromium_problem() -> str | None:
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        return "chromium is not installed"
    return None


def _prometheus_problem() -> str | None:
    return None if shutil.which("prometheus") else "prometheus is not installed"


def _aarch64_problem() -> str | None:
    missing = [
        tool for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64-static", "gcc", "file") if shutil.which(tool) is None
    ]
    return f"{', '.join(missing)} not installed" if missing else None


def _real_vllm_problem() -> str | None:
    base = Path(os.environ.get("GB300LANE_REAL_LANE_DIR") or Path.home() / ".cache/gb300lane/real-lane")
    python = base / "venv" / "bin" / "python"
    if not python.is_file():
        return f"the real lane is not installed ({python} is missing)"
    if not (base / "models" / "manifest.json").is_file():
        return f"the real lane's models are not built ({base / 'models' / 'manifest.json'} is missing)"
    return None


def _registry_problem() -> str | None:
    return None if shutil.which("docker-registry") else "Debian's docker-registry is not installed"


#: marker -> (skip variable, what to install, probe returning the problem or None)
_COMPONENTS = {
    "docker": ("GB300LANE_SKIP_DOCKER", "start the engine", _docker_problem),
    "compose": ("GB300LANE_SKIP_COMPOSE", "install docker-compose (apt-get install docker-compose)", _compose_problem),
    "podman": ("GB300LANE_SKIP_PODMAN", "install Debian's podman and catatonit (bash .ci/run does)", _podman_problem),
    "mounts": ("GB300LANE_SKIP_MOUNTS", "run as root (unshare -m and mount -t tmpfs)", _mounts_problem),
    "chromium": ("GB300LANE_SKIP_CHROMIUM", "install Debian's chromium (bash .ci/run does)", _chromium_problem),
    "prometheus": ("GB300LANE_SKIP_PROMETHEUS", "install Debian's prometheus (bash .ci/run does)", _prometheus_problem),
    "aarch64": (
        "GB300LANE_SKIP_AARCH64",
        "install Debian's gcc-aarch64-linux-gnu and qemu-user-static "
        "(apt-get install gcc-aarch64-linux-gnu qemu-user-static file; bash .ci/run does)",
        _aarch64_problem,
    ),
    "real_vllm": ("GB300LANE_SKIP_REAL_VLLM", "run `make real-lane` (scripts/real_lane.sh)", _real_vllm_problem),
    "registry": (
        "GB300LANE_SKIP_REGISTRY",
        "install Debian's docker-registry (apt-get install docker-registry; bash .ci/run does)",
        _registry_problem,
    ),
}


#: Markers whose tests share something machine-wide (Docker's container names and host ports, podman's
#: network namespaces and images): under pytest-xdist (`--dist loadgroup`) each set runs on one worker, in order.
_SERIAL_GROUPS = {"docker": "docker", "podman": "podman", "real_vllm": "real_vllm"}


# A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment (set by the terminal library
# in the worker, not by the user); the CLI's consoles read COLUMNS, so a worker would see a terminal that is
# not there. Each worker gets the controller's values back.
_TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # xdist, on the controller
    node.workerinput["gb300lane_terminal_env"] = {k: os.environ.get(k) for k in _TERMINAL_ENV}


def pytest_configure(config: pytest.Config) -> None:
    given = getattr(config, "workerinput", {}).get("gb300lane_terminal_env")
    for key, value in (given or {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


#: What puts a test in the integration tier (`make test-integration`): a component marker, an OpenSSH
#: server (the `ssh_server` fixture), or `slow` (an end-to-end run). Everything else needs only Python.
_INTEGRATION_MARKERS = (*_COMPONENTS, "slow")
_INTEGRATION_FIXTURES = ("ssh_server",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(m) is not None for m in _INTEGRATION_MARKERS) or any(
            f in getattr(item, "fixturenames", ()) for f in _INTEGRATION_FIXTURES
        ):
            item.add_marker(pytest.mark.integration)
        for marker, group in _SERIAL_GROUPS.items():
            if item.get_closest_marker(marker) is not None and item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(group))
                break


def pytest_runtest_setup(item: pytest.Item) -> None:
    needed = [(m, c) for m, c in _COMPONENTS.items() if item.get_closest_marker(m) is not None]
    # A skip variable for any component the test needs skips it before anything is probed.
    for marker, (skip_var, _fix, _probe) in needed:
        if os.environ.get(skip_var) == "1":
            pytest.skip(f"{skip_var}=1: {marker} tests skipped")
    for marker, (skip_var, fix, probe) in needed:
        problem = probe()
        if problem:
            where = (
                f" (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')})"
                if marker == "docker"
                else ""
            )
            pytest.fail(
                f"this test needs {marker} and it does not answer{where}: {problem}; "
                f"{fix}, or set {skip_var}=1 to skip {marker} tests",
                pytrace=False,
            )


@pytest.fixture(autouse=True)
def _isolated_lane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    base = tmp_path_factory.mktemp("lane")
    monkeypatch.setenv("GB300LANE_STATE_DIR", str(base / "state"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(base / "vllm-cache"))
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(base / "results"))
    # The signing key and its allowed signers live in the user's config directory: every test has its own.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    if request.node.get_closest_marker("integration") is None:
        # The fast tier needs no Docker, and must not see this machine's: the lane lists every labelled
        # container the engine answers for, so a lane someone runs here would show up in every status.
        monkeypatch.setenv("DOCKER_HOST", f"unix://{base / 'no-docker.sock'}")


@pytest.fixture
def recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A writable copy of the shipped recipes as GB300LANE_RECIPES_DIR; every lane it booted is taken down after."""
    from gb300lane import lane, paths

    folder = tmp_path / "recipes"
    folder.mkdir()
    for f in (paths.shipped("recipes")).glob("*.yaml"):
        shutil.copy(f, folder / f.name)
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(folder))
    yield folder
    lane.down(all=True)


@pytest.fixture
def ssh_server(tmp_path_factory: pytest.TempPathFactory):
    """An sshd on a loopback port with a generated key: `ssh://root@127.0.0.1:PORT` reaches this machine."""
    import sshd

    why = sshd.problem()
    if why:
        if os.environ.get("GB300LANE_SKIP_DOCKER") == "1":
            pytest.skip(f"GB300LANE_SKIP_DOCKER=1 and {why}")
        pytest.fail(f"this test needs an OpenSSH server: {why}", pytrace=False)
    server, proc = sshd.start(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=10)
