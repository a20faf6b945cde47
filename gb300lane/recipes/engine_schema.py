"""Engine-schema validation: recipe keys checked against the image's vLLM version.

The snapshot (`gb300lane/data/vllm-<version>-schema.json`) is generated from the
vllm wheel by `scripts/snapshot_vllm_schema.py`; nothing here hand-types the
field list. A key vLLM does not know is an error with a "did you mean".
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

from gb300lane.errors import RecipeError
from gb300lane.models import key_text

if TYPE_CHECKING:
    from pydantic import JsonValue


@lru_cache(maxsize=8)
def load_snapshot(vllm_version: str) -> dict[str, Any]:
    """The committed schema snapshot for one vLLM version."""
    data = resources.files("gb300lane.data")
    path = data.joinpath(f"vllm-{vllm_version}-schema.json")
    if not path.is_file():
        have = sorted(
            p.name[len("vllm-") : -len("-schema.json")]
            for p in data.iterdir()
            if p.name.startswith("vllm-") and p.name.endswith("-schema.json")
        )
        raise RecipeError(
            f"image.vllm_version = {vllm_version!r}: no engine schema snapshot ({path.name}); "
            f"snapshots exist for {', '.join(have) or 'none'}; run scripts/snapshot_vllm_schema.py on that wheel"
        )
    return cast(dict[str, Any], json.loads(path.read_text(encoding="utf-8")))


#: The k schedule's names: vLLM 0.33's, and the new one of vLLM's open rename. A recipe may use either; it is
#: rendered under the one the image's vLLM version knows.
SCHEDULE_NAMES = ("num_speculative_tokens_per_batch_size", "speculative_token_schedule")


def schedule_name(vllm_version: str) -> str:
    """The name vLLM `vllm_version` takes the k schedule under (the new name once its snapshot has it)."""
    try:
        fields = load_snapshot(vllm_version)["speculative_config"]["fields"]
    except RecipeError:
        return SCHEDULE_NAMES[0]
    return SCHEDULE_NAMES[1] if SCHEDULE_NAMES[1] in fields else SCHEDULE_NAMES[0]


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else "see gb300lane/data for the keys this vLLM version knows"


def speculative_fields(vllm_version: str) -> dict[str, dict[str, JsonValue]]:
    return cast(dict[str, dict[str, JsonValue]], load_snapshot(vllm_version)["speculative_config"]["fields"])


def _check_bounds(value: Any, bounds: dict[str, Any]) -> str | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    checks: dict[str, tuple[Callable[[float, float], bool], str]] = {
        "gt": (lambda a, b: a > b, ">"), "ge": (lambda a, b: a >= b, ">="),
        "lt": (lambda a, b: a < b, "<"), "le": (lambda a, b: a <= b, "<="),
    }  # fmt: skip
    for op, bound in bounds.items():
        fn, sym = checks[op]
        if not fn(value, bound):
            return f"must be {sym} {bound}"
    return None


def validate_engine_keys(raw: Mapping[str, object], where: Callable[[str], str]) -> None:
    """Check the merged raw recipe's speculative, extra_args and compilation keys against the snapshot.

    `where(dotted_key)` gives the "file:line" an error about that key names.
    """
    image = raw.get("image")
    version = image.get("vllm_version") if isinstance(image, dict) else None
    if not isinstance(version, str):
        return  # the schema reports the missing image.vllm_version
    try:
        snap = load_snapshot(version)
    except RecipeError as exc:
        raise RecipeError(f"{where('image.vllm_version')}: {exc}") from None

    spec = raw.get("speculative")
    if isinstance(spec, dict):
        fields = dict(snap["speculative_config"]["fields"])
        # Either name of the k schedule is accepted wherever the version knows one of them (the rename).
        for a, b in (SCHEDULE_NAMES, SCHEDULE_NAMES[::-1]):
            if a in fields and b not in fields:
                fields[b] = fields[a]
        for key, value in spec.items():
            dotted = f"speculative.{key_text(key)}"
            if key not in fields:
                raise RecipeError(
                    f"{where(dotted)}: {dotted} is not a vLLM {version} speculative-config key; {_suggest(key, sorted(fields))}"
                )
            field = fields[key]
            if value is None:
                continue
            choices = field.get("choices")
            if choices is not None and value not in choices:
                hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
                fix = f"did you mean {hint[0]!r}?" if hint else f"use one of: {', '.join(map(str, choices))}"
                raise RecipeError(f"{where(dotted)}: {dotted} = {value!r} is not accepted by vLLM {version}; {fix}")
            problem = _check_bounds(value, field.get("bounds", {}))
            if problem:
                raise RecipeError(f"{where(dotted)}: {dotted} = {value!r} {problem} (vLLM {version}); change the value")

    engine_args = raw.get("engine_args")
    if not isinstance(engine_args, dict):
        return
    extra = engine_args.get("extra_args")
    if isinstance(extra, dict):
        # `vllm serve` takes the engine's args and the OpenAI server's own (tool parsers, chat template, ...).
        known = {**snap.get("frontend_args", {}).get("fields", {}), **snap["engine_args"]["fields"]}
        for key, value in extra.items():
            dotted = f"engine_args.extra_args.{key_text(key)}"
            name = str(key).replace("-", "_").lstrip("_")
            if name not in known:
                raise RecipeError(
                    f"{where(dotted)}: {dotted} is not a `vllm serve` argument in vLLM {version}; {_suggest(name, sorted(known))}"
                )
            if name == "speculative_config" or name == "compilation_config":
                raise RecipeError(
                    f"{where(dotted)}: {dotted} duplicates a recipe section; set it under "
                    f"{'speculative' if name == 'speculative_config' else 'engine_args.compilation_config'} instead"
                )
            choices = known[name].get("choices")
            if choices is not None and value not in choices:
                raise RecipeError(
                    f"{where(dotted)}: {dotted} = {value!r} is not accepted by vLLM {version}; use one of: "
                    f"{', '.join(map(str, choices))}"
                )
    compilation = engine_args.get("compilation_config")
    if isinstance(compilation, dict):
        known = snap["compilation_config"]["fields"]
        for key in compilation:
            dotted = f"engine_args.compilation_config.{key_text(key)}"
            if key not in known:
                raise RecipeError(
                    f"{where(dotted)}: {dotted} is not a vLLM {version} compilation-config key; {_suggest(str(key), sorted(known))}"
                )
        sizes = compilation.get("cudagraph_capture_sizes")
        if sizes is not None and (
            not isinstance(sizes, list)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)
        ):
            dotted = "engine_args.compilation_config.cudagraph_capture_sizes"
            raise RecipeError(f"{where(dotted)}: {dotted} must be a list of positive integers, e.g. [1, 2, 4, 8]")
