"""Reading recipe keys back out of a running container's command line.

`parse_argv` turns the argv a runtime reports (docker inspect Path + Args, or
the process command line psutil reads) into {flag: value}, with `--speculative-config` and
`--compilation-config` decoded from JSON; `flag_value` answers "what does the
container actually run with for this dotted recipe key", so the flag check
compares the recipe with the container and never with the rendered spec. Where
a key lands (a flag, the program, env, or nowhere) is the engine's own
rendering (`recipes.containers.key_rendering`), never guessed from the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import Field, JsonValue

from gb300lane.models import FrozenModel
from gb300lane.recipes.containers import KeyRendering

_JSON_FLAGS = ("speculative-config", "compilation-config")


class FlagReading(FrozenModel):
    """One recipe key as found in the container's args."""

    key: str = Field(description="Dotted recipe key.")
    readable: bool = Field(description="False when the key does not render to a flag (env, volumes, ...).")
    present: bool = Field(description="The flag (or the JSON key inside its flag) appears in the args.")
    value: JsonValue = Field(default=None, description="The value in the args (decoded), None when absent.")
    rendered_as: str = Field(
        default="flag",
        description="Where the engine renders the key: flag, program, env, "
        "image or none (`recipes.containers.KeyRendering`).",
    )


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


def flag_value(
    parsed: dict[str, JsonValue],
    rendering: KeyRendering,
    *,
    argv0: str | None = None,
    env: Mapping[str, str] | None = None,
) -> FlagReading:
    """What the running container says about one dotted recipe key, read where its engine renders it
    (`recipes.containers.key_rendering`): a flag or a key inside a JSON flag, the program, or an env variable.

    A key the engine is not handed (or the image, which provenance reads) is not readable here."""
    key = rendering.key
    kind = rendering.rendered_as
    if kind == "env" and rendering.flag is not None:
        if env is None:
            return FlagReading(key=key, readable=False, present=False, rendered_as=kind)
        present = rendering.flag in env
        return FlagReading(key=key, readable=True, present=present, value=env.get(rendering.flag), rendered_as=kind)
    if kind == "program" and rendering.flag is None:
        return FlagReading(
            key=key, readable=argv0 is not None, present=argv0 is not None, value=argv0, rendered_as=kind
        )
    if kind not in ("flag", "program") or rendering.flag is None:
        return FlagReading(key=key, readable=False, present=False, rendered_as=kind)
    flag, inner = rendering.flag, rendering.inner
    if flag not in parsed:
        return FlagReading(key=key, readable=True, present=False, rendered_as=kind)
    value = parsed[flag]
    if inner is None:
        return FlagReading(key=key, readable=True, present=True, value=value, rendered_as=kind)
    node: JsonValue = value
    for part in inner.split("."):
        if not isinstance(node, dict) or part not in node:
            return FlagReading(key=key, readable=True, present=False, rendered_as=kind)
        node = node[part]
    return FlagReading(key=key, readable=True, present=True, value=node, rendered_as=kind)


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
