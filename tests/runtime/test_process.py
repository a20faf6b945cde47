"""The process runtime: records survive the process that wrote them, kept means restartable, stale pids are seen."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from gb300lane.errors import BootError, StateError
from gb300lane.runtime import get_runtime
from gb300lane.runtime.process import _CHILDREN, ProcessRuntime

SCRIPT = "import os, sys, time; print('hello from', os.environ['GREETING'], sys.argv[1:], flush=True); time.sleep(60)"


def _spec(name: str, **over: object) -> SimpleNamespace:
    base = dict(
        role="main", name=name, image="gb300lane-engine:local",
        argv=("python3", "-c", SCRIPT, "--flag", "x"), env={"GREETING": "lane", "HF_TOKEN": "t0"},
        network_mode="host", device_ids=(), ipc_mode=None, shm_size=None, ulimits={}, volumes=(),
        labels={"gb300lane.lane": "t", "gb300lane.instance": "t-a", "gb300lane.role": "main"}, port=1,
    )  # fmt: skip
    base.update(over)
    return SimpleNamespace(**base)


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture
def rt():  # type: ignore[no-untyped-def]
    runtime = ProcessRuntime()
    yield runtime
    for info in runtime.list():
        runtime.remove(info.name)


def test_lifecycle_create_start_stop_keep_restart_remove(rt: ProcessRuntime) -> None:
    created = rt.create(_spec("t-a-main"))
    assert created.state == "created" and created.argv[0] == sys.executable
    info = rt.start("t-a-main")
    assert info.state == "running" and info.pid
    _wait_for(lambda: "hello from lane" in rt.logs("t-a-main"))
    live = rt.inspect("t-a-main")
    # Args and env come from the kernel while running, not from the record.
    assert live.argv[-2:] == ("--flag", "x") and live.env["GREETING"] == "lane"
    assert set(live.env) == set(rt.base_env()) | {"GREETING", "HF_TOKEN"}
    stopped = rt.stop("t-a-main", timeout_s=5)
    assert stopped.state == "exited" and stopped.pid is None
    assert not psutil.pid_exists(info.pid) or psutil.Process(info.pid).status() == psutil.STATUS_ZOMBIE
    # Kept: a fresh runtime object (a later CLI call) still knows it and can start it again.
    later = ProcessRuntime()
    assert later.inspect("t-a-main").state == "exited"
    first_start = later.inspect("t-a-main").started_at
    again = later.start("t-a-main")
    assert again.state == "running" and again.pid != info.pid
    _wait_for(lambda: later.logs("t-a-main", since=again.started_at).count("hello from") == 1)
    assert later.logs("t-a-main").count("hello from") == 2
    assert first_start is not None
    later.remove("t-a-main")
    assert later.inspect("t-a-main").state == "missing"
    assert later.list() == []


def test_labels_filter_and_duplicate_names(rt: ProcessRuntime) -> None:
    rt.create(_spec("t-a-main"))
    rt.create(_spec("t-b-main", labels={"gb300lane.lane": "t", "gb300lane.instance": "t-b"}))
    assert [i.name for i in rt.list({"gb300lane.instance": "t-b"})] == ["t-b-main"]
    assert len(rt.list({"gb300lane.lane": "t"})) == 2
    with pytest.raises(BootError, match="already exists"):
        rt.create(_spec("t-a-main"))
    with pytest.raises(StateError, match="no process container"):
        rt.start("nope")


def test_a_process_that_dies_unwatched_is_reported_exited(rt: ProcessRuntime) -> None:
    rt.create(_spec("t-a-main"))
    pid = rt.start("t-a-main").pid
    assert pid is not None
    # Forget the in-process handle, as a later CLI invocation would not have it.
    child = _CHILDREN.pop(pid)
    os.kill(pid, signal.SIGKILL)
    child.wait(timeout=10)
    info = ProcessRuntime().inspect("t-a-main")
    assert info.state == "exited" and info.exit_code is None
    assert "gone" in info.detail and "status unknown" in info.detail


def test_a_reused_pid_is_not_taken_for_the_container(rt: ProcessRuntime) -> None:
    """A record whose pid now names a later process (here: this test's own) reads as exited, and stop leaves it be."""
    rt.create(_spec("t-a-main"))
    rt.start("t-a-main")
    path = rt.root / "t-a-main.json"
    rec = json.loads(path.read_text())
    real = rec["pid"]
    me = psutil.Process()
    rec.update(pid=me.pid, pid_created=me.create_time() - 100.0)  # same pid, an earlier process's start
    path.write_text(json.dumps(rec))
    info = ProcessRuntime().inspect("t-a-main")
    assert info.state == "exited" and f"pid {me.pid} is gone" in info.detail
    assert ProcessRuntime().stop("t-a-main").state == "exited" and me.is_running()
    os.killpg(real, signal.SIGKILL)
    _CHILDREN.pop(real).wait(timeout=10)


def test_stop_ends_descendants_that_left_the_process_group(rt: ProcessRuntime) -> None:
    """A child in its own session is out of reach of the group signal; psutil's process tree still finds it."""
    script = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print('child', c.pid, flush=True); time.sleep(60)"
    )
    rt.create(_spec("t-a-main", argv=("python3", "-c", script)))
    rt.start("t-a-main")
    _wait_for(lambda: "child " in rt.logs("t-a-main"))
    grandchild = psutil.Process(int(rt.logs("t-a-main").split()[1]))
    assert os.getpgid(grandchild.pid) != os.getpgid(rt.inspect("t-a-main").pid or 0)
    rt.stop("t-a-main", timeout_s=5)
    _wait_for(lambda: _gone(grandchild))  # ended (a zombie until whoever adopted it reaps it)


