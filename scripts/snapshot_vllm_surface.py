#!/usr/bin/env python3
"""Write a vLLM version's surface golden: `gb300lane/data/vllm-<version>-surface.json`.

The source of a build (a wheel, or a site-packages directory with vLLM installed) says which of the log lines
the lane's checks read it can print, which metric names it declares and which environment its compile cache
hashes (`gb300lane/data/_vllm_surface_probe.py`). A live scrape of the build serving (`--scrape FILE`, the body
of GET /metrics) replaces the declared names with the families it actually serves, which is what `gb300lane
engine drift` compares a running engine with.

    python scripts/snapshot_vllm_surface.py ~/.cache/gb300lane/real-lane/venv/lib/python3.11/site-packages \
        --scrape /tmp/metrics-0.32.txt
    python scripts/snapshot_vllm_surface.py /tmp/vllm-wheel/vllm-0.33.0-*.whl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    from gb300lane.fsio import atomic_write, dumps_json
    from gb300lane.lane import surface
    from gb300lane.spec.counters import served_families

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a vllm wheel, or a site-packages directory with vllm installed")
    parser.add_argument("--scrape", type=Path, default=None, help="a saved GET /metrics body of this build serving")
    parser.add_argument("--out", type=Path, default=None, help="default gb300lane/data/vllm-<version>-surface.json")
    args = parser.parse_args(argv)
    spec = __import__("importlib.util").util.spec_from_file_location("probe", surface.probe_script())
    probe = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    got = surface.ProbeReport.model_validate(probe.probe(args.source, surface.probe_literals()))
    families = None
    if args.scrape is not None:
        families = {
            n: t
            for n, t in served_families(args.scrape.read_text(), source=str(args.scrape)).items()
            if n.startswith("vllm:")
        }
    label = str(args.source)
    found = surface.from_probe(label, got, families=families)
    out = args.out or ROOT / "gb300lane" / "data" / f"vllm-{got.vllm_version}-surface.json"
    how = f"live scrape ({args.scrape.name})" if args.scrape else f"source ({Path(label).name})"
    atomic_write(
        out, dumps_json(surface.golden_payload(found, families_from=how, log_lines_from=f"source ({Path(label).name})"))
    )
    print(
        f"{out}: {len(found.families)} families ({how}), "
        f"{sum(1 for v in found.log_lines.values() if v)} of {len(found.log_lines)} log lines, "
        f"{len(found.compile_env)} compile env names"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
