"""The Docker runtime against the machine's engine, with gb300lane-engine:local built FROM scratch.

Tests that need an engine carry the `docker` marker; the image is built once
per session (and only when the project source changed since the last build).
The unreachable-engine test needs no engine: it points DOCKER_HOST at a dead socket.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gb300lane import lane, paths
from gb300lane.errors import BootError, RuntimeUnavailable
from gb300lane.lane import records as instances
from gb300lane.runtime import dockerhost, get_runtime
from gb300lane.testing.free_ports import free_port

from interrupt import interruptible

SHIPPED = paths.shipped("recipes")


def write_recipe(folder: Path, name: str, **over: object) -> str:
    body: dict[str, object] = {
        "schema_version": 1, "name": name, "extends": "local-v27", "description": f"test recipe {name}",
        "runtime": "docker", "lane": {"port": free_port()},
        "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0}, "env": {"HF_TOKEN": "hf_secret_value", "VLLM_LOGGING_LEVEL": "INFO"},
    }  # fmt: skip
    body.update(over)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return name


@pytest.fixture(scope="session")
def engine_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    from gb300lane.runtime.image import ensure_engine_image

    return ensure_engine_image(scratch=tmp_path_factory.mktemp("image")).tag


def test_docker_unreachable_names_docker_host_and_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dead = tmp_path / "dead.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")
    with pytest.raises(RuntimeUnavailable) as exc:
        get_runtime("docker")
    msg = str(exc.value)
    assert f"DOCKER_HOST=unix://{dead}" in msg and "--runtime process" in msg


def test_up_on_docker_with_an_unreachable_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recipes: Path
) -> None:
    name = write_recipe(recipes, "t-dock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'dead.sock'}")
    with pytest.raises(RuntimeUnavailable, match="does not answer"):
        lane.up(name)


@pytest.mark.docker
def test_image_missing_is_refused_before_anything_is_created(engine_image: str, recipes: Path) -> None:
    name = write_recipe(recipes, "t-noimage", image={"ref": "gb300lane-engine:no-such-tag"})
    # Not the engine's own tag, so `engine-image build` (which builds gb300lane-engine:local) is not the fix.
    with pytest.raises(
        BootError, match="gb300lane-engine:no-such-tag .* not present.*docker pull gb300lane-engine:no-such-tag.*--pull"
    ):
        lane.up(name)
    assert get_runtime("docker").list({"gb300lane.instance": "local-t-noimage"}) == []


@pytest.mark.docker
def test_engine_image_is_cached_by_source_hash(engine_image: str) -> None:
    from gb300lane.runtime.image import SOURCE_HASH_LABEL, ensure_engine_image

    first = ensure_engine_image()
    again = ensure_engine_image()
    # The tree is edited while tests run: a rebuild is right only when the hash moved.
    assert again.built is False or again.source_hash != first.source_hash
    labels = get_runtime("docker").image_labels(engine_image)  # type: ignore[attr-defined]
    assert labels[SOURCE_HASH_LABEL] == again.source_hash


@pytest.mark.docker
def test_up_checks_stop_keep_restart_and_down_on_docker(engine_image: str, recipes: Path) -> None:
    name = write_recipe(recipes, "t-dock")
    report = lane.up(name, dark=True, check_keys=["speculative.rejection_sample_method", "engine_args.time_scale"])
    assert report.runtime == "docker"
    checks = {c.name: c for c in report.checks}
    assert report.ok, report.to_text()
    assert checks["env"].status == "pass" and "HF_TOKEN" in checks["env"].evidence["secret_names"]
    assert "hf_secret_value" not in Path(report.path or "").read_text()
    assert [r["present"] for r in checks["flags"].evidence["keys"]] == [1, 1]
    assert checks["autotune"].evidence["observed"] == "miss"
    assert checks["dark_bind"].status == "pass" and checks["foreign_clients"].status == "pass"

    rt = get_runtime("docker")
    made = rt.list({"gb300lane.instance": "local-t-dock"})
    assert sorted(c.name for c in made) == ["local-t-dock-main", "local-t-dock-sidecar"]
    assert all(c.labels["gb300lane.run"] == report.run and c.state == "running" for c in made)
    assert "Application startup complete." in lane.logs(name)

    lane.stop_instance(report.instance)
    assert {c.state for c in rt.list({"gb300lane.instance": "local-t-dock"})} == {"exited"}
    again = lane.start_instance(report.instance)
    # The kept container kept its compile cache: the restart is a hit, read from the log.
    assert again.check("autotune").evidence["observed"] == "hit"  # type: ignore[union-attr]
    assert again.ok

    assert lane.down(name) == ["local-t-dock"]
    assert rt.list({"gb300lane.instance": "local-t-dock"}) == []


@pytest.mark.docker
def test_a_docker_container_that_exits_during_boot(engine_image: str, recipes: Path) -> None:
    name = write_recipe(recipes, "t-dbad", model={"path": "no-such-model"})
    with pytest.raises(BootError) as exc:
        lane.up(name)
    assert "local-t-dbad-main exited during boot" in str(exc.value)
    assert "serves only the builtin model" in exc.value.log_tail
    left = get_runtime("docker").list({"gb300lane.instance": "local-t-dbad"})
    assert left and all(c.state == "exited" for c in left)


@pytest.mark.docker
def test_create_carries_argv_ipc_shm_ulimits_mounts_gpus_and_labels(engine_image: str, tmp_path: Path) -> None:
    from types import SimpleNamespace

    import docker as sdk

    rt = get_runtime("docker")
    name = f"gb300lane-test-create-{tmp_path.name[-8:]}"
    spec = SimpleNamespace(
        role="main", name=name, image=engine_image,
        argv=("vllm", "serve", "/models/dsv41", "--speculative-config", '{"method":"dspark"}'),
        env={"VLLM_LOGGING_LEVEL": "INFO"}, network_mode="host", device_ids=("0",), ipc_mode="host",
        shm_size="1g", ulimits={"memlock": (-1, -1), "stack": (67108864, 67108864)},
        volumes=(f"{tmp_path}:/models:ro",), labels={"gb300lane.lane": "t", "gb300lane.role": "main"}, port=1,
    )  # fmt: skip
    try:
        info = rt.create(spec)
        assert info.state == "created" and info.argv == spec.argv
        assert info.env["VLLM_LOGGING_LEVEL"] == "INFO" and info.labels["gb300lane.role"] == "main"
        host = sdk.from_env().api.inspect_container(name)["HostConfig"]
        assert host["NetworkMode"] == "host" and host["IpcMode"] == "host" and host["ShmSize"] == 2**30
        assert {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]} == dict(spec.ulimits)
        assert host["Binds"] == [f"{tmp_path}:/models:ro"]
        assert host["DeviceRequests"][0]["DeviceIDs"] == ["0"]
        assert host["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
        assert rt.host_path(spec, "/models/cache") == tmp_path / "cache"  # type: ignore[arg-type]
        assert rt.host_path(spec, "/root/.cache/vllm") is None  # type: ignore[arg-type]
    finally:
        rt.remove(name)
    assert rt.inspect(name).state == "missing"


@pytest.mark.docker
def test_cli_engine_image_build_reports_the_source_hash(engine_image: str) -> None:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "gb300lane", "engine-image", "build", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["tag"] == engine_image and len(result["source_hash"]) == 16


@pytest.mark.docker
def test_ctrl_c_during_a_docker_boot_stops_and_keeps_the_containers(engine_image: str, recipes: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    # A slow modelled boot (a compile miss is minutes of modelled time): the interrupt must land while
    # the engine is still booting, however loaded the machine is.
    name = write_recipe(recipes, "t-dslow", engine_args={"time_scale": 0.2})
    proc = subprocess.Popen(
        [sys.executable, "-m", "gb300lane", "up", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ), preexec_fn=interruptible,
    )  # fmt: skip
    rt = get_runtime("docker")
    deadline = time.monotonic() + 120
    while True:
        main = rt.inspect("local-t-dslow-main")
        if main.state == "running" and "API server version" in rt.logs("local-t-dslow-main"):
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate(timeout=60)
            pytest.fail(f"the engine never reached its boot log while `up` ran (exit {proc.returncode}): {err[-2000:]}")
        time.sleep(0.1)
    assert proc.poll() is None, "the boot finished before the interrupt could land"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)  # stopping a booting engine, on a loaded machine
    assert proc.returncode == 1 and "interrupted" in err and "stopped and kept" in err
    left = rt.list({"gb300lane.instance": "local-t-dslow"})
    assert len(left) == 2 and all(c.state == "exited" for c in left)


@pytest.mark.docker
def test_a_rebuild_leaves_no_untagged_engine_image_behind() -> None:
    import docker

    from gb300lane.runtime.image import ENGINE_IMAGE, ensure_engine_image

    built = ensure_engine_image(force=True)
    assert built.built
    client = docker.from_env()
    try:
        leftovers = client.images.list(filters={"dangling": True, "label": "gb300lane.lane=engine-image"})
        assert leftovers == []
        assert client.images.get(ENGINE_IMAGE).id == built.image_id
    finally:
        client.close()


@pytest.mark.docker
def test_the_compile_cache_outlives_docker_instances_as_on_a_real_lane(engine_image: str, recipes: Path) -> None:
    """A card's arms on docker: A compiles; B (same fingerprint) and a fresh A2 after `down` are predicted hits."""
    import os

    a = write_recipe(recipes, "t-ca", extends="local-v26")
    b = write_recipe(recipes, "t-cb", extends="local-v27")
    ra = lane.up(a, arm="A")
    lane.stop_instance(ra.instance)
    rb = lane.up(b, arm="B")
    lane.stop_instance(rb.instance)
    assert sorted(lane.down(all=True)) == ["local-t-ca-A", "local-t-cb-B"]
    ra2 = lane.up(a, arm="A2")
    reports = (ra, rb, ra2)
    auto = [r.check("autotune") for r in reports]
    outcomes = [(c.evidence["predicted"], c.evidence["observed"]) for c in auto]  # type: ignore[union-attr]
    assert outcomes == [("miss", "miss"), ("hit", "hit"), ("hit", "hit")]
    assert all(c.status == "pass" for c in auto), [c.summary for c in auto]  # type: ignore[union-attr]
    assert all(r.ok for r in reports), [r.to_text() for r in reports]
    assert len({r.compile_hash for r in reports}) == 1
    # The cache lives where the tool's VLLM_CACHE_ROOT points, inside the container at /cache/vllm.
    host_dir = Path(os.environ["VLLM_CACHE_ROOT"]) / "torch_compile_cache" / str(ra.compile_hash)
    assert host_dir.is_dir() and auto[2].evidence["cache_dir"].startswith("/cache/vllm/")  # type: ignore[union-attr]
    assert ra2.check("env").status == "pass"  # type: ignore[union-attr]


@pytest.mark.docker
def test_a_leftover_is_reported_after_status_recorded_none(engine_image: str, recipes: Path) -> None:
    sock = dockerhost.local_socket()
    assert sock is not None, "the docker tests use the local engine"
    assert lane.status().instances == ()
    assert dockerhost.known_none(sock)  # from now on status does not load the SDK ...
    report = lane.up(write_recipe(recipes, "t-left"))
    try:
        # ... until a container is created: the instance's record is then lost, as a crash or a quarantine loses it.
        instances.delete(report.instance)
        rows = [row.info for row in lane.status().instances]
        assert [(i.name, i.recorded, i.runtime) for i in rows] == [(report.instance, False, "docker")]
    finally:
        lane.down(report.instance, yes=True)
    assert lane.status().instances == ()
    assert dockerhost.known_none(sock)
