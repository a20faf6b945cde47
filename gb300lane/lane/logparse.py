"""Boot facts read from vLLM's log lines (0.33 on the box, 0.32 on the CPU lane): a pure `parse(text)` fed
recorded logs in tests.

Only the lines named in the vLLM reference are read: the compile-cache
directory (which carries the compile hash), the hit and miss lines (hit or miss
is decided here, from the log, never from timing), the KV cache size (the
one-line 0.33 form, the older two-line form, and the CPU build's `CPU KV cache
size:`), graph capture and the server start lines.

AOT compilation (the CPU build's path) names each compiled module by a tag
(`[backbone]`, `[draft_model]`) and a path
`<root>/torch_compile_cache/torch_aot_compile/<hash>/rank_<r>_<dp>/model`.
Three outcomes per module, as `vllm/compilation/decorators.py` logs them:
`Directly load AOT compilation from path P` (a hit), `saved AOT compiled
function to P` without a load before it (a miss: compiled and saved), and
`Compiling model again due to a load failure from P, reason: ...` (a reload:
the hash was found, its artifact did not load, the module was compiled again;
neither a hit nor a plain miss, and named as such). The model runner the
engine chose is read too (`Using V2 Model Runner`, or `... using the V1 model
runner instead.` with its reason), because some features exist in one runner
only. Logger prefixes (`(APIServer pid=1) INFO 10-26 04:08:11 [x.py:12]`)
are ignored because every pattern is searched, not anchored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field

from gb300lane.models import FrozenModel

_CACHE_DIR = re.compile(r"Using cache directory: (?P<dir>\S+?)/? for vLLM's torch\.compile")
_HASH_IN_DIR = re.compile(r"^(?P<root>.*)/torch_compile_cache/(?P<hash>[^/]+)(?:/|$)")
_HIT_GRAPH = re.compile(
    r"Directly load the compiled graph\(s\) for compile range (?P<range>.+?) from the cache, took (?P<s>[\d.]+) s"
)
_HIT_AOT = re.compile(r"Directly load AOT compilation from path (?P<path>\S+)")
_MISS = re.compile(r"Compiling a graph for compile range (?P<range>.+?) takes (?P<s>[\d.]+) s")
_COMPILE_TOTAL = re.compile(r"torch\.compile took (?P<s>[\d.]+) s in total")
_KV_MEM = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
_KV_SIZE = re.compile(r"(?P<device>GPU|CPU) KV cache size: (?P<tokens>[\d,]+) tokens")
_AOT_PATH = re.compile(r"^(?P<root>.*)/torch_compile_cache/torch_aot_compile/(?P<hash>[^/]+)/")
_TAG = r"(?:\[(?P<tag>[^\]\s]+)\] )?"
_AOT_LOAD = re.compile(_TAG + r"Directly load AOT compilation from path (?P<path>\S+)")
_AOT_SAVED = re.compile(_TAG + r"saved AOT compiled function to (?P<path>\S+)")
_AOT_RELOAD = re.compile(
    _TAG + r"Compiling model again due to a load failure from (?P<path>\S+?),? reason: (?P<reason>.*)$"
)
_RUNNER_V2 = re.compile(r"Using V2 Model Runner")
_RUNNER_V1 = re.compile(
    r"(?P<why>Model Runner V2 (?:requires|does not yet support) .*?);? using the V1 model runner instead"
)
_MAX_CONC = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
_GRAPH = re.compile(r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<gib>[\d.]+) GiB")
_SERVER = re.compile(r"Starting vLLM (?:API )?server on (?P<url>https?://\S+)")
_WEIGHTS = re.compile(r"Loading weights took (?P<s>[\d.]+) s(?:econds)?")
_INIT_ENGINE = re.compile(r"init engine \(.*?\) took (?P<s>[\d.]+) s(?:econds)?")
_READY = "Application startup complete."
_FACTORS = re.compile(
    r"(?:\[(?P<tag>[A-Za-z_]+)\] )?torch\.compile cache factors: env=(?P<env>\S+) cfg=(?P<cfg>\S+) comp=(?P<comp>\S+) "
    r"code=(?P<code>\S+)(?: dir=(?P<dir>\S+))?"
)
_FORCED = re.compile(r"VLLM_FORCE_AOT_LOAD=1: failed to load the compiled model from (?P<path>\S+?): (?P<reason>.*)$")
#: vLLM re-raises a failed AOT load under VLLM_FORCE_AOT_LOAD=1 (`raise e` in _try_load_aot_compiled_fn): the
#: traceback's exception line is the reason.
_FORCED_FRAME = "in _try_load_aot_compiled_fn"
_EXC_LINE = re.compile(r"(?P<exc>[A-Za-z_.]*(?:Error|Exception)): (?P<msg>.+)$")
_TACTICS = re.compile(r"Autotune (?:finished: saved|cache hit: loaded) (?P<n>\d+) tactics (?:to|from) (?P<path>\S+)")
_DP_DROP = re.compile(
    r"Disabling num_speculative_tokens_per_batch_size and falling back to static "
    r"num_speculative_tokens=(?P<k>\d+)"
)

AutotuneOutcome = Literal["hit", "miss", "reload", "unknown"]


class CompileUnit(FrozenModel):
    """One AOT-compiled module of a boot (`[backbone]`, `[draft_model]`) and what its cache did."""

    tag: str = Field(description="The module's log tag (backbone, draft_model); `model` when the line has none.")
    outcome: Literal["hit", "miss", "reload"] = Field(
        description="hit: loaded; miss: compiled and saved; reload: found but failed to load, compiled again."
    )
    compile_hash: str | None = Field(description="The hash directory under torch_compile_cache/torch_aot_compile/.")
    path: str = Field(description="The artifact path the log names.")
    reason: str | None = Field(default=None, description="A reload's `reason:` as logged.")


class CacheFactors(FrozenModel):
    """vLLM's compile-cache factors as its debug line logs them (`torch.compile cache factors: ...`)."""

    tag: str = Field(description="The module's log tag (`model` when the line has none).")
    env: str = Field(description="Hash of the compile-relevant environment.")
    cfg: str = Field(description="Hash of the engine config.")
    comp: str = Field(description="Hash of the compiler (torch/inductor; on the embedded engine Python and numpy).")
    code: str = Field(description="Hash of the traced source files.")
    dir: str | None = Field(default=None, description="The local cache directory the line names.")

    def as_dict(self) -> dict[str, str]:
        return {"env": self.env, "cfg": self.cfg, "comp": self.comp, "code": self.code}


