"""How a command's parameter values are converted: plain Python, as click converts them, without pydantic.

typer (0.29) converts each value through a pydantic `TypeAdapter` built on
first use: building one loads pydantic's schema machinery, about a quarter
of a second before any command runs, `version` included. The CLI's
parameters are few kinds (str, int with an optional range, float, bool,
Path, an Enum of choices, and lists of those), so each gets a converter
here and typer's adapter is never built. Bad values are usage errors with
click's wording (exit code 2): `'abc' is not a valid integer.`,
`0 is not in the range 1<=x<=65535.`, `'x' is not one of 'a', 'b'.`

Only public names are used: a parameter typer built (`typer.core.TyperOption`,
`TyperArgument`) becomes a subclass whose `process_value` follows click's
contract for it (convert, refuse a missing required value, run the callback)
with these converters; what it converts is read from the parameter's
`type_descriptor` (its annotation and `typer.models.ParameterInfo`). A typer
whose parameters lack it keeps its own converters: the same values, slower
(`tests/test_cli_params.py` says which).

`convert_with_click_rules(command)` installs the converters on every
parameter of a command tree (the top-level group does it when built).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

from typer import BadParameter, Context
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

#: click's spellings of a boolean value.
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off", ""})


def _number(kind: type, value: Any, lo: float | None, hi: float | None) -> Any:
    number: Any
    if isinstance(value, kind) and not isinstance(value, bool):
        number = value
    else:
        try:
            number = kind(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise BadParameter(f"{value!r} is not a valid {'integer' if kind is int else 'float'}.") from None
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        span = f"{lo}<=x<={hi}" if lo is not None and hi is not None else (f"x>={lo}" if lo is not None else f"x<={hi}")
        raise BadParameter(f"{number} is not in the range {span}.")
    return number


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadParameter(f"{value!r} is not a valid boolean.")


def _choice(choices: type[Enum], value: Any, ctx: Any, case_sensitive: bool) -> Enum:
    if isinstance(value, choices):
        return value

    def norm(text: str) -> str:
        if ctx is not None and ctx.token_normalize_func is not None:
            text = ctx.token_normalize_func(text)
        return text if case_sensitive else text.casefold()

    wanted = norm(str(value))
    for member in choices:
        if norm(str(member.value)) == wanted:
            return member
    names = ", ".join(repr(norm(str(m.value))) for m in choices)
    raise BadParameter(f"{value!r} is not one of {names}.")


@dataclass(frozen=True)
class ClickRules:
    """One parameter's converter, for the kinds the CLI uses (installed only where `_supported` says so)."""

    annotation: Any
    parameter_info: Any  # typer.models.ParameterInfo: min, max, case_sensitive

    def coerce(self, value: object, param: TyperOption | TyperArgument, ctx: Context | None) -> object:
        """The value as the command receives it: None stays None (or () for a multi-value parameter)."""
        multi = bool(param.multiple) or param.nargs == -1
        if value is None:
            return () if multi else None
        if multi and isinstance(value, str):
            raise BadParameter("Value must be an iterable.", ctx=ctx, param=param)
        origin: Any = get_origin(self.annotation)
        if origin is list:
            (item,) = get_args(self.annotation)
            items = value if isinstance(value, (list, tuple)) else [value]
            return [self._one(item, v, param, ctx) for v in items]
        return self._one(self.annotation, value, param, ctx)

    def _one(self, kind: Any, value: Any, param: Any, ctx: Any) -> Any:
        info = self.parameter_info
        try:
            if kind is str:
                return value if isinstance(value, str) else str(value)
            if kind is bool:
                return _bool(value)
            if kind is int or kind is float:
                return _number(kind, value, info.min, info.max)
            if isinstance(kind, type) and issubclass(kind, Path):
                return value if isinstance(value, kind) else kind(value)
            if isinstance(kind, type) and issubclass(kind, Enum):
                return _choice(kind, value, ctx, info.case_sensitive)
        except BadParameter as exc:
            exc.ctx, exc.param = ctx, param
            raise
        raise AssertionError(f"no converter for {kind!r}")  # never installed for such a kind


