"""Acting on one lane of the hosts inventory: the scope a `--host` / `--lane` command runs in.

`on_lane(placement)` makes the layers below act on that lane (its state
folder, its host's engine and facts) and, when the block ends, closes the SSH
forwards it opened. `instance_prefix` is what an instance's name starts with:
the inventory lane's name (two lanes on one Docker engine never share a
container name), else the recipe's `lane.name`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gb300lane import placement as placement_mod
from gb300lane.placement import Placement
from gb300lane.recipes import Recipe
from gb300lane.runtime import ssh


@contextmanager
def on_lane(place: Placement | None) -> Iterator[Placement | None]:
    """Act on `place` (None: this machine's own lane) until the block ends; SSH forwards close with it."""
    outer = placement_mod.current()
    with placement_mod.placed(place):
        try:
            yield place
        finally:
            if place is not None and place.remote and (outer is None or outer.host != place.host):
                ssh.close_all()


def instance_prefix(recipe: Recipe) -> str:
    """The first part of the instance names a recipe boots under on the acting lane."""
    place = placement_mod.current()
    return place.lane if place is not None else recipe.lane.name


def endpoint(rendered_endpoint: str, port: int, *, dark: bool) -> str:
    """The endpoint recorded for an instance: the box's address for a lane on a remote host, loopback otherwise.

    A dark lane on a remote box keeps its loopback endpoint: the tool reaches it through an SSH forward.
    """
    place = placement_mod.current()
    if place is None or not place.remote or dark:
        return rendered_endpoint
    return f"http://{place.address}:{port}"
