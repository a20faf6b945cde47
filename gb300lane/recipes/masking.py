"""What `render` and `recipes show` print: the same lane or recipe with every secret value as `<secret>`.

Secrets are what `gb300lane.redact` says they are (by name or by value). The
lane that boots is never masked; only what is shown or written for a person
is, unless they ask for the values (`--show-secrets`).
"""

from __future__ import annotations

from typing import Any

from gb300lane.recipes.containers import ContainerSpec, RenderedLane
from gb300lane.recipes.schema import Recipe
from gb300lane.redact import MASK, is_secret


def _mask_env(env: dict[str, str], where: str, masked: list[str]) -> dict[str, str]:
    out = {}
    for k, v in env.items():
        if is_secret(k, v):
            out[k] = MASK
            masked.append(f"{where}{k}")
        else:
            out[k] = v
    return out


def _mask_argv(argv: tuple[str, ...], where: str, masked: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            masked.append(f"{where}{out[-2]}")
            hide_next = False
            continue
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if is_secret(name.replace("-", "_"), value if eq else None):
                if eq:
                    out.append(f"--{name}={MASK}")
                    masked.append(f"{where}--{name}")
                    continue
                hide_next = True
        elif is_secret("", arg):
            out.append(MASK)
            masked.append(f"{where}argv")
            continue
        out.append(arg)
    return tuple(out)


def _mask_container(c: ContainerSpec, masked: list[str]) -> ContainerSpec:
    where = f"{c.role}."
    return c.model_copy(
        update={"env": _mask_env(dict(c.env), f"{where}env.", masked), "argv": _mask_argv(tuple(c.argv), where, masked)}
    )


def mask_lane(lane: RenderedLane) -> tuple[RenderedLane, list[str]]:
    """The rendered lane with secret env values and secret flag values masked; and what was masked."""
    masked: list[str] = []
    containers = tuple(_mask_container(c, masked) for c in lane.containers)
    return lane.model_copy(update={"containers": containers}), masked


def mask_recipe_data(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A recipe dump (`model_dump(mode="json")`) with secret values masked; and the dotted keys masked."""
    masked: list[str] = []
    out = dict(data)
    out["env"] = _mask_env(dict(data.get("env") or {}), "env.", masked)
    if isinstance(data.get("sidecar"), dict):
        sidecar = dict(data["sidecar"])
        sidecar["env"] = _mask_env(dict(sidecar.get("env") or {}), "sidecar.env.", masked)
        sidecar["args"] = list(_mask_argv(tuple(sidecar.get("args") or ()), "sidecar.args.", masked))
        out["sidecar"] = sidecar
    engine_args = data.get("engine_args")
    if isinstance(engine_args, dict) and isinstance(engine_args.get("extra_args"), dict):
        extra = dict(engine_args["extra_args"])
        for k, v in extra.items():
            if isinstance(v, str) and is_secret(k, v):
                extra[k] = MASK
                masked.append(f"engine_args.extra_args.{k}")
        out["engine_args"] = {**engine_args, "extra_args": extra}
    return out, masked


def mask_recipe(recipe: Recipe) -> tuple[Recipe, list[str]]:
    """The recipe with secret values masked (for renderings built from a recipe, such as Kubernetes manifests)."""
    data, masked = mask_recipe_data(recipe.model_dump(mode="json"))
    return Recipe.model_validate(data), masked
