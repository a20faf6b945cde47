"""Regenerates the shipped corpora (`gb300lane/engine/corpora/*.txt`).

Prose and code are copied from the Python distribution (its reference
documentation and standard-library source, PSF License); structured, shell_ops
and tool_json are written here from seeded templates, so the package ships
only text it may ship. Run `python -m gb300lane.engine.corpus_gen` to rebuild;
the model cache is keyed by the corpus bytes, so a rebuild invalidates it.
"""

from __future__ import annotations

import json
import random
import sysconfig
from collections.abc import Callable
from pathlib import Path

from gb300lane.fsio import atomic_write

CORPORA_DIR = Path(__file__).parent / "corpora"
DOC_SEP = "\n<|endoftext|>\n"

STDLIB_CODE = (
    "textwrap.py",
    "heapq.py",
    "bisect.py",
    "string.py",
    "shlex.py",
    "fnmatch.py",
    "glob.py",
    "queue.py",
    "sched.py",
    "colorsys.py",
    "graphlib.py",
    "cmd.py",
    "contextlib.py",
    "calendar.py",
    "dataclasses.py",
)
PROSE_TOPICS_LIMIT = 130_000


def _prose() -> str:
    from pydoc_data import topics

    docs, total = [], 0
    for name in sorted(topics.topics):
        text = topics.topics[name].strip()
        if total + len(text) > PROSE_TOPICS_LIMIT:
            break
        docs.append(text)
        total += len(text)
    return DOC_SEP.join(docs)


def _code() -> str:
    lib = Path(sysconfig.get_paths()["stdlib"])
    return DOC_SEP.join((lib / name).read_text(encoding="utf-8").strip() for name in STDLIB_CODE)


SERVICES = ["api", "worker", "gateway", "scheduler", "cache", "ingest", "billing", "search", "auth", "metrics"]
REGIONS = ["us-east-1", "us-west-2", "eu-central-1", "ap-south-1"]
IMAGES = ["nginx:1.27", "redis:7.2", "postgres:16", "python:3.11-slim", "vllm/vllm-openai:v0.33.0"]
HOSTS = ["gb300-01", "gb300-02", "rtx6000-01", "edge-03", "build-07"]


def _structured(rng: random.Random) -> str:
    docs = []
    for _ in range(180):
        svc = rng.choice(SERVICES)
        kind = rng.randrange(4)
        if kind == 0:
            docs.append(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
                f"  name: {svc}\n  namespace: {rng.choice(['default', 'prod', 'staging'])}\n"
                f"  labels:\n    app: {svc}\n    tier: {rng.choice(['frontend', 'backend', 'data'])}\n"
                f"spec:\n  replicas: {rng.randint(1, 8)}\n  selector:\n    matchLabels:\n      app: {svc}\n"
                "  template:\n    spec:\n      containers:\n"
                f"        - name: {svc}\n          image: {rng.choice(IMAGES)}\n"
                f"          ports:\n            - containerPort: {rng.choice([80, 443, 8000, 8080, 9090])}\n"
                f'          resources:\n            limits:\n              cpu: "{rng.randint(1, 16)}"\n'
                f"              memory: {rng.choice([512, 1024, 2048, 4096])}Mi\n"
            )
        elif kind == 1:
            rows = ["host,region,service,cpu_pct,mem_gib,requests,errors"]
            for _ in range(rng.randint(6, 14)):
                rows.append(
                    f"{rng.choice(HOSTS)},{rng.choice(REGIONS)},{rng.choice(SERVICES)},"
                    f"{rng.randint(1, 99)}.{rng.randint(0, 9)},{rng.randint(1, 120)},{rng.randint(100, 9000)},{rng.randint(0, 40)}"
                )
            docs.append("\n".join(rows) + "\n")
        elif kind == 2:
            lines = [f"[{svc}]"]
            for key in rng.sample(
                ["host", "port", "timeout", "retries", "log_level", "workers", "region", "enabled"], 5
            ):
                value = {
                    "host": rng.choice(HOSTS),
                    "port": str(rng.choice([80, 8000, 8080, 30006])),
                    "timeout": f"{rng.randint(1, 60)}s",
                    "retries": str(rng.randint(0, 5)),
                    "log_level": rng.choice(["info", "debug", "warning"]),
                    "workers": str(rng.randint(1, 32)),
                    "region": rng.choice(REGIONS),
                    "enabled": rng.choice(["true", "false"]),
                }[key]
                lines.append(f"{key} = {value}")
            docs.append("\n".join(lines) + "\n")
        else:
            lines = ["| service | region | p50 ms | p99 ms | status |", "|---|---|---|---|---|"]
            for _ in range(rng.randint(4, 9)):
                lines.append(
                    f"| {rng.choice(SERVICES)} | {rng.choice(REGIONS)} | {rng.randint(2, 80)} | "
                    f"{rng.randint(80, 900)} | {rng.choice(['ok', 'ok', 'degraded', 'down'])} |"
                )
            docs.append("\n".join(lines) + "\n")
    return DOC_SEP.join(d.strip() for d in docs)


