"""Kubernetes manifests for a lane (`render --format k8s`), built as data and dumped with PyYAML.

The manifests are a view of the same containers every other format shows
(argv, env, labels, ports, mounts and GPUs from `render`), placed on a cluster:

- one Deployment per container, `Recreate` (a GPU lane cannot run two copies
  side by side), on the node whose `nvidia.com/gpu.product` label (set by
  NVIDIA GPU feature discovery) is the recipe's `gpus.<role>_product`, with
  `nvidia.com/gpu` requested; the GB300 node for main, the RTX PRO 6000 node
  for the sidecar;
- one ConfigMap with the speculative config (a `vllm serve --config` file,
  mounted into main) and every env var; env whose name looks like a
  credential (`gb300lane.redact.is_secret`: by name or by value) comes from a Secret instead and never appears in
  the ConfigMap;
- one PersistentVolumeClaim per lane mounted at the compile cache root
  (`VLLM_CACHE_ROOT`): every recipe of the lane shares it, as they share the
  box's cache directory, so a restart of the same hash is a hit;
- a startupProbe that waits as long as the lane's own boot does
  (`recipes.boottime.boot_limit_s`: 60 minutes for vLLM, twice the ~1,910 s a
  compile miss takes), readiness on `/health`, Prometheus scrape annotations;
- a ClusterIP Service per container, and for a dark lane a NetworkPolicy that
  admits only the tool (pods labelled `gb300lane.lane=<lane>`,
  `gb300lane.role=tool`).

What differs from the container view, and why:

- both containers listen on all of the pod's addresses (`--host 0.0.0.0`):
  loopback in a pod is the pod's own, and who may connect is the Service's and
  the NetworkPolicy's business. A dark lane is dark by policy here, not by bind.
- main reaches the sidecar at its Service name: the two run on different nodes.
  The sidecar is called off the decode path, so the hop costs no step time.
- a dark lane's main carries no scrape annotations: its NetworkPolicy would
  refuse Prometheus, and the tool scrapes /metrics itself around every cell.
- `/dev/shm` is a memory emptyDir of the spec's shm size. `ipc: host` and
  ulimits have no pod field; they are the node's container runtime's defaults.
- the recipe's other mounts (the model weights) are hostPath volumes on the
  node, as they are host directories on the box. The sidecar gets those but
  not the compile cache, whose claim is attached to main's node.
- `enableServiceLinks: false`: otherwise Kubernetes injects `<SERVICE>_PORT`
  variables, and a Service named `vllm` becomes `VLLM_PORT`, which vLLM reads.
- the embedded engine's image is built locally and lives in no registry:
  `imagePullPolicy: Never` for it, `IfNotPresent` for a vLLM image.

No namespace is written; `kubectl apply -n NS -f k8s.yaml` places the lane.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, cast

import yaml

from gb300lane import __version__
from gb300lane.errors import RenderError
from gb300lane.fsio import atomic_write, dumps_json, sha256_bytes
from gb300lane.recipes.boottime import boot_limit_s
from gb300lane.recipes.containers import ContainerSpec, RenderedLane, compact_json, render
from gb300lane.recipes.engine_schema import schedule_name
from gb300lane.recipes.schema import LABEL_VALUE_RE, Recipe
from gb300lane.redact import is_secret

FILE_NAME = "k8s.yaml"
#: The node label NVIDIA GPU feature discovery sets to the GPU's product name.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
#: Where main reads the ConfigMap's `vllm serve --config` file.
CONFIG_DIR = "/etc/gb300lane"
SERVE_CONFIG_KEY = "vllm-serve.yaml"
#: vLLM's cache root when VLLM_CACHE_ROOT is unset (~/.cache/vllm of root).
DEFAULT_CACHE_ROOT = "/root/.cache/vllm"
#: One claim holds what every hash of the lane compiled (graphs, autotune results; no weights).
COMPILE_CACHE_SIZE = "20Gi"
#: Readiness every 10 s; startup as long as `boot_limit_s` (vLLM: 360 x 10 s = 60 minutes, a compile miss twice over).
PROBE_PERIOD_S = 10
PROBE_TIMEOUT_S = 5
READINESS_FAILURES = 3


def startup_failures(recipe: Recipe) -> int:
    """The startupProbe's failureThreshold: probes at PROBE_PERIOD_S until the recipe's boot limit has passed."""
    return max(READINESS_FAILURES, math.ceil(boot_limit_s(recipe) / PROBE_PERIOD_S))


#: Labels that select one container's pods. The fingerprint and tool version stay out:
#: a selector cannot change, and both change without the workload changing identity.
SELECTOR_KEYS = ("gb300lane.lane", "gb300lane.recipe", "gb300lane.role")
TOOL_ROLE = "tool"

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SHM_UNITS = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}


def object_name(name: str, recipe: Recipe) -> str:
    """A Kubernetes object name (a DNS-1035 label) for a lane's object: lowercase, `.`/`_` become `-`."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not _DNS_LABEL.match(out):
        raise RenderError(
            f"recipe {recipe.name}: {name!r} makes no Kubernetes object name ({out!r} must start with a letter "
            "and have at most 63 letters, digits and -); shorten lane.name or the recipe name"
        )
    return out


