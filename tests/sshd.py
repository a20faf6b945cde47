"""An OpenSSH server for the remote-host tests: Debian's sshd on a loopback port, with keys made for the test.

It runs as this user (root), accepts only the generated client key (its own
authorized_keys file), and its host key is written to a known_hosts file, so
`ssh://root@127.0.0.1:PORT` is a second host whose Docker engine is this
machine's, reached the way a remote box is: through ssh.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gb300lane.testing.free_ports import free_port

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshServer:
    port: int
    key: Path
    known_hosts: Path
    folder: Path

    @property
    def url(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"


def _free_port() -> int:
    return free_port()  # below the ephemeral range: an ssh forward's own port can never take it


def problem() -> str | None:
    """Why no sshd can be started here (None when it can)."""
    if not Path(SSHD).is_file():
        return f"{SSHD} is not installed (apt-get install openssh-server; bash .ci/run does)"
    for exe in ("ssh", "ssh-keygen"):
        if shutil.which(exe) is None:
            return f"{exe} is not installed (apt-get install openssh-client)"
    return None


def start(folder: Path) -> tuple[SshServer, subprocess.Popen[bytes]]:
    """Generate the keys, start sshd on a free loopback port, and wait until it accepts a login."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    host_key, key = folder / "host_ed25519", folder / "client_ed25519"
    for path in (host_key, key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    (folder / "authorized_keys").write_text((folder / "client_ed25519.pub").read_text())
    port = _free_port()
    host_pub = (folder / "host_ed25519.pub").read_text().split()
    known = folder / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    config = folder / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1:{port}\nHostKey {host_key}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nAllowTcpForwarding yes\nAllowStreamLocalForwarding yes\n"
        f"PidFile {folder / 'sshd.pid'}\nLogLevel ERROR\n"
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                            stderr=open(folder / "sshd.log", "wb"))  # fmt: skip
    server = SshServer(port=port, key=key, known_hosts=known, folder=folder)
    deadline = time.monotonic() + 20
    while True:
        probe = subprocess.run(
            ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
             "-i", str(key), "-o", "IdentitiesOnly=yes", "-p", str(port), "root@127.0.0.1", "true"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if probe.returncode == 0:
            return server, proc
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log = (folder / "sshd.log").read_text(errors="replace")[-1500:]
            raise RuntimeError(f"sshd did not accept a login on 127.0.0.1:{port}: {probe.stderr.strip()}\n{log}")
        time.sleep(0.2)


def inventory_host(server: SshServer, lanes: list[dict]) -> dict:
    """The inventory entry of this server as a host."""
    return {"docker": server.url, "ssh_key": str(server.key), "known_hosts": str(server.known_hosts), "lanes": lanes}
