"""The local image of the embedded engine, `gb300lane-engine:local`, built FROM scratch.

No registry can be assumed, so nothing is pulled: the image's root filesystem
is assembled from this host. It holds the host's Python (interpreter, shared
library, standard library without tests/idle/tkinter), the installed
distributions the engine needs (the project's runtime requirements, walked
transitively, minus plotting and the Docker SDK), every shared library `ldd`
reports for the ELF files copied, a minimal /etc, and the project source the
engine imports (`gb300lane.engine` and its static import closure). The build runs `python3 -c "import ..."` inside the image, so a broken
rootfs fails the build rather than the first boot.

The image is labelled with a hash of the project source and the Python build;
`ensure_engine_image` rebuilds only when that hash changes.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from pydantic import Field

from gb300lane import __version__, paths, placement
from gb300lane.errors import BootError, RuntimeUnavailable, StateError
from gb300lane.fsio import sha256_bytes
from gb300lane.locks import FileLock
from gb300lane.models import FrozenModel
from gb300lane.runtime.base import ENGINE_IMAGE as ENGINE_IMAGE  # defined with the runtimes, re-exported here

if TYPE_CHECKING:
    from gb300lane.runtime.docker import DockerRuntime

SOURCE_HASH_LABEL = "gb300lane.source-hash"
PREFIX = "/opt/python"
SRC_DIR = "/opt/gb300lane"

#: Requirements the engine never imports inside a container (plots, the Docker SDK).
EXCLUDED_DISTS = frozenset({"matplotlib", "docker"})
_STDLIB_SKIP = frozenset({"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"})
_SKIP_DIRS = frozenset({"tests", "test", "__pycache__"})


class EngineImage(FrozenModel):
    """The outcome of `ensure_engine_image`."""

    tag: str = Field(description="Image reference.")
    source_hash: str = Field(description="Hash of the project source and Python build the image was built from.")
    built: bool = Field(description="True when this call built it; False when the cached image matched.")
    sent_from: str | None = Field(
        default=None, description="Where the image came from when it was loaded rather than built (docker save | load)."
    )
    image_id: str = Field(default="", description="Docker image id (empty when not built by this call).")


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def engine_distributions() -> list[md.Distribution]:
    """The installed distributions the engine image carries: runtime requirements, transitively."""
    env = {"extra": ""}
    stack = [Requirement(r) for r in md.requires("gb300lane") or []]
    seen: dict[str, md.Distribution] = {}
    while stack:
        req = stack.pop()
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        key = _norm(req.name)
        if key in seen or key in EXCLUDED_DISTS:
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue
        seen[key] = dist
        stack.extend(Requirement(r) for r in dist.requires or [])
    return [seen[k] for k in sorted(seen)]


def _module_file(pkg_root: Path, module: str) -> Path | None:
    path = pkg_root.parent.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported_project_modules(source: Path, pkg_root: Path) -> set[Path]:
    """Files of `gb300lane.*` modules a source file imports anywhere (lazy imports included)."""
    out: set[Path] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != pkg_root.name:
                continue
            for i in range(1, len(parts) + 1):
                found = _module_file(pkg_root, ".".join(parts[:i]))
                if found is not None:
                    out.add(found)
    return out


def package_root() -> Path:
    """The installed `gb300lane` package folder (a checkout's or site-packages'), via importlib.resources."""
    root = resources.files("gb300lane")
    if not isinstance(root, Path):
        raise BootError(
            f"gb300lane is installed inside an archive ({root!r}); install it with pip to build the engine image"
        )
    return root


def project_source_files() -> list[Path]:
    """The project files the engine image carries: `gb300lane.engine` and what it imports, statically.

    Following imports (not the whole package) keeps the image, and its source
    hash, unchanged by edits to parts of the tool that never run inside it.
    A subpackage it touches travels whole, data files included.
    """
    pkg = package_root()
    todo = [p for p in (pkg / "engine").rglob("*.py")] + [pkg / "__init__.py"]
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(_imported_project_modules(f, pkg) - seen)
    files: set[Path] = set()
    for f in seen:
        rel = f.relative_to(pkg)
        if len(rel.parts) > 1:
            files.update(p for p in (pkg / rel.parts[0]).rglob("*") if p.is_file())
        else:
            files.add(f)
    return sorted(p for p in files if "__pycache__" not in p.parts and p.suffix != ".pyc")


def source_hash() -> str:
    """Changes whenever the project source, the Python build or the carried distributions change."""
    # The builder itself is an input: a changed rootfs recipe must rebuild too.
    parts = [sys.version, sys.base_prefix, sha256_bytes(Path(__file__).read_bytes())]
    parts += [f"{d.metadata['Name']}=={d.version}" for d in engine_distributions()]
    root = package_root().parent
    for p in project_source_files():
        parts.append(f"{p.relative_to(root)}:{sha256_bytes(p.read_bytes())}")
    return sha256_bytes("\n".join(parts))[:16]


def _place(src: Path, dest: Path) -> None:
    """Hard-link (fast, no copy) or copy `src` to `dest`, following symlinks."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        return
    real = src.resolve()
    try:
        os.link(real, dest)
    except OSError:
        shutil.copy2(real, dest)