def _labels(labels: dict[str, str], recipe: Recipe) -> dict[str, str]:
    for key, value in labels.items():
        if not LABEL_VALUE_RE.match(value):
            raise RenderError(
                f"recipe {recipe.name}: label {key}={value!r} is not a Kubernetes label value "
                "(at most 63 characters, letters or digits at both ends); rename the recipe or the lane"
            )
    return dict(labels)


def _replace_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with `flag`'s value set to `value` (the flag dropped when None); `--flag v` and `--flag=v` alike."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == flag and i + 1 < len(argv):
            if value is not None:
                out += [flag, value]
            i += 2
            continue
        if tok.startswith(flag + "="):
            if value is not None:
                out.append(f"{flag}={value}")
            i += 1
            continue
        out.append(tok)
        i += 1
    return out


def _escape(values: list[str]) -> list[str]:
    """Kubernetes expands `$(VAR)` in command and args; `$$` is a literal `$`."""
    return [v.replace("$", "$$") for v in values]


def _mount(spec: str) -> tuple[str, str, bool]:
    """A `source:target[:ro]` mount of a ContainerSpec as (source, target, read_only)."""
    parts = spec.split(":")
    read_only = len(parts) > 2 and parts[-1] == "ro"
    return parts[0], parts[1] if len(parts) > 1 else parts[0], read_only


def _shm_quantity(size: str) -> str:
    """Docker's `32g` (binary units) as a Kubernetes quantity, `32Gi`."""
    m = re.fullmatch(r"(\d+)([bkmgt]?)", size.strip().lower())
    if not m:
        raise RenderError(f"shm size {size!r}: expected a number with b, k, m, g or t")
    return m.group(1) + _SHM_UNITS[m.group(2)]


def _probe(failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": PROBE_PERIOD_S,
        "timeoutSeconds": PROBE_TIMEOUT_S,
        "failureThreshold": failures,
    }


