"""`workload import`: a file of the operator's traffic into `./workloads/<name>/`, and what it kept and why.

The class of each record comes from a field the user names (`--class-field
metadata.team`, a dotted path into the record) or is one class. A transcript's
id is `<class>-<first 12 hex of the sha256 of its content>`: stable across
re-imports of the same record, and a different id when its content changed
(the per-request seed comes from the id, so an edited request is never sent
with the old one's seed). A record that looks like it holds a secret (the
recipes' classifier, `gb300lane.redact`) or a prompt over the length limit
refuses the import, naming its line and field, unless the user says otherwise.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from gb300lane.canonical import dumps_json, sha256_bytes
from gb300lane.errors import WorkloadError
from gb300lane.fsio import atomic_write, sha256_file
from gb300lane.models import FrozenModel
from gb300lane.names import name_problem
from gb300lane.paths import workloads_home
from gb300lane.redact import secret_name, secret_shape
from gb300lane.workloads.content import MANIFEST, Manifest, Source, Transcript
from gb300lane.workloads.folders import class_problem, write_workload
from gb300lane.workloads.parsers import FORMATS, Parsed, parse

#: The class of every record when no --class-field is given.
ONE_CLASS = "traffic"
#: The longest prompt (characters, messages counted by their text) imported without --max-prompt-chars.
MAX_PROMPT_CHARS = 65536
#: Histogram edges: prompt characters, output tokens (the last bin is open).
PROMPT_EDGES = (0, 256, 1024, 4096, 16384, 65536)
OUTPUT_EDGES = (0, 16, 64, 256, 1024, 4096)


class Bin(FrozenModel):
    low: int = Field(description="Lowest value of the bin.")
    high: int | None = Field(description="First value above the bin; none: open.")
    count: int = Field(description="Transcripts in the bin.")


class ClassStats(FrozenModel):
    name: str = Field(description="The class.")
    transcripts: int = Field(description="Transcripts of the class.")
    chat: int = Field(description="Chat requests (the rest are completions).")
    with_tools: int = Field(description="Requests that carry tools.")
    tool_names: dict[str, int] = Field(description="Declared tool name -> requests that declare it.")
    prompt_chars: tuple[Bin, ...] = Field(description="Prompt length histogram, characters.")
    output_tokens: tuple[Bin, ...] | None = Field(
        description="Recorded output length histogram; none when the source records no output length."
    )
    with_arrival: int = Field(description="Requests with a recorded arrival time (a trace).")
    sessions: int = Field(default=0, description="Multi-turn sessions (conversations imported turn by turn).")


class Drop(FrozenModel):
    reason: str = Field(description="Why the records were dropped.")
    count: int = Field(description="How many.")
    first: str = Field(description="Where the first one was (file:line or file: record [i]).")


class ImportReport(FrozenModel):
    schema_version: Literal[1] = Field(default=1, description="Report format version.")
    workload: str = Field(description="The workload written.")
    folder: str = Field(description="Where it was written.")
    format: str = Field(description="The input format.")
    file: str = Field(description="The input file.")
    file_sha256: str = Field(description="sha256 of the input file.")
    records: int = Field(description="Records read.")
    kept: int = Field(description="Transcripts written.")
    dropped: tuple[Drop, ...] = Field(description="Records dropped, by reason.")
    classes: tuple[ClassStats, ...] = Field(description="Per class: counts, lengths, tool use.")
    content_sha256: str = Field(description="The workload's content hash.")


def _histogram(values: list[int], edges: tuple[int, ...]) -> tuple[Bin, ...]:
    bins = []
    for i, low in enumerate(edges):
        high = edges[i + 1] if i + 1 < len(edges) else None
        bins.append(Bin(low=low, high=high, count=sum(1 for v in values if v >= low and (high is None or v < high))))
    return tuple(bins)


def prompt_chars(t: Transcript) -> int:
    """A transcript's prompt length in characters (a chat's message texts summed; non-text parts as JSON)."""
    if t.prompt is not None:
        return len(t.prompt)
    total = 0
    for m in t.messages or []:
        c = m.get("content")
        total += len(c) if isinstance(c, str) else len(json.dumps(c)) if c is not None else 0
    return total


def class_stats(name: str, items: list[Transcript] | tuple[Transcript, ...]) -> ClassStats:
    """The import report's figures of one class."""
    tools: Counter[str] = Counter()
    for t in items:
        for tool in t.tools or []:
            fn = tool.get("function") if isinstance(tool, dict) else None
            tools[str(fn.get("name")) if isinstance(fn, dict) else "?"] += 1
    outs = [t.output_tokens for t in items if t.output_tokens is not None]
    return ClassStats(
        name=name,
        transcripts=len(items),
        chat=sum(t.kind == "chat" for t in items),
        with_tools=sum(bool(t.tools) for t in items),
        tool_names=dict(sorted(tools.items())),
        prompt_chars=_histogram([prompt_chars(t) for t in items], PROMPT_EDGES),
        output_tokens=_histogram(outs, OUTPUT_EDGES) if outs else None,
        with_arrival=sum(t.arrival_s is not None for t in items),
        sessions=len({t.session for t in items if t.session is not None}),
    )


