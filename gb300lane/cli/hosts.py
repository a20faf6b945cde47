"""`--host HOST[/LANE]` on the commands that act on a lane: one decorator adds the option and enters the lane's scope.

Without `--host` a command acts on this machine's own lane, as it always has.
With it, the hosts inventory (`lanes.yaml`, or GB300LANE_INVENTORY) says which
box and lane, and the command runs inside `lane.hosts.on_lane`: that lane's
state folder, its host's Docker engine and facts, SSH forwards closed at the end.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer

if TYPE_CHECKING:
    from gb300lane.placement import Placement

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["acts_on_host", "current_placement"]

HOST_HELP = "Act on this inventory host's lane (lanes.yaml): HOST, or HOST/LANE on a host with several lanes."
_PARAM = "on_host"


def current_placement() -> Placement | None:
    """The lane placement the running command acts on (None: this machine's own lane)."""
    from gb300lane.placement import current  # pydantic's models load when a command runs, not for `--help`

    return current()


def acts_on_host(fn: Callable[P, R]) -> Callable[..., R]:
    """`fn` with a `--host` option; its body runs on that lane (on this machine's own lane without it)."""
    # Evaluated annotations: a __signature__ is taken as it is, so `Annotated[...]` must not stay a string.
    sig = inspect.signature(fn, eval_str=True)
    option = inspect.Parameter(
        _PARAM, inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--host", metavar="HOST", help=HOST_HELP),
        annotation=str | None,
    )  # fmt: skip

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        selector = kwargs.pop(_PARAM, None)
        if selector is None:
            return fn(*args, **kwargs)
        from gb300lane.lane.hosts import on_lane
        from gb300lane.lane.inventory import placement

        with on_lane(placement(str(selector))):
            return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), option])  # type: ignore[attr-defined]
    # typer also reads the hints; they are the evaluated ones, the option's included.
    wrapper.__annotations__ = {
        **{n: p.annotation for n, p in sig.parameters.items() if p.annotation is not inspect.Parameter.empty},
        _PARAM: str | None,
    }
    return wrapper
