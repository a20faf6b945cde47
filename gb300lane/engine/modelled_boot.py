"""The modelled boot: vLLM 0.33's start-up log lines, the compile cache, the timings.

A boot is a sequence of phases with modelled durations (weights, torch.compile
hit or miss, KV profiling, graph capture); each phase sleeps its modelled
seconds times --time-scale and logs the modelled seconds, as vLLM logs real
ones. `$VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_0_0/backbone` gets a
completion marker only once a compile finished, so a boot killed mid-compile
stays a miss. A hash hit totals about 528 modelled seconds, a miss about
1,910.

The hash is vLLM's: the sha256 of four factors, each a hash of its own
(`CompileFactors`): env (the compile-relevant `VLLM_*` variables, vLLM's
ignored set left out), cfg (the engine config: `config.compile_hash`), comp
(the "compiler": Python, numpy and whether the C kernels run) and code (the
engine's own source). With `VLLM_LOGGING_LEVEL=DEBUG` the boot logs them as
vLLM does (`torch.compile cache factors: env=... cfg=... comp=... code=...
dir=...`), and the cache directory keeps `cache_key_factors.json` (the raw env
factors and the four hashes), so a miss can name the factor that changed.
`VLLM_FORCE_AOT_LOAD=1` makes a load that fails (no finished compile for the
hash, or a marker that does not read) fail the boot instead of compiling again.

The profile phase models FlashInfer's autotuner: a miss (or a missing tactic
file) autotunes and writes the chosen tactics to
`$VLLM_CACHE_ROOT/flashinfer_autotune_cache/gb300lane-embedded/<hash>/autotune_cache.json`;
a hit reads them. Either way the boot logs the file and its tactic count.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TextIO

from gb300lane.engine.args import EngineArgs
from gb300lane.engine.config import compile_hash
from gb300lane.errors import EngineError
from gb300lane.fsio import atomic_write, dumps_json, sha256_bytes
from gb300lane.spec.vllmenv import compile_env

VLLM_VERSION = "0.33.0"
COMPLETE_MARKER = "gb300lane-compile-complete.json"
#: Bytes of KV per token on the lane's checkpoint (MLA latent + rope, fp8), for the GiB line.
KV_BYTES_PER_TOKEN = 12_800
MAX_BATCHED_TOKENS = 8192

WEIGHTS_S = 236.4
COMPILE_HIT_S = 16.2
COMPILE_MISS_S = 1_082.6
PROFILE_HIT_S = 189.7  # FlashInfer autotune read from its cache
PROFILE_MISS_S = 507.9  # autotune run from scratch
INIT_REST_S = 52.1
CAPTURE_S_PER_SIZE = 1.3
FACTORS_FILE = "cache_key_factors.json"
AUTOTUNE_DIR = "flashinfer_autotune_cache"
AUTOTUNE_FILE = "autotune_cache.json"
#: The kernels the modelled autotuner picks a tactic for, and the batch buckets it tunes each at.
AUTOTUNE_OPS = ("mla_decode", "moe_grouped_gemm", "fp8_gemm", "rejection_sampler")
AUTOTUNE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class VllmLog:
    """Writes lines as vLLM's logger does: `INFO MM-DD HH:MM:SS [file.py:line] message`."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def _emit(self, level: str, where: str, message: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
        try:
            self.stream.write(f"{level} {stamp} [{where}] {message}\n")
            self.stream.flush()
        except (ValueError, OSError):
            pass  # a closed stream at shutdown must not take the engine down

    def info(self, where: str, message: str) -> None:
        self._emit("INFO", where, message)

    def warning(self, where: str, message: str) -> None:
        self._emit("WARNING", where, message)

    def error(self, where: str, message: str) -> None:
        self._emit("ERROR", where, message)

    def debug(self, where: str, message: str) -> None:
        """Written only under `VLLM_LOGGING_LEVEL=DEBUG`, as vLLM's logger does."""
        if os.environ.get("VLLM_LOGGING_LEVEL", "").upper() == "DEBUG":
            self._emit("DEBUG", where, message)


def _sha(value: object) -> str:
    return hashlib.sha256(str(value).encode()).hexdigest()


def code_hash() -> str:
    """sha256 over the engine's own source (engine and spec modules, the kernels' C): its `code` factor."""
    root = resources.files("gb300lane")
    h = hashlib.sha256()
    for pkg in ("engine", "spec"):
        for item in sorted(root.joinpath(pkg).iterdir(), key=lambda t: t.name):
            if item.name.endswith((".py", ".c", ".h")) and item.is_file():
                h.update(f"{pkg}/{item.name}\n".encode() + item.read_bytes())
    return h.hexdigest()


