"""A workload's types: the transcript (one request body's content) and the manifest that pins a workload's files.

A transcript line is what `bench` has always sent: a completion prompt, or chat
messages with tools. The keys an imported transcript may add (`output_tokens`,
`arrival_s`) are left out of the dump when absent, so the shipped lines read and
write byte for byte as before.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from gb300lane.models import FrozenModel

#: The class that is no file: it interleaves every class of the workload, first transcript of each first.
MIXED = "mixed"
#: The workload every window runs unless it names another: the shipped transcripts.
BUILTIN = "builtin"
#: The builtin workload's classes, in the order `mixed` interleaves them.
BUILTIN_CLASSES: tuple[str, ...] = ("prose", "structured", "code", "shell_ops", "tool_json")
#: The file beside the class files that pins them.
MANIFEST = "manifest.json"


class Transcript(FrozenModel):
    """One request body's content: a completion prompt, or chat messages with tools."""

    id: str = Field(
        description="Stable id, `<class>-NNN` (shipped) or `<class>-<content digest>` (imported); "
        "part of the per-request seed."
    )
    cls: str = Field(description="The class the transcript belongs to (never 'mixed').")
    kind: Literal["completion", "chat"] = Field(description="Which OpenAI endpoint it is sent to.")
    prompt: str | None = Field(default=None, description="Completion prompt (kind 'completion').")
    messages: list[dict[str, Any]] | None = Field(default=None, description="Chat messages (kind 'chat').")
    tools: list[dict[str, Any]] | None = Field(default=None, description="Tool definitions sent with a chat request.")
    response_format: dict[str, Any] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="OpenAI `response_format` sent with the request (json_object, or json_schema with its schema); "
        "the task-quality check then asks the output to parse as JSON (and validate against that schema).",
    )
    output_tokens: int | None = Field(
        default=None,
        ge=1,
        exclude_if=lambda v: v is None,
        description="The output length the source recorded (vLLM custom `output_tokens`, a trace's "
        "`output_length`, an OpenAI body's `max_tokens`); absent when the source records none.",
    )
    arrival_s: float | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda v: v is None,
        description="A trace's arrival time, seconds after its first request (mooncake `timestamp`).",
    )

    session: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The conversation a multi-turn transcript belongs to (ShareGPT imported with every turn): each "
        "turn is sent with the conversation so far, so the lane's prefix cache sees what agent traffic does.",
    )

    @model_validator(mode="after")
    def _shape(self) -> Transcript:
        if self.kind == "completion" and not self.prompt:
            raise ValueError("a completion transcript needs a non-empty 'prompt'")
        if self.kind == "chat" and not self.messages:
            raise ValueError("a chat transcript needs non-empty 'messages'")
        return self


class ClassFile(FrozenModel):
    """One class of a workload: its file and the sha256 of its bytes."""

    name: str = Field(description="The class name (the user's own words; `mixed` is reserved).")
    file: str = Field(description="The class file, `<name>.jsonl`, beside the manifest.")
    sha256: str = Field(description="sha256 of the file's bytes.")
    transcripts: int = Field(ge=1, description="Transcripts in the file.")


class Split(FrozenModel):
    """Which transcripts are held out: confirmatory cards run them, selection work never reads them."""

    held_out: float = Field(gt=0, lt=1, description="The fraction of each class held out.")
    seed: int = Field(description="The seed the split drew with (the same seed draws the same split).")
    held_out_ids: tuple[str, ...] = Field(description="The held-out transcripts' ids, sorted.")


class Source(FrozenModel):
    """Where an imported workload came from."""

    format: str = Field(description="The import format (openai, sharegpt, vllm-custom, trace).")
    file: str = Field(description="The file's name as given to `workload import`.")
    sha256: str = Field(description="sha256 of the imported file's bytes.")
    class_field: str | None = Field(
        default=None, description="The dotted field the classes came from; none: one class."
    )


class Manifest(FrozenModel):
    """`workloads/<name>/manifest.json`: every class file's sha256, the split and the content hash over them."""

    schema_version: Literal[1] = Field(description="Manifest format version.")
    name: str = Field(description="The workload's name; equals its folder's.")
    description: str = Field(default="", description="One line: what traffic this is.")
    classes: tuple[ClassFile, ...] = Field(
        min_length=1, description="The class files, in the order `mixed` interleaves them."
    )
    source: Source | None = Field(
        default=None, description="The file it was imported from; none for one written by hand."
    )
    split: Split | None = Field(default=None, description="The dev / held-out split; none: every transcript is dev.")
    content_sha256: str = Field(
        description="sha256 over the classes (name, file, sha256) and the split: what a card's registration freezes."
    )


__all__ = ["BUILTIN", "BUILTIN_CLASSES", "MANIFEST", "MIXED", "ClassFile", "Manifest", "Source", "Split", "Transcript"]
