"""Tool calls and structured output at the API: what a request asks for, and the text turned into tool_calls.

The request side follows vLLM 0.33's chat protocol: `tools` without a
`tool_choice` means `auto`; `none` turns tools off; `required` and a named
function force a call by constraining decoding to a JSON schema (vLLM's: an
array of `{"name", "parameters"}` objects for `required`, the function's own
parameters for a named one); `response_format` `json_object` / `json_schema`
constrains decoding to JSON. Errors are vLLM's messages, as 400s.

The response side is the engine's tool-call parser (what `--tool-call-parser`
selects on a real lane): the builtin model writes a call the way its tool_json
corpus does, a JSON object `{"tool_calls": [{"id", "type", "function":
{"name", "arguments"}}]}` at the start of its answer. `parse_tool_calls` reads
it from a finished text; `AutoToolStream` reads it from a stream, holding text
back only while it can still become a call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gb300lane.engine.api_errors import ApiError

ToolMode = Literal["none", "auto", "required", "named"]
ConstraintKind = Literal["json", "json_object", "regex", "choice", "grammar"]


_EXPLICIT_KINDS: tuple[ConstraintKind, ...] = ("json", "regex", "choice", "grammar")


@dataclass(frozen=True)
class Constraint:
    """What decoding is held to (vLLM's StructuredOutputsParams, one kind), and which field asked for it."""

    kind: ConstraintKind
    value: Any
    source: str  # "response_format", "structured_outputs" or "tools"


_DECODER = json.JSONDecoder()
_CALLS_KEY = '"tool_calls"'
_CORRECT_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


@dataclass(frozen=True)
class ToolRequest:
    """What a chat request asks of tools: the mode, the declared functions, the forced name."""

    mode: ToolMode
    functions: tuple[dict[str, Any], ...] = ()
    name: str | None = None
    parallel: bool = True  # parallel_tool_calls: False keeps only the first call, as vLLM filters

    def keep(self, calls: list[dict[str, object]]) -> list[dict[str, object]]:
        return calls if self.parallel else calls[:1]

    def schema(self) -> dict[str, object] | None:
        """The JSON schema decoding is held to: None unless a call is forced."""
        if self.mode == "named":
            fn = next(f for f in self.functions if f["name"] == self.name)
            return fn.get("parameters") or {"type": "object", "properties": {}}
        if self.mode == "required":
            return {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "anyOf": [
                        {
                            "properties": {
                                "name": {"type": "string", "enum": [f["name"]]},
                                "parameters": f.get("parameters") or {"type": "object", "properties": {}},
                            },
                            "required": ["name", "parameters"],
                        }
                        for f in self.functions
                    ],
                },
            }
        return None


def parse_tools(body: Mapping[str, object]) -> ToolRequest:
    """`tools` and `tool_choice` of a chat body, checked as vLLM's ChatCompletionRequest checks them."""
    tools = body.get("tools")
    functions: list[dict[str, Any]] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError("tools must be a list of {type: function, function: {name, parameters}}", param="tools")
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict):
                raise ApiError(f'tools[{i}] must be {{"type": "function", "function": {{...}}}}', param="tools")
            if not isinstance(fn.get("name"), str):
                raise ApiError(f"tools[{i}].function.name must be a string", param="tools")
            params = fn.get("parameters")
            if params is not None and not isinstance(params, dict):
                raise ApiError(f"tools[{i}].function.parameters must be a JSON schema object", param="tools")
            functions.append(fn)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise ApiError(f"parallel_tool_calls must be a boolean; got {parallel!r}", param="parallel_tool_calls")
    parallel = parallel is not False
    choice = body.get("tool_choice")
    if choice is None and "tool_choice" not in body and tools:
        choice = "auto"
    if choice is None or choice == "none":
        return ToolRequest("none", tuple(functions), parallel=parallel)
    if tools is None:
        raise ApiError("When using `tool_choice`, `tools` must be set.", param="tool_choice")
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise ApiError(
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or "required" are supported.',
            param="tool_choice",
        )
    if choice == "required" and not functions:
        return ToolRequest("none", parallel=parallel)
    if choice in ("auto", "required"):
        return ToolRequest(choice, tuple(functions), parallel=parallel)
    assert isinstance(choice, dict)  # anything else was refused above
    fn = choice.get("function")
    if not isinstance(fn, dict):
        raise ApiError(f"Invalid value for `function`: `{fn}` in `tool_choice`! {_CORRECT_USAGE}", param="tool_choice")
    if "name" not in fn:
        raise ApiError(f"Expected field `name` in `function` in `tool_choice`! {_CORRECT_USAGE}", param="tool_choice")
    name = fn["name"]
    if not isinstance(name, str) or not name:
        raise ApiError(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {_CORRECT_USAGE}", param="tool_choice"
        )
    if not any(f["name"] == name for f in functions):
        raise ApiError(
            "The tool specified in `tool_choice` does not match any of the specified `tools`", param="tool_choice"
        )
    return ToolRequest("named", tuple(functions), name, parallel=parallel)


