"""`up` / `down` / `status` / `logs` end to end on the process runtime with the embedded engine.

Recipes are written into a temp recipes dir (the shipped ones, plus test
recipes extending local-v27 on free ports and --time-scale 0), so nothing
here touches the checkout's recipes or the lane port.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from gb300lane import lane, paths
from gb300lane.errors import BootError, RecipeError, StateError
from gb300lane.lane import records as instances
from gb300lane.promote import view
from gb300lane.runtime import ProcessRuntime
from gb300lane.testing.free_ports import free_port

from interrupt import interruptible

SHIPPED = paths.shipped("recipes")


def write_recipe(folder: Path, name: str, *, time_scale: float = 0, extends: str = "local-v27", **over: object) -> str:
    body: dict[str, object] = {
        "schema_version": 1, "name": name, "extends": extends, "description": f"test recipe {name}",
        "lane": {"port": free_port()},
        "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": time_scale},
    }  # fmt: skip
    body.update(over)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return name


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_up_reports_checks_then_down_leaves_nothing(recipes: Path) -> None:
    name = write_recipe(recipes, "t-v27")
    report = lane.up(name, dark=True, runtime="process")
    assert report.instance == "local-t-v27" and report.runtime == "process"
    by_name = {c.name: c for c in report.checks}
    assert by_name["autotune"].status == "pass" and by_name["autotune"].evidence["observed"] == "miss"
    assert by_name["autotune"].evidence["predicted"] == "miss"
    assert by_name["env"].status == "pass", by_name["env"].summary
    assert by_name["kv_pool"].status == "pass"
    assert by_name["dark_bind"].status == "pass"
    assert by_name["foreign_clients"].status == "pass"
    # Default check keys: t-v27 differs from its parent local-v27 only in ports and time scale.
    flag_rows = {r["key"]: r for r in by_name["flags"].evidence["keys"]}
    assert flag_rows["engine_args.time_scale"]["ok"] and flag_rows["engine_args.time_scale"]["present"] == 1
    assert report.ok and Path(report.path or "").is_file()

    st = lane.status()
    [row] = st.instances
    assert row.info.state == "running" and row.health == "healthy"
    assert "role" not in row.model_dump()  # the lane reports facts; roles are the promotion layer's
    [viewed] = view.lane_view().instances
    assert viewed.role == "candidate" and viewed.info == row.info
    assert row.info.compile_hash == report.compile_hash and row.uptime_s is not None
    assert "Application startup complete." in lane.logs(name)
    assert "expert sidecar" in lane.logs(name, role="sidecar")

    pids = [i.pid for i in ProcessRuntime().list() if i.pid]
    assert len(pids) == 2
    assert lane.down(name) == ["local-t-v27"]
    assert not any(_alive(p) for p in pids)
    assert lane.list_instances() == [] and ProcessRuntime().list() == []


@pytest.mark.slow  # end to end: three boots of the engine as processes (A, B, then A again)
def test_second_boot_is_a_predicted_hit_and_a_flag_bracket_reads_0_1_0(recipes: Path) -> None:
    a = write_recipe(recipes, "t-a", extends="local-v26")
    b = write_recipe(recipes, "t-b", extends="local-v27")
    key = ["speculative.rejection_sample_method"]
    ra = lane.up(a, arm="A", check_keys=key)
    lane.stop_instance(ra.instance)
    rb = lane.up(b, arm="B", check_keys=key)
    lane.stop_instance(rb.instance)
    ra2 = lane.start_instance(ra.instance)
    reports = (ra, rb, ra2)
    flags = [r.check("flags") for r in reports]
    assert [f.status for f in flags] == ["pass"] * 3
    values = [f.evidence["keys"][0]["actual"] for f in flags]
    assert values == ["standard", "block", "standard"]
    # The first boot compiled; B and A2 share the fingerprint (the key is not a hash input): hits.
    outcomes = [(r.check("autotune").evidence["predicted"], r.check("autotune").evidence["observed"]) for r in reports]
    assert outcomes == [("miss", "miss"), ("hit", "hit"), ("hit", "hit")]
    assert len({r.compile_hash for r in reports}) == 1
    assert ra2.run == ra.run and ra2.expected_boot_seconds is not None
    # A restart is a new report; the first boot's report is never overwritten.
    assert ra2.path != ra.path and Path(ra.path or "").read_text().count('"observed": "miss"') == 1
    # The env is the same set on every arm.
    assert len({r.check("env").evidence["set_digest"] for r in (ra, ra2)}) == 1
    names = {i.name: i.state for i in lane.list_instances()}
    assert names == {"local-t-a-A": "running", "local-t-b-B": "stopped"}


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_second_up_of_a_running_instance_is_refused(recipes: Path) -> None:
    name = write_recipe(recipes, "t-v27")
    lane.up(name)
    with pytest.raises(StateError, match="already up.*gb300lane down local-t-v27"):
        lane.up(name)
    # Another arm of the same recipe on the same port is refused too, naming the holder.
    with pytest.raises(BootError, match="port .* served by lane container local-t-v27-main"):
        lane.up(name, arm="other")


def test_port_in_use_by_a_foreign_process(recipes: Path) -> None:
    name = write_recipe(recipes, "t-v27")
    port = yaml.safe_load((recipes / f"{name}.yaml").read_text())["lane"]["port"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        # The error names the process holding the port: this one.
        with pytest.raises(BootError, match=f"port {port} \\(main\\) is in use by pid {os.getpid()} \\(.*--port"):
            lane.up(name)
    assert lane.list_instances() == []


@pytest.mark.slow
def test_a_container_that_exits_during_boot_carries_its_log_tail(recipes: Path) -> None:
    name = write_recipe(recipes, "t-bad", model={"path": "no-such-model"})
    with pytest.raises(BootError) as exc:
        lane.up(name)
    msg = str(exc.value)
    assert "local-t-bad-main exited during boot" in msg and "last 40 log lines" in msg
    assert "serves only the builtin model" in exc.value.log_tail
    [info] = lane.list_instances()
    assert info.state == "failed" and all(s == "exited" for s in info.containers.values())
    assert all(c.labels["gb300lane.instance"] == "local-t-bad" for c in ProcessRuntime().list())


def test_readiness_timeout_names_url_elapsed_limit_and_hint(recipes: Path) -> None:
    name = write_recipe(recipes, "t-slow", time_scale=0.01)
    with pytest.raises(BootError) as exc:
        lane.up(name, timeout_s=0.5)
    msg = str(exc.value)
    assert "not ready after" in msg and "(limit 0.5 s)" in msg and "/health: " in msg
    assert "http://127.0.0.1:" in msg and "--timeout" in msg and "gb300lane logs local-t-slow" in msg
    assert all(c.state == "exited" for c in ProcessRuntime().list())


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_k_outside_the_trained_block_needs_acknowledgement(recipes: Path) -> None:
    name = write_recipe(recipes, "t-k9", extends="local-k9")
    with pytest.raises(RecipeError) as exc:
        lane.up(name)
    msg = str(exc.value)
    assert "num_speculative_tokens = 9 exceeds the trained block" in msg
    assert "--allow-outside-trained-block" in msg and "t-k9.yaml" in msg
    report = lane.up(name, allow_outside_trained_block=True)
    assert report.ok


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_ctrl_c_during_boot_stops_and_keeps_the_labelled_containers(recipes: Path) -> None:
    # A slow modelled boot (a compile miss is minutes of modelled time): the interrupt must land while
    # the engine is still booting, however loaded the machine is.
    name = write_recipe(recipes, "t-slow", time_scale=0.2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gb300lane", "up", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ), preexec_fn=interruptible,
    )  # fmt: skip
    main_log = paths.state_dir() / "runtime" / "process" / "local-t-slow-main.log"
    deadline = time.monotonic() + 120
    while not (main_log.exists() and "API server version" in main_log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"the engine never reached its boot log while `up` ran (exit {proc.returncode}): {err[-2000:]}")
        time.sleep(0.05)
    assert proc.poll() is None, "the boot finished before the interrupt could land"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)  # stopping a booting engine, on a loaded machine
    assert proc.returncode == 1, (out, err)
    assert "interrupted" in err and "stopped and kept" in err and "gb300lane.instance=local-t-slow" in err
    infos = ProcessRuntime().list({"gb300lane.instance": "local-t-slow"})
    assert len(infos) == 2 and all(i.state == "exited" for i in infos)
    assert instances.load("local-t-slow").phase == "interrupted"  # type: ignore[union-attr]


@pytest.mark.slow
def test_cli_up_status_logs_down(recipes: Path) -> None:
    name = write_recipe(recipes, "t-v27")
    # In process: what is tested is the commands, not the console script (the Ctrl-C test crosses the process).
    from typer.testing import CliRunner

    from gb300lane.cli.main import app

    runner = CliRunner()
    run = lambda *a: runner.invoke(app, list(a))  # noqa: E731
    up = run("up", name, "--dark", "--json", "--check", "speculative.rejection_sample_method", "--check", "lane.port")
    assert up.exit_code == 0, up.output
    report = json.loads(up.stdout)
    assert report["instance"] == "local-t-v27"
    [flags] = [c for c in report["checks"] if c["name"] == "flags"]
    assert [(r["key"], r["actual"]) for r in flags["evidence"]["keys"]] == [
        ("lane.port", str(yaml.safe_load((recipes / f"{name}.yaml").read_text())["lane"]["port"])),
        ("speculative.rejection_sample_method", "block"),
    ]
    st = run("status", "--json")
    assert '"state": "running"' in st.stdout and '"health": "healthy"' in st.stdout
    logs = run("logs", name, "--tail", "2")
    assert logs.exit_code == 0 and len(logs.stdout.splitlines()) == 2
    down = run("down", "--all")
    assert down.exit_code == 0 and "local-t-v27" in down.stdout
    assert run("down", "--all").stdout.strip() == "nothing to take down"


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_leftovers_without_a_record_are_found_by_label_and_taken_down(recipes: Path) -> None:
    name = write_recipe(recipes, "t-v27")
    report = lane.up(name)
    instances.delete(report.instance)  # as if the state file were lost
    [info] = lane.list_instances()
    assert info.name == "local-t-v27" and not info.recorded and info.state == "running"
    assert info.labels["gb300lane.run"] == report.run
    assert lane.down(all=True) == ["local-t-v27"]
    assert ProcessRuntime().list() == []


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_foreign_clients_counts_requests_the_tool_did_not_send(recipes: Path) -> None:
    import urllib.request

    name = write_recipe(recipes, "t-v27")
    report = lane.up(name, dark=True)
    assert report.check("foreign_clients").status == "pass"  # type: ignore[union-attr]
    body = json.dumps({"model": report.served_model, "prompt": "hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(
        f"{report.endpoint}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    seen = lane.foreign_clients(report.endpoint)
    assert seen.status == "fail" and seen.evidence["foreign_requests"] == 1
    assert lane.foreign_clients(report.endpoint, sent_by_tool=1).status == "pass"


def test_default_timeout_scales_with_the_engine_and_past_boots() -> None:
    from gb300lane.lane.boot import default_timeout_s
    from gb300lane.recipes import load_recipe

    local = load_recipe("local-v27", SHIPPED)
    assert default_timeout_s(local, None) == pytest.approx(60 + 2 * 1910 * 0.01)
    assert default_timeout_s(local, 100.0) == 300.0
    assert default_timeout_s(load_recipe("v27", SHIPPED), None) == 3600.0


@pytest.mark.slow  # end to end: boots the engine as processes through the lane (the fast tier keeps one such boot)
def test_dark_overrides_a_recipe_bind_of_all_interfaces_and_the_flag_check_agrees(recipes: Path) -> None:
    # lane.bind differs from the parent, so the flag check verifies it: the container must run what
    # --dark asked for (loopback), not the recipe's 0.0.0.0.
    name = write_recipe(recipes, "t-open", lane={"port": free_port(), "bind": "0.0.0.0"})
    report = lane.up(name, dark=True, runtime="process")
    checks = {c.name: c for c in report.checks}
    assert checks["dark_bind"].status == "pass", checks["dark_bind"].summary
    assert checks["flags"].status == "pass", checks["flags"].summary
    assert "lane.bind" in json.dumps(checks["flags"].evidence)
    lane.down(name)


@pytest.mark.slow  # end to end: boots the engine as processes twice (up, then the start it takes over)
def test_await_instance_takes_over_a_start_a_killed_process_began(recipes: Path) -> None:
    name = write_recipe(recipes, "t-await")
    first = lane.up(name, dark=True, runtime="process")
    lane.stop_instance(first.instance)
    rec = instances.load(first.instance)
    assert rec is not None
    # What a killed `rollback` leaves: the containers started, nobody waiting, the record not yet `up` again.
    instances.save(rec, phase="booting", detail="started by a process that was killed")
    rt = ProcessRuntime()
    for container in reversed(rec.containers):
        rt.start(container)
    seen: list[float] = []
    report = lane.await_instance(first.instance, progress=lambda p: seen.append(p.elapsed_s))
    assert report.instance == first.instance and report.path and report.path != first.path
    assert {c.name for c in report.checks} >= {"autotune", "flags", "env", "dark_bind"}
    assert instances.load(first.instance).phase == "up"
    # Already up: it only waits for readiness and returns the same report.
    assert lane.await_instance(first.instance).path == report.path
    lane.down(name)
    with pytest.raises(StateError, match="no instance named"):
        lane.await_instance(first.instance)
