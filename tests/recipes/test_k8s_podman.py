"""`gb300lane render local-v27 --format k8s`, run for real under `podman kube play`.

The manifests are played as rendered; podman 4.3 (Debian's) applies what it
can express: Deployments as pods, the ConfigMap as env and as the mounted
`vllm serve --config` file, the claim as a named volume. What it cannot
express is reported at the end of the run (a `PodmanPartsSkipped` warning),
read from the manifests themselves:

- Services: podman 4.3 has none, and no cluster DNS. The sidecar's Service
  name is put in the containers' hosts file (containers.conf
  `base_hosts_file`) at the pod network's gateway, where podman publishes
  the sidecar's port, so main reaches the sidecar by the name the manifest
  gives, as it would through the Service.
- probes: podman 4.3 runs neither startup nor readiness probes; the test waits
  on /health itself.
- node selection and GPU requests, NetworkPolicy, the Recreate strategy,
  `enableServiceLinks`, the claim's size and access mode.

The claim's semantics are checked: the first boot compiles (a miss), a restart
of main reads the same volume and is a hit, and `podman kube down` removes the
pods and leaves the volume, as deleting a Deployment leaves its claim.

Everything runs in a network namespace the test makes (`ip netns`), so the
ports podman publishes (on every address, its 4.3 behaviour) are seen by
nothing else on the machine. The engine image comes from Docker
(`docker save` into `podman load`), hence the `docker` marker as well.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gb300lane.lane.logparse import parse as parse_boot_log
from gb300lane.recipes import load_recipe, render
from gb300lane.runtime.docker import DockerRuntime
from gb300lane.runtime.image import ENGINE_IMAGE, SOURCE_HASH_LABEL, ensure_engine_image

pytestmark = [pytest.mark.podman, pytest.mark.docker, pytest.mark.slow]

RECIPE = "local-v27"
KUBE_NETWORK = "podman-default-kube-network"
BOOT_TIMEOUT_S = 180.0


class PodmanPartsSkipped(UserWarning):
    """Parts of the manifests podman 4.3 does not apply, so this test did not exercise them."""


_WAIT_READY = r"""
import sys, time, urllib.error, urllib.request
base, limit = sys.argv[1], float(sys.argv[2])
deadline, last = time.monotonic() + limit, "no answer"
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            if r.status == 200:
                with urllib.request.urlopen(base + "/v1/models", timeout=5) as m:
                    print(m.read().decode())
                sys.exit(0)
    except urllib.error.HTTPError as exc:
        last = f"HTTP {exc.code}"
    except OSError as exc:
        last = str(exc)
    time.sleep(0.5)
print(f"{base}/health did not answer 200 within {limit:.0f} s (last: {last})", file=sys.stderr)
sys.exit(1)
"""


class Podman:
    """podman and client commands inside one network namespace, with the test's containers.conf."""

    def __init__(self, netns: str, conf: Path | None = None) -> None:
        self.netns, self.conf = netns, conf

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf is not None:
            env["CONTAINERS_CONF"] = str(self.conf)
        return env

    def run(
        self, argv: list[str], *, timeout: float = 120, check: bool = True, stdin: Any = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["nsenter", f"--net={self.netns}", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            stdin=stdin,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv[:4])} ... exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def podman(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["podman", *args], timeout=timeout, check=check)


@pytest.fixture
def netns() -> Iterator[str]:
    """A private network namespace with only loopback, removed after the test."""
    if os.geteuid() != 0:
        pytest.fail(
            "the podman test runs rootful podman in a network namespace it makes: run it as root "
            "(CI does), or set GB300LANE_SKIP_PODMAN=1",
            pytrace=False,
        )
    missing = [tool for tool in ("ip", "nsenter") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"the podman test needs {', '.join(missing)} (iproute2, util-linux); install them "
            "(bash .ci/run does), or set GB300LANE_SKIP_PODMAN=1",
            pytrace=False,
        )
    name = f"gb300lane-podman-{os.getpid()}"
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True, timeout=30)
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)


def load_engine_image(pm: Podman) -> str:
    """Put the engine image Docker built into podman's store, unless the same build is already there."""
    built = ensure_engine_image()
    have = pm.podman(
        "image", "inspect", ENGINE_IMAGE, "--format", f'{{{{index .Labels "{SOURCE_HASH_LABEL}"}}}}', check=False
    )
    if have.returncode == 0 and have.stdout.strip() == built.source_hash:
        return "already loaded"
    with tempfile.TemporaryFile() as errors:
        load = subprocess.Popen(
            ["podman", "load"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors, env=pm.env()
        )
        assert load.stdin is not None
        with load.stdin:
            for chunk in DockerRuntime().save_image(ENGINE_IMAGE):
                load.stdin.write(chunk)
        load.wait(timeout=300)
        errors.seek(0)
        assert load.returncode == 0, f"podman load: {errors.read().decode()[-2000:]}"
    # The previous load lost its tag to this one.
    pm.podman("image", "prune", "--force", "--filter", "label=gb300lane.lane=engine-image", check=False)
    return "loaded"


def default_ulimits() -> str:
    """Container ulimits this host can grant: its hard limits, nproc no higher than pid_max (podman lowers
    its own nproc to that) and nofile no higher than podman's default. `.ci/run` writes the same."""

    def hard(kind: int, cap: int) -> int:
        limit = resource.getrlimit(kind)[1]
        return cap if limit == resource.RLIM_INFINITY else min(limit, cap)

    nofile = hard(resource.RLIMIT_NOFILE, 1 << 20)
    nproc = hard(resource.RLIMIT_NPROC, int(Path("/proc/sys/kernel/pid_max").read_text()))
    return f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]'


