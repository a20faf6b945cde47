"""Build configuration beyond pyproject.toml: the verification kernels (a small C extension), and the top-level
folders a wheel carries inside the package.

The extension is optional: where no C compiler is available the install still
succeeds and `gb300lane.spec.kernels` reports the numpy path (same results,
slower). Compiled without floating-point contraction, so every multiply and add
rounds as numpy's do.

The repository keeps `recipes/`, `templates/` and the write-up's receipts
(`results/<run>/`) at its top level, where people read and edit them. A wheel
has no top level of its own, so `build_py` copies them into the built package
under `gb300lane/data/` (`recipes/`, `templates/`, `receipts/<run>/`), where
`gb300lane.paths.shipped` looks first; a checkout (an editable install) reads
the top-level folders themselves, so no copy is ever kept by hand.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: Top-level folder -> where the wheel carries it under gb300lane/data/ (gb300lane.paths.TOP_LEVEL says the same).
MAPPED = {"recipes": "recipes", "templates": "templates"}
#: The write-up's receipts under results/ (gb300lane.paths.WRITEUP_RUNS); a user's own runs there stay out.
WRITEUP_RUNS = ("2026-10-26-br1-block-verification", "2026-10-26-br2-k-ladder-peerbench")


class BuildPyWithTopLevel(build_py):
    """build_py, then the top-level folders copied into the built package (not in an editable build)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the checkout's own folders are read in place
        data = Path(self.build_lib) / "gb300lane" / "data"
        pairs = [(ROOT / top, data / inside) for top, inside in MAPPED.items()]
        pairs += [(ROOT / "results" / run, data / "receipts" / run) for run in WRITEUP_RUNS]
        for src, dest in pairs:
            if not src.is_dir():
                raise SystemExit(f"setup.py: {src} is missing; the wheel must carry it (restore it from git)")
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(
    cmdclass={"build_py": BuildPyWithTopLevel},
    ext_modules=[
        Extension(
            "gb300lane.spec._kernels",
            sources=["gb300lane/spec/_kernels.c"],
            depends=["gb300lane/spec/_kernels_core.h"],
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        )
    ],
)
