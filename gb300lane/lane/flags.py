"""Reading recipe keys back out of a running container's command line.

`parse_argv` turns the argv a runtime reports (docker inspect Path + Args, or
the process command line psutil reads) into {flag: value}, with `--speculative-config` and
`--compilation-config` decoded from JSON; `flag_value` answers "what does the
container actually run with for this dotted recipe key", so the flag check
compares the recipe with the container and never with the rendered spec.
"""

from __future__ import annotations

import json
from pydantic import Field, JsonValue

from gb300lane.models import FrozenModel

_JSON_FLAGS = ("speculative-config", "compilation-config")

#: Recipe keys that render to a flag whose name is not the key's last part.
_DIRECT = {
    "model.served_name": "served-model-name",
    "model.path": "model",
    "lane.port": "port",
    "lane.bind": "host",
    "kv_pool_tokens": "kv-pool-tokens",
    "engine_args.compilation_config": "compilation-config",
}


class FlagReading(FrozenModel):
    """One recipe key as found in the container's args."""

    key: str = Field(description="Dotted recipe key.")
    readable: bool = Field(description="False when the key does not render to a flag (env, volumes, ...).")
    present: bool = Field(description="The flag (or the JSON key inside its flag) appears in the args.")
    value: JsonValue = Field(default=None, description="The value in the args (decoded), None when absent.")


def parse_argv(argv: list[str] | tuple[str, ...]) -> dict[str, JsonValue]:
    """{flag name without dashes: value}; a bare flag is True, `--no-x` is x = False.

    The first positional after `serve` is recorded as `model` (vLLM's
    `vllm serve MODEL`), unless `--model` is also given.
    """
    out: dict[str, JsonValue] = {}
    args = list(argv)
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            if eq:
                out[name] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[name] = args[i + 1]
                i += 1
            elif name.startswith("no-"):
                out[name[3:]] = False
            else:
                out[name] = True
        else:
            positional.append(arg)
        i += 1
    if "serve" in positional:
        after = positional[positional.index("serve") + 1 :]
        if after and "model" not in out:
            out["model"] = after[0]
    for name in _JSON_FLAGS:
        text = out.get(name)
        if isinstance(text, str):
            try:
                out[name] = json.loads(text)
            except json.JSONDecodeError:
                pass  # left as text: the comparison then fails with the raw value shown
    return out


def _flag_for(key: str) -> tuple[str, str | None] | None:
    """(flag, key inside the flag's JSON or None) for a dotted recipe key; None if it is no flag."""
    if key in _DIRECT:
        return _DIRECT[key], None
    head, _, rest = key.partition(".")
    if head == "speculative" and rest:
        return "speculative-config", rest
    if key == "speculative":
        return "speculative-config", None
    if head == "engine_args" and rest:
        if rest.startswith("compilation_config."):
            return "compilation-config", rest.split(".", 1)[1]
        if rest.startswith("extra_args."):
            rest = rest.split(".", 1)[1]
        if "." in rest:
            return None
        return rest.replace("_", "-"), None
    return None


def flag_value(parsed: dict[str, JsonValue], key: str) -> FlagReading:
    """What the parsed args say about one dotted recipe key."""
    where = _flag_for(key)
    if where is None:
        return FlagReading(key=key, readable=False, present=False)
    flag, inner = where
    if flag not in parsed:
        return FlagReading(key=key, readable=True, present=False)
    value = parsed[flag]
    if inner is None:
        return FlagReading(key=key, readable=True, present=True, value=value)
    node: JsonValue = value
    for part in inner.split("."):
        if not isinstance(node, dict) or part not in node:
            return FlagReading(key=key, readable=True, present=False)
        node = node[part]
    return FlagReading(key=key, readable=True, present=True, value=node)


def same_value(expected: JsonValue, actual: JsonValue) -> bool:
    """Recipe value vs argv value: numbers, booleans and lists compare by meaning, not spelling."""
    if isinstance(actual, str) and not isinstance(expected, str):
        text = actual
        try:
            actual = json.loads(text)
        except json.JSONDecodeError:
            if isinstance(expected, bool):
                return text.lower() == str(expected).lower()
            return False
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(same_value(e, a) for e, a in zip(expected, actual, strict=True))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(same_value(expected[k], actual[k]) for k in expected)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return float(expected) == float(actual)
    return str(expected) == str(actual) if isinstance(expected, str) else expected == actual
