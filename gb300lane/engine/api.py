"""OpenAI-compatible request parsing and response shapes for the embedded engine.

Parsing turns a JSON body into a `GenerateRequest` or raises `ApiError` with
the status and the parameter at fault (400 for bad parameters, 404 for an
unknown model), which the server returns as OpenAI-style JSON. Nothing here
touches the engine core.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gb300lane.engine.api_errors import ApiError as ApiError  # the server catches it from here
from gb300lane.engine.core import Sequence
from gb300lane.engine.logprobs import MAX_LOGPROBS
from gb300lane.engine.sampling import SamplingParams
from gb300lane.engine.tools import (
    AutoToolStream,
    Constraint,
    ToolRequest,
    parse_constraint,
    parse_required,
    parse_tool_calls,
    parse_tools,
    render_tool_calls,
    tool_call_id,
)


@dataclass
class GenerateRequest:
    """One parsed completion or chat request."""

    chat: bool
    prompt_text: str | None
    prompt_ids: list[int] | None
    params: SamplingParams
    stream: bool
    include_usage: bool
    continuous_usage: bool
    stop: list[str] = field(default_factory=list)
    request_id: str = ""
    tools: ToolRequest = field(default_factory=lambda: ToolRequest("none"))
    #: What response_format / structured_outputs hold decoding to, if anything.
    constraint: Constraint | None = None
    #: Top logprobs per output token (completions' `logprobs`, chat's `top_logprobs`); None: no logprobs.
    logprobs: int | None = None
    #: Top logprobs per prompt token (`prompt_logprobs`, or `logprobs` under echo); None: none.
    prompt_logprobs: int | None = None
    #: A completion's `echo`: the prompt goes before the answer (and its tokens before the answer's logprobs).
    echo: bool = False
    #: vLLM's `return_token_ids`: the prompt's token ids and each chunk's (or the answer's) generated token ids.
    return_token_ids: bool = False

    @property
    def decoding_constraint(self) -> Constraint | None:
        """The constraint decoding follows: a forced tool call's schema, else the request's own."""
        forced = self.tools.schema()
        if forced is not None:
            return Constraint("json", forced, "tools")
        return self.constraint


def _number(body: dict[str, Any], key: str, default, *, lo=None, hi=None, lo_open=False, integer=False):
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        raise ApiError(f"{key} must be {kind}; got {value!r}", param=key)
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ApiError(f"{key} must be {'>' if lo_open else '>='} {lo}; got {value}", param=key)
    if hi is not None and value > hi:
        raise ApiError(f"{key} must be <= {hi}; got {value}", param=key)
    return value


def _messages_text(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list of {role, content} objects", param="messages")
    parts = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ApiError(f"messages[{i}] must be an object with a string role", param="messages")
        content = msg.get("content")
        if msg.get("tool_calls") is not None:
            # An earlier answer's calls, written back the way the builtin model writes them.
            parts.append(render_tool_calls(msg["tool_calls"], where=f"messages[{i}].tool_calls"))
        if content is None:
            continue
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(f"messages[{i}].content parts must be text parts", param="messages")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise ApiError(f"messages[{i}].content must be a string or a list of text parts", param="messages")
        parts.append(content)
    # The builtin model has no chat template: it continues the conversation's text.
    return "\n\n".join(parts) + "\n"


def _logprob_count(body: dict[str, Any], key: str, what: str, max_logprobs: int, vocab_size: int | None) -> int | None:
    """A logprob count as vLLM takes it: an integer >= 0, or -1 for the whole vocabulary, at most max_logprobs."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"{key} must be an integer; got {value!r}", param=key)
    if value < -1:
        raise ApiError(f"`{key}` must be a positive value or -1.", param=key)
    if value == -1 and vocab_size is None:
        raise ApiError(
            f"Requested {what} logprobs of -1 (the whole vocabulary), which is greater than max allowed: "
            f"{max_logprobs}",
            param=key,
        )
    asked = vocab_size if value == -1 and vocab_size is not None else value
    if asked > max_logprobs:
        raise ApiError(
            f"Requested {what} logprobs of {asked}, which is greater than max allowed: {max_logprobs}", param=key
        )
    return asked


