"""Fuzz the recipe loader, the card loader and the engine's request parser (hypothesis).

The property, for every input: the loader returns a value or raises the project's own error whose
message is one line naming the file (or, for the engine, an `ApiError` with a 400/404 status) -- never
another exception (a traceback), and never longer than `HANG_S` seconds (a hang).

Inputs: raw text and bytes; "YAML soup" built from the tokens that break parsers (anchors, aliases,
tags, merge keys, flow brackets, non-finite numbers, control characters); and valid files mutated key
by key (deleted, replaced by any JSON-like value, unknown keys added). For the engine: arbitrary JSON
bodies and valid completion/chat bodies with mutated fields.

CI runs a fixed budget, derandomized (`GB300LANE_FUZZ_EXAMPLES`, default 120 per property). A longer run
for the figures: `GB300LANE_FUZZ_EXAMPLES=3000 GB300LANE_FUZZ_REPORT=benchmarks/results/fuzz.json
python -m pytest tests/house/test_fuzz_loaders.py` (the report counts inputs tried, tracebacks and hangs).
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gb300lane.cards.cardfile import load_card
from gb300lane.engine.api import ApiError, parse_request
from gb300lane.engine.grammar import GrammarError, compile_constraint
from gb300lane.engine.model import load_model
from gb300lane.errors import LaneError
from gb300lane.paths import shipped
from gb300lane.recipes import load_recipe

EXAMPLES = int(os.environ.get("GB300LANE_FUZZ_EXAMPLES", "120"))
#: One input taking longer than this is a hang (a recipe or card is a few KiB; the limits bound the rest).
HANG_S = float(os.environ.get("GB300LANE_FUZZ_HANG_S", "10"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=EXAMPLES <= 500,  # CI: the same inputs every run; a long run explores
    deadline=None,  # hangs are timed below, with an alarm that interrupts them
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    database=None,
)

FIGURES: dict[str, Counter[str]] = {}

RECIPE = (shipped("recipes") / "local-v26.yaml").read_text(encoding="utf-8").replace("name: local-v26", "name: r")
CARD = (Path(__file__).parents[1] / "data" / "cards" / "mini.yaml").read_text(encoding="utf-8")

# -- strategies ----------------------------------------------------------------------------------

SOUP_TOKENS = [
    "a:", "b: ", "name:", "schema_version: 1", "extends: r", "engine: embedded", "env:", "arms:", "gates:",
    " ", "  ", "\n", "\n  ", "\t", "- ", "-", ":", "? ", ",", "{", "}", "[", "]", "'", '"', "|", ">", "#c",
    "&a ", "&b ", "*a", "*b", "<<: *a", "!!python/object:os.system ", "!!python/name:os.system", "!!int ",
    "!!float ", "!!binary ", "!!set ", "!!omap ", "!!timestamp ", "!!str ", "!custom ", "%YAML 1.1\n", "---",
    "...", ".inf", "-.inf", ".nan", "1.0e+999", "1e999", "0x1F", "0o17", "0b101", "2024-13-45", "~", "null",
    "yes", "no", "x" * 40, "9" * 30, "\x00", "\x85", "\ufeff", "\u2028", "é", "\\", "%", "@", "`",
]  # fmt: skip

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=5)),
    max_leaves=25,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """A valid mapping with some keys deleted, replaced by any JSON-like value, or added."""
    data = json.loads(json.dumps(base))
    paths = [p for p in _paths(data) if p]
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(paths))
        parent: Any = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "replace":
                parent[path[-1]] = draw(json_values)
            elif action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=10))] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced the path
    return data


def _dump(data: Any) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return json.dumps(data, default=str)


yaml_soup = st.lists(st.sampled_from(SOUP_TOKENS), min_size=1, max_size=80).map("".join)


def _texts(base: str) -> st.SearchStrategy[str | bytes]:
    base_data = yaml.safe_load(base)
    return st.one_of(
        st.text(max_size=3000),
        st.binary(max_size=3000),
        yaml_soup,
        yaml_soup.map(lambda s: base + s),
        st.tuples(st.integers(min_value=0, max_value=len(base)), yaml_soup).map(
            lambda t: base[: t[0]] + t[1] + base[t[0] :]
        ),
        mutated(base_data).map(_dump),
    )


# -- the property ----------------------------------------------------------------------------------


class Hang(Exception):
    """An input ran past HANG_S."""


def _alarm(_signum: int, _frame: object) -> None:
    raise Hang(f"one input ran past {HANG_S:g} s")


def _check(
    kind: str, call: Callable[[], object], allowed: type[Exception], ok: Callable[[BaseException], bool]
) -> None:
    """Run one input; count it; fail on anything but a value or an `allowed` error that is `ok`, or on a hang."""
    figures = FIGURES.setdefault(kind, Counter())
    figures["tried"] += 1
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    t0 = time.perf_counter()
    try:
        call()
        figures["accepted"] += 1
    except Hang:
        figures["hangs"] += 1
        raise
    except Exception as exc:
        if not isinstance(exc, allowed):
            figures["tracebacks"] += 1
            raise
        if not ok(exc):
            figures["bad_messages"] += 1  # the right error, but not one line naming the file
            raise
        figures["refused"] += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        figures["slowest_ms"] = max(figures["slowest_ms"], int((time.perf_counter() - t0) * 1000))


def _one_line_naming(path: Path) -> Callable[[BaseException], bool]:
    def ok(exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, LaneError) and "\n" not in text and str(path) in text

    return ok


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    out = os.environ.get("GB300LANE_FUZZ_REPORT")
    if out:
        rows = {k: dict(v) for k, v in sorted(FIGURES.items())}
        total = {
            key: sum(v.get(key, 0) for v in FIGURES.values())
            for key in ("tried", "accepted", "refused", "tracebacks", "bad_messages", "hangs")
        }
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(
            json.dumps(
                {"examples_per_property": EXAMPLES, "hang_s": HANG_S, "total": total, "by_property": rows}, indent=2
            )
            + "\n"
        )


_DIR = Path(tempfile.mkdtemp(prefix="gb300lane-fuzz-"))


def _write(name: str, content: str | bytes) -> Path:
    path = _DIR / name
    path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    return path


@FUZZ
@given(content=_texts(RECIPE))
# Keys with a line break (a quoted YAML key) are named on one line, quoted.
@pytest.mark.slow
@example(content='? "\\n\\n"\n: 1\n')
@example(content='engine_args:\n  extra_args:\n    ? "a\\nb"\n    : 1\n')
@example(content='speculative:\n  ? "\\n"\n  : 1\n')
def test_the_recipe_loader_never_tracebacks_or_hangs(content: str | bytes) -> None:
    path = _write("r.yaml", content)
    _check("recipe loader", lambda: load_recipe("r", _DIR), LaneError, _one_line_naming(path))


@pytest.mark.slow
@FUZZ
@given(content=_texts(CARD))
def test_the_card_loader_never_tracebacks_or_hangs(content: str | bytes) -> None:
    path = _write("c.yaml", content)
    _check("card loader", lambda: load_card(path), LaneError, _one_line_naming(path))


# -- the engine's request parser -------------------------------------------------------------------

COMPLETION = {
    "model": "m",
    "prompt": "Hello",
    "max_tokens": 8,
    "temperature": 0.7,
    "top_p": 0.9,
    "seed": 1,
    "stream": True,
    "stream_options": {"include_usage": True},
    "stop": ["\n"],
    "min_tokens": 1,
}
CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "Hi"}],
    "max_completion_tokens": 8,
    "temperature": 0.0,
    "top_k": 5,
    "min_p": 0.1,
    "ignore_eos": True,
}
TOOL_CHAT = {
    "model": "m",
    "messages": [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
    ],
    "max_tokens": 8,
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 9}},
                    "required": ["city"],
                },
            },
        }
    ],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": False,
}
FORMATTED = {
    "model": "m",
    "prompt": "{",
    "max_tokens": 8,
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "x",
            "schema": {
                "type": "object",
                "properties": {"a": {"enum": [1, "b"]}, "b": {"type": "array", "items": {"type": "number"}}},
            },
        },
    },
}
OUTPUTS = {"model": "m", "prompt": "x", "max_tokens": 4, "structured_outputs": {"choice": ["yes", "no"]}}
REGEX = {"model": "m", "prompt": "x", "max_tokens": 4, "structured_outputs": {"regex": "[a-z]{2,5}-[0-9]+"}}
bodies = st.one_of(
    json_values,
    mutated(COMPLETION),
    mutated(CHAT),
    mutated(TOOL_CHAT),
    mutated(FORMATTED),
    mutated(OUTPUTS),
    mutated(REGEX),
)


def _api_error(exc: BaseException) -> bool:
    return isinstance(exc, ApiError) and exc.status in (400, 404) and "\n" not in str(exc)


@FUZZ
@given(body=bodies, chat=st.booleans())
def test_the_engine_request_parser_answers_400_never_a_traceback(body: Any, chat: bool) -> None:
    def call() -> None:
        req = parse_request(body, chat=chat, served_model_name="m")
        # What it accepts is usable: finite sampling values, in range.
        assert math.isfinite(req.params.temperature) and req.params.temperature >= 0
        assert math.isfinite(req.params.top_p) and 0 < req.params.top_p <= 1
        # A schema it accepts compiles to a grammar or is refused with GrammarError (the server's 400).
        constraint = req.decoding_constraint
        if constraint is not None:
            try:
                compile_constraint(load_model().tokenizer, constraint.kind, constraint.value)
            except GrammarError as exc:
                assert "\n" not in str(exc), str(exc)

    _check("engine request parser", call, ApiError, _api_error)