class _Lane:
    """The facts shared by every manifest of one rendered recipe."""

    def __init__(self, recipe: Recipe, lane: RenderedLane, dark: bool) -> None:
        self.recipe, self.lane, self.dark = recipe, lane, dark
        self.base = object_name(f"{recipe.lane.name}-{recipe.name}", recipe)
        self.claim = object_name(f"{recipe.lane.name}-compile-cache", recipe)
        common = {k: v for k, v in lane.containers[0].labels.items() if k != "gb300lane.role"}
        self.config_labels = _labels({**common, "gb300lane.role": "config"}, recipe)
        self.claim_labels = _labels(
            {
                "gb300lane.lane": recipe.lane.name,
                "gb300lane.role": "compile-cache",
                "gb300lane.tool-version": __version__,
            },
            recipe,
        )
        main = lane.container("main")
        assert main is not None
        self.cache_root = main.env.get("VLLM_CACHE_ROOT") or DEFAULT_CACHE_ROOT
        sidecar = lane.container("sidecar")
        self.sidecar_url = f"http://{object_name(sidecar.name, recipe)}:{sidecar.port}" if sidecar is not None else None
        self.config_data: dict[str, str] = {}
        self.secret_data: dict[str, str] = {}

    def env(self, c: ContainerSpec) -> list[dict[str, Any]]:
        """The container's env, each value from the ConfigMap (or the Secret), keyed `<role>.<NAME>`."""
        values = dict(c.env)
        if c.role == "main" and self.recipe.sidecar is not None and self.sidecar_url is not None:
            values[self.recipe.sidecar.connect_env] = self.sidecar_url
        out = []
        for name, value in sorted(values.items()):
            key = f"{c.role}.{name}"
            if not _CONFIG_KEY.match(key):
                raise RenderError(
                    f"recipe {self.recipe.name}: env name {name!r} cannot be a ConfigMap key; "
                    "use letters, digits, - _ and . only"
                )
            if is_secret(name, value):
                self.secret_data[key] = base64.b64encode(value.encode()).decode()
                ref = {"secretKeyRef": {"name": self.base, "key": key}}
            else:
                self.config_data[key] = value
                ref = {"configMapKeyRef": {"name": self.base, "key": key}}
            out.append({"name": name, "valueFrom": ref})
        return out

    def argv(self, c: ContainerSpec) -> list[str]:
        """The container's argv in a pod: all addresses, and main's speculative config from the ConfigMap file."""
        argv = _replace_flag(list(c.argv), "--host", "0.0.0.0")
        if c.role == "main":
            argv = _replace_flag(argv, "--speculative-config", None)
            argv += ["--config", f"{CONFIG_DIR}/{SERVE_CONFIG_KEY}"]
        return _escape(argv)

    def gpu_product(self, role: str, c: ContainerSpec) -> str | None:
        if not c.device_ids:
            return None
        gpus = self.recipe.gpus
        product = gpus.main_product if role == "main" else gpus.sidecar_product
        if product is None:
            raise RenderError(
                f"recipe {self.recipe.name}: gpus.{role} names devices but gpus.{role}_product is not set; "
                f"Kubernetes selects the node by its {GPU_PRODUCT_LABEL} label, so set gpus.{role}_product "
                "to that label's value (kubectl get nodes -L nvidia.com/gpu.product)"
            )
        return product

    def volumes(self, c: ContainerSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(volumeMounts, volumes) of one container."""
        mounts: list[dict[str, Any]] = []
        volumes: list[dict[str, Any]] = []
        has_cache = False
        for i, spec in enumerate(c.volumes):
            source, target, read_only = _mount(spec)
            if PurePosixPath(target) == PurePosixPath(self.cache_root):
                has_cache = True
                if c.role != "main":
                    continue
                mounts.append({"name": "compile-cache", "mountPath": target})
                volumes.append({"name": "compile-cache", "persistentVolumeClaim": {"claimName": self.claim}})
                continue
            name = f"host-path-{i}"
            mount: dict[str, Any] = {"name": name, "mountPath": target}
            if read_only:
                mount["readOnly"] = True
            mounts.append(mount)
            volumes.append({"name": name, "hostPath": {"path": source, "type": "Directory"}})
        if c.role == "main":
            if not has_cache:
                mounts.append({"name": "compile-cache", "mountPath": self.cache_root})
                volumes.append({"name": "compile-cache", "persistentVolumeClaim": {"claimName": self.claim}})
            mounts.append({"name": "serve-config", "mountPath": CONFIG_DIR, "readOnly": True})
            volumes.append(
                {
                    "name": "serve-config",
                    "configMap": {"name": self.base, "items": [{"key": SERVE_CONFIG_KEY, "path": SERVE_CONFIG_KEY}]},
                }
            )
        if c.shm_size is not None:
            mounts.append({"name": "shm", "mountPath": "/dev/shm"})
            volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": _shm_quantity(c.shm_size)}})
        return mounts, volumes

    def deployment(self, c: ContainerSpec) -> dict[str, Any]:
        labels = _labels(c.labels, self.recipe)
        selector = {k: labels[k] for k in SELECTOR_KEYS}
        argv = self.argv(c)
        container: dict[str, Any] = {
            "name": c.role,
            "image": c.image,
            "imagePullPolicy": "Never" if self.recipe.engine == "embedded" else "IfNotPresent",
            "command": argv[:1],
            "args": argv[1:],
            "ports": [{"name": "http", "containerPort": c.port, "protocol": "TCP"}],
            "env": self.env(c),
        }
        product = self.gpu_product(c.role, c)
        if c.device_ids:
            count = str(len(c.device_ids))
            container["resources"] = {"requests": {GPU_RESOURCE: count}, "limits": {GPU_RESOURCE: count}}
        container["startupProbe"] = _probe(startup_failures(self.recipe))
        container["readinessProbe"] = _probe(READINESS_FAILURES)
        mounts, volumes = self.volumes(c)
        if mounts:
            container["volumeMounts"] = mounts
        annotations: dict[str, str] = {}
        if not (self.dark and c.role == "main"):
            annotations.update(
                {"prometheus.io/scrape": "true", "prometheus.io/port": str(c.port), "prometheus.io/path": "/metrics"}
            )
        pod: dict[str, Any] = {"enableServiceLinks": False}
        if product is not None:
            pod["nodeSelector"] = {GPU_PRODUCT_LABEL: product}
            pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
        pod["containers"] = [container]
        if volumes:
            pod["volumes"] = volumes
        template_meta: dict[str, Any] = {"labels": labels}
        if annotations:
            template_meta["annotations"] = annotations
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": object_name(c.name, self.recipe), "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {"metadata": template_meta, "spec": pod},
            },
        }

    def service(self, c: ContainerSpec) -> dict[str, Any]:
        labels = _labels(c.labels, self.recipe)
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": object_name(c.name, self.recipe), "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": {k: labels[k] for k in SELECTOR_KEYS},
                "ports": [{"name": "http", "port": c.port, "targetPort": "http", "protocol": "TCP"}],
            },
        }

    def network_policy(self, main: ContainerSpec) -> dict[str, Any]:
        labels = _labels(main.labels, self.recipe)
        tool = {"gb300lane.lane": self.recipe.lane.name, "gb300lane.role": TOOL_ROLE}
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": object_name(main.name, self.recipe), "labels": labels},
            "spec": {
                "podSelector": {"matchLabels": {k: labels[k] for k in SELECTOR_KEYS}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": tool}}],
                        "ports": [{"port": main.port, "protocol": "TCP"}],
                    }
                ],
            },
        }


def manifests(recipe: Recipe, *, dark: bool = False, port: int | None = None) -> list[dict[str, object]]:
    """The lane's objects in apply order: ConfigMap, Secret (when env holds credentials), the cache
    claim, then sidecar and main (Deployment, Service), then main's NetworkPolicy when dark."""
    is_dark = dark or recipe.lane.dark
    lane = render(recipe, dark=is_dark, port=port)
    k = _Lane(recipe, lane, is_dark)
    ordered = sorted(lane.containers, key=lambda c: c.role != "sidecar")
    workloads: list[dict[str, Any]] = []
    for c in ordered:
        workloads += [k.deployment(c), k.service(c)]
    main = lane.container("main")
    assert main is not None
    if is_dark:
        workloads.append(k.network_policy(main))
    k.config_data[SERVE_CONFIG_KEY] = yaml.safe_dump(
        {
            "speculative-config": compact_json(
                recipe.speculative.config_json_dict(schedule_name=schedule_name(recipe.image.vllm_version))
            )
        },
        width=2**16,
    )
    config_data = dict(sorted(k.config_data.items()))
    # A changed ConfigMap must restart the pods that read it; the hash in the pod template does that.
    config_hash = sha256_bytes(dumps_json({"config": config_data, "secret": k.secret_data}))[:16]
    for w in workloads:
        if w["kind"] == "Deployment":
            meta = w["spec"]["template"]["metadata"]
            meta["annotations"] = {**meta.get("annotations", {}), "gb300lane.config-sha256": config_hash}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": k.base, "labels": k.config_labels},
            "data": config_data,
        }
    ]
    if k.secret_data:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": k.base, "labels": k.config_labels},
                "type": "Opaque",
                "data": dict(sorted(k.secret_data.items())),
            }
        )
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": k.claim, "labels": k.claim_labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": COMPILE_CACHE_SIZE}}},
        }
    )
    return docs + workloads


