"""The Docker runtime: the one module in gb300lane that imports the `docker` SDK.

Every Docker exception is translated here, once, into `RuntimeUnavailable`
(the engine does not answer) or `BootError` (it answered no). Containers run
with host networking, the spec's ipc mode, shm size and ulimits, GPU device
requests by device id only when the spec names devices, and the labels the
spec carries. Images are never pulled unless asked (`pull=True`).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import docker.errors
import docker.tls
import docker.types
import requests.exceptions

from gb300lane import placement as placement_mod
from gb300lane.errors import BootError, RuntimeUnavailable
from gb300lane.placement import Placement
from gb300lane.runtime import dockerhost
from gb300lane.runtime.base import (
    LABEL_PREFIX,
    ContainerInfo,
    ImageIdentity,
    Runtime,
    SpecLike,
    image_fix,
    label_filter,
)


def _unavailable(exc: BaseException, place: Placement | None = None) -> RuntimeUnavailable:
    if place is not None and place.remote:
        return RuntimeUnavailable(
            f"host {place.host}: the Docker engine at {place.docker} does not answer ({type(exc).__name__}: {exc}); "
            f"start Docker on the box, or fix hosts.{place.host}.docker in {place.inventory}"
        )
    return RuntimeUnavailable(dockerhost.unavailable_message(f"{type(exc).__name__}: {exc}"))


def _parse_time(value: str | None) -> float | None:
    if not value or value.startswith("0001-"):
        return None
    # Docker prints nanoseconds; Python parses at most microseconds.
    head, _, frac = value.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(head + "+00:00")
    return stamp.timestamp() + (float("0." + frac[:6]) if frac else 0.0)


def _env_dict(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        out[key] = value if sep else ""
    return out


def _ulimits(raw: Mapping[str, tuple[int, int]] | None) -> list[docker.types.Ulimit]:
    """The spec's ulimits (name -> (soft, hard)) as SDK objects."""
    return [docker.types.Ulimit(name=name, soft=soft, hard=hard) for name, (soft, hard) in (raw or {}).items()]


def _volumes(raw: Sequence[str] | None) -> dict[str, dict[str, str]]:
    """The spec's mounts (`source:target[:ro]`) as the SDK's volume mapping."""
    out: dict[str, dict[str, str]] = {}
    for vol in raw or ():
        parts = vol.split(":")
        mode = "ro" if len(parts) > 2 and parts[2] == "ro" else "rw"
        out[parts[0]] = {"bind": parts[1] if len(parts) > 1 else parts[0], "mode": mode}
    return out