def _dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _slug(value: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", value.strip().lower()).strip("-._")


def _strings(obj: Any, path: str) -> list[tuple[str, str, str]]:
    """(dotted path, key, value) of every string in `obj`."""
    if isinstance(obj, str):
        return [(path, path.rsplit(".", 1)[-1].split("[")[0], obj)]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in _strings(v, f"{path}.{k}" if path else str(k))]
    if isinstance(obj, list):
        return [s for i, v in enumerate(obj) for s in _strings(v, f"{path}[{i}]")]
    return []


def secret_in(fields: dict[str, Any]) -> tuple[str, str] | None:
    """(field, what) of the first value in `fields` that looks like a secret, None when none does: a value
    under a secret's name (`api_key`), or a word of a value in a token's shape (the recipes' classifier)."""
    for path, key, value in _strings(fields, ""):
        if secret_name(key) and value.strip() and key not in ("content", "prompt", "text", "description"):
            return path, f"a value under {key!r}, a secret's name"
        for word in (value, *value.split()):
            what = secret_shape(word)
            if what is not None:
                return path, what
    return None


def import_workload(
    file: Path,
    *,
    name: str,
    fmt: str,
    class_field: str | None = None,
    dest: Path | None = None,
    allow_secrets: bool = False,
    max_prompt_chars: int = MAX_PROMPT_CHARS,
    drop_long: bool = False,
    replace: bool = False,
    description: str = "",
    turns: str = "first",
) -> ImportReport:
    """Read `file` in `fmt`, write `dest/<name>/` (default `paths.workloads_home()`: ./workloads), and return what
    was kept and dropped."""
    problem = name_problem(name, "workload name")
    if problem:
        raise WorkloadError(f"--name: {problem}")
    if fmt not in FORMATS:
        raise WorkloadError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    folder = (dest or workloads_home()) / name
    if (folder / MANIFEST).exists() and not replace:
        raise WorkloadError(
            f"{folder} already holds workload {name}; pass --replace to import over it (its content "
            "hash changes, so cards registered on it refuse to score), or choose another --name"
        )
    parsed = parse(file, fmt, turns=turns)
    by_class: dict[str, list[Transcript]] = {}
    seen: dict[str, str] = {}
    drops: dict[str, Drop] = {}

    def drop(p: Parsed, reason: str) -> None:
        d = drops.get(reason)
        drops[reason] = (
            Drop(reason=reason, count=1, first=p.where) if d is None else d.model_copy(update={"count": d.count + 1})
        )

    for p in parsed:
        if p.dropped is not None:
            drop(p, p.dropped)
            continue
        if class_field is not None:
            raw = _dig(p.source, class_field)
            if raw is None or isinstance(raw, (dict, list)):
                drop(p, f"no {class_field} (a string) to class it by")
                continue
            cls = _slug(str(raw))
            if not cls or class_problem(cls):
                drop(p, f"{class_field} = {raw!r} is no class name ({class_problem(cls or '-') or 'empty'})")
                continue
        else:
            cls = ONE_CLASS
        if not allow_secrets:
            found = secret_in(
                {
                    k: v
                    for k, v in p.fields.items()
                    if k in ("prompt", "messages", "tools", "response_format", "session")
                }
            )
            if found is not None:
                raise WorkloadError(
                    f"{p.where}: field {found[0]} looks like it holds {found[1]}; remove the record "
                    "(or the secret) from the file, or pass --allow-secrets if it is none; nothing "
                    "was written"
                )
        content = {k: v for k, v in p.fields.items()}
        tid = f"{cls}-{sha256_bytes(dumps_json(content))[:12]}"
        t = Transcript.model_validate({"id": tid, "cls": cls, **content})
        length = prompt_chars(t)
        if length > max_prompt_chars:
            if not drop_long:
                field_name = "prompt" if t.prompt is not None else "messages"
                raise WorkloadError(
                    f"{p.where}: field {field_name} is {length} characters, over the limit of "
                    f"{max_prompt_chars}; pass --max-prompt-chars N to raise it, or --drop-long to "
                    "drop such records; nothing was written"
                )
            drop(p, f"prompt over {max_prompt_chars} characters")
            continue
        if tid in seen:
            drop(p, "duplicate of an earlier record (same content, same class)")
            continue
        seen[tid] = p.where
        by_class.setdefault(cls, []).append(t)
    if not by_class:
        reasons = "; ".join(f"{d.count} {d.reason} (first {d.first})" for d in drops.values()) or "the file is empty"
        raise WorkloadError(f"{file}: no record could be imported ({reasons}); check --format {fmt}")
    if folder.exists() and replace:
        for old in folder.glob("*.jsonl"):
            if old.stem not in by_class:
                old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    source = Source(format=fmt, file=file.name, sha256=sha256_file(file), class_field=class_field)
    manifest: Manifest = write_workload(folder, {"name": name, "description": description, "source": source}, by_class)
    report = ImportReport(
        workload=name,
        folder=str(folder),
        format=fmt,
        file=str(file),
        file_sha256=source.sha256,
        records=len(parsed),
        kept=sum(len(v) for v in by_class.values()),
        dropped=tuple(drops.values()),
        classes=tuple(class_stats(c, v) for c, v in by_class.items()),
        content_sha256=manifest.content_sha256,
    )
    atomic_write(folder / "import.json", json.dumps(report.model_dump(mode="json"), indent=2) + "\n")
    return report


