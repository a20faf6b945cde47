"""The input formats `workload import` reads, each into transcripts: one parser per format.

- `openai`: OpenAI request bodies, one JSON object a line, as a logging proxy or
  vLLM's request log keeps them: a `/v1/chat/completions` body (`messages`,
  optional `tools`, `response_format`, `max_tokens` / `max_completion_tokens`)
  or a `/v1/completions` body (`prompt`, a string); a line may wrap the body
  under `body`.
- `sharegpt`: a JSON array (or JSONL) of conversations, `conversations` a list
  of `{from, value}` turns (human, gpt, system). The first human turn (after any
  system turn) is the request, as `vllm bench serve --dataset-name sharegpt`
  takes it; with turns 'all', every human turn is one, sent with the
  conversation so far (the recorded replies as assistant turns): a multi-turn
  session, each turn's prompt the previous one's plus a reply, so the prefix
  cache is exercised the way agent traffic does.
- `vllm-custom`: vLLM bench's custom dataset JSONL, `prompt` and an optional
  `output_tokens`.
- `trace`: a mooncake-style trace, one JSON object a line: `timestamp`
  (milliseconds), `input_length`, `output_length`, `hash_ids` (one id per
  512-token block; equal ids are a shared prefix). The trace has no text: each
  block id becomes a fixed run of words drawn from its id, so requests that
  share block ids share a prompt prefix, and `input_length` is counted in those
  words (about one token each; the lane's tokenizer decides the exact count).

Each parser yields `Parsed` records: where the record was (line, or index in a
JSON array), the object the class field is read from, and the transcript's
fields or why the record is dropped.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gb300lane.errors import WorkloadError

Format = Literal["openai", "sharegpt", "vllm-custom", "trace"]
FORMATS: tuple[str, ...] = ("openai", "sharegpt", "vllm-custom", "trace")
#: Tokens per block of a mooncake trace's hash_ids.
TRACE_BLOCK = 512
#: The words a trace block's text is drawn from (plain words: about one token each in common tokenizers).
_WORDS = (
    "the",
    "lane",
    "block",
    "cache",
    "request",
    "token",
    "model",
    "server",
    "queue",
    "batch",
    "draft",
    "verify",
    "step",
    "window",
    "card",
    "class",
    "prefix",
    "session",
    "agent",
    "tool",
    "call",
    "reply",
    "user",
    "system",
    "data",
    "file",
    "line",
    "value",
    "field",
    "time",
    "rate",
    "load",
    "peak",
    "mean",
    "run",
    "test",
    "plan",
    "note",
    "list",
    "table",
    "code",
    "shell",
    "query",
    "answer",
    "check",
    "report",
)


@dataclass
class Parsed:
    """One input record: where it was, the object its class is read from, and its transcript fields (or a drop)."""

    where: str
    source: dict[str, Any]
    fields: dict[str, Any] = field(default_factory=dict)
    dropped: str | None = None


def _lines(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{path}:{lineno}: not JSON ({exc.msg}); one JSON object a line, or fix the line"
            ) from None


def _objects(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{exc.lineno}: not JSON ({exc.msg}); fix the file") from None
        for i, item in enumerate(items):
            yield f"{path}: record [{i}]", item
    else:
        yield from _lines(path, text)


def _openai(where: str, obj: dict[str, Any]) -> Parsed:
    body = obj["body"] if isinstance(obj.get("body"), dict) and "messages" not in obj and "prompt" not in obj else obj
    p = Parsed(where=where, source=obj)
    out = body.get("max_tokens", body.get("max_completion_tokens"))
    if isinstance(out, int) and out >= 1:
        p.fields["output_tokens"] = out
    if "messages" in body:
        msgs = body["messages"]
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) and "role" in m for m in msgs):
            p.dropped = "messages is not a non-empty list of {role, content}"
            return p
        p.fields.update(kind="chat", messages=msgs)
        if body.get("tools"):
            p.fields["tools"] = body["tools"]
        if isinstance(body.get("response_format"), dict) and body["response_format"].get("type") != "text":
            p.fields["response_format"] = body["response_format"]
        return p
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        p.fields.update(kind="completion", prompt=prompt)
    elif isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(x, str) for x in prompt):
        p.dropped = "prompt is a batch of several prompts (one request a line)"
    elif isinstance(prompt, list):
        p.dropped = "prompt is token ids (no text to send)"
    else:
        p.dropped = "neither messages (chat) nor a prompt string (completions)"
    return p


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "system": "system",
}


def _sharegpt(where: str, obj: dict[str, Any], turns: str) -> list[Parsed]:
    """The first human turn (turns 'first'), or every human turn with the conversation so far (turns 'all')."""
    p = Parsed(where=where, source=obj)
    conv = obj.get("conversations")
    if not isinstance(conv, list) or not conv:
        p.dropped = "no conversations"
        return [p]
    out: list[Parsed] = []
    messages: list[dict[str, Any]] = []
    session = str(obj.get("id") or where)
    for turn in conv:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            p.dropped = "a turn without a string value"
            return [p]
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            p.dropped = f"a turn from {turn.get('from')!r} (expected human, gpt or system)"
            return [p]
        if role == "assistant" and not out:
            break  # a reply before any human turn: nothing to send
        messages.append({"role": role, "content": turn["value"]})
        if role == "user":
            if not turn["value"].strip():
                p.dropped = "the human turn is empty"
                return [p]
            one = Parsed(where=where if turns == "first" else f"{where} turn {len(out) + 1}", source=obj)
            one.fields.update(kind="chat", messages=list(messages))
            if turns == "all":
                one.fields["session"] = session
            out.append(one)
            if turns == "first":
                break
    if not out:
        p.dropped = "no human turn before the first reply"
        return [p]
    return out


def _custom(where: str, obj: dict[str, Any]) -> Parsed:
    p = Parsed(where=where, source=obj)
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        p.dropped = "no prompt string"
        return p
    p.fields.update(kind="completion", prompt=prompt)
    out = obj.get("output_tokens")
    if out is not None:
        if not isinstance(out, int) or isinstance(out, bool) or out < 1:
            p.dropped = f"output_tokens = {out!r} is not a positive integer"
            return p
        p.fields["output_tokens"] = out
    return p


def block_words(hash_id: int, n: int) -> list[str]:
    """The first `n` words of a trace block's text: the same id always gives the same words."""
    rng = random.Random(f"trace-block:{hash_id}")
    return [rng.choice(_WORDS) for _ in range(n)]


