"""Shapes a workload's requests take that its source did not have: prompts padded or cut to a target length.

`pad_workload` writes a new workload whose every prompt is `words` words long:
a shorter one gets a context block in front (words drawn from the transcript's
id, the same on every run: the trace import's block text), a longer one keeps
its last `words` words. That is the peer harness's single-stream long-context
cell (2K, 64K input): the same requests at a fixed input length. Words stand in
for tokens (about one each for the plain words of the context block); the
lane's tokenizer decides the exact count, which the window's records show.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from gb300lane.canonical import dumps_json, sha256_bytes
from gb300lane.errors import WorkloadError
from gb300lane.names import name_problem
from gb300lane.paths import workloads_home
from gb300lane.workloads.formats import block_words
from gb300lane.workloads.model import MANIFEST, Manifest, Source, Transcript
from gb300lane.workloads.store import load_workload, write_workload

#: What the context block is introduced with, so the request still reads as the original ask.
CONTEXT_HEAD = "Context:"


def _to_words(text: str, words: int, seed: str) -> str:
    have = text.split()
    if len(have) >= words:
        return " ".join(have[-words:])
    fill = words - len(have) - 1  # the head counts as one word
    if fill < 1:
        return " ".join(["..."] * (words - len(have)) + have)
    n = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big")
    return f"{CONTEXT_HEAD} {' '.join(block_words(n, fill))}\n\n{text}"


def _padded(t: Transcript, words: int) -> dict[str, Any]:
    fields = t.model_dump(mode="json", exclude_none=True, exclude={"id", "cls"})
    if t.prompt is not None:
        fields["prompt"] = _to_words(t.prompt, words, t.id)
        return fields
    messages = [dict(m) for m in t.messages or []]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user" and isinstance(m.get("content"), str)),
               default=None)
    if last is None:
        raise WorkloadError(f"transcript {t.id}: no user message with text to pad; pad a workload of text prompts")
    others = sum(len(str(m.get("content") or "").split()) for i, m in enumerate(messages) if i != last)
    messages[last]["content"] = _to_words(str(messages[last]["content"]), max(1, words - others), t.id)
    fields["messages"] = messages
    return fields


def pad_workload(source: str, name: str, words: int, *, dest: Path | None = None, replace: bool = False) -> Manifest:
    """Write workload `name`: every transcript of `source` with its prompt padded (or cut) to `words` words."""
    problem = name_problem(name, "workload name")
    if problem:
        raise WorkloadError(f"--name: {problem}")
    if words < 1:
        raise WorkloadError(f"--words {words}: pass a positive length, e.g. 2048")
    src = load_workload(source)
    folder = (dest or workloads_home()) / name
    if (folder / MANIFEST).exists() and not replace:
        raise WorkloadError(f"{folder} already holds workload {name}; pass --replace, or choose another --name")
    by_class: dict[str, list[Transcript]] = {}
    for cls in src.classes:
        for t in src.by_class[cls]:
            fields = _padded(t, words)
            tid = f"{cls}-{sha256_bytes(dumps_json(fields))[:12]}"
            by_class.setdefault(cls, []).append(Transcript.model_validate({"id": tid, "cls": cls, **fields}))
    folder.mkdir(parents=True, exist_ok=True)
    desc = f"{source} with every prompt padded or cut to {words} words"
    return write_workload(folder, {"name": name, "description": desc,
                                   "source": Source(format=f"pad:{words}", file=source,
                                                    sha256=src.manifest.content_sha256)}, by_class)


__all__ = ["pad_workload"]