def _shell_ops(rng: random.Random) -> str:
    templates = [
        "$ docker ps --filter label=gb300lane.role={role} --format '{{{{.Names}}}}'\n{svc}-{role}\n",
        "$ docker logs --tail 50 {svc}-main\nINFO: Started server process [{pid}]\nINFO: Waiting for application startup.\nINFO: Application startup complete.\n",
        "$ nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv\nname, memory.used [MiB], memory.total [MiB]\nNVIDIA GB300, {mem} MiB, 284208 MiB\n",
        "$ systemctl status {svc}.service\n* {svc}.service - {svc} daemon\n   Loaded: loaded (/etc/systemd/system/{svc}.service; enabled)\n   Active: active (running) since Mon 2026-10-26 04:{mm}:00 CDT\n",
        "$ journalctl -u {svc} --since '10 min ago' | grep -i error | wc -l\n{n}\n",
        "$ curl -s http://127.0.0.1:{port}/health -o /dev/null -w '%{{http_code}}\\n'\n200\n",
        '$ curl -s http://127.0.0.1:{port}/metrics | grep spec_decode_num_drafts_total\nvllm:spec_decode_num_drafts_total{{engine="0",model_name="dsv41-flash"}} {n}.0\n',
        "$ kubectl get pods -n {ns} -l app={svc}\nNAME READY STATUS RESTARTS AGE\n{svc}-{pid} 1/1 Running 0 {n}m\n",
        "$ kubectl rollout restart deployment/{svc} -n {ns}\ndeployment.apps/{svc} restarted\n",
        "$ df -h /var/lib/docker\nFilesystem Size Used Avail Use% Mounted on\n/dev/nvme0n1p2 3.5T {n}G 2.1T {pct}% /\n",
        "$ ls -la /etc/{svc}/\ntotal 16\ndrwxr-xr-x 2 root root 4096 Oct 26 04:{mm} .\n-rw-r--r-- 1 root root {n} Oct 26 04:{mm} config.yaml\n",
        "$ grep -n 'num_speculative_tokens' recipes/{svc}.yaml\n{n}:  num_speculative_tokens: {k}\n",
        '$ ss -ltnp | grep {port}\nLISTEN 0 4096 127.0.0.1:{port} 0.0.0.0:* users:(("python3",pid={pid},fd=12))\n',
        "$ ps aux --sort=-%mem | head -3\nUSER PID %CPU %MEM COMMAND\nroot {pid} {pct}.0 {n}.1 python3 -m vllm.entrypoints.openai.api_server\n",
        "$ tail -n 3 /var/log/{svc}/{svc}.log\nINFO {svc}: request done in {n} ms\nINFO {svc}: request done in {n} ms\nWARNING {svc}: slow request {n} ms\n",
        "$ export VLLM_CACHE_ROOT=/var/cache/vllm && ls $VLLM_CACHE_ROOT/torch_compile_cache\n{hash}\n",
        "$ sudo chown -R {svc}:{svc} /var/lib/{svc} && echo ok\nok\n",
        "$ tar -czf /backup/{svc}-$(date +%F).tar.gz /etc/{svc} && ls /backup | tail -1\n{svc}-2026-10-26.tar.gz\n",
    ]
    docs = []
    for _ in range(120):
        lines = []
        for _ in range(rng.randint(3, 7)):
            lines.append(
                rng.choice(templates).format(
                    svc=rng.choice(SERVICES),
                    role=rng.choice(["main", "sidecar"]),
                    pid=rng.randint(1000, 99999),
                    mem=rng.randint(1000, 200000),
                    mm=f"{rng.randint(0, 59):02d}",
                    n=rng.randint(1, 400),
                    port=rng.choice([8000, 8080, 30006, 30106]),
                    ns=rng.choice(["prod", "staging"]),
                    pct=rng.randint(1, 99),
                    k=rng.choice([3, 5, 9]),
                    hash="".join(rng.choice("0123456789abcdef") for _ in range(10)),
                )
            )
        docs.append("".join(lines))
    script = (
        "#!/usr/bin/env bash\nset -euo pipefail\n\nfor svc in {a} {b} {c}; do\n"
        '  if systemctl is-active --quiet "$svc"; then\n    echo "$svc is up"\n  else\n'
        '    echo "$svc is down, restarting" >&2\n    systemctl restart "$svc"\n  fi\ndone\n'
    )
    for _ in range(40):
        a, b, c = rng.sample(SERVICES, 3)
        docs.append(script.format(a=a, b=b, c=c))
    rng.shuffle(docs)
    return DOC_SEP.join(d.strip() for d in docs)


