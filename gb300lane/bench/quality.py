"""Task quality without a model: whether a request's output is what its transcript asked for, checked by parsing.

Three outcomes the tool can check on its own, per request:

- `tool_call`: the transcript declares `tools`; the answer must call one of
  them, and every call's arguments must parse as a JSON object that validates
  against that tool's own `parameters` schema (`jsonschema`, the schema's own
  draft, Draft 2020-12 when it names none). The calls are the response's
  `tool_calls` when the server's tool parser found any; otherwise a call
  written in the content (`{"tool_calls": [...]}`, Hermes' `<tool_call>`
  tags, or a bare `{"name", "arguments"}` object) counts, and the outcome
  says which (`source`), since a server without a parser for its model's
  call format passes the call through as text.
- `json` / `yaml` / `csv`: the transcript asks for data in that format (a
  structured prompt's words, or a `response_format`); the output's data (the
  first fenced block if there is one, else the text after the heading the
  prompt asked for, else the whole text) must parse, JSON and YAML as the
  container asked for (an array/list or an object/mapping), CSV with at
  least a header and one row and every row as wide as the header (a CSV
  reader accepts any text; a table of one column is prose) and, where the
  prompt names the columns, that header.
- `python`: the transcript asks for Python; the code (up to the closing fence
  when the prompt opened one, else the output's Python fences, else the
  whole text) must `compile()`; nothing is executed.

A transcript that asks for none of these (prose, a markdown table, Rust) has
no outcome. `asks_for` is the one place that reads a transcript's fields for
this. An outcome keeps what it checked (the text parsed, the calls, the
first error and the finish reason), so a verdict can be re-scored from the
receipts (`recheck`). A forced-length window cuts outputs off, so outcomes
are recorded only in windows whose requests may stop at EOS
(`forced_tokens: null`).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from gb300lane.bench.transcripts import Transcript
from gb300lane.errors import BenchError
from gb300lane.models import FrozenModel
from gb300lane.recipes.yamlio import parse_value

CheckKind = Literal["tool_call", "json", "yaml", "csv", "python"]
Container = Literal["array", "object"]

#: Longest excerpt of checked text an error message quotes.
_QUOTE = 60


class Ask(FrozenModel):
    """What a transcript asks its output to be, as far as a check without a model can tell."""

    check: CheckKind = Field(description="tool_call, json, yaml, csv or python: the check its output gets.")
    container: Container | None = Field(
        default=None,
        description="json / yaml: the top-level value asked for (a JSON array or YAML list: array; "
        "a JSON object or YAML mapping: object); None: either.",
    )
    heading: bool = Field(default=False, description="The prompt asks for a short heading before the data.")
    open_fence: bool = Field(
        default=False,
        description="python: the prompt ends inside an open code fence, so the code runs up to the fence's close.",
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None, description="tool_call: the tools the request declared, with their parameter schemas."
    )
    json_schema: dict[str, Any] | None = Field(
        default=None,
        description="json: the schema of a response_format json_schema the output must validate "
        "against (None: any JSON of the container asked for).",
    )
    columns: list[str] | None = Field(
        default=None,
        description="csv: the columns the prompt names, the header the table must have (a CSV "
        "reader accepts almost any text, so the header is what shows the table is the one asked for).",
    )


class ToolCall(FrozenModel):
    """One tool call as the response carried it: the function's name and its arguments as sent."""

    name: str = Field(description="The function called.")
    arguments: str = Field(description="Its arguments, the JSON text as streamed.")


class QualityOutcome(FrozenModel):
    """One request's task-quality outcome, with the input of its check."""

    ask: Ask = Field(description="What the transcript asked for (the check applied).")
    passed: bool = Field(description="True when the output is what was asked for (see bench.quality).")
    source: Literal["tool_calls", "content", "text"] = Field(
        description="Where the checked value came from: the response's tool_calls, a call written in the content, "
        "or the output text."
    )
    checked: str = Field(
        description="The text the check parsed (the data or code taken from the output; the "
        "calls' JSON for tool_calls)."
    )
    tool_calls: tuple[ToolCall, ...] = Field(
        default=(), description="The tool calls the response carried (tool_call checks; empty otherwise)."
    )
    error: str | None = Field(description="Why it did not pass: the first parse or validation error; None passed.")
    finish_reason: str | None = Field(
        default=None,
        description="The response's finish reason (length: cut at max_tokens, which often explains a parse error).",
    )


def _prompt_text(t: Transcript) -> str:
    if t.prompt is not None:
        return t.prompt
    return "\n".join(str(m.get("content") or "") for m in t.messages or () if m.get("role") == "user")


_DATA_ASK = re.compile(r"\b(CSV|YAML|JSON)\b(?:\s+(list|mapping|array|object))?")
_COLUMNS = re.compile(r"\bwith columns ([\w ]+(?:, [\w ]+)*)")
_CONTAINER: dict[str, Container] = {"list": "array", "array": "array", "mapping": "object", "object": "object"}


