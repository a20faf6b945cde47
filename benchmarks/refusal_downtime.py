"""Benchmark: the time production is down when `promote` refuses, for every reason its plan finds first.

A throwaway lane (its own state, config, results and cache directories, recipes on free ports) runs
local-v26 as production on the process runtime with the embedded engine (`--time-scale`, default 0.01). A
card mini (local-v26 against local-v27) is run with fake arms and scored PASS, so local-v27 has a real
verdict in the evidence log. Then `promote` is asked, against the live lane, to do what it must refuse:

- local-k9 (k = 9 above the trained block of 5), forced;
- a recipe with no smoke gates, forced;
- a recipe whose sidecar port something else holds, forced;
- local-v27 with the signing key garbage, zeroed, or another key (its public half not a chosen signer);
- local-v27 after its recipe was edited since the card's PASS (k and an env var);
- local-v27 after the card's verdict was deleted from results/ (the evidence log remembers it).

While each runs, a poller asks production's /health every 20 ms; downtime is the time from its first
failed answer to the next 200 (summed). Each must refuse and leave production's engine process as it was
(same pid, never stopped): 0 s down. Before the plan found these refusals, promote stopped production first
(14.4 s down for k above the trained block on this write-up's box, 33 s for a recipe without smoke gates).

    python benchmarks/refusal_downtime.py [--time-scale 0.01] [--out benchmarks/results/refusal_downtime.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def write_recipes(dest: Path, time_scale: float) -> tuple[int, int]:
    from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair

    base = quick_local_v26(name="refusal-bench-{port}", time_scale=time_scale)
    port, sidecar = int(base["lane"]["port"]), int(base["sidecar"]["port"])
    write_quick_pair(dest, base, also=("local-k9",))
    (dest / "local-nosmoke.yaml").write_text(
        "schema_version: 1\nname: local-nosmoke\nextends: local-v27\ndescription: no smoke gates\nsmoke:\n  gates: []\n"
    )
    return port, sidecar


class Poller:
    """Asks /health every `every_s`; sums the time between a failed answer and the next 200."""

    def __init__(self, url: str, every_s: float = 0.02) -> None:
        self.url, self.every_s = url, every_s
        self.down_s, self.polls, self.failures = 0.0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=1.0) as r:
                return r.status == 200
        except OSError:
            return False

    def _run(self) -> None:
        since: float | None = None
        while not self._stop.is_set():
            ok = self._ok()
            now = time.monotonic()
            self.polls += 1
            if not ok:
                self.failures += 1
                since = now if since is None else since
            elif since is not None:
                self.down_s += now - since
                since = None
            time.sleep(self.every_s)
        if since is not None:
            self.down_s += time.monotonic() - since

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=0.01)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "refusal_downtime.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gb300lane-refusal-bench-"))
    os.environ.update(
        GB300LANE_STATE_DIR=str(work / "state"),
        GB300LANE_RECIPES_DIR=str(work / "recipes"),
        GB300LANE_RESULTS_DIR=str(work / "results"),
        VLLM_CACHE_ROOT=str(work / "vllm-cache"),
        XDG_CONFIG_HOME=str(work / "config"),
    )
    for k in ("GB300LANE_LANE_OPS", "GB300LANE_SIGNING_KEY", "GB300LANE_ALLOWED_SIGNERS", "GB300LANE_PRINCIPALS"):
        os.environ.pop(k, None)
    port, _ = write_recipes(work / "recipes", args.time_scale)

    from gb300lane import __version__, lane, signing
    from gb300lane import promote as pm
    from gb300lane.cards import load_card, register, run_card, score
    from gb300lane.errors import LaneError
    from gb300lane.fsio import atomic_write, dumps_json

    from fakes import cards as fakes
    from fakes.sshkey import write_key

    rows = []
    try:
        t0 = time.monotonic()
        first = pm.promote("local-v26", force=True, reason="benchmark: production")
        if not first.ok:
            print(f"setup failed: {first.message}", file=sys.stderr)
            return 1
        card, path = load_card(ROOT / "tests" / "data" / "cards" / "mini.yaml")
        rec = register(card, path.read_text())
        run_card(rec, ops=fakes.FakeLane(card, {"A": 1.0, "B": 1.05, "A2": 1.0}).ops())
        assert score(rec).verdict == "PASS"
        print(f"setup: production up and card mini PASS in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        prod = pm.current_production()
        assert prod is not None
        pid = {i.name: i for i in lane.list_instances()}[prod.instance]
        key = signing.signing_key_path()
        good, pub = key.read_bytes(), Path(f"{key}.pub").read_text()
        recipe27 = work / "recipes" / "local-v27.yaml"
        text27 = recipe27.read_text()
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))  # a port something else holds: the new recipe's sidecar port
        held = holder.getsockname()[1]
        (work / "recipes" / "local-heldport.yaml").write_text(
            f"schema_version: 1\nname: local-heldport\nextends: local-v27\ndescription: its sidecar port held\n"
            f"sidecar:\n  port: {held}\n"
        )

        def spoil(kind: str) -> None:
            if kind == "garbage":
                key.write_bytes(b"not a key\n")
            elif kind == "zeroed":
                key.write_bytes(b"\0" * len(good))
            else:
                other = write_key(work / "other" / "key", "someone else")
                key.write_bytes(other.read_bytes())
                Path(f"{key}.pub").write_text(Path(f"{other}.pub").read_text())

        def unspoil() -> None:
            key.write_bytes(good)
            Path(f"{key}.pub").write_text(pub)

        cases = [
            (
                "k above the trained block (local-k9)",
                "local-k9",
                True,
                lambda: None,
                lambda: None,
                "exceeds the trained block",
            ),
            ("no smoke gates", "local-nosmoke", True, lambda: None, lambda: None, "smoke.gates is empty"),
            (
                "a port of the candidate's lane held",
                "local-heldport",
                True,
                holder.listen,
                holder.close,
                f"port {held}",
            ),
            ("signing key garbage", "local-v27", False, lambda: spoil("garbage"), unspoil, str(key)),
            ("signing key zeroed", "local-v27", False, lambda: spoil("zeroed"), unspoil, str(key)),
            ("signing key foreign", "local-v27", False, lambda: spoil("foreign"), unspoil, "does not verify"),
            (
                "recipe edited after its PASS",
                "local-v27",
                False,
                lambda: recipe27.write_text(text27 + '  num_speculative_tokens: 3\nenv:\n  BENCH_EXTRA: "1"\n'),
                lambda: recipe27.write_text(text27),
                "differs from the candidate card mini measured",
            ),
            (
                "its verdict deleted from results/ (the log remembers it)",
                "local-v27",
                False,
                lambda: (os.chmod(rec.verdict_file(1), 0o644), rec.verdict_file(1).rename(work / "verdict.bak")),
                lambda: (work / "verdict.bak").rename(rec.verdict_file(1)),
                "verdict-1.json",
            ),
        ]
        for name, recipe, force, before, after, expect in cases:
            before()
            with Poller(f"http://127.0.0.1:{port}/health") as poll:
                t = time.monotonic()
                try:
                    report = pm.promote(recipe, force=force, reason="benchmark: must refuse" if force else None)
                    refused, said = not report.ok, report.message
                except LaneError as exc:
                    refused, said = True, str(exc)
                took = time.monotonic() - t
            after()
            now = {i.name: i for i in lane.list_instances()}.get(prod.instance)
            same = now is not None and now.state == "running" and now.containers == pid.containers
            rows.append(
                {
                    "reason": name,
                    "refused": refused,
                    "named": expect in said,
                    "down_s": poll.down_s,
                    "polls": poll.polls,
                    "failed_polls": poll.failures,
                    "promote_s": took,
                    "production_untouched": same and pm.current_production() == prod,
                    "said": said[:300],
                }
            )
            print(
                f"  {name}: refused={refused} down {poll.down_s:.2f} s ({poll.failures}/{poll.polls} polls "
                f"failed) in {took:.2f} s",
                file=sys.stderr,
            )
    finally:
        for info in lane.list_instances():
            lane.remove_instance(info.name)
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"time production is down while promote refuses, embedded engine on the process runtime, time scale "
        f"{args.time_scale}; /health polled every 20 ms"
    )
    print(f"{'reason':<58} {'refused':>7} {'named':>5} {'down s':>7} {'polls':>6} {'promote s':>9}  production")
    for r in rows:
        print(
            f"{r['reason']:<58} {'yes' if r['refused'] else 'NO':>7} {'yes' if r['named'] else 'NO':>5} "
            f"{r['down_s']:>7.2f} {r['polls']:>6} {r['promote_s']:>9.2f}  "
            f"{'untouched' if r['production_untouched'] else 'TOUCHED'}"
        )
    atomic_write(
        args.out,
        dumps_json(
            {
                "schema_version": 1,
                "benchmark": "refusal_downtime",
                "tool_version": __version__,
                "python": platform.python_version(),
                "platform": platform.platform(),
                "time_scale": args.time_scale,
                "rows": rows,
            }
        ),
    )
    print(f"wrote {args.out}")
    bad = [r for r in rows if not (r["refused"] and r["named"] and r["production_untouched"]) or r["down_s"] > 0]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
