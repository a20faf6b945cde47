"""The shipped transcripts: 40 per traffic class, each with a stable id.

`transcripts/<class>.jsonl` holds one transcript a line. prose, structured,
code and shell_ops are completion prompts; tool_json are chat requests that
carry `tools` and ask for JSON. `mixed` is not a file: it interleaves the
five classes (prose-001, structured-001, ..., tool_json-001, prose-002, ...)
so its first N transcripts always draw evenly from all of them.

Ids never change once shipped: the per-request seed is derived from the id,
so renumbering would silently change every arm's requests.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from gb300lane.errors import BenchError
from gb300lane.models import FrozenModel, format_validation_error

BASE_CLASSES: tuple[str, ...] = ("prose", "structured", "code", "shell_ops", "tool_json")
CLASSES: tuple[str, ...] = (*BASE_CLASSES, "mixed")

#: The shipped transcripts (package data, read through importlib.resources).
TRANSCRIPTS_DIR = resources.files("gb300lane.bench") / "transcripts"


class Transcript(FrozenModel):
    """One request body's content: a completion prompt, or chat messages with tools."""

    id: str = Field(description="Stable id, `<class>-NNN`; part of the per-request seed.")
    cls: str = Field(description="The class the transcript belongs to (never 'mixed').")
    kind: Literal["completion", "chat"] = Field(description="Which OpenAI endpoint it is sent to.")
    prompt: str | None = Field(default=None, description="Completion prompt (kind 'completion').")
    messages: list[dict[str, Any]] | None = Field(default=None, description="Chat messages (kind 'chat').")
    tools: list[dict[str, Any]] | None = Field(default=None, description="Tool definitions sent with a chat request.")
    response_format: dict[str, Any] | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="OpenAI `response_format` sent with the request (json_object, or json_schema with its schema); "
        "the task-quality check then asks the output to parse as JSON (and validate against that schema).",
    )

    @model_validator(mode="after")
    def _shape(self) -> Transcript:
        if self.kind == "completion" and not self.prompt:
            raise ValueError("a completion transcript needs a non-empty 'prompt'")
        if self.kind == "chat" and not self.messages:
            raise ValueError("a chat transcript needs non-empty 'messages'")
        return self


@cache
def _load_file(cls: str) -> tuple[Transcript, ...]:
    path = TRANSCRIPTS_DIR.joinpath(f"{cls}.jsonl")
    if not path.is_file():
        raise BenchError(f"{path}: transcript file missing; reinstall gb300lane (package data)")
    items: list[Transcript] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = Transcript.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise BenchError(f"{path}:{lineno}: invalid transcript: not JSON ({exc.msg}); fix or remove the line") from None
        except ValidationError as exc:
            raise BenchError(
                f"{path}:{lineno}: invalid transcript: {format_validation_error(exc)}; fix or remove the line"
            ) from None
        if item.cls != cls:
            raise BenchError(f"{path}:{lineno}: cls = {item.cls!r} in the {cls!r} file; move the line to its class file")
        if item.id in seen:
            raise BenchError(f"{path}:{lineno}: duplicate id {item.id!r}; ids must be unique and stable")
        seen.add(item.id)
        items.append(item)
    return tuple(items)


def load_transcripts(cls: str) -> list[Transcript]:
    """All shipped transcripts of a class, in id order (`mixed` interleaves the five classes)."""
    if cls not in CLASSES:
        raise BenchError(f"unknown traffic class {cls!r}; expected one of {', '.join(CLASSES)}")
    if cls != "mixed":
        return list(_load_file(cls))
    per_class = [_load_file(c) for c in BASE_CLASSES]
    depth = max(len(items) for items in per_class)
    return [items[i] for i in range(depth) for items in per_class if i < len(items)]


def select_transcripts(cls: str, count: int) -> list[Transcript]:
    """The first `count` transcripts of a class; an error names the class and what is shipped."""
    items = load_transcripts(cls)
    if count < 1 or count > len(items):
        raise BenchError(
            f"window asks for transcripts_per_class = {count} of class {cls!r}, "
            f"which ships {len(items)}; use 1..{len(items)}"
        )
    return items[:count]
