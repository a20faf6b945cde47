"""The text the tool writes for people to read or edit, rendered from jinja2 templates found by name.

Templates are looked up in `paths.template_dirs()`: `./templates` first (a
user's file shadows the shipped one of the same name), then the shipped
`templates/`. What a template produces as HTML is autoescaped (every value
is text unless a caller marks a fragment it built as markup, such as an SVG
figure); other templates (markdown, a shell script, systemd units) get their
values already quoted for their syntax by the caller, and `shquote` quotes a
value for the shell. An undefined name is an error, never an empty string.

What stays built as data (the compose file, the Kubernetes manifests, JSON)
is serialised by a library instead: a template cannot make YAML valid by
construction, the serialiser does.
"""

from __future__ import annotations

import shlex
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from gb300lane import paths
from gb300lane.errors import TemplateError

if TYPE_CHECKING:
    import jinja2
    from markupsafe import Markup


@lru_cache(maxsize=8)
def _environment(dirs: tuple[str, ...]) -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(dirs)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "htm", "xml", "svg"), default=False),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shquote"] = lambda value: shlex.quote(str(value))
    return env


def environment() -> jinja2.Environment:
    """The environment over the template folders as they are now (one per distinct search path)."""
    return _environment(tuple(str(d) for d in paths.template_dirs()))


def template_path(name: str) -> Path:
    """The file `name` renders from: the first of `paths.template_dirs()` that has it."""
    for d in paths.template_dirs():
        if (d / name).is_file():
            return d / name
    where = ", ".join(str(d) for d in paths.template_dirs())
    raise TemplateError(
        f"template {name} not found in {where}; reinstall gb300lane, or add your own "
        f"templates/{name} in the working directory"
    )


def render(name: str, **context: object) -> str:
    """Render template `name` with `context`; a missing, broken or mistyped template is a TemplateError."""
    import jinja2

    path = template_path(name)
    try:
        return environment().get_template(name).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(
            f"{exc.filename or path}:{exc.lineno}: {exc.message}; fix the template, or remove "
            "your copy to use the shipped one"
        ) from exc
    except jinja2.UndefinedError as exc:
        raise TemplateError(
            f"{path}: {exc.message} (the names a template may use are the shipped template's); fix "
            "the template, or remove your copy to use the shipped one"
        ) from exc


def markup(html: str) -> Markup:
    """A fragment the caller built as HTML (an SVG figure): inserted into an autoescaped template as it is."""
    from markupsafe import Markup

    return Markup(html)
