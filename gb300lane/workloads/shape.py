"""Shapes a workload's requests take that its source did not have: prompts padded or cut to a target length.

`pad_workload` writes a new workload whose every prompt is a given length: a
shorter one gets a context block in front (words drawn from the transcript's
id, the same on every run: the trace import's block text), a longer one keeps
its last words. That is the peer harness's single-stream long-context cell
(2K, 64K input): the same requests at a fixed input length. The length is
counted in words, or by a tokenizer the caller passes (`workload pad --tokens`:
the embedded engine's, exact for it; another lane's tokenizer counts its own,
which its window's records show). A chat is counted by its messages' text, its
chat template left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gb300lane.canonical import dumps_json, sha256_bytes
from gb300lane.errors import WorkloadError
from gb300lane.names import name_problem
from gb300lane.paths import workloads_home
from gb300lane.workloads.content import MANIFEST, Manifest, Source, Transcript
from gb300lane.workloads.folders import load_workload, write_workload
from gb300lane.workloads.parsers import block_words

#: What the context block is introduced with, so the request still reads as the original ask.
CONTEXT_HEAD = "Context:"


Count = Callable[[str], int]


def count_words(text: str) -> int:
    """The default length: words (whitespace-separated)."""
    return len(text.split())


def _largest(ok: Callable[[int], bool], high: int) -> int:
    """The largest n in 0..high with ok(n), ok being true up to a point and false after (0 when none is)."""
    lo, hi = 0, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _fit(text: str, length: int, seed: str, count: Count) -> str:
    """`text` with a context block in front, or its front cut, so that count() is `length` (or just under it,
    where one more word would overshoot)."""
    if count(text) > length:
        words = text.split()
        keep = _largest(lambda j: count(" ".join(words[-j:]) if j else "") <= length, len(words))
        return " ".join(words[-keep:]) if keep else ""
    n = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big")
    pool = block_words(n, length)

    def padded(k: int) -> str:
        return f"{CONTEXT_HEAD} {' '.join(pool[:k])}\n\n{text}" if k else text

    return padded(_largest(lambda k: count(padded(k)) <= length, length))


def _padded(t: Transcript, length: int, count: Count) -> dict[str, Any]:
    fields = t.model_dump(mode="json", exclude_none=True, exclude={"id", "cls"})
    if t.prompt is not None:
        fields["prompt"] = _fit(t.prompt, length, t.id, count)
        if not fields["prompt"]:
            raise WorkloadError(f"transcript {t.id}: no word of its prompt fits in {length}; pass a longer length")
        return fields
    messages = [dict(m) for m in t.messages or []]
    last = max(
        (i for i, m in enumerate(messages) if m.get("role") == "user" and isinstance(m.get("content"), str)),
        default=None,
    )
    if last is None:
        raise WorkloadError(f"transcript {t.id}: no user message with text to pad; pad a workload of text prompts")
    others = sum(count(str(m.get("content") or "")) for i, m in enumerate(messages) if i != last)
    if others >= length:
        raise WorkloadError(
            f"transcript {t.id}: its other messages alone are {others} long, over {length}; pass a longer length"
        )
    messages[last]["content"] = _fit(str(messages[last]["content"]), length - others, t.id, count)
    fields["messages"] = messages
    return fields


def pad_workload(
    source: str,
    name: str,
    length: int,
    *,
    count: Count = count_words,
    unit: str = "words",
    dest: Path | None = None,
    replace: bool = False,
) -> Manifest:
    """Write workload `name`: every transcript of `source` with its prompt padded (or cut) to `length` as `count`
    measures it (words by default; the CLI's --tokens passes the embedded engine's tokenizer)."""
    problem = name_problem(name, "workload name")
    if problem:
        raise WorkloadError(f"--name: {problem}")
    if length < 1:
        raise WorkloadError(f"--{unit} {length}: pass a positive length, e.g. 2048")
    src = load_workload(source)
    folder = (dest or workloads_home()) / name
    if (folder / MANIFEST).exists() and not replace:
        raise WorkloadError(f"{folder} already holds workload {name}; pass --replace, or choose another --name")
    by_class: dict[str, list[Transcript]] = {}
    for cls in src.classes:
        for t in src.by_class[cls]:
            fields = _padded(t, length, count)
            tid = f"{cls}-{sha256_bytes(dumps_json(fields))[:12]}"
            by_class.setdefault(cls, []).append(Transcript.model_validate({"id": tid, "cls": cls, **fields}))
    folder.mkdir(parents=True, exist_ok=True)
    desc = f"{source} with every prompt padded or cut to {length} {unit}"
    return write_workload(
        folder,
        {
            "name": name,
            "description": desc,
            "source": Source(format=f"pad:{length} {unit}", file=source, sha256=src.manifest.content_sha256),
        },
        by_class,
    )


__all__ = ["Count", "count_words", "pad_workload"]