def asks_for(t: Transcript) -> Ask | None:
    """The check a transcript's output gets, from its fields: `tools`, `response_format`, and what a structured
    or code prompt asks for in words; None when it asks for nothing checkable."""
    if t.tools:
        return Ask(check="tool_call", tools=t.tools)
    fmt = t.response_format
    if fmt is not None and fmt.get("type") in ("json_object", "json_schema"):
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return Ask(
            check="json",
            container="object" if fmt["type"] == "json_object" else None,
            json_schema=schema if isinstance(schema, dict) else None,
        )
    text = _prompt_text(t)
    if t.cls == "structured" and (m := _DATA_ASK.search(text)):
        formats: dict[str, CheckKind] = {"CSV": "csv", "YAML": "yaml", "JSON": "json"}
        check = formats[m.group(1)]
        container = _CONTAINER.get(m.group(2) or "") if check != "csv" else None
        named = _COLUMNS.search(text) if check == "csv" else None
        return Ask(
            check=check,
            container=container,
            heading="short heading" in text,
            columns=[c.strip() for c in named.group(1).split(",")] if named else None,
        )
    if t.cls == "code" and re.search(r"\bin Python\b", text):
        return Ask(check="python", open_fence=text.rstrip(" ").endswith("```python\n"))
    return None


# ---------------------------------------------------------------- extracting what is checked

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.MULTILINE)


