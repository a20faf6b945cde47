"""Count the public functions of the package whose signature names `Any`.

    python scripts/count_any.py [--list]

A function is public when its name and every enclosing class's name has no leading underscore (methods of
public classes included, dunders excluded); its signature is its parameters' and return annotations. `Any`
is counted when an annotation mentions the name `Any` (`Any`, `dict[str, Any]`, `typing.Any`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gb300lane"


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "Any" in sub.value:
            return _mentions_any(ast.parse(sub.value, mode="eval").body)
    return False


def _signature_has_any(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
    return _mentions_any(fn.returns) or any(_mentions_any(p.annotation) for p in params)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def public_functions_with_any(root: Path = PACKAGE) -> list[str]:
    """`module:qualname` of every public function or method whose signature names `Any`, sorted."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if any(_private(p) for p in parts if p != "__init__"):
            continue
        module = ".".join(p for p in parts if p != "__init__")

        def visit(body: list[ast.stmt], prefix: str) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef) and not _private(node.name):
                    visit(node.body, f"{prefix}{node.name}.")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if _private(node.name) or (node.name.startswith("__") and node.name.endswith("__")):
                        continue
                    if _signature_has_any(node):
                        found.append(f"{module}:{prefix}{node.name}")

        visit(ast.parse(path.read_text()).body, "")
    return found


if __name__ == "__main__":
    names = public_functions_with_any()
    if "--list" in sys.argv[1:]:
        print("\n".join(names))
    print(f"{len(names)} public functions with Any in their signature")