def _logprob_params(
    body: dict[str, Any],
    *,
    chat: bool,
    max_logprobs: int,
    vocab_size: int | None,
) -> tuple[int | None, int | None, bool]:
    """(logprobs per output token, per prompt token, echo) with vLLM's checks and messages."""
    stream = body.get("stream") is True
    if chat:
        wanted = body.get("logprobs", False)
        if wanted is not None and not isinstance(wanted, bool):
            raise ApiError(
                f"logprobs must be a boolean for chat; got {wanted!r} (send top_logprobs for a count)", param="logprobs"
            )
        top = _logprob_count(body, "top_logprobs", "sample", max_logprobs, vocab_size)
        if top is not None and top != 0 and not wanted:
            raise ApiError("when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs")
        logprobs = (top or 0) if wanted else None
        if body.get("echo") not in (None, False):
            raise ApiError("echo is not supported for chat by the embedded engine; omit echo", param="echo")
        echo = False
    else:
        logprobs = _logprob_count(body, "logprobs", "sample", max_logprobs, vocab_size)
        echo = body.get("echo", False)
        if echo is None:
            echo = False
        if not isinstance(echo, bool):
            raise ApiError(f"echo must be a boolean; got {echo!r}", param="echo")
    prompt_logprobs = _logprob_count(body, "prompt_logprobs", "prompt", max_logprobs, vocab_size)
    if prompt_logprobs is not None and stream:
        raise ApiError("`prompt_logprobs` are not available when `stream=True`.", param="prompt_logprobs")
    if stream and (logprobs is not None or echo):
        key = "echo" if echo else "logprobs"
        raise ApiError(
            f"{key} with stream=true: the embedded engine returns logprobs and echo in whole answers "
            "only; send stream=false",
            param=key,
        )
    if echo and logprobs is not None and prompt_logprobs is None:
        prompt_logprobs = logprobs  # vLLM scores the echoed prompt at the answer's count
    return logprobs, prompt_logprobs, echo


