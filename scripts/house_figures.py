"""The house's figures: how the code is spread over its packages, how tangled its functions are, how the tests
map onto the modules, and which module names are twins.

    python scripts/house_figures.py               # this checkout
    python scripts/house_figures.py --ref main    # a git ref of this repository (read with `git archive`)
    python scripts/house_figures.py --json        # the same, as JSON

What each figure counts:

- lines per package: physical lines of the `.py` files under each top-level package of `gb300lane/` (the
  modules at its top, `errors.py`, `fsio.py`, ..., count as `core`), and the largest package's share of all.
- functions over complexity 20: cyclomatic complexity by radon (`radon.complexity.cc_visit`, McCabe's count:
  one plus each branch, loop, boolean operator, except and comprehension condition), every function and method.
- modules per test folder: test files (`test_*.py`) in `tests/` itself (flat) and in each folder under it.
- modules a test file names: a module `gb300lane/<package>/<module>.py` is named by `tests/<package>/test_<module>.py`
  (the layout the tests move to) or by a flat `tests/test_<package>_<module>.py`; modules imported by no test
  file at all are listed too.
- twin names: module names that say the same thing twice: the same stem in two packages (`lane/ledger.py`,
  `promote/ledger.py`; a package's own `models`, `schema`, `report` and `stats`, and the CLI's modules, named after
  their command groups, are not counted), a singular beside its plural (`instance.py`, `instances.py`), and the
  pairs of `KNOWN_TWINS` whose names do not tell their jobs apart (`lane_ops.py`, `lanetake.py`).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[1]
#: A function above this cyclomatic complexity is counted.
COMPLEXITY_LIMIT = 20
#: Module pairs whose names do not say which job each does, beyond what the rules find by name alone.
KNOWN_TWINS = (("promote/lane_ops.py", "promote/lanetake.py"),)
#: Stems every package may have without being twins of one another: a package's own models, file schema,
#: report and statistics say what they are for that package (`recipes/schema.py` is the recipe file's schema).
SHARED_STEMS = frozenset({"__init__", "__main__", "models", "schema", "report", "stats"})


@dataclass
class Figures:
    """Everything the script measures on one tree."""

    tree: str
    lines_total: int = 0
    lines_per_package: dict[str, int] = field(default_factory=dict)
    largest_package: str = ""
    largest_share: float = 0.0
    complex_functions: list[tuple[str, str, int]] = field(default_factory=list)
    test_files_per_folder: dict[str, int] = field(default_factory=dict)
    modules: int = 0
    modules_named_by_a_test: int = 0
    modules_imported_by_no_test: list[str] = field(default_factory=list)
    twins: list[tuple[str, str]] = field(default_factory=list)


def _package_of(rel: Path) -> str:
    """`gb300lane/cards/decide/gates.py` -> `cards`; a module at the package's top -> `core`."""
    return rel.parts[1] if len(rel.parts) > 2 else "core"


def _modules(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in (root / "gb300lane").rglob("*.py") if "__pycache__" not in p.parts)


def _imported_modules(tests: Path) -> set[str]:
    """Every `gb300lane...` module a test file imports (a `from X import name` counts `X` and `X.name`)."""
    found: set[str] = set()
    for f in tests.rglob("*.py"):
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("gb300lane")}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gb300lane"):
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _twins(mods: list[Path]) -> list[tuple[str, str]]:
    by_stem: dict[str, list[Path]] = defaultdict(list)
    for m in mods:
        # A CLI module is named after the command group it registers (`cli/hosts.py` for `--host`), by design.
        if m.stem not in SHARED_STEMS and m.parts[1] != "cli":
            by_stem[m.stem].append(m)
    pairs: set[tuple[str, str]] = set()
    for group in by_stem.values():
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                pairs.add((str(a.relative_to("gb300lane")), str(b.relative_to("gb300lane"))))
    for stem, group in by_stem.items():
        for plural in by_stem.get(stem + "s", ()):
            for single in group:
                if single.parent == plural.parent:
                    pairs.add((str(single.relative_to("gb300lane")), str(plural.relative_to("gb300lane"))))
    present = {str(m.relative_to("gb300lane")) for m in mods}
    pairs |= {pair for pair in KNOWN_TWINS if set(pair) <= present}
    return sorted(pairs)


