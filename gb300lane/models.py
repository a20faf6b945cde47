"""The base every value model in gb300lane derives from, and the one formatter of its validation errors."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, ValidationError


class FrozenModel(BaseModel):
    """A value object: immutable once built, and an unknown key is an error, never ignored.

    Each model's validator is built when it is first used, not when its module is imported (`defer_build`): a
    command pays only for the models it touches. Until then `inspect.signature(Model)` is `(**data)`;
    `Model.model_rebuild()` builds it now.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


#: pydantic error types whose fix is another value (the message then shows the value given).
_VALUE_ERRORS = (
    "_type", "_parsing", "literal_error", "greater_than", "less_than_equal", "greater_than_equal", "less_than",
    "too_short", "too_long", "finite_number", "enum", "union_tag_invalid", "multiple_of",
)  # fmt: skip


def format_validation_error(
    exc: ValidationError,
    *,
    source: str = "",
    where: Callable[[str], str] | None = None,
    missing: str = "missing; add it",
    first_only: bool = False,
) -> str:
    """A pydantic error as one line: `source: dotted.key: what is wrong; the fix`, several joined by '; '.

    `where(key)` names the place of a key (a recipe's `file:line`) instead of
    `source`; `missing` is the fix for a missing key in the caller's words.
    """
    parts = []
    for err in exc.errors()[:1] if first_only else exc.errors():
        key = ".".join(key_text(x) for x in err.get("loc", ()))
        kind = err.get("type", "")
        msg = " ".join(str(err.get("msg", "invalid")).removeprefix("Value error, ").split())
        place = where(key) if where is not None else source
        prefix = f"{place}: " if place else ""
        if kind == "extra_forbidden":
            parts.append(f"{prefix}{key}: unknown key (remove it or check its spelling)")
        elif kind == "missing":
            parts.append(f"{prefix}{key}: {missing}")
        elif kind.endswith(_VALUE_ERRORS):
            parts.append(f"{prefix}{key or '(top level)'} = {_shown(err.get('input'))}: {msg}; change the value")
        else:
            parts.append(f"{prefix}{key or '(top level)'}: {msg}")
    return "; ".join(parts)


def key_text(part: object) -> str:
    """One part of a dotted key; a key with a newline or other control character is quoted, so the line stays one."""
    text = str(part)
    return text if text.isprintable() else repr(text)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