class BootLogFacts(FrozenModel):
    """What a boot log says about the boot."""

    cache_dir: str | None = Field(default=None, description="Compile cache directory from `Using cache directory:`.")
    cache_root: str | None = Field(
        default=None, description="The cache root (VLLM_CACHE_ROOT) that directory lies under."
    )
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
    kv_cache_device: str | None = Field(default=None, description="GPU or CPU, as the KV cache size line says.")
    compile_units: tuple[CompileUnit, ...] = Field(default=(), description="AOT-compiled modules, in log order.")
    model_runner: Literal["v1", "v2"] | None = Field(
        default=None, description="The model runner the engine logged it uses; None when the log does not say."
    )
    model_runner_line: str | None = Field(default=None, description="The log line the model runner was read from.")
    cache_factors: tuple[CacheFactors, ...] = Field(
        default=(), description="`torch.compile cache factors` debug lines."
    )
    forced_load_failure: str | None = Field(
        default=None, description="A load that VLLM_FORCE_AOT_LOAD=1 turned into a failed boot: the reason logged."
    )
    tactics_file: str | None = Field(default=None, description="The autotune tactic file the engine saved or loaded.")
    tactics_loaded: bool | None = Field(default=None, description="True: loaded from the cache; False: autotuned now.")
    schedule_dropped: bool = Field(
        default=False,
        description="The engine logged that it disabled the k schedule (data parallel size > 1) and drafts a static k.",
    )

    @property
    def cache_reloads(self) -> int:
        return sum(1 for u in self.compile_units if u.outcome == "reload")

    @property
    def autotune(self) -> AutotuneOutcome:
        """reload if a found hash failed to load; miss if anything compiled; hit if only loads; else unknown."""
        if self.cache_reloads:
            return "reload"
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


