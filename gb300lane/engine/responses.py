"""`POST /v1/responses` for text, as vLLM 0.33's OpenAI-compatible server answers it.

The Responses API is a chat turn in another shape: `instructions` become a
system message, `input` (a string, or a list of messages whose content is a
string or `input_text` parts) the conversation, `max_output_tokens` the
length limit. The engine runs it as the chat completion it is and answers
with a `response` object: one `message` output item holding one
`output_text` part, `status` completed or incomplete (`max_output_tokens`),
usage as input / output / total tokens. Streaming, tools and stored
responses (`previous_response_id`, `store`) are not served by the embedded
engine; asking for them is a 400 that says so.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from gb300lane.engine.api_errors import ApiError

#: Keys a text request may carry that the embedded engine takes as they are, or ignores as vLLM's defaults do.
_PASSED = ("model", "temperature", "top_p", "seed", "user", "metadata")
_UNSERVED = {"tools": "tools", "previous_response_id": "stored responses", "background": "background responses"}


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                isinstance(part, dict)
                and part.get("type") in ("input_text", "output_text", "text")
                and isinstance(part.get("text"), str)
            ):
                parts.append(part["text"])
            else:
                raise ApiError(f"{where}: only text content (input_text parts) is served", param="input")
        return "".join(parts)
    raise ApiError(f"{where}: content must be a string or a list of input_text parts", param="input")


def chat_body(body: object) -> dict[str, object]:
    """The chat completion request a text `/v1/responses` request is; ApiError for what is not served."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    for key, what in _UNSERVED.items():
        if body.get(key):
            raise ApiError(f"/v1/responses: {what} are not served by this engine; send text input only", param=key)
    if body.get("stream"):
        raise ApiError("/v1/responses: streaming is not served by this engine; send stream: false", param="stream")
    messages: list[dict[str, str]] = []
    if body.get("instructions") is not None:
        if not isinstance(body["instructions"], str):
            raise ApiError("instructions must be a string", param="instructions")
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        for i, item in enumerate(given):
            if not isinstance(item, dict) or item.get("type", "message") != "message":
                raise ApiError(f"input[{i}]: only message items are served", param="input")
            role = item.get("role", "user")
            if role not in ("user", "assistant", "system", "developer"):
                raise ApiError(
                    f"input[{i}].role {role!r} is not one of user, assistant, system, developer", param="input"
                )
            messages.append(
                {
                    "role": "system" if role == "developer" else role,
                    "content": _text_of(item.get("content"), f"input[{i}]"),
                }
            )
    else:
        raise ApiError("input is required: a string or a list of messages", param="input")
    out: dict[str, object] = {k: body[k] for k in _PASSED if k in body and body[k] is not None}
    out["messages"] = messages
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    return out


def response_body(request: Mapping[str, object], chat: Mapping[str, Any]) -> dict[str, object]:
    """The `response` object for a chat completion body `chat` answering the Responses request `request`."""
    choice = chat["choices"][0]
    text = choice["message"].get("content") or ""
    usage = chat["usage"]
    finished = choice["finish_reason"] != "length"
    out: dict[str, object] = {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "model": chat["model"],
        "status": "completed" if finished else "incomplete",
        "incomplete_details": None if finished else {"reason": "max_output_tokens"},
        "error": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "output": [
            {
                "id": f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "role": "assistant",
                "status": "completed" if finished else "incomplete",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": None}],
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": None,
        "temperature": request.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": request.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        },
        "user": request.get("user"),
        "metadata": request.get("metadata"),
    }
    if "gb300lane" in chat:
        out["gb300lane"] = chat["gb300lane"]
    return out
