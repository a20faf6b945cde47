"""Wall time of `reproduce br1|br2`: part 1 (transcribed receipts) and part 2 (the embedded engine).

    python benchmarks/reproduce.py            # part 1 of both cards, 5 repetitions each
    python benchmarks/reproduce.py --part2    # also part 2 (minutes; receipts go to a temp results dir)

Prints a table and writes benchmarks/results/reproduce.json. Floors: part 1
under 10 s, part 2 under 10 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"part1": 10.0, "part2": 600.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part2", action="store_true", help="also time part 2 on the embedded engine")
    ap.add_argument("--reps", type=int, default=5, help="part 1 repetitions")
    args = ap.parse_args()

    from gb300lane import __version__
    from gb300lane.cards.reproduce import part1, part2

    rows = []
    quiet = lambda _m: None  # noqa: E731 - the table is the output
    for which in ("br1", "br2"):
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            part1(which, quiet)
            times.append(time.perf_counter() - t0)
        rows.append(
            {
                "card": which,
                "part": 1,
                "runs": len(times),
                "median_s": statistics.median(times),
                "max_s": max(times),
                "floor_s": FLOORS["part1"],
                "what": "in process",
            }
        )
        cold = []
        for _ in range(2):
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from gb300lane.cli.main import main; main()",
                    "card",
                    "reproduce",
                    which,
                    "--part",
                    "1",
                ],
                check=True,
                capture_output=True,
                cwd=ROOT,
                timeout=600,
            )
            cold.append(time.perf_counter() - t0)
        rows.append(
            {
                "card": which,
                "part": 1,
                "runs": len(cold),
                "median_s": statistics.median(cold),
                "max_s": max(cold),
                "floor_s": FLOORS["part1"],
                "what": "CLI, fresh process",
            }
        )
    if args.part2:
        with tempfile.TemporaryDirectory(prefix="gb300lane-reproduce-") as tmp:
            os.environ["GB300LANE_RESULTS_DIR"] = tmp
            for which in ("br1", "br2"):
                t0 = time.perf_counter()
                part2(which, quiet)
                dt = time.perf_counter() - t0
                rows.append(
                    {
                        "card": which,
                        "part": 2,
                        "runs": 1,
                        "median_s": dt,
                        "max_s": dt,
                        "floor_s": FLOORS["part2"],
                        "what": "register, run 3 arms, score, report",
                    }
                )

    print(f"{'card':<5} {'part':>4} {'what':<38} {'runs':>4} {'median s':>9} {'max s':>8} {'floor s':>8}  ok")
    for r in rows:
        ok = "yes" if r["max_s"] < r["floor_s"] else "NO"
        print(
            f"{r['card']:<5} {r['part']:>4} {r['what']:<38} {r['runs']:>4} {r['median_s']:>9.3f} "
            f"{r['max_s']:>8.3f} {r['floor_s']:>8.0f}  {ok}"
        )
    out = ROOT / "benchmarks" / "results" / "reproduce.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "tool_version": __version__,
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    return 0 if all(r["max_s"] < r["floor_s"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
