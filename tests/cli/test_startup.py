"""`gb300lane --help` and `gb300lane status` start without the heavy libraries that only some commands use.

A correctness check of what is imported (Python's own `-X importtime` list), not a timing test: the cold start
itself is measured in benchmarks/cli.py.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main

from gb300lane.cli.main import GROUPS, app, app_for
from gb300lane.runtime import dockerhost

from fakes.dockerd import ping_only_engine

#: Loaded by the commands that need them (bench, cards, spec, the engine), never to print help or status.
HEAVY = ("numpy", "matplotlib", "aiohttp", "prometheus_client")


def imported_modules(*argv: str, **env: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """Every module the command imported, from `python -X importtime -m gb300lane ARGV` in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gb300lane", *argv],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
    )  # fmt: skip
    names = {
        line.split("|")[2].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2 and "imported package" not in line
    }
    return names, proc


@pytest.mark.parametrize("argv", [("--help",), ("status",), ("--version",)], ids=" ".join)
def test_cold_start_imports_no_heavy_library(argv: tuple[str, ...]) -> None:
    names, proc = imported_modules(*argv)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "gb300lane.cli.main" in names, "the importtime list was not read"
    heavy = sorted(n for n in names if n.split(".")[0] in HEAVY)
    assert not heavy, f"`gb300lane {' '.join(argv)}` imported {', '.join(heavy[:8])}"


def test_help_loads_no_model_library_either() -> None:
    # Help is the commands' names and options: no pydantic models, YAML, process table or Docker SDK behind it.
    names, proc = imported_modules("--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = sorted({n.split(".")[0] for n in names} & {"pydantic", "yaml", "psutil", "docker"})
    assert not loaded, f"`gb300lane --help` imported {', '.join(loaded)}"


def test_a_command_without_models_loads_no_model_library() -> None:
    # typer's own converters may load pydantic (0.29 builds an adapter per parameter); nothing else comes with it.
    names, proc = imported_modules("version", "--json")
    assert proc.returncode == 0 and '"version"' in proc.stdout, proc.stderr[-2000:]
    loaded = sorted({n.split(".")[0] for n in names} & {"yaml", "psutil", "docker", "requests", *HEAVY})
    assert not loaded, f"`gb300lane version --json` imported {', '.join(loaded)}"


def test_a_command_loads_only_its_own_command_module() -> None:
    # sys.modules at exit (importlib.import_module, which loads a command module, is not in the importtime list).
    code = (
        "import sys\nfrom gb300lane.cli.main import main\nsys.argv = ['gb300lane', 'status']\n"
        "try:\n    main()\nfinally:\n    print(' '.join(sys.modules), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "production:" in proc.stdout, proc.stderr[-2000:]
    loaded = proc.stderr.split()
    commands = {n.removeprefix("gb300lane.cli.") for n in loaded if n.startswith("gb300lane.cli.")}
    assert "lane" in commands and not commands & (set(GROUPS) - {"lane"}), sorted(commands)


def test_the_module_of_each_command_is_the_one_that_registers_it() -> None:
    for module, names in GROUPS.items():
        one = typer.Typer()
        importlib.import_module(f"gb300lane.cli.{module}").register(one)
        registered = {c.name for c in one.registered_commands} | {g.name for g in one.registered_groups}
        assert registered == set(names), module
    top = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert set(top) == {n for names in GROUPS.values() for n in names} | {"version"}
    for argv in (["status", "--json"], ["card", "run", "x"], ["engine-image", "build"], ["version"]):
        sub = typer.main.get_command(app_for(argv)).commands  # type: ignore[attr-defined]
        assert argv[0] in sub and len(sub) < len(top)
        assert sub[argv[0]].params.__len__() == top[argv[0]].params.__len__()
    for argv in ([], ["--version"], ["--help"], ["stauts"], ["--install-completion"]):
        assert app_for(argv) is app


def test_status_loads_the_docker_sdk_only_when_a_container_of_ours_may_exist(tmp_path: Path) -> None:
    # No instance on Docker: an engine that does not answer is reported without the SDK ...
    dead = tmp_path / "dead.sock"
    names, proc = imported_modules("status", DOCKER_HOST=f"unix://{dead}")
    assert proc.returncode == 0 and "does not answer" in proc.stderr, proc.stderr[-2000:]
    assert "docker" not in names and "requests" not in names
    sock = tmp_path / "docker.sock"
    with ping_only_engine(sock) as requests:
        # ... an engine that answers, on which no container of this state directory was created, too ...
        dockerhost.record_none(dockerhost.epoch(), sock)
        names, proc = imported_modules("status", DOCKER_HOST=f"unix://{sock}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "docker" not in names and "requests" not in names
        # Pinged only (status lists the instances, and production's witnesses list the running engines again).
        assert requests and set(requests) == {"GET /_ping HTTP/1.0\r\n"}, requests
        # ... and once one may have been created since, the SDK asks the engine for it.
        dockerhost.new_epoch()
        names, proc = imported_modules("status", DOCKER_HOST=f"unix://{sock}")
        assert "docker" in names and len(requests) > 2, proc.stderr[-2000:]


def test_the_check_sees_a_heavy_import() -> None:
    # The same reading of the importtime list does see numpy where a command loads it.
    names, proc = imported_modules("spec", "advise", "--a-p", "0.7,0.5", "--step", "1:10", "--step", "2:11")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "numpy" in names


def test_lazy_package_names_are_the_objects_even_after_their_submodule_loads() -> None:
    # A fresh interpreter: the submodule of the same name is imported before the package name is first read.
    code = """
import inspect, types
import gb300lane.lane.boot, gb300lane.lane.instance_scope, gb300lane.spec.acceptance
from gb300lane.lane import boot, instance
from gb300lane.spec import acceptance
import gb300lane.lane, gb300lane.promote, gb300lane.spec
assert inspect.isfunction(boot) and inspect.isfunction(acceptance) and not isinstance(instance, types.ModuleType)
assert gb300lane.lane.boot is boot
for pkg in (gb300lane.lane, gb300lane.promote, gb300lane.spec):
    assert set(pkg.__all__) <= set(dir(pkg))
    for name in pkg.__all__:
        assert not isinstance(getattr(pkg, name), types.ModuleType), (pkg.__name__, name)
try:
    gb300lane.lane.no_such_name
except AttributeError as exc:
    assert "no_such_name" in str(exc)
else:
    raise AssertionError("an unknown name resolved")
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
