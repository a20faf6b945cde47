"""The README's first screen on a fresh machine: a new virtual environment with nothing in it, the checkout's own
files, and the README's first commands as written (`python3 -m pip install -e '.[test]' && make reproduce-br1`,
then `make test`), each through bash with the new environment first in PATH.

Nothing installed by hand can help: the environment is made here, and what it gets comes from pyproject.toml
(pip's cache may serve the downloads). The checkout is copied file by file from what git tracks or would
track, so no build output or environment of this checkout travels with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def first_screen(readme: str) -> list[str]:
    """The command lines of the README's first ```sh block, comments dropped."""
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line.split("   #", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_first_screen_is_the_install_then_the_tests() -> None:
    lines = first_screen((ROOT / "README.md").read_text())
    assert lines == ["python3 -m pip install -e '.[test]' && make reproduce-br1", "make test"], lines


def _checkout_files() -> list[str]:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [f for f in done.stdout.split("\0") if f and (ROOT / f).is_file()]


@pytest.mark.slow
@pytest.mark.xdist_group("readme")  # the README walkthrough's group: both want the lane's default ports
@pytest.mark.timeout(3600)
def test_the_first_screen_runs_green_in_a_fresh_virtual_environment(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("this test copies the checkout with git ls-files: run it in a git checkout with git installed")
    repo = tmp_path / "repo"
    for rel in _checkout_files():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, repo / rel)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")
        and not k.startswith("GB300LANE_")
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        GB300LANE_STATE_DIR=str(tmp_path / "state"),
        VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"),
    )
    log = []
    for line in first_screen((ROOT / "README.md").read_text()):
        t0 = time.monotonic()
        done = subprocess.run(["bash", "-c", line], cwd=repo, env=env, capture_output=True, text=True, timeout=3000)
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
        log.append(f"$ {line}: exit {done.returncode} in {time.monotonic() - t0:.0f} s; last line: {tail[0]}")
        assert done.returncode == 0, (
            "\n".join(log) + f"\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
    which = subprocess.run(
        ["bash", "-c", "command -v python3; python3 -c 'import gb300lane; print(gb300lane.__file__)'"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert which.stdout.splitlines() == [str(venv / "bin" / "python3"), str(repo / "gb300lane" / "__init__.py")], which
    print("\n".join(log))
