"""The documentation site keeps up with the code: the generated reference is current, every command, key and
environment variable is documented, every page is in the nav, and the README stays a first screen.

`mkdocs build --strict` (CI, `.ci/run`) checks every link and anchor; these tests are the fast half that needs
no mkdocs: they fail with the command or the file that fixes them.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
#: The README is a first screen: what it is, the two commands, a picture, links. Everything else is a page.
README_MAX_LINES = 150
ENV_NAME = re.compile(r"\b_?GB300LANE_[A-Z0-9_]*[A-Z0-9]\b")


@cache
def gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", module)
    spec.loader.exec_module(module)
    return module


@cache
def rendered() -> dict[str, str]:
    return gen_docs().render_all()


def test_the_generated_reference_pages_are_current() -> None:
    gd = gen_docs()
    stale = gd.stale(rendered())
    assert not stale, (
        f"{', '.join('docs/' + s for s in stale)} differ from what the code gives now "
        f"(a command's help, a model's field or its description changed): run `{gd.REGENERATE}` "
        "and commit the pages"
    )


@pytest.mark.slow
def test_every_command_has_help_and_a_section_in_the_cli_reference() -> None:
    page = rendered()["reference/cli.md"]
    commands = gen_docs().commands()
    assert len(commands) > 40
    undocumented = [c.title for c in commands if not c.summary]
    assert not undocumented, f"commands without help text (give them help=...): {undocumented}"
    missing = [c.title for c in commands if f"{{ #{c.anchor} }}" not in page or c.help_text not in page]
    assert not missing, missing


@pytest.mark.parametrize("page", ["reference/recipe-keys.md", "reference/card-keys.md"])
def test_every_key_of_the_file_formats_is_described(page: str) -> None:
    from gb300lane.cards.schema import Card
    from gb300lane.recipes.schema import Recipe

    model = Recipe if page.startswith("reference/recipe") else Card
    keys = gen_docs().model_keys(model)
    assert len(keys) > 30
    bare = [k.path for k in keys if not k.description]
    assert not bare, f"{model.__name__} keys without a description (give the field Field(description=...)): {bare}"
    text = rendered()[page]
    assert all(f"| `{k.path}` |" in text for k in keys)


def test_a_key_without_a_description_is_found() -> None:
    # The check above sees a field that lacks one (and the walk reaches nested models and union kinds).
    from typing import Literal

    from pydantic import Field

    from gb300lane.models import FrozenModel

    class Inner(FrozenModel):
        kind: Literal["x"] = Field(description="the kind")
        bare: int = 0

    class Outer(FrozenModel):
        items: tuple[Inner, ...] = Field(description="items")

    keys = {k.path: k for k in gen_docs().model_keys(Outer)}
    assert set(keys) == {"items", "items[].kind", "items[].bare"}
    assert keys["items[].bare"].description == "" and keys["items[].bare"].default == "`0`"


def _package_env_names() -> set[str]:
    """Every GB300LANE_* name in the package's Python and text files, the scripts, the Makefile and CI."""
    files = [
        p
        for p in (ROOT / "gb300lane").rglob("*")
        if p.suffix in (".py", ".md", ".sh", ".txt") and "corpora" not in p.parts
    ]
    files += [p for p in (ROOT / "scripts").iterdir() if p.is_file()]
    files += [ROOT / "Makefile", ROOT / ".ci" / "run", ROOT / ".ci" / "wheel", ROOT / "tests" / "conftest.py"]
    names: set[str] = set()
    for f in files:
        if f.is_file():
            names |= set(ENV_NAME.findall(f.read_text(encoding="utf-8", errors="replace")))
    return names


def test_every_environment_variable_is_documented() -> None:
    names = _package_env_names()
    assert {"GB300LANE_STATE_DIR", "GB300LANE_CARDS_DIR", "GB300LANE_SIGNING_KEY"} <= names, sorted(names)
    page = (DOCS / "reference" / "environment.md").read_text(encoding="utf-8")
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"docs/reference/environment.md does not document {missing}: add a row for each"


def _nav_files(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    return []


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_files(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert len(nav) == len(set(nav)), f"mkdocs.yml lists a page twice: {sorted(nav)}"
    orphans = sorted(set(pages) - set(nav))
    assert not orphans, f"pages no one can reach: {orphans}; add each to `nav` in mkdocs.yml"
    absent = sorted(set(nav) - set(pages))
    assert not absent, f"mkdocs.yml's nav names pages that do not exist: {absent}"
    assert set(gen_docs().PAGES) <= set(nav)


def test_the_readme_is_a_first_screen_whose_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail to a page under docs/ and link it"
    )
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(links) > 10
    broken = sorted({link for link in links if not (ROOT / link).is_file()})
    assert not broken, f"README.md links to files that do not exist: {broken}"