def _trace(where: str, obj: dict[str, Any], first: list[float]) -> Parsed:
    p = Parsed(where=where, source=obj)
    ts, n_in, n_out, ids = obj.get("timestamp"), obj.get("input_length"), obj.get("output_length"), obj.get("hash_ids")
    for key, v in (("timestamp", ts), ("input_length", n_in), ("output_length", n_out)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            p.dropped = f"{key} = {v!r} is not a non-negative number"
            return p
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        p.dropped = "hash_ids is not a list of integers"
        return p
    assert isinstance(n_in, (int, float)) and isinstance(n_out, (int, float)) and isinstance(ts, (int, float))
    if int(n_in) < 1 or int(n_out) < 1:
        p.dropped = "input_length or output_length is 0"
        return p
    if len(ids) * TRACE_BLOCK < int(n_in):
        p.dropped = f"{len(ids)} hash_ids cover {len(ids) * TRACE_BLOCK} tokens, fewer than input_length {int(n_in)}"
        return p
    words: list[str] = []
    for h in ids:
        words += block_words(h, min(TRACE_BLOCK, int(n_in) - len(words)))
        if len(words) >= int(n_in):
            break
    if not first:
        first.append(float(ts))
    p.fields.update(
        kind="completion",
        prompt=" ".join(words),
        output_tokens=int(n_out),
        arrival_s=max(0.0, (float(ts) - first[0]) / 1000.0),
    )
    return p


def parse(path: Path, fmt: str, *, turns: str = "first") -> list[Parsed]:
    """Every record of `path` in `fmt`, parsed or with the reason it is dropped (ShareGPT: one per human turn
    with `turns` 'all')."""
    if turns not in ("first", "all"):
        raise WorkloadError(f"--turns {turns!r}: expected first or all")
    if turns == "all" and fmt != "sharegpt":
        raise WorkloadError(
            f"--turns all splits ShareGPT conversations into their turns; --format {fmt} has one "
            "request a record (an OpenAI chat body already carries its conversation)"
        )
    if fmt not in FORMATS:
        raise WorkloadError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror}); check the path") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start}); convert the file to UTF-8") from None
    out: list[Parsed] = []
    first: list[float] = []
    items = _objects(path, text) if fmt == "sharegpt" else _lines(path, text)
    for where, obj in items:
        if not isinstance(obj, dict):
            out.append(Parsed(where=where, source={}, dropped="not a JSON object"))
        elif fmt == "openai":
            out.append(_openai(where, obj))
        elif fmt == "sharegpt":
            out.extend(_sharegpt(where, obj, turns))
        elif fmt == "vllm-custom":
            out.append(_custom(where, obj))
        else:
            out.append(_trace(where, obj, first))
    return out


__all__ = ["FORMATS", "TRACE_BLOCK", "Format", "Parsed", "block_words", "parse"]
