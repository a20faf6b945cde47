"""Package namespaces whose names load their submodule on first use (PEP 562).

A package's `__init__` imports its public names under `TYPE_CHECKING` (for
readers and mypy) and hands the same names to `attach`; at run time a name's
submodule is imported when the name is first read. `gb300lane status` and
`--help` then load only the submodules they use, not every model a package
defines.

A public name that is also a submodule's name (`lane.boot` the function,
`lane/boot.py` the module) stays the function once the submodule is loaded,
as it would after an eager `from gb300lane.lane.boot import boot`.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping


class _Package(types.ModuleType):
    """A package module that keeps a public name bound to its object when a same-named submodule loads."""

    def __setattr__(self, name: str, value: object) -> None:
        exports: Mapping[str, str] = self.__dict__.get("_lazy_exports", {})
        if isinstance(value, types.ModuleType) and name in exports:
            return  # the import system binding `package.boot` to the submodule; the function keeps the name
        super().__setattr__(name, value)


def attach(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose public names are `exports` (name -> submodule)."""
    module = sys.modules[package]
    module.__class__ = _Package
    module.__dict__["_lazy_exports"] = dict(exports)

    def __getattr__(name: str) -> object:
        sub = exports.get(name)
        if sub is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{sub}"), name)
        module.__dict__[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(exports))

    return __getattr__, __dir__