def _tool_json(rng: random.Random) -> str:
    tools: dict[str, Callable[[], dict[str, object]]] = {
        "get_weather": lambda: {
            "city": rng.choice(["Chicago", "Austin", "Berlin", "Tokyo", "Paris"]),
            "unit": rng.choice(["celsius", "fahrenheit"]),
        },
        "search_files": lambda: {
            "pattern": rng.choice(["*.py", "*.yaml", "README*", "*.log"]),
            "path": rng.choice(["/srv", "/etc", "."]),
            "max_results": rng.randint(5, 50),
        },
        "run_command": lambda: {
            "command": rng.choice(["ls -la", "df -h", "uptime", "nvidia-smi"]),
            "timeout_s": rng.choice([10, 30, 60]),
        },
        "read_file": lambda: {
            "path": rng.choice(["/etc/hosts", "config.yaml", "src/main.py", "recipes/v27.yaml"]),
            "offset": 0,
            "limit": rng.choice([100, 200, 400]),
        },
        "open_incident": lambda: {
            "title": rng.choice(["Disk almost full", "Lane boot slow", "Metrics gap"]),
            "priority": rng.choice(["low", "medium", "high"]),
            "labels": rng.sample(["ops", "gpu", "lane", "infra"], 2),
        },
        "query_metrics": lambda: {
            "metric": rng.choice(["vllm:generation_tokens_total", "vllm:spec_decode_num_drafts_total", "cpu_pct"]),
            "window": rng.choice(["5m", "1h", "24h"]),
            "step_s": rng.choice([15, 60]),
        },
        "send_email": lambda: {
            "to": rng.choice(["ops@example.com", "james@example.com"]),
            "subject": rng.choice(["Lane report", "Promotion done", "Rollback"]),
            "body": "See the attached report.",
        },
    }
    docs = []
    for i in range(260):
        name = rng.choice(sorted(tools))
        call = {
            "id": f"call_{rng.randint(10000, 99999)}",
            "type": "function",
            "function": {"name": name, "arguments": tools[name]()},
        }
        result = {
            "tool_call_id": call["id"],
            "role": "tool",
            "content": {"ok": rng.random() > 0.1, "elapsed_ms": rng.randint(3, 900)},
        }
        if i % 2:
            docs.append(json.dumps({"tool_calls": [call]}, indent=2) + "\n" + json.dumps(result, indent=2))
        else:
            docs.append(json.dumps({"tool_calls": [call]}) + "\n" + json.dumps(result))
    return DOC_SEP.join(docs)


def generate(out_dir: Path = CORPORA_DIR) -> dict[str, int]:
    """Write every corpus file; returns the byte size per class."""
    rng = random.Random(20261026)
    texts = {
        "prose": _prose(),
        "structured": _structured(rng),
        "code": _code(),
        "shell_ops": _shell_ops(rng),
        "tool_json": _tool_json(rng),
    }
    sizes = {}
    for name, text in texts.items():
        atomic_write(out_dir / f"{name}.txt", text + "\n")
        sizes[name] = len(text.encode("utf-8"))
    return sizes


if __name__ == "__main__":
    print(generate())