def parse_request(
    body: object,
    *,
    chat: bool,
    served_model_name: str,
    max_logprobs: int = MAX_LOGPROBS,
    vocab_size: int | None = None,
) -> GenerateRequest:
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_model_name:
        raise ApiError(f"The model `{model}` does not exist.", status=404, param="model")
    prompt_text = prompt_ids = None
    if chat:
        prompt_text = _messages_text(body.get("messages"))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_text = prompt
        elif (
            isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            prompt_ids = list(prompt)
        else:
            raise ApiError("prompt must be a string, a list with one string, or a list of token ids", param="prompt")
    n = _number(body, "n", 1, lo=1, integer=True)
    if n != 1:
        raise ApiError("n > 1 is not supported by the embedded engine; send n = 1", param="n")
    logprobs, prompt_logprobs, echo = _logprob_params(body, chat=chat, max_logprobs=max_logprobs, vocab_size=vocab_size)
    temperature = float(_number(body, "temperature", 1.0, lo=0.0))
    top_p = float(_number(body, "top_p", 1.0, lo=0.0, lo_open=True, hi=1.0))
    top_k = _number(body, "top_k", -1, integer=True)
    if top_k == 0 or top_k < -1:
        raise ApiError(f"top_k must be -1 (disabled) or >= 1; got {top_k}", param="top_k")
    min_p = float(_number(body, "min_p", 0.0, lo=0.0, hi=1.0))
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _number(body, key, None, lo=1, hi=2**63 - 1, integer=True)
    min_tokens = _number(body, "min_tokens", 0, lo=0, integer=True)
    if max_tokens is not None and min_tokens > max_tokens:
        raise ApiError(f"min_tokens ({min_tokens}) must be <= {key} ({max_tokens})", param="min_tokens")
    # vLLM's bounds: a seed is a torch.long.
    seed = _number(body, "seed", None, integer=True, lo=-(2**63), hi=2**63 - 1)
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ApiError(f"ignore_eos must be a boolean; got {ignore_eos!r}", param="ignore_eos")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(f"stream must be a boolean; got {stream!r}", param="stream")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise ApiError("stream_options is only allowed when stream is true", param="stream_options")
        if not isinstance(options, dict):
            raise ApiError("stream_options must be an object", param="stream_options")
    options = options or {}
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ApiError("stop must be a non-empty string or a list of them", param="stop")
    tools = parse_tools(body) if chat else ToolRequest("none")
    constraint = parse_constraint(body)
    if constraint is not None and tools.mode in ("required", "named"):
        raise ApiError(
            "You can only either use constraints for structured outputs or tools, not both.", param="response_format"
        )
    params = SamplingParams(
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens or 0,
        min_tokens=min_tokens,
        ignore_eos=ignore_eos,
        seed=seed,
        top_k=top_k,
        min_p=min_p,
    )
    prefix = "chatcmpl" if chat else "cmpl"
    return GenerateRequest(
        chat=chat,
        prompt_text=prompt_text,
        prompt_ids=prompt_ids,
        params=params,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        continuous_usage=bool(options.get("continuous_usage_stats", False)),
        stop=stop,
        request_id=f"{prefix}-{uuid.uuid4().hex}",
        tools=tools,
        constraint=constraint,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        echo=echo,
        return_token_ids=_flag(body, "return_token_ids", False),
    )


def _check_model(body: dict[str, Any], served_model_name: str) -> None:
    model = body.get("model")
    if model is not None and model != served_model_name:
        raise ApiError(f"The model `{model}` does not exist.", status=404, param="model")


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(f"{key} must be a boolean; got {value!r}", param=key)
    return value


def parse_tokenize(body: object, *, served_model_name: str) -> tuple[str, bool]:
    """A /tokenize body: (the text the generate routes would tokenize, whether to return token strings).

    vLLM's two shapes: `{"prompt": str}` (a completion prompt) or `{"messages": [...]}`
    (a chat, rendered as /v1/chat/completions renders it).
    """
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    _check_model(body, served_model_name)
    strs = _flag(body, "return_token_strs", False)
    if "messages" in body:
        if body.get("continue_final_message") and body.get("add_generation_prompt"):
            raise ApiError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        return _messages_text(body["messages"]), strs
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise ApiError("prompt must be a string (or send messages for a chat)", param="prompt")
    return prompt, strs


def parse_detokenize(body: object, *, served_model_name: str, vocab_size: int) -> list[int]:
    """A /detokenize body's token ids, each in the vocabulary."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    _check_model(body, served_model_name)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in tokens):
        raise ApiError("tokens must be a list of integer token ids", param="tokens")
    bad = [t for t in tokens if not 0 <= t < vocab_size]
    if bad:
        raise ApiError(f"token id {bad[0]} is out of vocabulary (ids lie in [0, {vocab_size}))", param="tokens")
    return tokens


def timing_extension(seq: Sequence) -> dict[str, object]:
    """The per-response "gb300lane" extension: modelled and wall times since arrival."""
    times = seq.token_modelled
    return {
        "modelled_ttft_s": times[0] if times else None,
        "modelled_e2e_s": times[-1] if times else 0.0,
        "modelled_token_times_s": list(times),
        "wall_token_times_s": list(seq.token_wall),
        "block_positions": list(seq.block_positions),
    }


def spec_metrics(seq: Sequence, mode: str) -> dict[str, object] | None:
    if mode == "none":
        return None
    drafts = seq.num_drafts
    out: dict[str, object] = {
        "num_drafts": drafts,
        "num_draft_tokens": seq.num_draft_tokens,
        "num_accepted_tokens": seq.num_accepted,
        "mean_acceptance_length": (1 + seq.num_accepted / drafts) if drafts else None,
        "draft_acceptance_rate": (seq.num_accepted / seq.num_draft_tokens) if seq.num_draft_tokens else None,
    }
    if mode == "detailed":
        out["num_accepted_tokens_per_pos"] = list(seq.accepted_per_pos)
    return out


def usage(seq: Sequence, completion_tokens: int | None = None) -> dict[str, int]:
    """Usage for the request, or, for a stream chunk, for the `completion_tokens` sent up to it."""
    prompt = len(seq.prompt_ids)
    done = len(seq.output_ids) if completion_tokens is None else completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def chunk(
    req: GenerateRequest,
    model: str,
    text: str | None,
    finish: str | None,
    *,
    first: bool = False,
    fields: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """One stream chunk; a chat chunk's delta carries `text` as content, or `fields` (tool_calls) instead."""
    created = int(time.time())
    if req.chat:
        delta: dict[str, object] = {}
        if first:
            delta["role"] = "assistant"
        if fields is not None:
            delta.update(fields)
        elif text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            "id": req.request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
        }
    choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish, "stop_reason": None}
    return {"id": req.request_id, "object": "text_completion", "created": created, "model": model, "choices": [choice]}