def compiler_hash() -> str:
    """The `comp` factor: what turns the config into kernels here (Python, numpy, the C kernels or numpy's path)."""
    import numpy

    from gb300lane.spec.kernels import active

    return _sha([platform.python_version(), numpy.__version__, "kernels" if active() is not None else "numpy"])


@dataclass(frozen=True)
class CompileFactors:
    """vLLM's four compile-cache factors; the hash directory is sha256 of them, as vLLM names it."""

    env: str
    cfg: str
    comp: str
    code: str
    env_raw: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return _sha([self.env, self.cfg, self.code, self.comp])[:10]

    def line(self, cache_dir: Path) -> str:
        return (
            f"torch.compile cache factors: env={self.env} cfg={self.cfg} comp={self.comp} code={self.code} "
            f"dir={cache_dir}"
        )

    def record(self) -> dict[str, object]:
        return {
            "env": self.env_raw,
            "env_hash": self.env,
            "config_hash": self.cfg,
            "compiler_hash": self.comp,
            "code_hash": self.code,
        }


@dataclass(frozen=True)
class BootPlan:
    """What a boot will do, decided before it starts."""

    hash: str
    cache_dir: Path
    hit: bool
    capture_sizes: list[int]
    factors: CompileFactors | None = None
    load_problem: str | None = None
    force_load: bool = False

    @property
    def marker(self) -> Path:
        return self.cache_dir / COMPLETE_MARKER

    @property
    def tactics_file(self) -> Path:
        return cache_root() / AUTOTUNE_DIR / "gb300lane-embedded" / self.hash / AUTOTUNE_FILE


def cache_root() -> Path:
    return Path(os.environ.get("VLLM_CACHE_ROOT") or Path.home() / ".cache" / "vllm")