#: typer's path settings when a parameter asks for no check on the file.
_PLAIN_PATH = {
    "exists": False, "file_okay": True, "dir_okay": True, "writable": False, "readable": True,
    "resolve_path": False, "allow_dash": False, "path_type": None,
}  # fmt: skip


def _supported(annotation: Any, info: Any) -> bool:
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return len(args) == 1 and _supported(args[0], info)
    if info.parser is not None or info.clamp:
        return False
    if annotation in (str, bool, int, float):
        return True
    if isinstance(annotation, type) and issubclass(annotation, Path):
        # A plain path: none of typer's checks on the file (exists, readable, a directory, ...) is asked for.
        return all(getattr(info, key, value) == value for key, value in _PLAIN_PATH.items())
    return isinstance(annotation, type) and issubclass(annotation, Enum)


def _process_value(param: Any, ctx: Any, value: Any, typers: Any) -> Any:
    """click's `Parameter.process_value`: convert, refuse a missing required value, then the callback."""
    if param.rules is None:
        return typers(ctx, value)  # a kind this module does not convert: typer's own converter
    value = param.rules.coerce(value, param=param, ctx=ctx)
    if param.required and param.value_is_missing(value):
        return typers(ctx, value)  # typer's own path raises click's MissingParameter (an error: its cost is no matter)
    if param.callback is not None:
        value = param.callback(ctx, param, value)
    return value


class ConvertingOption(TyperOption):
    """An option that converts by `ClickRules` instead of typer's adapter."""

    rules: ClickRules | None = None

    # The context is the base's (typer's vendored click, which names it only privately), so it stays unnamed here.
    def process_value(self, ctx: Any, value: Any) -> Any:
        return _process_value(self, ctx, value, super().process_value)


class ConvertingArgument(TyperArgument):
    """An argument that converts by `ClickRules` instead of typer's adapter (the CLI's own argument class derives
    from it)."""

    rules: ClickRules | None = None

    def process_value(self, ctx: Any, value: Any) -> Any:
        return _process_value(self, ctx, value, super().process_value)


_CONVERTING: dict[type, type] = {TyperOption: ConvertingOption, TyperArgument: ConvertingArgument}


def _install(param: Any) -> None:
    converting = type(param) if isinstance(param, (ConvertingOption, ConvertingArgument)) else _CONVERTING.get(type(param))
    desc = getattr(param, "type_descriptor", None)
    if converting is None or desc is None or getattr(param, "rules", None) is not None:
        return  # not a parameter typer built, a typer that describes it otherwise, or converting already
    if getattr(desc, "file_annotation", None) is None and _supported(desc.annotation, desc.parameter_info):
        param.__class__ = converting
        param.rules = ClickRules(annotation=desc.annotation, parameter_info=desc.parameter_info)


def _installed(option: Any) -> Any:
    if option is not None:
        _install(option)
    return option


class ConvertingCommand(TyperCommand):
    """A command whose `--help` option (click builds it when the command is first parsed) converts like the rest."""

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        return _installed(super().get_help_option(ctx))


class ConvertingGroup(TyperGroup):
    """A group whose `--help` option converts like the rest."""

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        return _installed(super().get_help_option(ctx))


def convert_with_click_rules(command: object) -> None:
    """Give every parameter of `command` and its subcommands a converter from this module.

    A parameter of a kind not covered here (a parser, a clamped range, a path that must exist) keeps typer's
    own converter, so nothing converts differently than declared.
    """
    for param in getattr(command, "params", ()):
        _install(param)
    if type(command) is TyperCommand:  # typer builds the command objects; their help option is the class's
        command.__class__ = ConvertingCommand
    elif type(command) is TyperGroup:
        command.__class__ = ConvertingGroup
    for sub in getattr(command, "commands", {}).values():
        convert_with_click_rules(sub)