def _copy_tree(src: Path, dest: Path, skip: frozenset[str]) -> None:
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith("config-")]
        rel = Path(root).relative_to(src)
        for f in files:
            if f.endswith((".opt-1.pyc", ".opt-2.pyc", ".a")):
                continue
            _place(Path(root) / f, dest / rel / f)


def _copy_distribution(dist: md.Distribution, dest_site: Path) -> None:
    for rel in dist.files or []:
        parts = Path(str(rel)).parts
        if ".." in parts or _SKIP_DIRS.intersection(parts[:-1]):
            continue
        src = Path(str(dist.locate_file(rel)))
        if not src.is_file():
            continue
        _place(src, dest_site / rel)
        if src.suffix == ".py":
            pyc = src.parent / "__pycache__" / f"{src.stem}.{sys.implementation.cache_tag}.pyc"
            if pyc.is_file():
                _place(pyc, dest_site / Path(str(rel)).parent / "__pycache__" / pyc.name)


def _shared_libraries(elf_files: list[Path], inside: Path) -> set[Path]:
    """Host libraries the ELF files load that are not already under `inside`."""
    libs: set[Path] = set()
    for i in range(0, len(elf_files), 200):
        chunk = [str(p) for p in elf_files[i : i + 200]]
        try:
            out = subprocess.run(["ldd", *chunk], capture_output=True, text=True, check=False, timeout=300).stdout
        except subprocess.TimeoutExpired as exc:
            raise BootError(f"ldd did not answer within {exc.timeout:.0f} s for the engine image's libraries") from exc
        for line in out.splitlines():
            line = line.strip()
            target = line.split("=>", 1)[1].strip() if "=>" in line else line
            path = target.split(" (", 1)[0].strip()
            if path.startswith("/") and Path(path).exists() and not Path(path).resolve().is_relative_to(inside):
                libs.add(Path(path))
    return libs


def assemble_rootfs(rootfs: Path) -> None:
    """Lay out the image's root filesystem under `rootfs`."""
    prefix = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dest_prefix = rootfs / PREFIX.lstrip("/")
    exe = Path(sys.executable).resolve()
    _place(exe, dest_prefix / "bin" / ver)
    for alias in ("python3", "python"):
        (dest_prefix / "bin" / alias).symlink_to(ver)
    libdir = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib")
    for lib in libdir.glob("libpython3*.so*"):
        _place(lib, dest_prefix / "lib" / lib.name)
    _copy_tree(prefix / "lib" / ver, dest_prefix / "lib" / ver, _STDLIB_SKIP)
    dest_site = dest_prefix / "lib" / ver / "site-packages"
    for dist in engine_distributions():
        _copy_distribution(dist, dest_site)
    for f in project_source_files():
        _place(f, rootfs / SRC_DIR.lstrip("/") / f.relative_to(package_root().parent))
    elf = [exe] + [p for p in rootfs.rglob("*.so*") if p.is_file() and not p.is_symlink()]
    for lib in _shared_libraries(elf, rootfs.resolve()):
        _place(lib, rootfs / str(lib).lstrip("/"))
    usr_bin = rootfs / "usr" / "bin"
    usr_bin.mkdir(parents=True, exist_ok=True)
    (usr_bin / "python3").symlink_to(f"{PREFIX}/bin/{ver}")
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/bin/python3\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (etc / "nsswitch.conf").write_text("hosts: files dns\n")
    for d, mode in (("tmp", 0o1777), ("root", 0o700)):
        (rootfs / d).mkdir(exist_ok=True)
        os.chmod(rootfs / d, mode)


def dockerfile() -> str:
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return _DOCKERFILE.replace("{{PREFIX}}", PREFIX).replace("{{SRC_DIR}}", SRC_DIR).replace("{{PYVER}}", ver)


