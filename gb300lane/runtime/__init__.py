"""Container runtimes behind one interface: `process` (local subprocesses) and `docker`.

`get_runtime(name)` is the only way the lane obtains one; the Docker runtime is
imported lazily so nothing else ever loads the `docker` SDK.
"""

from __future__ import annotations

from gb300lane import placement
from gb300lane.errors import LaneError
from gb300lane.names import RUNTIME_NAMES, RuntimeName
from gb300lane.runtime import dockerhost
from gb300lane.runtime.base import (
    ENGINE_IMAGE,
    LABEL_ARM,
    LABEL_FINGERPRINT,
    LABEL_INSTANCE,
    LABEL_LANE,
    LABEL_PORT,
    LABEL_RECIPE,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_STATE,
    ContainerInfo,
    ImageIdentity,
    Runtime,
    image_fix,
    state_label,
)
from gb300lane.runtime.process import ProcessRuntime

RUNTIMES = RUNTIME_NAMES


def reaches_remote_hosts(name: str) -> bool:
    """Whether the runtime can serve a lane on another host (docker, through the lane's DOCKER_HOST); the
    process runtime runs on this machine only."""
    return name == "docker"


def unasked_note(name: str) -> str | None:
    """A runtime no instance record names: its status note when it need not be loaded to know it, else None
    (ask it). Docker's local engine says it cheaply: it does not answer, or it answers and no container of
    this state directory can be on it (see `gb300lane.runtime.dockerhost`), all without the SDK."""
    if name != "docker":
        return None
    sock = dockerhost.local_socket()
    if sock is None:
        return None
    why = dockerhost.ping(sock)
    if why is not None:
        return dockerhost.unavailable_message(why)
    return "reachable" if dockerhost.known_none(sock) else None


def get_runtime(name: str, *, pull: bool = False) -> Runtime:
    """The runtime called `name`; `RuntimeUnavailable` when it cannot be reached."""
    if name == "process":
        place = placement.current()
        if place is not None and place.remote:
            raise LaneError(
                f"lane {place.lane} is on host {place.host} ({place.docker}), and the process runtime runs on this "
                f"machine only; set runtime: docker for lane {place.lane} in {place.inventory}"
            )
        return ProcessRuntime()
    if name == "docker":
        from gb300lane.runtime.docker import DockerRuntime

        return DockerRuntime(pull=pull)
    raise LaneError(f"unknown runtime {name!r}; use one of: {', '.join(RUNTIMES)} (--runtime)")


__all__ = [
    "ContainerInfo",
    "ENGINE_IMAGE",
    "ImageIdentity",
    "LABEL_ARM",
    "LABEL_FINGERPRINT",
    "LABEL_INSTANCE",
    "LABEL_LANE",
    "LABEL_PORT",
    "LABEL_RECIPE",
    "LABEL_ROLE",
    "LABEL_RUN",
    "LABEL_STATE",
    "ProcessRuntime",
    "RUNTIMES",
    "Runtime",
    "RuntimeName",
    "get_runtime",
    "image_fix",
    "reaches_remote_hosts",
    "state_label",
    "unasked_note",
]
