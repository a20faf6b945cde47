"""Benchmark: what reaching a lane through an SSH forward costs, beside reaching it directly, in the same run.

A dark lane on a remote box binds that box's loopback; the tool reaches it
through an `ssh -N -L` forward it opens itself (`gb300lane.runtime.ssh`). Here
the box is this machine behind Debian's sshd on a loopback port (the remote-host
tests' setup), and the lane is the embedded engine's sidecar (`/health`). Two
things are measured:

- opening a forward (ssh connects, authenticates, and the local end accepts),
  `--opens` times;
- `GET /health` latency, `--gets` requests direct and `--gets` through one
  forward, interleaved in pairs so machine load falls on both alike.

The floors: opening a forward takes at most 3 s (median), and a request
through it at most 20 ms more than direct (median). On a loaded shared machine
the wall clock includes waiting for a core; both paths wait alike.

    python benchmarks/remote.py [--opens 5] [--gets 200] [--out benchmarks/results/remote.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

#: Median seconds to open a forward.
OPEN_FLOOR_S = 3.0
#: Median extra seconds a request through the forward may take.
OVERHEAD_FLOOR_S = 0.020


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> float:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    t0 = time.perf_counter()
    with opener.open(url, timeout=10) as resp:
        resp.read()
        if resp.status != 200:
            raise SystemExit(f"GET {url} answered {resp.status}")
    return time.perf_counter() - t0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opens", type=int, default=5, help="forwards opened (median reported)")
    parser.add_argument("--gets", type=int, default=200, help="GET /health requests per path")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "remote.json")
    args = parser.parse_args()

    from gb300lane import __version__
    from gb300lane.fsio import atomic_write, dumps_json
    from gb300lane.placement import Placement, SshAccess
    from gb300lane.runtime import ssh

    import sshd

    why = sshd.problem()
    if why:
        raise SystemExit(f"this benchmark needs an OpenSSH server: {why}")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    engine = subprocess.Popen([sys.executable, "-m", "gb300lane.engine", "sidecar", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gb300lane-remote-bench-") as tmp:
        server, sshd_proc = sshd.start(Path(tmp) / "sshd")
        try:
            direct = f"http://127.0.0.1:{port}/health"
            deadline = time.monotonic() + 30
            while True:
                try:
                    _get(direct)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the sidecar did not answer on {direct}") from None
                    time.sleep(0.1)
            place = Placement(
                host="bench", lane="bench", docker=server.url, address="127.0.0.1", inventory="(benchmark)",
                selector="bench", ssh=SshAccess(user="root", host="127.0.0.1", port=server.port,
                                                identity=str(server.key), known_hosts=str(server.known_hosts)),
            )  # fmt: skip
            opens = []
            for _ in range(args.opens):
                t0 = time.perf_counter()
                ssh.forward_port(place, port)
                opens.append(time.perf_counter() - t0)
                ssh.close_all()
            local = ssh.forward_port(place, port)
            tunnel = f"http://127.0.0.1:{local}/health"
            _get(direct), _get(tunnel)  # warm-up: connection set-up inside sshd, bytecode
            d_times, t_times = [], []
            for _ in range(args.gets):
                d_times.append(_get(direct))
                t_times.append(_get(tunnel))
            ssh.close_all()
        finally:
            sshd_proc.terminate()
            sshd_proc.wait(timeout=10)
            engine.terminate()
            engine.wait(timeout=10)

    open_median = statistics.median(opens)
    d_med, t_med = statistics.median(d_times), statistics.median(t_times)
    overhead = t_med - d_med
    passed = open_median <= OPEN_FLOOR_S and overhead <= OVERHEAD_FLOOR_S
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = [
        {"path": "direct", "requests": len(d_times), "median_ms": d_med * 1e3, "p95_ms": _pct(d_times, 0.95) * 1e3,
         "max_ms": max(d_times) * 1e3},
        {"path": "ssh forward", "requests": len(t_times), "median_ms": t_med * 1e3,
         "p95_ms": _pct(t_times, 0.95) * 1e3, "max_ms": max(t_times) * 1e3},
    ]  # fmt: skip
    print(
        f"GET /health, {args.gets} requests per path, interleaved, same run; load average {load:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(f"{'path':<12} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    for r in rows:
        print(f"{r['path']:<12} {r['median_ms']:10.2f} {r['p95_ms']:8.2f} {r['max_ms']:8.2f}")
    print(
        f"forward overhead (median): {overhead * 1e3:+.2f} ms (floor {OVERHEAD_FLOOR_S * 1e3:.0f} ms); "
        f"ratio through/direct {t_med / d_med:.2f}x"
    )
    print(
        f"opening a forward: median {open_median:.3f} s of {len(opens)} (min {min(opens):.3f}, max {max(opens):.3f}; "
        f"floor {OPEN_FLOOR_S} s)"
    )
    print(f"floors: {'passed' if passed else 'MISSED'}")
    result = {
        "schema_version": 1, "benchmark": "remote", "tool_version": __version__,
        "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "open_floor_s": OPEN_FLOOR_S, "overhead_floor_s": OVERHEAD_FLOOR_S, "passed": passed,
        "open_s": opens, "open_median_s": open_median, "overhead_median_s": overhead, "rows": rows,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, dumps_json(result))
    print(f"wrote {args.out}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
