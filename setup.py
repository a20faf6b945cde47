"""Build configuration beyond pyproject.toml: the verification kernels, a small C extension.

The extension is optional: where no C compiler is available the install still
succeeds and `gb300lane.spec.kernels` reports the numpy path (same results,
slower). Compiled without floating-point contraction, so every multiply and add
rounds as numpy's do.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gb300lane.spec._kernels",
            sources=["gb300lane/spec/_kernels.c"],
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        )
    ]
)
