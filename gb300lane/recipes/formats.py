"""Output formats of a rendered lane: a compose file, a docker-run script, JSON.

Each is a view of the same `RenderedLane`. The compose file and JSON are built
as data and serialised by a library (PyYAML, json), so they are valid by
construction, which a template could not promise for YAML. The docker-run
script is text people read: its layout is a template (`docker-run.sh`), and
every word in it is quoted by `shlex` before the template sees it.

The compose file adds what compose itself needs to run the lane unattended: a
healthcheck per container on its health URL, the sidecar as a
`service_healthy` dependency of main (main connects to it at boot), and a
restart policy.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from gb300lane import templating
from gb300lane.errors import RenderError
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.recipes.containers import ContainerSpec, RenderedLane

Format = Literal["compose", "docker-run", "json"]
FORMATS: tuple[str, ...] = ("compose", "docker-run", "json")
FILE_NAMES = {"compose": "compose.yaml", "docker-run": "docker-run.sh", "json": "lane.json"}

#: Restart a lane container that dies, but never one an operator stopped.
RESTART_POLICY = "unless-stopped"
#: Probe cadence. The start period is generous because a vLLM boot that misses
#: the compile cache takes many minutes; probes that fail inside it do not count,
#: and the first probe that passes marks the container healthy at once.
HEALTH_INTERVAL = "10s"
HEALTH_TIMEOUT = "5s"
HEALTH_RETRIES = 3
HEALTH_START_PERIOD = "1200s"


def _header(lane: RenderedLane) -> str:
    return (
        f"# Rendered by gb300lane from recipe {lane.recipe} (fingerprint {lane.fingerprint}); "
        "edit the recipe, not this file.\n"
    )


def healthcheck_test(health_url: str) -> list[str]:
    """The probe compose runs inside the container: python3's urllib, exit 0 on HTTP 200.

    Every image of a lane runs a Python program (vLLM, the expert sidecar, the
    embedded engine, whose image is FROM scratch and has no shell or curl), so
    python3 is the one probe all of them can run.
    """
    code = (
        "import sys, urllib.request; "
        f"sys.exit(0 if urllib.request.urlopen({health_url!r}, timeout=4).status == 200 else 1)"
    )
    return ["CMD", "python3", "-c", code]


def _escape(value: Any) -> Any:
    """Compose interpolates `$`; a literal `$` in a value is written `$$`."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_escape(v) for v in value]
    if isinstance(value, dict):
        return {k: _escape(v) for k, v in value.items()}
    return value


def compose_service(c: ContainerSpec, depends_on: Sequence[str]) -> dict[str, object]:
    """One compose service for one container, keys in the order a reader expects."""
    svc: dict[str, Any] = {
        "image": c.image,
        "container_name": c.name,
        "entrypoint": list(c.argv[:1]),
        "command": list(c.argv[1:]),
        "network_mode": c.network_mode,
    }
    if c.env:
        svc["environment"] = dict(c.env)
    if c.ipc_mode is not None:
        svc["ipc"] = c.ipc_mode
    if c.shm_size is not None:
        svc["shm_size"] = c.shm_size
    if c.ulimits:
        svc["ulimits"] = {name: {"soft": soft, "hard": hard} for name, (soft, hard) in c.ulimits.items()}
    if c.volumes:
        svc["volumes"] = list(c.volumes)
    svc["labels"] = dict(c.labels)
    if c.device_ids:
        svc["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "device_ids": list(c.device_ids), "capabilities": ["gpu"]}]
                }
            }
        }
    svc["healthcheck"] = {
        "test": healthcheck_test(c.health_url),
        "interval": HEALTH_INTERVAL,
        "timeout": HEALTH_TIMEOUT,
        "retries": HEALTH_RETRIES,
        "start_period": HEALTH_START_PERIOD,
    }
    svc["restart"] = RESTART_POLICY
    if depends_on:
        svc["depends_on"] = {name: {"condition": "service_healthy"} for name in depends_on}
    escaped: dict[str, object] = _escape(svc)
    return escaped


def compose_dict(lane: RenderedLane) -> dict[str, object]:
    """The compose document as data: one service per container, named by role; main waits for a healthy sidecar."""
    others = [c.role for c in lane.containers if c.role != "main"]
    return {"services": {c.role: compose_service(c, others if c.role == "main" else []) for c in lane.containers}}


def render_compose(lane: RenderedLane) -> str:
    """A compose file (`docker compose config` accepts it) with both containers."""
    body = yaml.safe_dump(
        compose_dict(lane), sort_keys=False, default_flow_style=False, allow_unicode=True, width=2**16
    )
    return _header(lane) + body


def docker_run_argv(c: ContainerSpec) -> list[str]:
    """The `docker run` command line that starts one container exactly as specified."""
    argv = ["docker", "run", "--detach", "--name", c.name, "--network", c.network_mode]
    for k, v in c.labels.items():
        argv += ["--label", f"{k}={v}"]
    for k, v in c.env.items():
        argv += ["--env", f"{k}={v}"]
    if c.device_ids:
        argv += ["--gpus", '"device=' + ",".join(c.device_ids) + '"']
    if c.ipc_mode is not None:
        argv += ["--ipc", c.ipc_mode]
    if c.shm_size is not None:
        argv += ["--shm-size", c.shm_size]
    for name, (soft, hard) in c.ulimits.items():
        argv += ["--ulimit", f"{name}={soft}:{hard}"]
    for v in c.volumes:
        argv += ["--volume", v]
    argv += ["--entrypoint", c.argv[0], c.image, *c.argv[1:]]
    return argv


def docker_run_parts(c: ContainerSpec) -> list[str]:
    """The `docker run` command of one container as the script lays it out, every word shell-quoted: `docker run
    --detach`, then one option with its value per part, then the image and each argument on their own."""
    argv = [shlex.quote(a) for a in docker_run_argv(c)]
    image_at = len(argv) - len(c.argv)
    head, tail = argv[:image_at], argv[image_at:]
    parts = [" ".join(head[:3])]
    parts += [f"{head[i]} {head[i + 1]}" for i in range(3, len(head), 2)]
    return parts + tail


def render_docker_run(lane: RenderedLane) -> str:
    """A bash script that starts the sidecar, then the main container; every value shell-quoted.

    The script's layout is the `docker-run.sh` template (a user's ./templates/docker-run.sh wins); the words
    are quoted here, by shlex, so a template never splices an unquoted value into the shell.
    """
    containers = [
        {"role": c.role, "health_url": c.health_url, "parts": docker_run_parts(c)} for c in reversed(lane.containers)
    ]
    return templating.render("docker-run.sh", lane=lane, containers=containers)


def render_json(lane: RenderedLane) -> str:
    """The rendered lane as stable JSON."""
    return dumps_json(lane.model_dump(mode="json"))


def render_format(lane: RenderedLane, fmt: str) -> str:
    if fmt == "compose":
        return render_compose(lane)
    if fmt == "docker-run":
        return render_docker_run(lane)
    if fmt == "json":
        return render_json(lane)
    raise RenderError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")


def write_rendered(lane: RenderedLane, fmt: str, out_dir: Path) -> Path:
    """Render, then write atomically to `out_dir/<file>`; nothing is written if rendering fails."""
    text = render_format(lane, fmt)
    path = atomic_write(Path(out_dir) / FILE_NAMES[fmt], text)
    if fmt == "docker-run":
        path.chmod(0o755)
    return path
