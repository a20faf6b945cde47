"""Finding, reading, verifying and writing workload folders.

A workload is `workloads/<name>/`: one `<class>.jsonl` per class (a transcript
a line) and `manifest.json`, which pins each file's sha256 and hashes them with
the split into `content_sha256`. Names are looked up like recipes: the working
directory's `workloads/` first, then the shipped ones (`paths.workload_dirs`).
Reading a workload checks every class file against its manifest, so an edited
transcript is an error naming the file, never a silently different window.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from gb300lane.canonical import dumps_json, sha256_bytes
from gb300lane.errors import WorkloadError
from gb300lane.fsio import atomic_write
from gb300lane.models import format_validation_error
from gb300lane.names import name_problem
from gb300lane.paths import shipped, workload_dirs
from gb300lane.workloads.content import BUILTIN, MANIFEST, MIXED, ClassFile, Manifest, Split, Transcript


def content_hash(classes: tuple[ClassFile, ...], split: Split | None) -> str:
    """sha256 over the classes (name, file, sha256, in order) and the split: what a registration freezes."""
    payload = {
        "classes": [[c.name, c.file, c.sha256] for c in classes],
        "split": None if split is None else split.model_dump(mode="json"),
    }
    return sha256_bytes(dumps_json(payload))


def transcript_line(t: Transcript) -> str:
    """A transcript as one line of its class file (sorted keys, absent keys left out), as the shipped ones are."""
    return json.dumps(t.model_dump(mode="json", exclude_none=True), sort_keys=True, ensure_ascii=False)


def class_problem(name: str) -> str | None:
    """Why `name` cannot be a class of a workload, None when it can."""
    if name == MIXED:
        return "'mixed' is reserved (it interleaves every class); name the class otherwise"
    return name_problem(name, "class name")


def find_workload(name: str) -> Path:
    """The folder of workload `name`, first match of `paths.workload_dirs()`; an error lists where it looked."""
    problem = name_problem(name, "workload name")
    if problem:
        raise WorkloadError(problem)
    dirs = workload_dirs()
    for d in dirs:
        if (d / name / MANIFEST).is_file():
            return d / name
    raise WorkloadError(
        f"no workload named {name!r} (looked in {', '.join(str(d) for d in dirs)}); "
        f"list them with `gb300lane workload list`, or import one with `gb300lane workload import`"
    )


def workload_names() -> list[str]:
    """Every workload name found, first match wins, sorted."""
    names: set[str] = set()
    for d in workload_dirs():
        if d.is_dir():
            names.update(p.parent.name for p in d.glob(f"*/{MANIFEST}"))
    return sorted(names)


def read_manifest(folder: Path) -> Manifest:
    """The manifest of a workload folder; an error names the file and the key."""
    path = folder / MANIFEST
    try:
        manifest = Manifest.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror}); re-import the workload") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{exc.lineno}: not JSON ({exc.msg}); re-import the workload") from None
    except ValidationError as exc:
        raise WorkloadError(f"{path}: {format_validation_error(exc)}; re-import the workload") from None
    if manifest.name != folder.name:
        raise WorkloadError(f"{path}: name = {manifest.name!r} in folder {folder.name!r}; the name is the folder's")
    for c in manifest.classes:
        problem = class_problem(c.name)
        if problem:
            raise WorkloadError(f"{path}: class {problem}")
        if c.file != f"{c.name}.jsonl":
            raise WorkloadError(f"{path}: class {c.name} names file {c.file!r}; a class's file is {c.name}.jsonl")
    if content_hash(manifest.classes, manifest.split) != manifest.content_sha256:
        raise WorkloadError(
            f"{path}: content_sha256 is not the hash of its classes and split (edited by hand?); "
            "re-import the workload, or restore the manifest"
        )
    return manifest


def _parse_class(path: Path, data: bytes, cls: str) -> tuple[Transcript, ...]:
    items: list[Transcript] = []
    seen: set[str] = set()
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = Transcript.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{path}:{lineno}: invalid transcript: not JSON ({exc.msg}); fix or remove the line"
            ) from None
        except ValidationError as exc:
            raise WorkloadError(
                f"{path}:{lineno}: invalid transcript: {format_validation_error(exc)}; fix or remove the line"
            ) from None
        if item.cls != cls:
            raise WorkloadError(
                f"{path}:{lineno}: cls = {item.cls!r} in the {cls!r} file; move the line to its class file"
            )
        if item.id in seen:
            raise WorkloadError(f"{path}:{lineno}: duplicate id {item.id!r}; ids must be unique and stable")
        seen.add(item.id)
        items.append(item)
    return tuple(items)


@dataclass(frozen=True)
class Workload:
    """A workload read and verified: its folder, its manifest and each class's transcripts in file order."""

    folder: Path
    manifest: Manifest
    by_class: dict[str, tuple[Transcript, ...]]

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.manifest.classes)

    def part(self, held_out: bool) -> str:
        """Which part a window with `held_out` runs: `all` (no split), `dev` or `held_out`."""
        if self.manifest.split is None:
            return "all"
        return "held_out" if held_out else "dev"

    def transcripts(self, cls: str, *, held_out: bool = False) -> list[Transcript]:
        """A class's transcripts of one part (`mixed` interleaves the classes); a split workload's dev part
        unless `held_out`. Held out of a workload with no split is an error."""
        split = self.manifest.split
        if held_out and split is None:
            raise WorkloadError(
                f"{self.folder / MANIFEST}: workload {self.name} has no held-out part; "
                f"split it first (`gb300lane workload split {self.name} --held-out 0.3`)"
            )
        held = set(split.held_out_ids) if split is not None else set()

        def keep(t: Transcript) -> bool:
            return (t.id in held) == held_out

        if cls == MIXED:
            per = [[t for t in self.by_class[c] if keep(t)] for c in self.classes]
            depth = max((len(p) for p in per), default=0)
            return [p[i] for i in range(depth) for p in per if i < len(p)]
        if cls not in self.by_class:
            raise WorkloadError(
                f"unknown traffic class {cls!r} of workload {self.name}; expected one of "
                f"{', '.join((*self.classes, MIXED))}"
            )
        return [t for t in self.by_class[cls] if keep(t)]


