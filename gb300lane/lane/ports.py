"""Which of a lane's ports are taken, and the nearest place a whole lane fits when its own are.

A lane moved with `--port P` keeps its sidecar's distance from main
(`gb300lane.recipes.lane_ports`); on a shared host the commands that boot
their own arms (`card reproduce`) look for the lowest such P at which every
recipe they boot finds both of its ports free, and say that they moved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gb300lane.errors import BootError, RenderError
from gb300lane.lane import facts
from gb300lane.recipes import Recipe
from gb300lane.recipes.containers import lane_ports


def ports_of(recipes: Iterable[Recipe], port: int | None = None) -> list[int]:
    """Every port the recipes' lanes listen on (moved to `port` when given), sorted, each once."""
    found: set[int] = set()
    for recipe in recipes:
        main, sidecar = lane_ports(recipe, port)
        found.update(p for p in (main, sidecar) if p is not None)
    return sorted(found)


def busy_ports(ports: Iterable[int]) -> dict[int, str]:
    """Each of `ports` something listens on, with who holds it (`facts.port_holders`)."""
    return {p: facts.port_holders(p) for p in ports if facts.port_in_use(p)}


def free_lane_port(recipes: Sequence[Recipe], *, start: int, tries: int = 2000) -> int:
    """The lowest P >= `start` at which every recipe's lane, moved to P, finds all its ports free."""
    for port in range(start, min(start + tries, 65536)):
        try:
            wanted = ports_of(recipes, port)
        except RenderError:
            break  # moved past 65535
        if not busy_ports(wanted):
            return port
    names = ", ".join(sorted({r.name for r in recipes}))
    raise BootError(
        f"no free place for the lane of {names} in ports {start}-{min(start + tries, 65536) - 1}; "
        "stop what holds them, or pass --port P"
    )