def parse_constraint(body: Mapping[str, object]) -> Constraint | None:
    """The decoding constraint `response_format` or vLLM's `structured_outputs` asks for (response_format wins)."""
    constrained, schema = parse_response_format(body)
    if constrained:
        return Constraint("json" if schema is not None else "json_object", schema, "response_format")
    spec = body.get("structured_outputs")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ApiError('structured_outputs must be an object such as {"json": {...}}', param="structured_outputs")
    kinds = [k for k in _EXPLICIT_KINDS if spec.get(k) is not None]
    if len([k for k in kinds if k != "grammar"]) > 1:
        raise ApiError(
            "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
            param="structured_outputs",
        )
    if not kinds:
        if spec.get("json_object"):
            return Constraint("json_object", None, "structured_outputs")
        return None
    kind = kinds[0]
    value = spec[kind]
    if kind == "json" and isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise ApiError("structured_outputs.json is not valid JSON", param="structured_outputs") from None
    if kind == "json" and not isinstance(value, dict):
        raise ApiError("structured_outputs.json must be a JSON schema object", param="structured_outputs")
    if kind in ("regex", "grammar") and not isinstance(value, str):
        raise ApiError(f"structured_outputs.{kind} must be a string", param="structured_outputs")
    if kind == "choice" and (not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value)):
        raise ApiError("structured_outputs.choice must be a non-empty list of strings", param="structured_outputs")
    return Constraint(kind, value, "structured_outputs")


def parse_response_format(body: Mapping[str, object]) -> tuple[bool, dict[str, object] | None]:
    """(constrained, schema) for `response_format`: json_object is (True, None), json_schema its schema."""
    fmt = body.get("response_format")
    if fmt is None:
        return False, None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        kind = fmt.get("type") if isinstance(fmt, dict) else fmt
        raise ApiError(f"response_format.type {kind!r}: use text, json_object or json_schema", param="response_format")
    if fmt["type"] == "text":
        return False, None
    if fmt["type"] == "json_object":
        return True, None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ApiError(
            "response_format.json_schema must be an object with a name and a schema", param="response_format"
        )
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise ApiError("response_format.json_schema.schema must be a JSON schema object", param="response_format")
    return True, schema


def render_tool_calls(calls: object, *, where: str) -> str:
    """An assistant message's `tool_calls` as the builtin model writes calls: `{"tool_calls": [...]}`."""
    if not isinstance(calls, list):
        raise ApiError(f"{where} must be a list of tool calls", param="messages")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(f'{where}[{j}] must be {{"function": {{"name", "arguments"}}}}', param="messages")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except (json.JSONDecodeError, RecursionError):
                raise ApiError(f"{where}[{j}].function.arguments is not valid JSON", param="messages") from None
        out.append(
            {
                "id": call.get("id") or f"call_{j}",
                "type": "function",
                "function": {"name": fn["name"], "arguments": args},
            }
        )
    return json.dumps({"tool_calls": out}, ensure_ascii=False)


def tool_call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def _call(name: str, arguments: str, index: int | None = None) -> dict[str, object]:
    out: dict[str, object] = {
        "id": tool_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    if index is not None:
        out["index"] = index
    return out


def _calls_from(obj: Any) -> list[tuple[str, str]] | None:
    """(name, JSON arguments) of each call in a parsed `{"tool_calls": [...]}` object, None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("tool_calls"), list) or not obj["tool_calls"]:
        return None
    calls = []
    for entry in obj["tool_calls"]:
        fn = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return None
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None
        calls.append((fn["name"], json.dumps(args, ensure_ascii=False)))
    return calls


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, object]]]:
    """(content, tool_calls) of a finished answer under `auto` (no calls: the text is the content)."""
    body = text.lstrip()
    if body.startswith("{"):
        try:
            obj, end = _DECODER.raw_decode(body)
        except json.JSONDecodeError:
            return text, []
        calls = _calls_from(obj)
        if calls:
            rest = body[end:]
            return (rest if rest.strip() else None), [_call(n, a) for n, a in calls]
    return text, []


def parse_required(text: str) -> list[dict[str, object]] | None:
    """The calls of a `required` answer (`[{"name", "parameters"}, ...]`), None if it did not finish."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    return [_call(i["name"], json.dumps(i.get("parameters", {}), ensure_ascii=False)) for i in items]


def _could_be_calls(text: str) -> bool:
    """Whether `text` (starting with `{`) can still grow into a `{"tool_calls": ...}` object."""
    rest = text[1:].lstrip()
    if len(rest) < len(_CALLS_KEY):
        return _CALLS_KEY.startswith(rest)
    return rest.startswith(_CALLS_KEY)


class AutoToolStream:
    """Turns an `auto` stream's text deltas into chat deltas: content, or tool_calls once a call is whole.

    Text is held back only while the answer so far can still become a
    `{"tool_calls": ...}` object; once it cannot (or the call closes), held
    text goes out as content and later text streams as it comes.
    """

    def __init__(self, parallel: bool = True) -> None:
        self._parallel = parallel
        self._held = ""
        self._state: Literal["undecided", "content"] = "undecided"
        self.called = False

    def feed(self, text: str) -> list[dict[str, object]]:
        if self._state == "content":
            return [{"content": text}] if text else []
        self._held += text
        body = self._held.lstrip()
        if not body:
            return []
        if body.startswith("{"):
            try:
                obj, end = _DECODER.raw_decode(body)
            except json.JSONDecodeError:
                if _could_be_calls(body):
                    return []
                return self._flush()
            calls = _calls_from(obj)
            if calls:
                self.called, self._state, self._held = True, "content", ""
                calls = calls if self._parallel else calls[:1]
                out: list[dict[str, object]] = [{"tool_calls": [_call(n, a, i) for i, (n, a) in enumerate(calls)]}]
                rest = body[end:]
                return out + ([{"content": rest}] if rest else [])
        return self._flush()

    def finish(self) -> list[dict[str, object]]:
        """What is still held when the answer ends (a call that never closed is content)."""
        return self._flush() if self._held else []

    def _flush(self) -> list[dict[str, object]]:
        held, self._held, self._state = self._held, "", "content"
        return [{"content": held}] if held else []
