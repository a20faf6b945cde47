"""The container runtime interface: what `up`, `down` and the boot checks ask of a runtime.

A runtime creates, starts, stops, removes and inspects named containers built
from a `ContainerSpec` (rendered by `gb300lane.recipes`), and reads their logs.
It never decides anything about lanes: instances, checks and reports live in
`gb300lane.lane`. Two implementations exist: `process` (a local subprocess per
container, records in the state directory) and `docker` (the Docker SDK).
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field

from gb300lane.models import FrozenModel

#: Label keys every created container carries; leftovers are found by these.
LABEL_PREFIX = "gb300lane."
LABEL_LANE = "gb300lane.lane"
LABEL_RECIPE = "gb300lane.recipe"
LABEL_ROLE = "gb300lane.role"
LABEL_FINGERPRINT = "gb300lane.fingerprint"
LABEL_RUN = "gb300lane.run"
LABEL_ARM = "gb300lane.arm"
LABEL_INSTANCE = "gb300lane.instance"
#: The host port a lane container serves on: several runtimes, one host, one port each.
LABEL_PORT = "gb300lane.port"
#: Which state directory created a container: leftovers are looked for only
#: among containers this state directory owns, so two states (two test runs,
#: two users) on one Docker engine never take each other's containers down.
LABEL_STATE = "gb300lane.state"


#: The embedded engine's image: built on this host (`gb300lane engine-image build`), never pulled.
ENGINE_IMAGE = "gb300lane-engine:local"


def image_fix(image: str) -> str:
    """What makes a missing image present: the embedded engine's is built here; any other image is pulled."""
    if image == ENGINE_IMAGE:
        return "build it with `gb300lane engine-image build`, or pass --pull"
    return f"pull it with `docker pull {image}`, or pass --pull to have `gb300lane up` pull it"


def state_label() -> str:
    """The value of LABEL_STATE for the current state directory."""
    from gb300lane import paths
    from gb300lane.fsio import sha256_bytes

    return sha256_bytes(str(paths.state_dir().resolve()))[:12]


ContainerStateName = Literal["created", "running", "exited", "missing"]


