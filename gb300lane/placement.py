"""Where the tool acts: one lane of the hosts inventory, as a value the layers below read.

Without an inventory the tool acts on the one lane of this machine, with the
state directory, the local runtimes and 127.0.0.1, as it always has. With
`--host HOST` (or `--host HOST/LANE` on a host with several lanes) the command runs inside `placed(placement)`:
the state directory becomes that lane's own folder under `hosts/<host>/<lane>/`
(so two lanes' instances, boot reports and promotion ledgers are never mixed),
the Docker runtime talks to that host's engine, the lane's facts (listening
sockets, GPUs) are read on that box, and loopback endpoints there are reached
through SSH tunnels.

A context variable rather than a parameter threaded through every call: the
same `up`, `smoke` and `promote` run unchanged on any lane, and a fleet
rollout moves from lane to lane by entering one scope after another.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from pydantic import Field

from gb300lane.models import FrozenModel


class SshAccess(FrozenModel):
    """How to reach a box over SSH: the ssh program's own options, nothing home-made."""

    user: str | None = Field(default=None, description="Login user (ssh -l); None: the ssh config's.")
    host: str = Field(description="Host name or address ssh connects to.")
    port: int | None = Field(default=None, description="SSH port (ssh -p); None: 22 or the ssh config's.")
    identity: str | None = Field(default=None, description="Private key file (ssh -i); None: the agent's or config's.")
    known_hosts: str | None = Field(
        default=None, description="Known-hosts file the box's key is checked against (UserKnownHostsFile)."
    )
    docker_socket: str = Field(default="/var/run/docker.sock", description="The Docker engine's socket on the box.")

    @property
    def destination(self) -> str:
        """`user@host` (or `host`), as ssh names the box in messages."""
        return f"{self.user}@{self.host}" if self.user else self.host


class TlsAccess(FrozenModel):
    """Client TLS for a `tcp://` Docker engine: the CA that signed the engine's certificate, and the client's pair."""

    ca: str = Field(description="CA certificate the engine's certificate must chain to.")
    cert: str = Field(description="Client certificate.")
    key: str = Field(description="Client private key.")


class Placement(FrozenModel):
    """One lane of the inventory: its host, how to reach that host's engine, and the lane's own defaults."""

    host: str = Field(description="Host name in the inventory.")
    lane: str = Field(description="Lane name in the inventory (unique across it).")
    docker: str = Field(description="`local`, `ssh://user@box[:port]` or `tcp://box:port` (TLS).")
    ssh: SshAccess | None = Field(default=None, description="SSH access, for an ssh:// host.")
    tls: TlsAccess | None = Field(default=None, description="Client TLS, for a tcp:// host.")
    address: str = Field(description="Address the tool reaches the box's lanes at (127.0.0.1 for this machine).")
    runtime: str | None = Field(default=None, description="Runtime the lane boots on; None: the recipe's.")
    port: int | None = Field(default=None, description="The lane's serving port; None: the recipe's lane.port.")
    sidecar_port: int | None = Field(default=None, description="The sidecar's port; None: the recipe's sidecar.port.")
    gpu_ids: tuple[str, ...] | None = Field(
        default=None, description="GPU device ids the inventory says the host has (None: not declared)."
    )
    gpu_products: dict[str, str] = Field(default_factory=dict, description="GPU device id -> product.")
    inventory: str = Field(description="The inventory file this placement was read from.")
    selector: str = Field(description="What names this lane after --host: HOST for a host's one lane, else HOST/LANE.")

    @property
    def remote(self) -> bool:
        """True when the host is another box (its engine, sockets and GPUs are not this machine's)."""
        return self.docker != "local"

    @property
    def scope_args(self) -> str:
        """The option that names this lane on a command line (`--host HOST` or `--host HOST/LANE`)."""
        return f"--host {self.selector}"


_CURRENT: ContextVar[Placement | None] = ContextVar("gb300lane_placement", default=None)


def current() -> Placement | None:
    """The lane the tool acts on, None for this machine's own lane (no inventory)."""
    return _CURRENT.get()


@contextmanager
def placed(placement: Placement | None) -> Iterator[Placement | None]:
    """Act on `placement` (None: this machine's own lane) for the length of the block."""
    token = _CURRENT.set(placement)
    try:
        yield placement
    finally:
        _CURRENT.reset(token)


def state_subdir(root: Path, placement: Placement | None) -> Path:
    """The state folder of `placement` under the state root: `hosts/<host>/<lane>` (the root itself without one)."""
    if placement is None:
        return root
    return root / "hosts" / placement.host / placement.lane


def scope_suffix() -> str:
    """` --host HOST[/LANE]` to append to a command a message suggests, empty for this machine's own lane."""
    p = current()
    return f" {p.scope_args}" if p is not None else ""
