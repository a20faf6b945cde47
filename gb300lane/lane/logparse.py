"""Boot facts read from vLLM 0.33's log lines: a pure `parse(text)` fed recorded logs in tests.

Only the lines named in the vLLM reference are read: the compile-cache
directory (which carries the compile hash), the hit and miss lines (hit or miss
is decided here, from the log, never from timing), the KV cache size (the
one-line 0.33 form and the older two-line form), graph capture and the server
start lines. Logger prefixes (`(APIServer pid=1) INFO 10-26 04:08:11 [x.py:12]`)
are ignored because every pattern is searched, not anchored.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from gb300lane.models import FrozenModel

_CACHE_DIR = re.compile(r"Using cache directory: (?P<dir>\S+?)/? for vLLM's torch\.compile")
_HASH_IN_DIR = re.compile(r"^(?P<root>.*)/torch_compile_cache/(?P<hash>[^/]+)(?:/|$)")
_HIT_GRAPH = re.compile(r"Directly load the compiled graph\(s\) for compile range (?P<range>.+?) from the cache, took (?P<s>[\d.]+) s")
_HIT_AOT = re.compile(r"Directly load AOT compilation from path (?P<path>\S+)")
_MISS = re.compile(r"Compiling a graph for compile range (?P<range>.+?) takes (?P<s>[\d.]+) s")
_COMPILE_TOTAL = re.compile(r"torch\.compile took (?P<s>[\d.]+) s in total")
_KV_MEM = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
_KV_SIZE = re.compile(r"GPU KV cache size: (?P<tokens>[\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
_GRAPH = re.compile(r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<gib>[\d.]+) GiB")
_SERVER = re.compile(r"Starting vLLM (?:API )?server on (?P<url>https?://\S+)")
_WEIGHTS = re.compile(r"Loading weights took (?P<s>[\d.]+) s(?:econds)?")
_INIT_ENGINE = re.compile(r"init engine \(.*?\) took (?P<s>[\d.]+) s(?:econds)?")
_READY = "Application startup complete."

AutotuneOutcome = Literal["hit", "miss", "unknown"]


class BootLogFacts(FrozenModel):
    """What a boot log says about the boot."""

    cache_dir: str | None = Field(default=None, description="Compile cache directory from `Using cache directory:`.")
    cache_root: str | None = Field(default=None, description="The cache root (VLLM_CACHE_ROOT) that directory lies under.")
    compile_hash: str | None = Field(default=None, description="The hash directory under torch_compile_cache/.")
    cache_hits: int = Field(default=0, description="`Directly load ...` lines (graph or AOT).")
    cache_misses: int = Field(default=0, description="`Compiling a graph ...` lines.")
    compile_seconds: float | None = Field(default=None, description="`torch.compile took <s> s in total`.")
    kv_cache_tokens: int | None = Field(default=None, description="`GPU KV cache size: <n> tokens`.")
    kv_cache_memory_gib: float | None = Field(default=None, description="`Available KV cache memory: <x> GiB`.")
    max_concurrency: float | None = Field(default=None, description="`Maximum concurrency ... : <x>x`.")
    graph_capture_seconds: float | None = Field(default=None, description="`Graph capturing finished in <n> secs`.")
    weights_seconds: float | None = Field(default=None, description="`Loading weights took <s> seconds`.")
    init_engine_seconds: float | None = Field(default=None, description="`init engine (...) took <s> seconds`.")
    server_url: str | None = Field(default=None, description="`Starting vLLM server on <url>`.")
    startup_complete: bool = Field(default=False, description="`Application startup complete.` was logged.")

    @property
    def autotune(self) -> AutotuneOutcome:
        """miss if anything compiled; hit if only loads; unknown if the log says neither."""
        if self.cache_misses:
            return "miss"
        if self.cache_hits:
            return "hit"
        return "unknown"

    @property
    def engine_logged_seconds(self) -> float | None:
        """The engine's own account of its boot: weights + torch.compile + init engine, as logged."""
        parts = [self.weights_seconds, self.compile_seconds, self.init_engine_seconds]
        return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def parse(text: str) -> BootLogFacts:
    """Read a boot log (one boot's lines; pass only the lines since the last start)."""
    facts: dict[str, object] = {"cache_hits": 0, "cache_misses": 0}
    for line in text.splitlines():
        if m := _CACHE_DIR.search(line):
            facts["cache_dir"] = m["dir"]
            if h := _HASH_IN_DIR.match(m["dir"]):
                facts["cache_root"] = h["root"]
                facts["compile_hash"] = h["hash"]
        elif _HIT_GRAPH.search(line) or _HIT_AOT.search(line):
            facts["cache_hits"] = int(facts["cache_hits"]) + 1  # type: ignore[call-overload]
        elif _MISS.search(line):
            facts["cache_misses"] = int(facts["cache_misses"]) + 1  # type: ignore[call-overload]
        elif m := _COMPILE_TOTAL.search(line):
            facts["compile_seconds"] = float(m["s"])
        elif m := _KV_MEM.search(line):
            facts["kv_cache_memory_gib"] = float(m["gib"])
        elif m := _GRAPH.search(line):
            facts["graph_capture_seconds"] = float(m["s"])
        elif m := _SERVER.search(line):
            facts["server_url"] = m["url"]
        elif m := _WEIGHTS.search(line):
            facts["weights_seconds"] = float(m["s"])
        elif m := _INIT_ENGINE.search(line):
            facts["init_engine_seconds"] = float(m["s"])
        elif _READY in line:
            facts["startup_complete"] = True
        # The KV size and the concurrency share a line in 0.33 and not before: search both always.
        if m := _KV_SIZE.search(line):
            facts["kv_cache_tokens"] = _num(m["tokens"])
        if m := _MAX_CONC.search(line):
            facts["max_concurrency"] = float(m["x"])
    return BootLogFacts.model_validate(facts)
