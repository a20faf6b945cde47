"""Where a window comes from (the shipped standard windows, a recipe's smoke gates, or a
file), and where a recipe's lane answers.

`primary-t1` is the write-up's primary window (all five classes, 40
transcripts, 256 forced tokens, C1 and C8, two rounds, temperature 1.0,
top_p 1.0, seeded); `parity-t0` is its greedy parity window. Quick runs may
shrink a window (`with_overrides`); the result records the window as run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gb300lane.errors import BenchError
from gb300lane.models import format_validation_error
from gb300lane.recipes.schema import Recipe, WindowSpec
from gb300lane.recipes.yamlio import load_mapping
from gb300lane.workloads import BUILTIN, load_workload

_FIVE = ["prose", "structured", "code", "shell_ops", "tool_json"]

STANDARD_WINDOWS: dict[str, dict[str, Any]] = {
    "primary-t1": dict(
        name="primary-t1",
        classes=_FIVE,
        transcripts_per_class=40,
        rounds=2,
        concurrency=[1, 8],
        temperature=1.0,
        top_p=1.0,
        seed_base=1000,
        forced_tokens=256,
    ),
    "parity-t0": dict(
        name="parity-t0",
        classes=_FIVE,
        transcripts_per_class=40,
        rounds=1,
        concurrency=[1, 8],
        temperature=0.0,
        top_p=1.0,
        seed_base=None,
        forced_tokens=256,
    ),
}


def standard_window(name: str) -> WindowSpec:
    """A shipped standard window by name."""
    if name not in STANDARD_WINDOWS:
        raise BenchError(f"no standard window {name!r}; shipped: {', '.join(sorted(STANDARD_WINDOWS))}")
    return WindowSpec.model_validate(STANDARD_WINDOWS[name])


def load_window_file(path: Path) -> WindowSpec:
    """A WindowSpec from a YAML or JSON file (the spec itself, or `{window: {...}}`), read by the one strict YAML
    reader (`recipes.yamlio`: its size, depth, alias and duplicate-key limits; JSON is YAML)."""
    data = load_mapping(path, str(path), error=BenchError)
    raw = data["window"] if set(data) == {"window"} else data
    if not isinstance(raw, dict):
        raise BenchError(f"{path}: expected a mapping with the WindowSpec keys (name, classes, ...)")
    try:
        return WindowSpec.model_validate(raw)
    except ValidationError as exc:
        raise BenchError(f"{path}: invalid window: {format_validation_error(exc)}; fix those keys") from None


def resolve_window(name_or_file: str, recipe: Recipe | None = None) -> WindowSpec:
    """A window by recipe gate name or window name, then standard name, then file path."""
    if recipe is not None:
        for gate in recipe.smoke.gates:
            if name_or_file in (gate.name, gate.window.name):
                return gate.window
    if name_or_file in STANDARD_WINDOWS:
        return standard_window(name_or_file)
    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            raise BenchError(f"{path}: window file not found; pass an existing file or a window name")
        return load_window_file(path)
    known = sorted(STANDARD_WINDOWS)
    if recipe is not None:
        known = sorted({*known, *(g.name for g in recipe.smoke.gates), *(g.window.name for g in recipe.smoke.gates)})
    raise BenchError(f"no window {name_or_file!r}; known: {', '.join(known)}, or pass a YAML/JSON file")


def with_overrides(
    window: WindowSpec,
    *,
    transcripts: int | None = None,
    tokens: int | None = None,
    rounds: int | None = None,
    concurrency: list[int] | None = None,
    classes: list[str] | None = None,
    workload: str | None = None,
) -> WindowSpec:
    """The window with sizes shrunk (or grown) for a quick run, re-validated (`tokens` sets the forced length, or
    max_tokens where the window lets requests stop at EOS). `workload` runs another workload's transcripts (its
    dev part: exploration never reads a held-out part); give its classes with `classes` unless it has the window's."""
    if window.held_out:
        raise BenchError(
            f"window {window.name!r} runs the held-out part of workload {window.workload}: a bench run "
            "is exploration, which reads only the dev part; run it with a card (held_out: true) for "
            "its confirmatory verdict, or drop held_out from the window"
        )
    if workload is not None and workload != BUILTIN and classes is None:
        classes = list(load_workload(workload).classes)  # the window's classes are another workload's
    data = window.model_dump()
    for key, value in (
        ("transcripts_per_class", transcripts),
        ("forced_tokens" if window.forced_tokens is not None else "max_tokens", tokens),
        ("rounds", rounds),
        ("concurrency", concurrency),
        ("classes", classes),
        ("workload", workload),
    ):
        if value is not None:
            data[key] = value
    try:
        return WindowSpec.model_validate(data)
    except ValidationError as exc:
        raise BenchError(
            f"window {window.name!r} with overrides: {format_validation_error(exc)}; fix the override options"
        ) from None


def lane_endpoint(recipe: Recipe) -> tuple[str, str]:
    """(endpoint, how it was found) for a recipe's lane.

    A running instance of the recipe (booted by `gb300lane up`, perhaps on
    another port) wins over the rendered default; when several run, the
    rendered endpoint is used and the caller should pass --endpoint.
    """
    from gb300lane.errors import LaneError
    from gb300lane.recipes import render

    rendered = render(recipe).endpoint
    try:
        from gb300lane.lane import list_instances

        running = [i for i in list_instances() if i.recipe == recipe.name and i.state == "running" and i.endpoint]
    except (LaneError, ImportError) as exc:
        return rendered, f"rendered from the recipe (instances not listed: {exc})"
    if len(running) == 1:
        return running[0].endpoint, f"running instance {running[0].name}"  # type: ignore[return-value]
    if len(running) > 1:
        names = ", ".join(i.name for i in running)
        return rendered, f"rendered from the recipe ({len(running)} instances run: {names}; pass --endpoint)"
    return rendered, "rendered from the recipe"