def _fences(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block (an unclosed last fence runs to the end)."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def _data(text: str, ask: Ask) -> str:
    blocks = _fences(text)
    if blocks:
        return blocks[0][1].strip()
    if ask.heading:
        lines = text.strip().splitlines()
        return "\n".join(lines[1:]).strip()
    return text.strip()


def _code(text: str, ask: Ask) -> str:
    if ask.open_fence:
        m = re.search(r"^[ \t]*```", text, re.MULTILINE)
        return text[: m.start()] if m else text
    blocks = [body for lang, body in _fences(text) if lang in ("python", "py", "python3", "")]
    return "\n\n".join(blocks) if blocks else text


def _quote(text: str) -> str:
    """The text as a Python literal, cut at `_QUOTE` characters (repr shows a line break as \\n)."""
    one = text.strip()
    return repr(one if len(one) <= _QUOTE else one[:_QUOTE] + "...")


# ---------------------------------------------------------------- the checks


def _container_error(value: object, ask: Ask, what: str) -> str | None:
    kind = "array" if isinstance(value, list) else "object" if isinstance(value, dict) else None
    words = {
        ("json", "array"): "a JSON array",
        ("json", "object"): "a JSON object",
        ("yaml", "array"): "a YAML list",
        ("yaml", "object"): "a YAML mapping",
    }
    if ask.container is None:
        if kind is None:
            return f"{what} is a {type(value).__name__}, not a list or a mapping of data"
        return None
    if kind != ask.container:
        return (
            f"{what} is {('a ' + type(value).__name__) if kind is None else words[(ask.check, kind)]}, "
            f"not {words[(ask.check, ask.container)]} as asked"
        )
    return None


def _schema_error(schema: dict[str, Any], value: Any, what: str) -> str | None:
    """The first error of `value` against `schema` (the schema's own draft, else 2020-12), or None."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"{what}: the schema itself is invalid ({exc.message}); fix the transcript's schema"
    errors = sorted(
        cls(schema).iter_errors(value), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    if not errors:
        return None
    first = errors[0]
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path) or " (top level)"
    return f"{what} fail the schema at ${where}: {first.message}"


def _check_json(payload: str, ask: Ask) -> str | None:
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno} of {_quote(payload)}"
    except RecursionError:
        return "not JSON: nested too deeply to parse"
    problem = _container_error(value, ask, "the JSON")
    if problem is None and ask.json_schema is not None:
        problem = _schema_error(ask.json_schema, value, "the JSON values")
    return problem


def _check_yaml(payload: str, ask: Ask) -> str | None:
    # The tool's one strict YAML reader: a duplicate key, an alias bomb or a recursive anchor is no valid document.
    try:
        value = parse_value(payload, "the output", error=BenchError)
    except BenchError as exc:
        # The reader's message names a file and a fix; here it is the output's line and the problem alone.
        m = re.match(r"the output(?::(\d+))?: (.*)", str(exc), re.DOTALL)
        problem = (m.group(2) if m else str(exc)).split("; ")[0]
        problem = re.sub(r"^invalid YAML \((.*)\)$", r"\1", problem)
        where = f" at line {m.group(1)}" if m and m.group(1) else ""
        return f"not YAML: {problem}{where} of {_quote(payload)}"
    if value is None:
        return "no YAML: the output holds no data"
    return _container_error(value, ask, "the YAML")


def _check_csv(payload: str, columns: list[str] | None) -> str | None:
    try:
        rows = [r for r in csv.reader(io.StringIO(payload), strict=True) if r]
    except csv.Error as exc:
        return f"not CSV: {exc}"
    if len(rows) < 2:
        return f"not a CSV table: {len(rows)} row(s), a header and at least one row are needed"
    width = len(rows[0])
    if width < 2:
        return f"not a CSV table: the header {_quote(','.join(rows[0]))} has one field (no comma-separated columns)"
    for i, row in enumerate(rows[1:], 2):
        if len(row) != width:
            return f"not a CSV table: row {i} has {len(row)} fields, the header {width}"
    header = [h.strip().lower() for h in rows[0]]
    if columns is not None and header != [c.lower() for c in columns]:
        return f"not the CSV asked for: the header is {','.join(rows[0])!r}, the prompt names {','.join(columns)!r}"
    return None


def _check_python(code: str) -> str | None:
    if not code.strip():
        return "no code: the output holds no Python"
    try:
        compile(code, "<output>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"does not compile: {type(exc).__name__}: {exc}"
    return None


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_DECODER = json.JSONDecoder()


def _call_of(entry: object) -> ToolCall | None:
    """A call from `{"function": {"name", "arguments"}}` or `{"name", "arguments"|"parameters"}`."""
    if not isinstance(entry, dict):
        return None
    inner = entry.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else entry
    name = fn.get("name")
    if not isinstance(name, str):
        return None
    args = fn.get("arguments", fn.get("parameters", {}))
    return ToolCall(name=name, arguments=args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))


def calls_in_content(content: str) -> list[ToolCall]:
    """Tool calls written in an answer's text: Hermes' `<tool_call>` tags, `{"tool_calls": [...]}`, or a bare
    call object (or a list of them) at the start of the answer; [] when it holds none."""
    tagged = [c for body in _HERMES.findall(content) for c in [_loads_call(body)] if c is not None]
    if tagged:
        return tagged
    body = content.strip()
    blocks = _fences(body)
    if blocks and body.startswith("```"):
        body = blocks[0][1].strip()
    if not body.startswith(("{", "[")):
        return []
    try:
        value, _ = _DECODER.raw_decode(body)
    except (json.JSONDecodeError, RecursionError):
        return []
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        entries: list[object] = value["tool_calls"]
    elif isinstance(value, list):
        entries = value
    else:
        entries = [value]
    calls = [_call_of(e) for e in entries]
    return [c for c in calls if c is not None] if all(c is not None for c in calls) else []


def _loads_call(body: str) -> ToolCall | None:
    try:
        return _call_of(json.loads(body))
    except (json.JSONDecodeError, RecursionError):
        return None


def _check_calls(calls: Sequence[ToolCall], ask: Ask) -> str | None:
    declared = {
        str(t["function"]["name"]): t["function"]
        for t in ask.tools or ()
        if isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
    }
    if not calls:
        return "no tool call: the answer is text"
    for call in calls:
        fn = declared.get(call.name)
        if fn is None:
            return f"calls {call.name!r}, which the request does not declare (declared: {', '.join(sorted(declared))})"
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            return f"arguments of {call.name} are not JSON: {msg} in {_quote(call.arguments)}"
        if not isinstance(args, dict):
            return f"arguments of {call.name} are a {type(args).__name__}, not a JSON object"
        schema = fn.get("parameters") or {"type": "object"}
        problem = _schema_error(schema, args, f"arguments of {call.name}")
        if problem is not None:
            return problem
    return None


def check(
    ask: Ask, *, text: str, tool_calls: Sequence[ToolCall] = (), finish_reason: str | None = None
) -> QualityOutcome:
    """Check one output against what its transcript asked for; `text` is the completion text or chat content
    (tool-call arguments apart, in `tool_calls`)."""
    if ask.check == "tool_call":
        source: Literal["tool_calls", "content", "text"] = "tool_calls"
        calls = list(tool_calls)
        if not calls:
            calls, source = calls_in_content(text), "content"
        checked = json.dumps([c.model_dump() for c in calls], ensure_ascii=False) if calls else text
        error = _check_calls(calls, ask)
        return QualityOutcome(
            ask=ask,
            passed=error is None,
            source=source,
            checked=checked,
            tool_calls=tuple(tool_calls),
            error=error,
            finish_reason=finish_reason,
        )
    if ask.check == "python":
        payload = _code(text, ask)
        error = _check_python(payload)
    else:
        payload = _data(text, ask)
        error = (
            _check_csv(payload, ask.columns)
            if ask.check == "csv"
            else _check_yaml(payload, ask)
            if ask.check == "yaml"
            else _check_json(payload, ask)
        )
    return QualityOutcome(
        ask=ask, passed=error is None, source="text", checked=payload, error=error, finish_reason=finish_reason
    )


def recheck(outcome: QualityOutcome, text: str) -> QualityOutcome:
    """The check run again on a recorded request (its text and outcome): what a re-score compares with."""
    return check(outcome.ask, text=text, tool_calls=outcome.tool_calls, finish_reason=outcome.finish_reason)


__all__ = ["Ask", "QualityOutcome", "ToolCall", "asks_for", "calls_in_content", "check", "recheck"]
