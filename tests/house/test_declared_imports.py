"""Every import of the tests, benchmarks and scripts is a declared dependency or the project's own.

A fresh `pip install -e '.[test]'` must be enough for `make test`: a module that an earlier hand install left
behind would let CI pass where a newcomer's collection fails. Each third-party module is mapped to the
distribution that provides it (importlib.metadata) and that distribution must be named in pyproject.toml's
`dependencies` or its `test` extra (a transitive dependency is not enough: its owner may drop it).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
#: Folders whose code runs from the checkout: each one's own modules (test_x, fakes, ...) import each other.
FOLDERS = ("tests", "benchmarks", "scripts")
#: What a script imports only where the snapshot is made (scripts/snapshot_*.py read the vllm wheel, the `vllm` extra).
EXTRAS_ALLOWED = {"vllm"}
#: Scripts that run in the real lane's own environment (`make real-lane`), not the project's: their imports are
#: declared by that environment's requirements, requirements/real-lane.in.
REAL_LANE_SCRIPTS = {"scripts/real_lane_model.py"}
REAL_LANE_REQUIREMENTS = ROOT / "requirements" / "real-lane.in"


def declared(*, runtime_only: bool = False) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"])
    if not runtime_only:
        reqs += project["optional-dependencies"]["test"]
        for extra in EXTRAS_ALLOWED:
            reqs += project["optional-dependencies"].get(extra, [])
    return {canonicalize_name(Requirement(r).name) for r in reqs}


def own_modules() -> set[str]:
    """The checkout's own modules: benchmarks import the tests' helpers (sshd, engines) by path."""
    found = {"gb300lane"}
    for name in FOLDERS:
        folder = ROOT / name
        found |= {p.stem for p in folder.rglob("*.py")} | {p.name for p in folder.rglob("*") if p.is_dir()}
    return found


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def undeclared(folders: tuple[str, ...], wanted: set[str]) -> list[str]:
    providers = metadata.packages_distributions()
    own = own_modules()
    problems: list[str] = []
    for name in folders:
        folder = ROOT / name
        for path in sorted(folder.rglob("*.py")):
            if path.relative_to(ROOT).as_posix() in REAL_LANE_SCRIPTS:
                continue
            for module in sorted(imports(path) - own - set(sys.stdlib_module_names)):
                dists = {canonicalize_name(d) for d in providers.get(module, [])}
                if not dists:
                    problems.append(
                        f"{path.relative_to(ROOT)}: imports {module}, which no installed distribution "
                        "provides; add the distribution that does to pyproject.toml's `test` extra"
                    )
                elif not dists & wanted:
                    problems.append(
                        f"{path.relative_to(ROOT)}: imports {module} (from {', '.join(sorted(dists))}), "
                        "which pyproject.toml does not declare; add it to `dependencies` or the `test` extra"
                    )
    return problems


def test_every_import_of_the_tests_benchmarks_and_scripts_is_declared() -> None:
    problems = undeclared(FOLDERS, declared())
    assert not problems, "\n".join(problems)


def real_lane_declared() -> set[str]:
    lines = REAL_LANE_REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return {canonicalize_name(Requirement(line).name) for line in lines if line.strip() and not line.startswith("#")}


def test_the_real_lane_scripts_import_what_the_real_lane_declares() -> None:
    # numpy comes with torch (its own requirement), the rest must be named in requirements/real-lane.in.
    wanted = real_lane_declared() | {"numpy"}
    problems = []
    for rel in sorted(REAL_LANE_SCRIPTS):
        for module in sorted(imports(ROOT / rel) - set(sys.stdlib_module_names)):
            if canonicalize_name(module) not in wanted:
                problems.append(
                    f"{rel}: imports {module}, which requirements/real-lane.in does not name; add it there "
                    "and recompile requirements/real-lane.txt"
                )
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_every_import_of_the_package_is_a_runtime_dependency() -> None:
    # The wheel installs `dependencies` only: a test extra would not be there.
    problems = undeclared(("gb300lane",), declared(runtime_only=True))
    assert not problems, "\n".join(problems)


def test_the_check_finds_an_undeclared_import(tmp_path: Path) -> None:
    # The reader sees function-level imports too (jsonschema was one test module's top-level import).
    f = tmp_path / "t.py"
    f.write_text("def f():\n    import jsonschema.validators\n    from PIL import Image\n")
    assert imports(f) == {"jsonschema", "PIL"}
    assert "jsonschema" in declared() and "pillow" in declared()