_DOCKERFILE = """FROM scratch
COPY rootfs/ /
ENV PATH={{PREFIX}}/bin:/usr/bin:/bin LD_LIBRARY_PATH={{PREFIX}}/lib PYTHONPATH={{SRC_DIR}} LANG=C.UTF-8 HOME=/root
RUN ["{{PREFIX}}/bin/{{PYVER}}", "-c", "import numpy, aiohttp, pydantic, prometheus_client, gb300lane.engine"]
WORKDIR /tmp
CMD ["python3", "-m", "gb300lane.engine", "--help"]
"""


def ensure_engine_image(
    *,
    tag: str = ENGINE_IMAGE,
    force: bool = False,
    log: Callable[[str], None] | None = None,
    scratch: Path | None = None,
) -> EngineImage:
    """Build the engine image unless one with the current source hash is already present.

    `scratch` is where the build context is assembled (default: under the state
    directory when it shares a filesystem with Python, so files are hard-linked).
    """
    from gb300lane.runtime.docker import DockerRuntime

    runtime = DockerRuntime()
    want = source_hash()
    # One build at a time on this machine: two builds of a tag at once race in the engine (one's prune of the
    # dangling image can take a layer the other is committing), so the second waits and finds the first's image.
    with _build_lock():
        labels = runtime.image_labels(tag)
        if not force and labels is not None and labels.get(SOURCE_HASH_LABEL) == want:
            return EngineImage(tag=tag, source_hash=want, built=False)
        return _build_engine_image(runtime, tag, want, force=force, log=log, scratch=scratch)


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """Held while this machine builds an engine image (a lock file in the temp directory every user shares);
    where that file cannot be opened the build runs unlocked, as it did before there was one."""
    lock = FileLock(Path(tempfile.gettempdir()) / "gb300lane-engine-image.lock")
    try:
        lock.acquire(wait_s=None)
    except StateError:
        yield
        return
    try:
        yield
    finally:
        lock.release()


def _build_engine_image(
    runtime: DockerRuntime,
    tag: str,
    want: str,
    *,
    force: bool,
    log: Callable[[str], None] | None,
    scratch: Path | None,
) -> EngineImage:
    if not force and runtime.place is not None and runtime.place.remote:
        sent = _send_local_image(runtime, tag, want, log)
        if sent is not None:
            return sent
    with tempfile.TemporaryDirectory(prefix="gb300lane-image-", dir=scratch or _scratch_dir()) as tmp:
        ctx = Path(tmp)
        if log:
            log(f"assembling the root filesystem in {ctx}")
        assemble_rootfs(ctx / "rootfs")
        (ctx / "Dockerfile").write_text(dockerfile())
        if log:
            log(f"building {tag} (source hash {want})")
        image_id = runtime.build_image(
            ctx, tag, {SOURCE_HASH_LABEL: want, "gb300lane.tool-version": __version__, "gb300lane.lane": "engine-image"}
        )
    if image_id == "":
        raise BootError(f"build {tag}: the Docker engine returned no image id")
    # The previous build lost its tag to this one; without this every source change leaves an image behind.
    runtime.prune_dangling_images("gb300lane.lane=engine-image")
    return EngineImage(tag=tag, source_hash=want, built=True, image_id=image_id)


def _send_local_image(
    remote: DockerRuntime, tag: str, want: str, log: Callable[[str], None] | None
) -> EngineImage | None:
    """Load this machine's image of the current source into a remote host's engine (docker save | docker load).

    None when this machine's engine has no such image (or does not answer): the image is then built on the box.
    """
    from gb300lane.runtime.docker import DockerRuntime

    host = remote.place.host if remote.place is not None else "?"
    try:
        with placement.placed(None):
            local = DockerRuntime()
            labels = local.image_labels(tag)
            if labels is None or labels.get(SOURCE_HASH_LABEL) != want:
                return None
            if log:
                log(f"sending {tag} to host {host} (docker save | docker load)")
            remote.load_image(local.save_image(tag))
    except RuntimeUnavailable:
        return None
    return EngineImage(tag=tag, source_hash=want, built=False, sent_from="this machine's Docker engine")


def _scratch_dir() -> str | None:
    """A temp dir on the same filesystem as the Python prefix, so files can be hard-linked."""
    candidate = paths.state_root() / "tmp"
    try:
        candidate.mkdir(parents=True, exist_ok=True)
        if os.stat(candidate).st_dev == os.stat(sys.base_prefix).st_dev:
            return str(candidate)
    except OSError:
        pass
    return None
