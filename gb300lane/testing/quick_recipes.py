"""local-v26 made quick for tests and benchmarks that boot and promote real lanes: one short smoke window.

The shipped local-v26 smokes 36 requests of 64 tokens at two temperatures; a test that only needs a lane to come
up and pass its smoke runs one prose transcript at C1 of `forced_tokens` tokens instead. A window that short scores
too few tokens for the losslessness check (INCONCLUSIVE, which fails a smoke), so the quick smoke leaves it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import yaml

from gb300lane.paths import shipped
from gb300lane.recipes.yamlio import load_mapping
from gb300lane.testing.free_ports import free_port

Table = dict[str, object]


def _table(data: Table, key: str) -> Table:
    return cast(Table, data[key])


def quick_local_v26(
    *,
    runtime: str | None = None,
    name: str | None = None,
    own_ports: bool = True,
    time_scale: float = 0.0,
    forced_tokens: int = 16,
) -> Table:
    """The shipped local-v26, as a dict, with a one-window smoke; on free ports unless `own_ports` is false.

    `name` is a format string for the lane's name (`{port}` is the lane's port); `runtime` replaces the recipe's.
    """
    base = load_mapping(shipped("recipes") / "local-v26.yaml")
    lane = _table(base, "lane")
    if runtime is not None:
        base["runtime"] = runtime
    if own_ports:
        lane["port"] = free_port()
        if base.get("sidecar"):
            _table(base, "sidecar")["port"] = free_port()
    if name is not None:
        lane["name"] = name.format(port=lane["port"])
    _table(base, "engine_args")["time_scale"] = time_scale
    for gate in cast(list[Table], _table(base, "smoke")["gates"]):
        gate.pop("lossless", None)
        _table(gate, "window").update(
            classes=["prose"], transcripts_per_class=1, concurrency=[1], forced_tokens=forced_tokens
        )
    return base


def write_quick_pair(dest: Path, base: Table, also: Sequence[str] = ()) -> None:
    """`base` (a quick local-v26) and the shipped local-v27, and the shipped recipes named in `also`, into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "local-v26.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    for recipe in ("local-v27", *also):
        (dest / f"{recipe}.yaml").write_text((shipped("recipes") / f"{recipe}.yaml").read_text())


__all__ = ["quick_local_v26", "write_quick_pair"]
