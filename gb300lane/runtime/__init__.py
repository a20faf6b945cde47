"""Container runtimes behind one interface: `process` (local subprocesses) and `docker`.

`get_runtime(name)` is the only way the lane obtains one; the Docker runtime is
imported lazily so nothing else ever loads the `docker` SDK.
"""

from __future__ import annotations

from gb300lane import placement
from gb300lane.errors import LaneError
from gb300lane.runtime.base import (
    LABEL_ARM,
    LABEL_FINGERPRINT,
    LABEL_INSTANCE,
    LABEL_LANE,
    LABEL_PORT,
    LABEL_RECIPE,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_STATE,
    ENGINE_IMAGE,
    ContainerInfo,
    Runtime,
    image_fix,
    state_label,
)
from gb300lane.runtime.process import ProcessRuntime

RUNTIMES = ("docker", "process")


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


__all__ = sorted(
    [
        "LABEL_ARM",
        "LABEL_FINGERPRINT",
        "LABEL_INSTANCE",
        "LABEL_LANE",
        "LABEL_PORT",
        "LABEL_RECIPE",
        "LABEL_ROLE",
        "LABEL_RUN",
        "LABEL_STATE",
        "RUNTIMES",
        "ENGINE_IMAGE",
        "ContainerInfo",
        "ProcessRuntime",
        "Runtime",
        "get_runtime",
        "image_fix",
        "state_label",
    ]
)