def _verify(folder: Path, manifest: Manifest) -> dict[str, tuple[Transcript, ...]]:
    by_class: dict[str, tuple[Transcript, ...]] = {}
    for c in manifest.classes:
        path = folder / c.file
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise WorkloadError(
                f"{path}: cannot read ({exc.strerror}); the manifest {folder / MANIFEST} lists it: "
                "restore the file or re-import the workload"
            ) from None
        got = sha256_bytes(data)
        if got != c.sha256:
            raise WorkloadError(
                f"{path}: sha256 {got[:12]} differs from the manifest's {c.sha256[:12]} (the file was "
                "edited after import); restore it, or re-import the workload (which changes its "
                "content hash, so cards registered on it refuse to score)"
            )
        items = _parse_class(path, data, c.name)
        if len(items) != c.transcripts:
            raise WorkloadError(f"{path}: {len(items)} transcripts, the manifest says {c.transcripts}; re-import")
        by_class[c.name] = items
    return by_class


@cache
def _load_cached(folder: Path, stamp: tuple[tuple[str, int, int], ...]) -> Workload:
    manifest = read_manifest(folder)
    return Workload(folder=folder, manifest=manifest, by_class=_verify(folder, manifest))


def _stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    # A re-read when any file changed (size or mtime): a workload edited in place is verified again.
    out = []
    for p in sorted(folder.glob("*")):
        if p.is_file():
            st = p.stat()
            out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def load_workload(name: str = BUILTIN) -> Workload:
    """The workload `name`, every class file checked against its manifest."""
    folder = find_workload(name)
    return _load_cached(folder, _stamp(folder))


def select(name: str, cls: str, count: int, *, held_out: bool = False) -> list[Transcript]:
    """The first `count` transcripts of a class of workload `name` (of its dev part, or held-out part)."""
    w = load_workload(name)
    items = w.transcripts(cls, held_out=held_out)
    if count < 1 or count > len(items):
        part = w.part(held_out)
        where = "" if part == "all" else f" in its {part.replace('_', '-')} part"
        shipped = "ships" if name == BUILTIN else f"has{where}"
        raise WorkloadError(
            f"window asks for transcripts_per_class = {count} of class {cls!r}"
            + ("" if name == BUILTIN else f" of workload {name}")
            + f", which {shipped} {len(items)}; use 1..{len(items)}"
        )
    return items[:count]


def write_workload(folder: Path, manifest_fields: dict[str, object], by_class: dict[str, list[Transcript]]) -> Manifest:
    """Write the class files and the manifest into `folder` (atomically, each file), the manifest last."""
    classes = []
    for cls, items in by_class.items():
        text = "".join(transcript_line(t) + "\n" for t in items)
        atomic_write(folder / f"{cls}.jsonl", text)
        classes.append(ClassFile(name=cls, file=f"{cls}.jsonl", sha256=sha256_bytes(text), transcripts=len(items)))
    split = manifest_fields.get("split")
    assert split is None or isinstance(split, Split)
    manifest = Manifest.model_validate(
        {
            **manifest_fields,
            "schema_version": 1,
            "classes": classes,
            "content_sha256": content_hash(tuple(classes), split),
        }
    )
    atomic_write(folder / MANIFEST, json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    return manifest


def split_workload(name: str, held_out: float, *, seed: int = 0) -> Manifest:
    """Hold out `held_out` of each class (at least one, at most all but one), drawn with `seed`; rewrites the
    manifest (its content hash changes: cards registered before the split refuse to score)."""
    if not 0 < held_out < 1:
        raise WorkloadError(f"--held-out {held_out}: pass a fraction between 0 and 1, e.g. 0.3")
    w = load_workload(name)
    if name == BUILTIN or not _writable(w.folder):
        raise WorkloadError(
            f"{w.folder}: workload {name} is shipped with the tool and read-only; import your own "
            "traffic (`gb300lane workload import`) and split that"
        )
    held: list[str] = []
    for cls in w.classes:
        ids = sorted(t.id for t in w.by_class[cls])
        if len(ids) < 2:
            raise WorkloadError(
                f"{w.folder / (cls + '.jsonl')}: class {cls} has {len(ids)} transcript; a split needs "
                "at least 2 per class (one dev, one held out)"
            )
        rng = random.Random(f"{seed}:{cls}")
        rng.shuffle(ids)
        k = min(len(ids) - 1, max(1, round(held_out * len(ids))))
        held.extend(ids[:k])
    split = Split(held_out=held_out, seed=seed, held_out_ids=tuple(sorted(held)))
    m = w.manifest
    manifest = m.model_copy(update={"split": split, "content_sha256": content_hash(m.classes, split)})
    Manifest.model_validate(manifest.model_dump())
    atomic_write(w.folder / MANIFEST, json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    return manifest


def _writable(folder: Path) -> bool:
    """False for a shipped workload (package data is never rewritten)."""
    return folder.parent.resolve() != shipped("workloads").resolve()


__all__ = [
    "Workload",
    "class_problem",
    "content_hash",
    "find_workload",
    "load_workload",
    "read_manifest",
    "select",
    "split_workload",
    "workload_names",
    "write_workload",
]