class DockerRuntime(Runtime):
    """Containers on a Docker engine, through the SDK."""

    name = "docker"
    builds_engine_image = True
    devices_in_env = False
    env_baseline = "recipe env + the image's default env (docker inspect of the image)"

    def __init__(self, *, pull: bool = False, timeout_s: float = 30.0, placement: Placement | None = None) -> None:
        self.pull = pull
        #: The host whose engine this is (None: this machine's, from DOCKER_HOST).
        self.place = placement if placement is not None else placement_mod.current()
        place = self.place
        try:
            if place is None or not place.remote:
                self.client = docker.from_env(timeout=int(timeout_s))
            elif place.docker.startswith("ssh://"):
                from gb300lane.runtime import ssh

                # The box's engine socket, forwarded by the ssh the inventory describes (key, known hosts).
                self.client = docker.DockerClient(base_url=ssh.docker_socket(place), timeout=int(timeout_s))
            else:
                tls = None
                if place.tls is not None:
                    tls = docker.tls.TLSConfig(
                        client_cert=(place.tls.cert, place.tls.key), ca_cert=place.tls.ca, verify=True
                    )
                self.client = docker.DockerClient(base_url=place.docker, tls=tls, timeout=int(timeout_s))
            self.client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise _unavailable(exc, place) from exc

    # -- translation boundary -------------------------------------------------
    def _call(self, what: str, fn: Any, *args: Any, lookup: bool = False, **kwargs: Any) -> Any:
        """Run one SDK call; `lookup=True` lets NotFound through for the caller to answer "missing"."""
        try:
            return fn(*args, **kwargs)
        except docker.errors.NotFound as exc:
            if lookup:
                raise
            if isinstance(exc, docker.errors.ImageNotFound):
                raise BootError(
                    f"{what}: image not found locally ({exc.explanation}); pull it with `docker pull IMAGE` "
                    "(the embedded engine's: `gb300lane engine-image build`), or pass --pull"
                ) from exc
            raise BootError(f"{what}: not found ({exc.explanation}); see `gb300lane status`") from exc
        except docker.errors.APIError as exc:
            raise BootError(f"{what}: the Docker engine refused: {exc.explanation or exc}") from exc
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise _unavailable(exc, self.place) from exc
        except docker.errors.DockerException as exc:
            raise BootError(f"{what}: {exc}") from exc

    def _get(self, name: str) -> Any | None:
        try:
            return self._call(f"inspect {name}", self.client.containers.get, name, lookup=True)
        except docker.errors.NotFound:
            return None

    # -- images ---------------------------------------------------------------
    def image_present(self, image: str) -> bool | None:
        try:
            self._call(f"image {image}", self.client.images.get, image, lookup=True)
            return True
        except docker.errors.NotFound:
            return False

    def image_env(self, image: str) -> dict[str, str]:
        try:
            img = self._call(f"image {image}", self.client.images.get, image, lookup=True)
        except docker.errors.NotFound:
            return {}
        return _env_dict((img.attrs.get("Config") or {}).get("Env"))

    def image_labels(self, image: str) -> dict[str, str] | None:
        """The image's labels, None when the image is not present."""
        try:
            img = self._call(f"image {image}", self.client.images.get, image, lookup=True)
        except docker.errors.NotFound:
            return None
        return dict((img.attrs.get("Config") or {}).get("Labels") or {})

    def image_identity(self, name: str) -> ImageIdentity | None:
        """The image the container runs: its id from the container (a tag may have moved since), the rest from
        that image."""
        container = self._get(name)
        if container is None:
            return None
        image_id = str(container.attrs.get("Image") or "")
        if not image_id:
            return None
        try:
            img = self._call(f"image {image_id}", self.client.images.get, image_id, lookup=True)
        except docker.errors.NotFound:
            return ImageIdentity(id=image_id)  # removed since the container was created: the id is what is known
        attrs = img.attrs
        return ImageIdentity(
            id=image_id,
            repo_digests=tuple(sorted(attrs.get("RepoDigests") or ())),
            tags=tuple(sorted(attrs.get("RepoTags") or ())),
            created=attrs.get("Created"),
            labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
        )

    def run_script(self, image: str, script: Path, args: Sequence[str]) -> tuple[int, str]:
        """Run a Python script inside `image` (its own python3, the script mounted read-only), removed afterwards:
        (exit status, stdout, or stderr where it failed)."""
        mount = "/gb300lane-probe"

        def run() -> tuple[int, str]:
            try:
                out = self.client.containers.run(
                    image,
                    command=[f"{mount}/{script.name}", *args],
                    entrypoint="python3",
                    volumes={str(script.parent): {"bind": mount, "mode": "ro"}},
                    remove=True,
                    stdout=True,
                    stderr=False,
                    network_mode="none",
                    labels={LABEL_PREFIX + "lane": "probe"},
                )
            except docker.errors.ContainerError as exc:
                err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
                return int(exc.exit_status), err
            return 0, out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out)

        result: tuple[int, str] = self._call(f"run {script.name} in {image}", run)
        return result

    def pull_image(self, image: str) -> None:
        try:
            self._call(f"pull {image}", self.client.images.pull, image, lookup=True)
        except docker.errors.NotFound as exc:
            raise BootError(f"pull {image}: no such image in its registry; check image.ref in the recipe") from exc

    def build_image(self, context: Path, tag: str, labels: Mapping[str, str]) -> str:
        """Build `tag` from the Dockerfile in `context`; returns the image id."""
        try:
            image, _logs = self._call(
                f"build {tag}",
                self.client.images.build,
                path=str(context),
                tag=tag,
                labels=dict(labels),
                rm=True,
                forcerm=True,
            )
        except docker.errors.BuildError as exc:
            lines = "".join(str(c.get("stream", c.get("error", ""))) for c in exc.build_log)[-4000:]
            raise BootError(f"build {tag} failed: {exc.msg}\n{lines}") from exc
        return str(image.id)

    def load_image(self, chunks: Iterator[bytes]) -> list[str]:
        """Load a `docker save` stream into this engine (`docker load`); returns the tags it now has."""
        images = self._call("load image", self.client.images.load, chunks)  # requests streams it in chunks
        return [t for img in images for t in img.tags]

    def save_image(self, image: str) -> Iterator[bytes]:
        """The image as `docker save` writes it (a tar stream, in chunks), to load into another engine."""
        img = self._call(f"image {image}", self.client.images.get, image)
        try:
            # Name the archive by the tag asked for: the SDK's named=True takes the image's first tag, maybe another one.
            yield from self._call(f"save {image}", img.save, named=image if image in img.tags else True)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise BootError(f"save {image}: the Docker engine's stream broke ({exc})") from exc

    def prune_dangling_images(self, label: str) -> int:
        """Remove untagged images carrying `label` (older builds of a rebuilt tag); returns how many."""
        result = self._call(
            f"prune images {label}", self.client.images.prune, filters={"dangling": True, "label": label}
        )
        return len((result or {}).get("ImagesDeleted") or [])

    # -- containers -----------------------------------------------------------
    def create(self, spec: SpecLike) -> ContainerInfo:
        if self._get(spec.name) is not None:
            raise BootError(f"a Docker container named {spec.name} already exists; remove it with `gb300lane down`")
        if not self.image_present(spec.image):
            if self.pull:
                self.pull_image(spec.image)
            else:
                raise BootError(f"image {spec.image} is not present on this Docker engine; {image_fix(spec.image)}")
        argv = list(spec.argv)
        kwargs: dict[str, Any] = {
            "name": spec.name,
            # Entrypoint + cmd make the argv exact whatever the image's own entrypoint is.
            "entrypoint": argv[:1],
            "command": argv[1:],
            "environment": {str(k): str(v) for k, v in dict(spec.env).items()},
            "labels": dict(spec.labels),
            "network_mode": spec.network_mode or "host",
            "detach": True,
            "volumes": _volumes(spec.volumes),
            "ulimits": _ulimits(spec.ulimits),
        }
        if spec.ipc_mode:
            kwargs["ipc_mode"] = spec.ipc_mode
        if spec.shm_size:
            kwargs["shm_size"] = spec.shm_size
        if spec.device_ids:
            kwargs["device_requests"] = [
                docker.types.DeviceRequest(device_ids=[str(d) for d in spec.device_ids], capabilities=[["gpu"]])
            ]
        dockerhost.new_epoch()  # before the container exists: a crash after this leaves it findable
        container = self._call(f"create {spec.name}", self.client.containers.create, spec.image, **kwargs)
        dockerhost.new_epoch()  # and after: a listing that began before the container existed is outdated too
        return self._info(container)

    def start(self, name: str, *, secrets: Mapping[str, str] | None = None) -> ContainerInfo:
        container = self._require(name)
        self._call(f"start {name}", container.start)
        container.reload()
        return self._info(container)

    def stop(self, name: str, *, timeout_s: float = 10.0) -> ContainerInfo:
        container = self._require(name)
        self._call(f"stop {name}", container.stop, timeout=int(max(1, timeout_s)))
        container.reload()
        return self._info(container)

    def remove(self, name: str) -> None:
        container = self._get(name)
        if container is None:
            return
        try:
            self._call(f"remove {name}", container.remove, force=True, v=True, lookup=True)
        except docker.errors.NotFound:
            return

    def inspect(self, name: str) -> ContainerInfo:
        container = self._get(name)
        if container is None:
            return ContainerInfo(name=name, runtime=self.name, state="missing")
        return self._info(container)

    def _require(self, name: str) -> Any:
        container = self._get(name)
        if container is None:
            raise BootError(f"no Docker container named {name}; see `gb300lane status`")
        return container

    def _info(self, container: Any) -> ContainerInfo:
        attrs = container.attrs
        st = attrs.get("State") or {}
        cfg = attrs.get("Config") or {}
        status = st.get("Status", "")
        state = (
            "running"
            if status in ("running", "restarting", "paused")
            else ("created" if status == "created" else "exited")
        )
        argv = tuple([attrs.get("Path", "")] + list(attrs.get("Args") or []))
        detail = ""
        if state == "exited":
            detail = f"exited with status {st.get('ExitCode')}" + (" (OOM-killed)" if st.get("OOMKilled") else "")
            if st.get("Error"):
                detail += f": {st['Error']}"
        return ContainerInfo(
            name=container.name,
            runtime=self.name,
            state=state,
            argv=argv,
            env=_env_dict(cfg.get("Env")),
            labels=dict(cfg.get("Labels") or {}),
            image=str(cfg.get("Image", "")),
            pid=st.get("Pid") or None,
            exit_code=st.get("ExitCode") if state == "exited" else None,
            started_at=_parse_time(st.get("StartedAt")),
            detail=detail,
        )

    def logs(self, name: str, *, tail: int | None = None, since: float | None = None) -> str:
        container = self._require(name)
        kwargs: dict[str, Any] = {"stdout": True, "stderr": True, "tail": tail if tail is not None else "all"}
        if since is not None:
            kwargs["since"] = float(since)
        raw: bytes = self._call(f"logs {name}", container.logs, **kwargs)
        return raw.decode("utf-8", "replace")

    def follow(self, name: str, *, tail: int | None = None) -> Iterator[str]:
        container = self._require(name)
        stream = self._call(
            f"logs {name}", container.logs, stream=True, follow=True, tail=tail if tail is not None else "all"
        )
        buf = b""
        for chunk in stream:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.decode("utf-8", "replace")
        if buf:
            yield buf.decode("utf-8", "replace")

    def list(self, labels: Mapping[str, str] | None = None) -> list[ContainerInfo]:
        filters = [f"{k}={v}" for k, v in (labels or {}).items()] or [LABEL_PREFIX + "lane"]
        found = self._call("list containers", self.client.containers.list, all=True, filters={"label": filters})
        return [self._info(c) for c in found if label_filter(c.labels, labels)]

    def list_state(self, labels: Mapping[str, str]) -> builtins.list[ContainerInfo]:
        """`list`, and on this machine's engine a record that it holds none of this state's containers when it
        listed none (`dockerhost`: the next `status` need not load the SDK to learn it)."""
        sock = dockerhost.local_socket()
        seen = dockerhost.epoch() if sock is not None else None
        listed = self.list(labels)
        if sock is not None and not listed:
            dockerhost.record_none(seen, sock)
        return listed

    def host_path(self, spec: SpecLike, container_path: str) -> Path | None:
        """Map a container path through the bind mounts; None when no mount covers it.

        A created container's own mounts are the evidence (a restart re-renders
        the spec against today's environment, the container kept its mounts);
        the spec's are used before it exists.
        """
        target = PurePosixPath(container_path)
        container = self._get(spec.name)
        if container is not None:
            binds = (container.attrs.get("HostConfig") or {}).get("Binds") or []
        else:
            binds = list(spec.volumes or ())
        for source, mount in _volumes(binds).items():
            bind = PurePosixPath(mount["bind"])
            if target == bind or bind in target.parents:
                if not source.startswith("/"):
                    return None  # a named volume: its host path is the engine's business
                return Path(source) / target.relative_to(bind)
        return None