def containers_conf(tmp_path: Path, hosts_line: str) -> Path:
    """The user's containers.conf (CONTAINERS_CONF, e.g. the one .ci/run writes) plus a base hosts file,
    and default ulimits the host can grant when the user's sets none."""
    hosts = tmp_path / "hosts"
    system = Path("/etc/hosts").read_text(encoding="utf-8") if Path("/etc/hosts").is_file() else "127.0.0.1 localhost\n"
    hosts.write_text(system.rstrip("\n") + "\n" + hosts_line + "\n", encoding="utf-8")
    user = os.environ.get("CONTAINERS_CONF")
    text = Path(user).read_text(encoding="utf-8") if user else ""
    text = re.sub(r"(?m)^\s*base_hosts_file\s*=.*$", "", text)
    lines = f'base_hosts_file = "{hosts}"'
    if not re.search(r"(?m)^\s*default_ulimits\s*=", text):
        lines += "\n" + default_ulimits()
    if re.search(r"(?m)^\s*\[containers\]\s*$", text):
        text = re.sub(r"(?m)^\s*\[containers\]\s*$", "[containers]\n" + lines, text, count=1)
    else:
        text = text.rstrip("\n") + f"\n[containers]\n{lines}\n"
    conf = tmp_path / "containers.conf"
    conf.write_text(text, encoding="utf-8")
    return conf


def play_failure(proc: subprocess.CompletedProcess[str]) -> str:
    text = proc.stdout + proc.stderr
    if "setting rlimit" in text:
        return (
            "podman could not set its default ulimits above this host's hard limits "
            f"(nofile hard {_hard('-Hn')}, nproc hard {_hard('-Hu')}): write a containers.conf with "
            '[containers] default_ulimits = ["nofile=N:N", "nproc=M:M"] at or below them and export '
            f"CONTAINERS_CONF=PATH (bash .ci/run does both)\n{text[-1500:]}"
        )
    return f"podman kube play exited {proc.returncode}:\n{text[-3000:]}"


def _hard(flag: str) -> str:
    return subprocess.run(["bash", "-c", f"ulimit {flag}"], capture_output=True, text=True, timeout=10).stdout.strip()


def skipped_parts(docs: list[dict[str, Any]], hosts_name: str) -> list[str]:
    """What in these manifests podman 4.3 does not apply, in words."""
    out: list[str] = []
    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        if kind == "Service":
            instead = (
                "its name resolves through the hosts file"
                if name == hosts_name
                else "the test reaches the port podman publishes"
            )
            out.append(f"Service {name}: podman has no Services; {instead}")
        elif kind == "NetworkPolicy":
            out.append(f"NetworkPolicy {name}: not enforced")
        elif kind == "Secret":
            out.append(f"Secret {name}: podman 4.3 reads Secrets from its own store, not the YAML")
        elif kind == "PersistentVolumeClaim":
            out.append(
                f"PersistentVolumeClaim {name}: size and access mode (a local named volume), and applying "
                "it again (podman 4.3 will not re-create its volume, so the second play omits it)"
            )
        elif kind == "Deployment":
            pod = d["spec"]["template"]["spec"]
            c = pod["containers"][0]
            parts = [
                p
                for p, present in (
                    ("startupProbe", "startupProbe" in c),
                    ("readinessProbe", "readinessProbe" in c),
                    ("nodeSelector", "nodeSelector" in pod),
                    ("tolerations", "tolerations" in pod),
                    ("GPU requests", "resources" in c),
                    ("strategy Recreate", "strategy" in d["spec"]),
                    ("enableServiceLinks", "enableServiceLinks" in pod),
                )
                if present
            ]
            if parts:
                out.append(f"Deployment {name}: {', '.join(parts)}")
    return out


def assert_pods_gone(pm: Podman, deployments: dict[str, dict[str, Any]]) -> None:
    for d in deployments.values():
        pod = f"{d['metadata']['name']}-pod-0"
        assert pm.podman("pod", "exists", pod, check=False).returncode == 1, f"{pod} still exists after kube down"


