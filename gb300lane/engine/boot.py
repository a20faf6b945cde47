"""The modelled boot: vLLM 0.33's start-up log lines, the compile cache, the timings.

A boot is a sequence of phases with modelled durations (weights, torch.compile
hit or miss, KV profiling, graph capture); each phase sleeps its modelled
seconds times --time-scale and logs the modelled seconds, as vLLM logs real
ones. `$VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_0_0/backbone` gets a
completion marker only once a compile finished, so a boot killed mid-compile
stays a miss. A hash hit totals about 528 modelled seconds, a miss about
1,910.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gb300lane.engine.args import EngineArgs
from gb300lane.engine.config import compile_hash
from gb300lane.fsio import atomic_write, dumps_json

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


@dataclass(frozen=True)
class BootPlan:
    """What a boot will do, decided before it starts."""

    hash: str
    cache_dir: Path
    hit: bool
    capture_sizes: list[int]

    @property
    def marker(self) -> Path:
        return self.cache_dir / COMPLETE_MARKER


def cache_root() -> Path:
    return Path(os.environ.get("VLLM_CACHE_ROOT") or Path.home() / ".cache" / "vllm")


def plan_boot(args: EngineArgs) -> BootPlan:
    digest, sizes = compile_hash(
        model=args.model, spec=args.spec, compilation_config=args.compilation_config,
        max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len, dtype=args.dtype,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    cache_dir = cache_root() / "torch_compile_cache" / digest / "rank_0_0" / "backbone"
    return BootPlan(hash=digest, cache_dir=cache_dir, hit=(cache_dir / COMPLETE_MARKER).is_file(), capture_sizes=sizes)


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
    compile_range = f"(1, {MAX_BATCHED_TOKENS})"
    if plan.hit:
        total += await phase(COMPILE_HIT_S)
        log.info("backends.py:241",
                 f"Directly load the compiled graph(s) for compile range {compile_range} from the cache, took {COMPILE_HIT_S * 0.31:.3f} s")
    else:
        plan.cache_dir.mkdir(parents=True, exist_ok=True)
        total += await phase(COMPILE_MISS_S)
        log.info("backends.py:258", f"Compiling a graph for compile range {compile_range} takes {COMPILE_MISS_S * 0.93:.2f} s")
        # The marker goes down only after the compile finished: a killed miss boot stays a miss.
        atomic_write(plan.marker, dumps_json({"hash": plan.hash, "compile_s": COMPILE_MISS_S}))
    compile_s = COMPILE_HIT_S if plan.hit else COMPILE_MISS_S
    log.info("monitor.py:34", f"torch.compile took {compile_s:.2f} s in total")
    profile_s = PROFILE_HIT_S if plan.hit else PROFILE_MISS_S
    total += await phase(profile_s)
    kv_gib = args.kv_pool_tokens * KV_BYTES_PER_TOKEN / 2**30
    log.info("gpu_worker.py:298", f"Available KV cache memory: {kv_gib:.2f} GiB")
    concurrency = args.kv_pool_tokens / args.max_model_len
    log.info("kv_cache_utils.py:1087",
             f"GPU KV cache size: {args.kv_pool_tokens:,} tokens, Maximum concurrency for "
             f"{args.max_model_len:,} tokens per request: {concurrency:.2f}x")
    capture_s = CAPTURE_S_PER_SIZE * len(plan.capture_sizes)
    total += await phase(capture_s)
    log.info("gpu_model_runner.py:3432",
             f"Graph capturing finished in {round(capture_s)} secs, took {0.04 * len(plan.capture_sizes):.2f} GiB")
    total += await phase(INIT_REST_S)
    log.info("core.py:211", f"init engine (profile, create kv cache, warmup model) took {profile_s + capture_s + INIT_REST_S:.2f} seconds")
    return total
