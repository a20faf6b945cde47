"""Output formats of a rendered lane: a compose file, a docker-run script, JSON.

Each is a view of the same `RenderedLane`. Templates live in `templates/` and
render with `StrictUndefined`, so a missing value is an error, never an empty
string in a command line.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Literal

import jinja2

from gb300lane import paths
from gb300lane.errors import RenderError
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.recipes.containers import RenderedLane

Format = Literal["compose", "docker-run", "json"]
FORMATS: tuple[str, ...] = ("compose", "docker-run", "json")
FILE_NAMES = {"compose": "compose.yaml", "docker-run": "docker-run.sh", "json": "lane.json"}


def _compose_str(value: Any) -> str:
    """A YAML-safe scalar for compose: JSON-quoted, with `$` escaped from interpolation."""
    if isinstance(value, str):
        value = value.replace("$", "$$")
    elif isinstance(value, (list, tuple)):
        value = [v.replace("$", "$$") if isinstance(v, str) else v for v in value]
    return json.dumps(value, ensure_ascii=False)


def _environment(templates_dir: Path | None = None) -> jinja2.Environment:
    directory = templates_dir or paths.templates_dir()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    env.filters["y"] = _compose_str
    return env


def _render_template(name: str, lane: RenderedLane, templates_dir: Path | None) -> str:
    try:
        template = _environment(templates_dir).get_template(name)
        return template.render(lane=lane, containers=lane.containers)
    except jinja2.TemplateNotFound as exc:
        raise RenderError(
            f"template {exc.name} not found in {templates_dir or paths.templates_dir()}; "
            "set GB300LANE_TEMPLATES_DIR to the checkout's templates/"
        ) from exc
    except jinja2.UndefinedError as exc:
        raise RenderError(f"template {name}: {exc.message}; the template uses a value the lane does not have") from exc
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {name}: {exc}") from exc


def render_compose(lane: RenderedLane, templates_dir: Path | None = None) -> str:
    """A compose file (`docker compose config` accepts it) with both containers."""
    return _render_template("compose.yaml.j2", lane, templates_dir)


def render_docker_run(lane: RenderedLane, templates_dir: Path | None = None) -> str:
    """A bash script that starts the sidecar, then the main container; every value shell-quoted."""
    return _render_template("docker-run.sh.j2", lane, templates_dir)


def render_json(lane: RenderedLane) -> str:
    """The rendered lane as stable JSON."""
    return dumps_json(lane.model_dump(mode="json"))


def render_format(lane: RenderedLane, fmt: str, templates_dir: Path | None = None) -> str:
    if fmt == "compose":
        return render_compose(lane, templates_dir)
    if fmt == "docker-run":
        return render_docker_run(lane, templates_dir)
    if fmt == "json":
        return render_json(lane)
    raise RenderError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")


def write_rendered(lane: RenderedLane, fmt: str, out_dir: Path, templates_dir: Path | None = None) -> Path:
    """Render, then write atomically to `out_dir/<file>`; nothing is written if rendering fails."""
    text = render_format(lane, fmt, templates_dir)
    path = atomic_write(Path(out_dir) / FILE_NAMES[fmt], text)
    if fmt == "docker-run":
        path.chmod(0o755)
    return path