def plan_boot(args: EngineArgs, environ: Mapping[str, str] | None = None) -> BootPlan:
    environ = os.environ if environ is None else environ
    cfg, sizes = compile_hash(
        model=args.model,
        spec=args.spec,
        compilation_config=args.compilation_config,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    raw = compile_env(environ)
    factors = CompileFactors(
        env=_sha(sorted(raw.items())), cfg=cfg, comp=compiler_hash(), code=code_hash(), env_raw=raw
    )
    digest = factors.key
    cache_dir = cache_root() / "torch_compile_cache" / digest / "rank_0_0" / "backbone"
    marker = cache_dir / COMPLETE_MARKER
    problem = None
    hit = False
    if marker.is_file():
        try:
            hit = json.loads(marker.read_text()).get("hash") == digest
            problem = None if hit else "the artifact names another hash"
        except (OSError, ValueError, AttributeError):
            problem = "Compile cache file corrupted."
    else:
        problem = f"[Errno 2] No such file or directory: '{marker}'"
    return BootPlan(
        hash=digest,
        cache_dir=cache_dir,
        hit=hit,
        capture_sizes=sizes,
        factors=factors,
        load_problem=None if hit else problem,
        force_load=environ.get("VLLM_FORCE_AOT_LOAD") == "1",
    )


def autotune_tactics(plan: BootPlan) -> dict[str, dict[str, int]]:
    """The tactics the modelled autotuner picks: per kernel and batch bucket, from the config and the compiler."""
    assert plan.factors is not None
    out: dict[str, dict[str, int]] = {}
    for op in AUTOTUNE_OPS:
        out[op] = {
            str(b): int(_sha([plan.factors.cfg, plan.factors.comp, op, b])[:8], 16) % 8 for b in AUTOTUNE_BUCKETS
        }
    return out


def _read_tactics(path: Path) -> dict[str, dict[str, int]] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    tactics = data.get("tactics") if isinstance(data, dict) else None
    return tactics if isinstance(tactics, dict) else None


def modelled_boot_seconds(plan: BootPlan) -> float:
    compile_s = COMPILE_HIT_S if plan.hit else COMPILE_MISS_S
    profile_s = PROFILE_HIT_S if plan.hit else PROFILE_MISS_S
    return WEIGHTS_S + compile_s + profile_s + INIT_REST_S + CAPTURE_S_PER_SIZE * len(plan.capture_sizes)


async def run_boot(args: EngineArgs, plan: BootPlan, log: VllmLog) -> float:
    """Log the boot phases, sleeping each one's modelled seconds times --time-scale; returns modelled seconds."""
    scale = args.time_scale

    async def phase(seconds: float) -> float:
        if scale > 0:
            await asyncio.sleep(seconds * scale)
        return seconds

    # The engine verifies in its own code, token or block: as vLLM's V2 runner does on the box, and it says so.
    log.info("gpu_worker.py:518", "Using V2 Model Runner")
    total = await phase(WEIGHTS_S)
    log.info("default_loader.py:291", f"Loading weights took {WEIGHTS_S:.2f} seconds")
    log.info("gpu_model_runner.py:2651", f"Model loading took 11.84 GiB memory and {WEIGHTS_S + 3.1:.6f} seconds")
    log.info("backends.py:703", f"Using cache directory: {plan.cache_dir} for vLLM's torch.compile")
    if plan.factors is not None:
        log.debug("backends.py:1117", plan.factors.line(plan.cache_dir))
    compile_range = f"(1, {MAX_BATCHED_TOKENS})"
    if not plan.hit and plan.load_problem is not None and plan.marker.exists():
        log.warning(
            "decorators.py:336",
            f"[backbone] Compiling model again due to a load failure from {plan.marker}, reason: {plan.load_problem}",
        )
    if not plan.hit and plan.force_load:
        log.error(
            "decorators.py:345",
            f"[backbone] VLLM_FORCE_AOT_LOAD=1: failed to load the compiled model from "
            f"{plan.marker}: {plan.load_problem}",
        )
        raise EngineError(
            f"VLLM_FORCE_AOT_LOAD=1 and the compile cache for hash {plan.hash} did not load "
            f"({plan.load_problem}); unset it to compile, or boot the recipe whose compile is cached"
        )
    if plan.hit:
        total += await phase(COMPILE_HIT_S)
        log.info(
            "backends.py:241",
            f"Directly load the compiled graph(s) for compile range {compile_range} from the cache, took {COMPILE_HIT_S * 0.31:.3f} s",
        )
    else:
        plan.cache_dir.mkdir(parents=True, exist_ok=True)
        total += await phase(COMPILE_MISS_S)
        log.info(
            "backends.py:258",
            f"Compiling a graph for compile range {compile_range} takes {COMPILE_MISS_S * 0.93:.2f} s",
        )
        # The marker goes down only after the compile finished: a killed miss boot stays a miss.
        if plan.factors is not None and not (plan.cache_dir / FACTORS_FILE).exists():
            atomic_write(plan.cache_dir / FACTORS_FILE, dumps_json(plan.factors.record()))
        atomic_write(plan.marker, dumps_json({"hash": plan.hash, "compile_s": COMPILE_MISS_S}))
    compile_s = COMPILE_HIT_S if plan.hit else COMPILE_MISS_S
    log.info("monitor.py:34", f"torch.compile took {compile_s:.2f} s in total")
    tactics = _read_tactics(plan.tactics_file) if plan.hit else None
    profile_s = PROFILE_HIT_S if tactics is not None else PROFILE_MISS_S
    total += await phase(profile_s)
    if plan.factors is not None:
        if tactics is None:
            tactics = autotune_tactics(plan)
            body = {"hash": plan.hash, "tactics": tactics}
            atomic_write(plan.tactics_file, dumps_json(body))
            log.info(
                "autotuner.py:212",
                f"Autotune finished: saved {sum(map(len, tactics.values()))} tactics to {plan.tactics_file}",
            )
        else:
            log.info(
                "autotuner.py:188",
                f"Autotune cache hit: loaded {sum(map(len, tactics.values()))} tactics from {plan.tactics_file}",
            )
    kv_gib = args.kv_pool_tokens * KV_BYTES_PER_TOKEN / 2**30
    log.info("gpu_worker.py:298", f"Available KV cache memory: {kv_gib:.2f} GiB")
    concurrency = args.kv_pool_tokens / args.max_model_len
    log.info(
        "kv_cache_utils.py:1087",
        f"GPU KV cache size: {args.kv_pool_tokens:,} tokens, Maximum concurrency for "
        f"{args.max_model_len:,} tokens per request: {concurrency:.2f}x",
    )
    capture_s = CAPTURE_S_PER_SIZE * len(plan.capture_sizes)
    total += await phase(capture_s)
    log.info(
        "gpu_model_runner.py:3432",
        f"Graph capturing finished in {round(capture_s)} secs, took {0.04 * len(plan.capture_sizes):.2f} GiB",
    )
    total += await phase(INIT_REST_S)
    log.info(
        "core.py:211",
        f"init engine (profile, create kv cache, warmup model) took {profile_s + capture_s + INIT_REST_S:.2f} seconds",
    )
    return total


def checkpoint_identity(model_hash: str, pieces: list[str], config: Mapping[str, object]) -> dict[str, str]:
    """The builtin model's identity as `/version` reports it: the hashes of its config, tokenizer and tables."""
    return {
        "path": "builtin",
        "config_sha256": sha256_bytes(json.dumps(dict(config), sort_keys=True)),
        "tokenizer_sha256": sha256_bytes("\n".join(pieces)),
        "weight_index_sha256": sha256_bytes(model_hash),
        "revision": model_hash,
    }