def _bins(bins: tuple[Bin, ...]) -> str:
    return "  ".join(f"{b.low}-{b.high - 1 if b.high else ''}:{b.count}" for b in bins)


def render_import(report: ImportReport) -> str:
    """The import report as text: kept and dropped, per class lengths and tool use."""
    lines = [
        f"workload {report.workload} <- {report.file} ({report.format}, sha256 {report.file_sha256[:12]})",
        f"  written to {report.folder}, content sha256 {report.content_sha256[:12]}",
        f"  records {report.records}: kept {report.kept}, dropped {report.records - report.kept}",
    ]
    for d in report.dropped:
        lines.append(f"    dropped {d.count}: {d.reason} (first at {d.first})")
    lines += render_classes(report.classes)
    return "\n".join(lines)


def render_classes(classes: tuple[ClassStats, ...]) -> list[str]:
    """Per class: transcripts, chat share, tool use and the length histograms."""
    lines = []
    for c in classes:
        tools = ", ".join(f"{k} x{v}" for k, v in c.tool_names.items()) or "none"
        lines.append(
            f"  class {c.name}: {c.transcripts} transcripts ({c.chat} chat), tools on {c.with_tools} "
            f"({tools})"
            + (f", {c.with_arrival} with arrival times" if c.with_arrival else "")
            + (f", {c.sessions} multi-turn sessions" if c.sessions else "")
        )
        lines.append(f"    prompt chars   {_bins(c.prompt_chars)}")
        lines.append("    output tokens  " + (_bins(c.output_tokens) if c.output_tokens else "not recorded"))
    return lines


__all__ = [
    "MAX_PROMPT_CHARS",
    "ONE_CLASS",
    "ClassStats",
    "ImportReport",
    "class_stats",
    "import_workload",
    "render_classes",
    "render_import",
    "secret_in",
]