def _aot_units(lines: list[str], facts: dict[str, object]) -> list[CompileUnit]:
    """Each AOT-compiled module's outcome: the first line naming its tag decides (a save after a reload is the
    reload's recompile), and its hash and root fill in the boot's when no `Using cache directory` line did."""
    units: dict[str, CompileUnit] = {}
    for line in lines:
        for pattern, outcome in ((_AOT_RELOAD, "reload"), (_AOT_LOAD, "hit"), (_AOT_SAVED, "miss")):
            m = pattern.search(line)
            if m is None:
                continue
            tag = m["tag"] or "model"
            if tag not in units:
                where = _AOT_PATH.match(m["path"])
                units[tag] = CompileUnit(
                    tag=tag, outcome=outcome, path=m["path"],
                    compile_hash=where["hash"] if where else None,
                    reason=m["reason"].strip() if outcome == "reload" else None,
                )  # fmt: skip
                if where and "compile_hash" not in facts:
                    facts["compile_hash"] = where["hash"]
                    facts["cache_root"] = where["root"]
                    facts["cache_dir"] = str(Path(m["path"]).parent)
            break
    return list(units.values())


def parse(text: str) -> BootLogFacts:
    """Read a boot log (one boot's lines; pass only the lines since the last start)."""
    facts: dict[str, object] = {"cache_hits": 0, "cache_misses": 0}
    lines = text.splitlines()
    for line in lines:
        if _RUNNER_V1.search(line):
            facts["model_runner"], facts["model_runner_line"] = "v1", line.strip()
        elif _RUNNER_V2.search(line):
            facts["model_runner"], facts["model_runner_line"] = "v2", line.strip()
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
        elif m := _FACTORS.search(line):
            factors = facts.setdefault("cache_factors", [])
            assert isinstance(factors, list)
            factors.append(
                CacheFactors(
                    tag=m["tag"] or "model", env=m["env"], cfg=m["cfg"], comp=m["comp"], code=m["code"], dir=m["dir"]
                )
            )
        elif m := _FORCED.search(line):
            facts["forced_load_failure"] = m["reason"].strip()
        elif m := _TACTICS.search(line):
            facts["tactics_file"] = m["path"]
            facts["tactics_loaded"] = "cache hit" in line
        elif _DP_DROP.search(line):
            facts["schedule_dropped"] = True
        # The KV size and the concurrency share a line in 0.33 and not before: search both always.
        if m := _KV_SIZE.search(line):
            facts["kv_cache_tokens"] = _num(m["tokens"])
            facts["kv_cache_device"] = m["device"]
        if m := _MAX_CONC.search(line):
            facts["max_concurrency"] = float(m["x"])
    forced = False
    for line in lines:
        if _FORCED_FRAME in line:
            forced = True
        elif forced and "forced_load_failure" not in facts and (m := _EXC_LINE.search(line)):
            facts["forced_load_failure"] = f"{m['exc']}: {m['msg'].strip()}"
    units = _aot_units(lines, facts)
    if units:
        facts["compile_units"] = units
        # An AOT boot's hits and misses are its modules': a reload's recompile is not counted as a plain miss.
        facts["cache_hits"] = sum(1 for u in units if u.outcome == "hit")
        facts["cache_misses"] = sum(1 for u in units if u.outcome == "miss")
    return BootLogFacts.model_validate(facts)