def measure(root: Path, name: str) -> Figures:
    fig = Figures(tree=name)
    mods = _modules(root)
    lines: Counter[str] = Counter()
    for rel in mods:
        text = (root / rel).read_text(encoding="utf-8")
        lines[_package_of(rel)] += text.count("\n")
        try:
            blocks = cc_visit(text)
        except SyntaxError:
            continue
        seen: set[tuple[str, int]] = set()
        for block in blocks:  # functions and methods each once (a class's block repeats its methods)
            for b in [block, *getattr(block, "methods", ())]:
                if hasattr(b, "methods") or (b.fullname, b.lineno) in seen:
                    continue
                seen.add((b.fullname, b.lineno))
                if b.complexity > COMPLEXITY_LIMIT:
                    fig.complex_functions.append((str(rel.relative_to("gb300lane")), b.fullname, b.complexity))
    fig.complex_functions.sort(key=lambda x: -x[2])
    fig.lines_total = sum(lines.values())
    fig.lines_per_package = dict(lines.most_common())
    fig.largest_package, top = lines.most_common(1)[0]
    fig.largest_share = top / fig.lines_total
    tests = root / "tests"
    per_folder: Counter[str] = Counter()
    for t in tests.rglob("test_*.py"):
        folder = t.parent.relative_to(tests).as_posix()
        per_folder["(flat)" if folder == "." else folder] += 1
    fig.test_files_per_folder = dict(sorted(per_folder.items()))
    named = 0
    counted = [m for m in mods if m.stem not in ("__init__", "__main__")]
    imported = _imported_modules(tests)
    for rel in counted:
        package = _package_of(rel)
        if (tests / package / f"test_{rel.stem}.py").is_file() or (tests / f"test_{package}_{rel.stem}.py").is_file():
            named += 1
        dotted = ".".join(rel.with_suffix("").parts)
        if dotted not in imported:
            fig.modules_imported_by_no_test.append(str(rel.relative_to("gb300lane")))
    fig.modules = len(counted)
    fig.modules_named_by_a_test = named
    fig.twins = _twins(mods)
    return fig


def render(fig: Figures) -> str:
    out = [
        f"== {fig.tree}",
        "",
        "lines per package (largest share in bold):",
        "| package | lines | share |",
        "| --- | --- | --- |",
    ]
    for pkg, n in fig.lines_per_package.items():
        share = f"{100 * n / fig.lines_total:.1f}%"
        out.append(f"| {pkg} | {n} | {'**' + share + '**' if pkg == fig.largest_package else share} |")
    out.append(f"| all | {fig.lines_total} | 100% |")
    out += [
        "",
        f"largest package: {fig.largest_package}, {100 * fig.largest_share:.1f}% of {fig.lines_total} lines",
        "",
        f"functions with cyclomatic complexity over {COMPLEXITY_LIMIT}: {len(fig.complex_functions)}",
    ]
    out += [f"  {c:3d}  {path}: {name}" for path, name, c in fig.complex_functions]
    out += ["", "test files per folder:"] + [f"  {folder}: {n}" for folder, n in fig.test_files_per_folder.items()]
    out += [
        "",
        f"modules with a test file that names them: {fig.modules_named_by_a_test} of {fig.modules}",
        f"modules imported by no test file: {len(fig.modules_imported_by_no_test)}",
    ]
    out += [f"  {m}" for m in fig.modules_imported_by_no_test]
    out += ["", f"twin module names: {len(fig.twins)}"] + [f"  {a}  ~  {b}" for a, b in fig.twins]
    return "\n".join(out)


def _checkout(ref: str, into: Path) -> Path:
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "gb300lane", "tests"],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", help="a git ref to measure instead of the checkout (e.g. main)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = _checkout(args.ref, Path(tmp)) if args.ref else ROOT
        fig = measure(root, args.ref or "this checkout")
    print(json.dumps(asdict(fig), indent=2) if args.json else render(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