class SpecLike(Protocol):
    """The fields of `gb300lane.recipes.ContainerSpec` a runtime reads (read-only: specs are frozen).

    The runtimes sit beside `recipes` in the layers, so they name the shape, not the class.
    """

    @property
    def role(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def image(self) -> str: ...

    @property
    def argv(self) -> Sequence[str]: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def network_mode(self) -> str: ...

    @property
    def device_ids(self) -> Sequence[str] | None: ...

    @property
    def ipc_mode(self) -> str | None: ...

    @property
    def shm_size(self) -> str | None: ...

    @property
    def ulimits(self) -> Mapping[str, tuple[int, int]]: ...

    @property
    def volumes(self) -> Sequence[str]: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def port(self) -> int | None: ...


class ContainerInfo(FrozenModel):
    """What a runtime knows about one container right now (docker inspect, or the process record)."""

    name: str = Field(description="Container name, `<instance>-<role>`.")
    runtime: str = Field(description="`process` or `docker`.")
    state: ContainerStateName = Field(description="created, running, exited (stopped and kept) or missing.")
    argv: tuple[str, ...] = Field(default=(), description="The command line the container actually runs.")
    env: dict[str, str] = Field(default_factory=dict, description="The environment the container actually has.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels set at create time.")
    image: str = Field(default="", description="Image reference (empty for the process runtime).")
    pid: int | None = Field(default=None, description="Host pid of the main process while running.")
    exit_code: int | None = Field(default=None, description="Exit status when known (None when not observable).")
    started_at: float | None = Field(default=None, description="Unix time of the last start.")
    detail: str = Field(default="", description="Why the state is what it is (stale pid, OOM-killed, ...).")


class ImageIdentity(FrozenModel):
    """The image a container runs, as the engine that runs it knows it (never the tag the recipe asked for)."""

    id: str = Field(description="Image id (sha256 of the image config), read from the container itself.")
    repo_digests: tuple[str, ...] = Field(
        default=(),
        description="`repo@sha256:...` manifest digests the image was "
        "pulled or pushed as (none for an image built here and never pushed).",
    )
    tags: tuple[str, ...] = Field(default=(), description="Tags that point at this image now.")
    created: str | None = Field(default=None, description="When the image was built (the engine's timestamp).")
    labels: dict[str, str] = Field(default_factory=dict, description="The image's labels.")


class Runtime(abc.ABC):
    """A place to run containers. Errors are `RuntimeUnavailable` or `BootError`, never third-party."""

    name: str = ""
    #: Whether `create` may pull a missing image (only the docker runtime has images to pull).
    pull: bool = False
    #: Whether a boot runs the embedded engine from an image built on this host (which must be built first).
    builds_engine_image: bool = False
    #: Whether a container's device ids reach it as CUDA_VISIBLE_DEVICES in its environment (no device cgroup).
    devices_in_env: bool = True
    #: What a booted container's environment is, beside the recipe's: the env check's baseline, in words.
    env_baseline: str = "recipe env + PATH/HOME/LANG/VLLM_CACHE_ROOT... passed through from the invoking shell"

    @abc.abstractmethod
    def create(self, spec: SpecLike) -> ContainerInfo:
        """Create (not start) a container from the spec; its labels are recorded."""

    @abc.abstractmethod
    def start(self, name: str, *, secrets: Mapping[str, str] | None = None) -> ContainerInfo:
        """Start a created or stopped container.

        `secrets`: env values (the spec's) for a runtime that keeps only keyed digests of secret values on disk
        (the process runtime); each must match the digest recorded at create. Docker keeps its own env: unused.
        """

    def start_problem(self, name: str, *, secrets: Mapping[str, str] | None = None) -> str | None:
        """Why `start(name, secrets=secrets)` would be refused before it runs anything (a secret it cannot
        restore); None when it would not. Only the process runtime keeps anything to check."""
        return None

    @abc.abstractmethod
    def stop(self, name: str, *, timeout_s: float = 10.0) -> ContainerInfo:
        """Stop a container and keep it (its record, args, env and logs survive)."""

    @abc.abstractmethod
    def remove(self, name: str) -> None:
        """Stop if needed, then forget the container; a missing one is not an error."""

    @abc.abstractmethod
    def inspect(self, name: str) -> ContainerInfo:
        """The container's current facts; state `missing` when it does not exist."""

    @abc.abstractmethod
    def logs(self, name: str, *, tail: int | None = None, since: float | None = None) -> str:
        """The container's log text (stdout and stderr together), the last `tail` lines if given.

        `since` (unix time) keeps only what was logged from then on: the boot
        checks read one boot's lines, never an earlier boot's.
        """

    @abc.abstractmethod
    def follow(self, name: str, *, tail: int | None = None) -> Iterator[str]:
        """Yield log lines as they are written until the container stops."""

    @abc.abstractmethod
    def list(self, labels: Mapping[str, str] | None = None) -> list[ContainerInfo]:
        """Every container this tool created, filtered by label equality."""

    def list_state(self, labels: Mapping[str, str]) -> builtins.list[ContainerInfo]:
        """`list(labels)` for a listing of this state directory's containers (a runtime may remember that it
        found none, so the next listing need not ask)."""
        return self.list(labels)

    @abc.abstractmethod
    def image_present(self, image: str) -> bool | None:
        """Whether the image is available locally (None where the runtime has no images)."""

    @abc.abstractmethod
    def image_env(self, image: str) -> dict[str, str]:
        """Environment the image adds by default (compared as part of the expected env)."""

    def base_env(self, name: str | None = None) -> dict[str, str]:
        """Environment the runtime itself adds (beyond the image's): to container `name` as created, else to a new one."""
        return {}

    def host_path(self, spec: SpecLike, container_path: str) -> Path | None:
        """Where a path inside the container lives on the host (None when not reachable)."""
        return Path(container_path)

    def image_identity(self, name: str) -> ImageIdentity | None:
        """The image container `name` runs (None where the runtime runs no image, or the container is gone)."""
        return None


def tail_lines(text: str, n: int | None) -> str:
    """The last `n` lines of `text` (all of it when n is None)."""
    if n is None:
        return text
    lines = text.splitlines()
    return "\n".join(lines[-n:]) + ("\n" if lines else "")


def label_filter(info_labels: Mapping[str, str], wanted: Mapping[str, str] | None) -> bool:
    """True when every wanted label is present with the same value."""
    if not wanted:
        return True
    return all(info_labels.get(k) == v for k, v in wanted.items())