class _Dumper(yaml.SafeDumper):
    """Safe YAML without anchors (objects share label dicts), multi-line strings as `|` blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_k8s(docs: Sequence[Mapping[str, object]]) -> str:
    """Manifests as one multi-document YAML file (`kubectl apply -f`, `podman kube play`)."""
    # The first document is the ConfigMap `manifests` builds, its metadata a name and a label mapping.
    labels = cast("Mapping[str, Mapping[str, str]]", docs[0]["metadata"])["labels"]
    header = (
        f"# Rendered by gb300lane from recipe {labels['gb300lane.recipe']} "
        f"(fingerprint {labels['gb300lane.fingerprint']}); edit the recipe, not this file.\n"
    )
    return header + yaml.dump_all(
        docs,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=2**16,
        explicit_start=True,
    )


def render_k8s(recipe: Recipe, *, dark: bool = False, port: int | None = None) -> str:
    """The lane's manifests as YAML text."""
    return dump_k8s(manifests(recipe, dark=dark, port=port))


def write_k8s(recipe: Recipe, out_dir: Path, *, dark: bool = False, port: int | None = None) -> Path:
    """Render, then write `out_dir/k8s.yaml` atomically (nothing is written if rendering fails);
    owner-only when it holds a Secret."""
    docs = manifests(recipe, dark=dark, port=port)
    path = atomic_write(Path(out_dir) / FILE_NAME, dump_k8s(docs))
    if any(d["kind"] == "Secret" for d in docs):
        path.chmod(0o600)
    return path