def test_local_v27_k8s_manifests_run_under_podman_kube_play(tmp_path: Path, netns: str) -> None:
    started = time.monotonic()
    out_dir = tmp_path / "k8s"
    rendered = subprocess.run(
        [sys.executable, "-m", "gb300lane", "render", RECIPE, "--format", "k8s", "--out", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rendered.returncode == 0, rendered.stderr
    manifest = out_dir / "k8s.yaml"
    docs = list(yaml.safe_load_all(manifest.read_text(encoding="utf-8")))
    deployments = {d["metadata"]["labels"]["gb300lane.role"]: d for d in docs if d["kind"] == "Deployment"}
    sidecar_service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["labels"]["gb300lane.role"] == "sidecar"
    )
    claim = next(d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim")
    config_map = next(d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap")
    lane = render(load_recipe(RECIPE))
    main_pod = f"{deployments['main']['metadata']['name']}-pod-0"
    main_container = f"{main_pod}-main"

    pm = Podman(netns)
    image = load_engine_image(pm)
    if pm.podman("network", "exists", KUBE_NETWORK, check=False).returncode != 0:
        pm.podman("network", "create", KUBE_NETWORK)
    gateway = pm.podman(
        "network", "inspect", KUBE_NETWORK, "--format", "{{range .Subnets}}{{.Gateway}}{{end}}"
    ).stdout.strip()
    pm.conf = containers_conf(tmp_path, f"{gateway}\t{sidecar_service['metadata']['name']}")

    # Leftovers of an interrupted run: the pods, and the volumes podman 4.3 refuses to create twice.
    pm.podman("kube", "down", str(manifest), check=False)
    pm.podman("volume", "rm", "--force", claim, config_map, check=False)

    played = pm.podman("kube", "play", str(manifest), timeout=180, check=False)
    assert played.returncode == 0, play_failure(played)
    try:
        ready = pm.run(
            [sys.executable, "-c", _WAIT_READY, lane.endpoint, str(BOOT_TIMEOUT_S)],
            timeout=BOOT_TIMEOUT_S + 30,
            check=False,
        )
        log = pm.podman("logs", main_container, check=False)
        assert ready.returncode == 0, f"{ready.stderr}\nmain's log:\n{(log.stdout + log.stderr)[-3000:]}"
        models = json.loads(ready.stdout)
        assert [m["id"] for m in models["data"]] == [lane.served_model_name]
        first = parse_boot_log(log.stdout + log.stderr)
        assert first.autotune == "miss", "a fresh claim must compile"
        assert first.cache_root == "/cache/vllm"
        assert "Expert sidecar at http://local-v27-sidecar:30107 is healthy" in log.stdout + log.stderr

        smoke = pm.run(
            [sys.executable, "-m", "gb300lane", "smoke", RECIPE, "--endpoint", lane.endpoint, "--json"],
            timeout=300,
            check=False,
        )
        assert smoke.returncode == 0, f"smoke failed:\n{smoke.stdout[-3000:]}\n{smoke.stderr[-2000:]}"
        report = json.loads(smoke.stdout)
        assert report["passed"] and [g["status"] for g in report["gates"]] == ["PASS", "PASS"]
    finally:
        down = pm.podman("kube", "down", str(manifest), timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert_pods_gone(pm, deployments)
    assert pm.podman("volume", "exists", claim, check=False).returncode == 0, "kube down must leave the claim"

    # The next pods of the same hash mount the same claim: a hit. Kubernetes leaves an existing claim as it
    # is on a second apply; podman 4.3 refuses to create its volume twice, so this play omits the claim.
    replay = tmp_path / "k8s-without-claim.yaml"
    replay.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] != "PersistentVolumeClaim"]), encoding="utf-8")
    played = pm.podman("kube", "play", str(replay), timeout=180, check=False)
    assert played.returncode == 0, play_failure(played)
    try:
        again = pm.run(
            [sys.executable, "-c", _WAIT_READY, lane.endpoint, str(BOOT_TIMEOUT_S)],
            timeout=BOOT_TIMEOUT_S + 30,
            check=False,
        )
        log = pm.podman("logs", main_container, check=False)
        assert again.returncode == 0, f"{again.stderr}\nmain's log:\n{(log.stdout + log.stderr)[-3000:]}"
        second = parse_boot_log(log.stdout + log.stderr)
        assert second.autotune == "hit" and second.compile_hash == first.compile_hash
    finally:
        down = pm.podman("kube", "down", str(replay), timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert_pods_gone(pm, deployments)
    pm.podman("volume", "rm", "--force", claim, config_map)

    seconds = time.monotonic() - started
    warnings.warn(
        PodmanPartsSkipped(
            f"podman kube play {RECIPE} ({seconds:.0f} s, engine image {image}) did not exercise: "
            + "; ".join(skipped_parts(docs, sidecar_service["metadata"]["name"]))
        ),
        stacklevel=1,
    )
