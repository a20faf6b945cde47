"""The environment vLLM's compile-cache key hashes: every `VLLM_*` variable set, but the ones vLLM ignores.

vLLM 0.32/0.33 (`vllm/envs.py` compile_factors) start from every known vLLM variable and drop an ignored
set (where a cache or config lives, logging, timeouts, credentials, the force-load switch); the rest is its
`env` factor. The embedded engine hashes the same selection, and a boot check compares it between boots of a
recipe where vLLM logs no factors (the CPU build's AOT path). One list, here, below both.
"""

from __future__ import annotations

from collections.abc import Mapping

#: `VLLM_*` variables vLLM's compile-cache key leaves out (the part of vLLM's ignored set a lane meets).
IGNORED_ENV_FACTORS = frozenset(
    {
        "VLLM_CACHE_ROOT",
        "VLLM_CONFIG_ROOT",
        "VLLM_PORT",
        "VLLM_HOST_IP",
        "VLLM_RPC_BASE_PATH",
        "VLLM_FORCE_AOT_LOAD",
        "VLLM_API_KEY",
        "VLLM_LOGGING_LEVEL",
        "VLLM_LOGGING_PREFIX",
        "VLLM_LOGGING_STREAM",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_LOGGING_COLOR",
        "VLLM_LOG_STATS_INTERVAL",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "VLLM_USAGE_STATS_SERVER",
        "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
        "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
        "VLLM_DEBUG_LOG_API_SERVER_RESPONSE",
        "VLLM_ENABLE_STARTUP_PLAN",
        "VLLM_XLA_CACHE_PATH",
        "VLLM_DP_MASTER_IP",
        "VLLM_DP_MASTER_PORT",
        "VLLM_SERVER_DEV_MODE",
        "VLLM_TUNED_CONFIG_FOLDER",
        "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
        "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
        "VLLM_IMAGE_FETCH_TIMEOUT",
        "VLLM_VIDEO_FETCH_TIMEOUT",
        "VLLM_AUDIO_FETCH_TIMEOUT",
        "VLLM_MEDIA_CACHE",
        "VLLM_MEDIA_CACHE_MAX_SIZE_MB",
        "VLLM_MODEL_REDIRECT_PATH",
    }
)


def compile_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The compile-relevant environment: every `VLLM_*` variable set, but vLLM's ignored ones, sorted."""
    return {k: environ[k] for k in sorted(environ) if k.startswith("VLLM_") and k not in IGNORED_ENV_FACTORS}
