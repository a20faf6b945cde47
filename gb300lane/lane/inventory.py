"""The hosts inventory (`lanes.yaml`): the boxes, how to reach each one's Docker engine, its GPUs and its lanes.

    schema_version: 1
    hosts:
      station-a:
        docker: ssh://ops@station-a          # or tcp://box:2376 with tls, or local
        ssh_key: ~/.ssh/gb300lane            # optional: ssh -i
        known_hosts: ~/.ssh/known_hosts      # optional: the file the box's host key is checked in
        gpus:
          - {product: NVIDIA-GB300, ids: ["0"]}
          - {product: NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition, ids: ["1"]}
        lanes:
          - {name: a-main, runtime: docker, port: 30106, sidecar_port: 30107}

Read with the one strict YAML reader and checked like a recipe: an unknown
key, a bad name or URL, a tcp:// host without TLS, a lane named twice, or two
lanes of one host on one port is one line naming the file, the key and the
fix. Recipes stay box-agnostic; a lane entry says where a recipe runs.
`placement("HOST")` (or `"HOST/LANE"`) turns a `--host` into the
`Placement` the layers below act on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, StrictInt, ValidationError, field_validator, model_validator

from gb300lane.errors import InventoryError
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.names import RuntimeName, name_problem
from gb300lane.placement import Placement, SshAccess, TlsAccess
from gb300lane.recipes.yamlio import load_mapping
from gb300lane.runtime import reaches_remote_hosts

#: Environment variable naming the inventory file (else ./lanes.yaml).
INVENTORY_ENV = "GB300LANE_INVENTORY"
INVENTORY_FILE = "lanes.yaml"


def _name(value: str, what: str) -> str:
    problem = name_problem(value, what)
    if problem:
        raise ValueError(problem)
    return value


class GpuGroup(FrozenModel):
    """GPUs of one product on a host."""

    product: str = Field(description="GPU product, as nvidia.com/gpu.product spells it (e.g. NVIDIA-GB300).")
    ids: tuple[str, ...] = Field(
        min_length=1, description="Device ids (index or UUID), as the recipe's gpus name them."
    )

    @field_validator("ids", mode="before")
    @classmethod
    def _ids_as_strings(cls, v: object) -> object:
        if isinstance(v, (list, tuple)):
            return tuple(str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v)
        return v


class LaneEntry(FrozenModel):
    """One lane a host carries: its name and where on the host it serves."""

    name: str = Field(description="Lane name, unique in the inventory (`--host HOST/LANE`, `--lanes a,b`).")
    runtime: RuntimeName | None = Field(
        default=None, description="Runtime it boots on (process only on this machine); None: the recipe's."
    )
    port: StrictInt | None = Field(
        default=None, ge=1, le=65535, description="Serving port; None: the recipe's lane.port."
    )
    sidecar_port: StrictInt | None = Field(
        default=None, ge=1, le=65535, description="Sidecar port; None: the recipe's sidecar.port."
    )

    @field_validator("name")
    @classmethod
    def _lane_name(cls, v: str) -> str:
        return _name(v, "lane name")


class HostEntry(FrozenModel):
    """One box: how to reach its Docker engine, its GPUs, the lanes it carries."""

    docker: str = Field(description="`local`, `ssh://user@box[:port]`, or `tcp://box:port` (with tls).")
    ssh_key: str | None = Field(default=None, description="Private key for ssh:// (ssh -i); relative to the inventory.")
    known_hosts: str | None = Field(
        default=None, description="Known-hosts file for ssh:// ; relative to the inventory."
    )
    docker_socket: str = Field(default="/var/run/docker.sock", description="The engine's socket on the box (ssh://).")
    tls: TlsAccess | None = Field(default=None, description="Client TLS (ca, cert, key) for tcp:// ; required there.")
    address: str | None = Field(
        default=None, description="Address the tool reaches the box's lanes at; None: the docker URL's host."
    )
    gpus: tuple[GpuGroup, ...] = Field(default=(), description="The host's GPUs by product (empty: none declared).")
    lanes: tuple[LaneEntry, ...] = Field(min_length=1, description="The lanes this host carries.")

    @field_validator("docker")
    @classmethod
    def _docker_url(cls, v: str) -> str:
        if v == "local":
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("ssh", "tcp") or not parts.hostname:
            raise ValueError(f"{v!r} is not a Docker host URL; use local, ssh://user@box[:port] or tcp://box:port")
        try:
            parts.port
        except ValueError as exc:
            raise ValueError(f"{v!r}: {exc}") from None
        if parts.path not in ("", "/") or parts.query or parts.password:
            raise ValueError(f"{v!r}: a Docker host URL has no path, query or password; use ssh://user@box[:port]")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> HostEntry:
        scheme = urlsplit(self.docker).scheme if self.docker != "local" else "local"
        if scheme == "tcp" and self.tls is None:
            raise ValueError(
                "a tcp:// engine needs tls: {ca, cert, key}; the tool never talks to an engine in the clear"
            )
        if scheme != "tcp" and self.tls is not None:
            raise ValueError("tls goes with a tcp:// docker URL only; remove it or change docker")
        if scheme != "ssh" and (self.ssh_key or self.known_hosts):
            raise ValueError("ssh_key and known_hosts go with an ssh:// docker URL only; remove them or change docker")
        if scheme != "local" and any(
            lane.runtime is not None and not reaches_remote_hosts(lane.runtime) for lane in self.lanes
        ):
            raise ValueError("the process runtime runs on this machine only; give remote lanes runtime: docker")
        ports: dict[int, str] = {}
        for lane in self.lanes:
            for kind, port in (("port", lane.port), ("sidecar_port", lane.sidecar_port)):
                if port is None:
                    continue
                if port in ports:
                    raise ValueError(
                        f"lane {lane.name} {kind} {port} is also {ports[port]}; give each lane of a host its own ports"
                    )
                ports[port] = f"lane {ports.get(port, lane.name)} {kind}"
        return self


class Inventory(FrozenModel):
    """The hosts inventory file."""

    schema_version: Literal[1] = Field(description="Inventory schema version.")
    hosts: dict[str, HostEntry] = Field(min_length=1, description="Host name -> the host.")

    @field_validator("hosts")
    @classmethod
    def _host_names(cls, v: dict[str, HostEntry]) -> dict[str, HostEntry]:
        for name in v:
            _name(name, "host name")
        return v

    @model_validator(mode="after")
    def _unique_lanes(self) -> Inventory:
        seen: dict[str, str] = {}
        for host, entry in self.hosts.items():
            for lane in entry.lanes:
                if lane.name in seen:
                    raise ValueError(
                        f"lane {lane.name} is named on hosts {seen[lane.name]} and {host}; lane names are unique"
                    )
                seen[lane.name] = host
        return self

    def lanes(self) -> list[tuple[str, LaneEntry]]:
        """Every (host, lane), in file order."""
        return [(host, lane) for host, entry in self.hosts.items() for lane in entry.lanes]


def inventory_path() -> Path:
    """`GB300LANE_INVENTORY`, else `./lanes.yaml`."""
    env = os.environ.get(INVENTORY_ENV)
    return Path(env) if env else Path.cwd() / INVENTORY_FILE


class LoadedInventory(FrozenModel):
    """An inventory with the file it was read from (relative paths in it are relative to that file)."""

    path: str = Field(description="The inventory file.")
    inventory: Inventory = Field(description="Its content.")


def load_inventory(path: Path | None = None) -> LoadedInventory:
    """Read and check the inventory; InventoryError naming the file, the key and the fix."""
    path = path or inventory_path()
    if not path.is_file():
        raise InventoryError(
            f"{path}: no hosts inventory there; --host, --lanes and --fleet need one: write lanes.yaml in the "
            f"working directory (or point {INVENTORY_ENV} at it) with schema_version: 1 and hosts:"
        )
    raw = load_mapping(path, str(path), error=InventoryError)
    try:
        inv = Inventory.model_validate(raw)
    except ValidationError as exc:
        raise InventoryError(format_validation_error(exc, source=str(path), first_only=True)) from None
    return LoadedInventory(path=str(path), inventory=inv)


def _file(base: Path, value: str | None) -> str | None:
    if value is None:
        return None
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else (base / p).resolve())


def _placement(loaded: LoadedInventory, host: str, lane: LaneEntry) -> Placement:
    entry = loaded.inventory.hosts[host]
    base = Path(loaded.path).resolve().parent
    ssh = tls = None
    address = entry.address or "127.0.0.1"
    if entry.docker != "local":
        parts = urlsplit(entry.docker)
        address = entry.address or str(parts.hostname)
        if parts.scheme == "ssh":
            ssh = SshAccess(
                user=parts.username, host=str(parts.hostname), port=parts.port, identity=_file(base, entry.ssh_key),
                known_hosts=_file(base, entry.known_hosts), docker_socket=entry.docker_socket,
            )  # fmt: skip
        elif entry.tls is not None:
            tls = TlsAccess(
                ca=str(_file(base, entry.tls.ca)),
                cert=str(_file(base, entry.tls.cert)),
                key=str(_file(base, entry.tls.key)),
            )
    ids = tuple(i for g in entry.gpus for i in g.ids) if entry.gpus else None
    return Placement(
        host=host, lane=lane.name, docker=entry.docker, ssh=ssh, tls=tls, address=address, runtime=lane.runtime,
        port=lane.port, sidecar_port=lane.sidecar_port, gpu_ids=ids,
        gpu_products={i: g.product for g in entry.gpus for i in g.ids}, inventory=loaded.path,
        selector=host if len(entry.lanes) == 1 else f"{host}/{lane.name}",
    )  # fmt: skip


def placement(selector: str, *, path: Path | None = None) -> Placement:
    """The lane `--host HOST` (a host's one lane) or `--host HOST/LANE` names; InventoryError when it names nothing."""
    loaded = load_inventory(path)
    inv = loaded.inventory
    host, _, lane = selector.partition("/")
    if host not in inv.hosts:
        raise InventoryError(f"{loaded.path}: no host named {host}; the inventory has {', '.join(inv.hosts)}")
    lanes = inv.hosts[host].lanes
    if lane:
        for entry in lanes:
            if entry.name == lane:
                return _placement(loaded, host, entry)
        raise InventoryError(
            f"{loaded.path}: host {host} carries no lane {lane}; it carries {', '.join(x.name for x in lanes)}"
        )
    if len(lanes) > 1:
        raise InventoryError(
            f"host {host} carries {len(lanes)} lanes ({', '.join(x.name for x in lanes)}); "
            f"name one as --host {host}/LANE"
        )
    return _placement(loaded, host, lanes[0])


def placements(path: Path | None = None, *, lanes: list[str] | None = None) -> list[Placement]:
    """Every lane of the inventory in file order, or the `lanes` named, in the order named."""
    loaded = load_inventory(path)
    every = {entry.name: (h, entry) for h, entry in loaded.inventory.lanes()}
    if lanes is None:
        return [_placement(loaded, h, e) for h, e in every.values()]
    out: list[Placement] = []
    for name in lanes:
        if name not in every:
            raise InventoryError(f"{loaded.path}: no lane named {name}; the inventory has {', '.join(every)}")
        if any(p.lane == name for p in out):
            raise InventoryError(f"lane {name} is named twice; name each lane once")
        out.append(_placement(loaded, *every[name]))
    return out