def chat_message(req: GenerateRequest, text: str, finish: str | None) -> tuple[dict[str, object], str | None]:
    """(message, finish_reason) of a finished chat answer, tool calls parsed as vLLM's serving_chat does."""
    mode = req.tools.mode
    message: dict[str, object] = {"role": "assistant", "content": text, "tool_calls": []}
    if mode == "named":
        message["content"] = ""
        message["tool_calls"] = [
            {"id": tool_call_id(), "type": "function", "function": {"name": req.tools.name, "arguments": text}}
        ]
    elif mode == "required":
        calls = parse_required(text)
        if calls is not None:
            message["content"], message["tool_calls"] = "", req.tools.keep(calls)
            if finish == "stop":
                finish = "tool_calls"
    elif mode == "auto":
        content, calls = parse_tool_calls(text)
        if calls:
            message["content"], message["tool_calls"] = content, req.tools.keep(calls)
            finish = "tool_calls"
    return message, finish


class ChatDeltas:
    """A chat stream's text deltas as delta fields: content, or tool calls as the request's tool mode reads them."""

    def __init__(self, req: GenerateRequest) -> None:
        self.req = req
        self._auto = AutoToolStream(req.tools.parallel) if req.tools.mode == "auto" else None
        self._named_started = False
        self._held = ""
        self.called = False

    def feed(self, text: str) -> list[dict[str, object]]:
        mode = self.req.tools.mode
        if self._auto is not None:
            return self._auto.feed(text)
        if mode == "named":
            if not text:
                return []
            call: dict[str, object] = {"index": 0, "function": {"arguments": text}}
            if not self._named_started:
                self._named_started = True
                call = {
                    "index": 0,
                    "id": tool_call_id(),
                    "type": "function",
                    "function": {"name": self.req.tools.name, "arguments": text},
                }
            return [{"tool_calls": [call]}]
        if mode == "required":
            self._held += text  # the calls go out whole, once the array closes
            return []
        return [{"content": text}] if text else []

    def finish(self) -> list[dict[str, object]]:
        if self._auto is not None:
            out = self._auto.finish()
            self.called = self._auto.called
            return out
        if self.req.tools.mode == "required" and self._held:
            calls = parse_required(self._held)
            if calls is None:
                return [{"content": self._held}]
            self.called = True
            return [{"tool_calls": [dict(c, index=i) for i, c in enumerate(self.req.tools.keep(calls))]}]
        return []

    def finish_reason(self, finish: str | None) -> str | None:
        if self.called and (self.req.tools.mode == "auto" or finish == "stop"):
            return "tool_calls"
        return finish


@dataclass(frozen=True)
class Scores:
    """A finished answer's logprob fields, as vLLM places them: the choice's `logprobs`, the prompt's
    (`prompt_logprobs`: on the choice of a completion, on the body of a chat) and, under echo, the prompt text."""

    logprobs: dict[str, Any] | None = None
    prompt_logprobs: list[Any] | None = None
    echo_text: str = ""


def final_body(
    req: GenerateRequest,
    model: str,
    seq: Sequence,
    text: str,
    mode: str,
    *,
    scores: Scores | None = None,
    faults: str = "",
) -> dict[str, Any]:
    created = int(time.time())
    scores = scores or Scores()
    if req.chat:
        message, finish = chat_message(req, text, seq.finish_reason)
        choice = {
            "index": 0,
            "message": message,
            "logprobs": scores.logprobs,
            "finish_reason": finish,
            "stop_reason": None,
        }
        body = {
            "id": req.request_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
        }
    else:
        choice = {
            "index": 0,
            "text": scores.echo_text + text,
            "logprobs": scores.logprobs,
            "finish_reason": seq.finish_reason,
            "stop_reason": None,
        }
        if req.prompt_logprobs is not None:
            choice["prompt_logprobs"] = scores.prompt_logprobs
        body = {
            "id": req.request_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [choice],
        }
    if req.return_token_ids:
        # vLLM's places: a completion's choice holds both; a chat's prompt ids sit on the body
        (body if req.chat else choice)["prompt_token_ids"] = list(seq.prompt_ids)
        choice["token_ids"] = list(seq.output_ids)
    body["usage"] = usage(seq)
    if req.chat and req.prompt_logprobs is not None:
        body["prompt_logprobs"] = scores.prompt_logprobs
    ext = timing_extension(seq)
    if faults:
        ext["faults"] = faults  # a faulted engine's answers say so (faults.py)
    body["gb300lane"] = ext
    metrics = spec_metrics(seq, mode)
    if metrics is not None:
        body["metrics"] = {"speculative_decoding": metrics}
    return body