def test_exit_status_is_known_when_watched(rt: ProcessRuntime) -> None:
    rt.create(_spec("t-a-main", argv=("python3", "-c", "raise SystemExit(3)")))
    rt.start("t-a-main")
    _wait_for(lambda: rt.inspect("t-a-main").state == "exited")
    info = rt.inspect("t-a-main")
    assert info.exit_code == 3 and "status 3" in info.detail


def test_device_ids_become_cuda_visible_devices(rt: ProcessRuntime) -> None:
    info = rt.create(_spec("t-a-main", device_ids=("0", "1")))
    assert info.env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_unknown_runtime_name() -> None:
    with pytest.raises(Exception, match="unknown runtime 'podman'"):
        get_runtime("podman")


def test_follow_yields_every_line_until_the_process_exits(rt: ProcessRuntime) -> None:
    script = "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.05)"
    rt.create(_spec("t-a-main", argv=("python3", "-c", script)))
    rt.start("t-a-main")
    assert list(rt.follow("t-a-main")) == ["line 0", "line 1", "line 2"]
    assert list(rt.follow("t-a-main", tail=1)) == ["line 2"]


def test_a_mounted_path_in_the_env_names_the_host_source(rt: ProcessRuntime, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No mount namespace: VLLM_CACHE_ROOT=/cache/vllm under a `src:/cache/vllm` mount reaches the process as src."""
    src = tmp_path / "cache"
    show = "import os, time; print(os.environ['VLLM_CACHE_ROOT'], flush=True); time.sleep(60)"
    spec = _spec(
        "t-mnt", argv=("python3", "-c", show),
        env={"VLLM_CACHE_ROOT": "/cache/vllm", "SUB": "/cache/vllm/x/y", "NEAR": "/cache/vllmx", "N": "10"},
        volumes=(f"{src}:/cache/vllm", f"{tmp_path}/models:/models:ro", "named:/named"),
    )  # fmt: skip
    rt.create(spec)
    rt.start("t-mnt")
    _wait_for(lambda: str(src) in rt.logs("t-mnt"))
    env = rt.inspect("t-mnt").env
    assert env["VLLM_CACHE_ROOT"] == str(src) and env["SUB"] == f"{src}/x/y"
    assert env["NEAR"] == "/cache/vllmx" and env["N"] == "10"
    assert rt.host_path(spec, "/cache/vllm") == src  # type: ignore[arg-type]
    assert rt.host_path(spec, "/models/m") == tmp_path / "models" / "m"  # type: ignore[arg-type]
    # A named volume has no host path a process could use; an unmounted path is the host's own.
    assert rt.host_path(spec, "/named/a") == Path("/named/a")  # type: ignore[arg-type]
    assert rt.host_path(spec, "/root/.cache/vllm") == Path("/root/.cache/vllm")  # type: ignore[arg-type]


def test_local_recipes_mount_the_per_user_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gb300lane.errors import RenderError
    from gb300lane.recipes import load_recipe, render, validate_raw

    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "c"))
    main = render(load_recipe("local-v27")).container("main")
    assert main.env["VLLM_CACHE_ROOT"] == "/cache/vllm" and main.volumes == (f"{tmp_path}/c:/cache/vllm",)
    monkeypatch.delenv("VLLM_CACHE_ROOT")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert render(load_recipe("local-k9")).container("main").volumes == (f"{tmp_path}/home/.cache/vllm:/cache/vllm",)
    monkeypatch.setenv("VLLM_CACHE_ROOT", "")  # empty takes the default, as in the shell
    assert render(load_recipe("local-v26")).container("main").volumes == (f"{tmp_path}/home/.cache/vllm:/cache/vllm",)

    raw = load_recipe("local-v27").model_dump(mode="json")
    raw["volumes"] = [{"source": "${NO_SUCH_VAR_XYZ}/c", "target": "/c"}]
    with pytest.raises(RenderError, match=r"volumes\[0\]\.source .*NO_SUCH_VAR_XYZ.* is not set"):
        render(validate_raw(raw, "t"))
    raw["volumes"] = [{"source": "${REL_ROOT:-cache}", "target": "/c"}]
    with pytest.raises(RenderError, match=r"expands to 'cache', not an absolute path"):
        render(validate_raw(raw, "t"))
    raw["volumes"] = [{"source": "$HOME/c", "target": "/c"}]
    with pytest.raises(Exception, match=r"\$\{NAME\} or \$\{NAME:-default\}"):
        validate_raw(raw, "t")


def test_paths_under_a_mount_reach_the_process_as_the_host_path_in_args_and_json_args() -> None:
    from gb300lane.runtime.process import mounted_argv

    vols = ["/home/u/real-lane/models:/models:ro", "/home/u/.cache/vllm:/cache/vllm"]
    spec = '{"method":"draft_model","model":"/models/cpu-draft","num_speculative_tokens":5}'
    out = mounted_argv(
        [
            "/venv/bin/python",
            "--model",
            "/models/cpu-target",
            "--speculative-config",
            spec,
            "--host",
            "127.0.0.1",
            "/modelsx/other",
            "{not json}",
        ],
        vols,
    )
    assert out[2] == "/home/u/real-lane/models/cpu-target"
    assert json.loads(out[4]) == {
        "method": "draft_model",
        "model": "/home/u/real-lane/models/cpu-draft",
        "num_speculative_tokens": 5,
    }
    assert out[4] == '{"method":"draft_model","model":"/home/u/real-lane/models/cpu-draft","num_speculative_tokens":5}'
    assert out[0] == "/venv/bin/python" and out[6] == "127.0.0.1"
    assert out[7] == "/modelsx/other"  # not under /models: a prefix of the name is not a parent
    assert out[8] == "{not json}"
    # A JSON argument with no mounted path is passed byte for byte (the flag checks compare it so).
    plain = '{"b":1, "a":2}'
    assert mounted_argv([plain], vols) == [plain]
