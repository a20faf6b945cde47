"""The engine's configuration: the speculative config, the k schedule, the compile hash.

Parses `--speculative-config` as vLLM 0.33 does for the parts the embedded
engine models (method, k, the per-batch-size schedule, draft and rejection
sampling, `dspark_draft_topk`) and refuses, with the key and the fix, what it
cannot serve. The compile hash covers only the compute-relevant inputs vLLM
hashes, so a flag outside them (k, the rejection method, the schedule) boots
as a hit when the capture sizes are pinned.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, JsonValue

from gb300lane.engine.model import DSPARK_BLOCK_SIZE, MTP_STAGES, TOPK_MAX, VOCAB_SIZE
from gb300lane.errors import EngineError
from gb300lane.fsio import sha256_bytes
from gb300lane.models import FrozenModel

SUPPORTED_METHODS = ("dspark", "mtp")
MTP_ALIASES = ("deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp", "longcat_flash_mtp")
VLLM_METHODS = (
    "ngram",
    "draft_model",
    "suffix",
    "custom_class",
    "ngram_gpu",
    "eagle",
    "eagle3",
    "extract_hidden_states",
    "dflash",
    "dspark",
    "mtp",
)
AUX_HIDDEN_STATE_METHODS = ("eagle3", "extract_hidden_states", "dflash", "dspark")
#: vLLM speculative-config keys the embedded engine accepts but does not model.
UNMODELLED_KEYS = (
    "model",
    "draft_tensor_parallel_size",
    "quantization",
    "max_model_len",
    "revision",
    "code_revision",
    "disable_by_batch_size",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "parallel_drafting",
    "speculative_token_tree",
    "disable_padded_drafter_batch",
    "disable_logprobs",
    "draft_model_config",
    "disable_log_stats",
    "suffix_decoding_max_tree_depth",
    "enforce_eager",
)
DEFAULT_DRAFT_TOPK = 32
#: The k schedule's new name (vLLM's open rename of num_speculative_tokens_per_batch_size); both are accepted.
SCHEDULE_NEW_NAME = "speculative_token_schedule"
#: The most drafts per step the engine serves: a step holds (max_num_seqs, k, vocab) draft rows,
#: and past the trained block every slot is extrapolated, so a larger k buys nothing but memory.
MAX_SPECULATIVE_TOKENS = 64
#: The builtin checkpoint's draft config, hashed as vLLM hashes the draft model config.
DRAFT_CHECKPOINT = {"mtp_stages": MTP_STAGES, "dspark_block_size": DSPARK_BLOCK_SIZE, "vocab_size": VOCAB_SIZE}


class SpecConfig(FrozenModel):
    """The resolved speculative config the engine serves."""

    method: Literal["dspark", "mtp"] = Field(description="Drafting method.")
    num_speculative_tokens: int = Field(description="k: drafts per verify step (upper bound under a schedule).")
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = Field(
        default=None, description="Inclusive [start, end, k] batch-size ranges, k clamped to num_speculative_tokens."
    )
    draft_sample_method: Literal["greedy", "probabilistic"] = Field(default="greedy", description="Draft sampling.")
    rejection_sample_method: Literal["standard", "block"] = Field(default="standard", description="Verify rule.")
    dspark_draft_topk: int = Field(default=DEFAULT_DRAFT_TOPK, description="Candidates scored per draft slot.")
    enable_adaptive_verification: bool = Field(default=False, description="DSpark adaptive verification flag.")
    ignored_keys: tuple[str, ...] = Field(default=(), description="vLLM keys accepted but not modelled.")

    def k_for_batch(self, batch_size: int) -> int:
        """The k the schedule gives a step of `batch_size` running sequences."""
        if self.num_speculative_tokens_per_batch_size:
            for start, end, k in self.num_speculative_tokens_per_batch_size:
                if start <= batch_size <= end:
                    return min(k, self.num_speculative_tokens)
        return self.num_speculative_tokens

    def as_log_dict(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json", exclude={"ignored_keys"})


def _bad(key: str, found: Any, fix: str) -> EngineError:
    return EngineError(f"--speculative-config: {key} = {found!r}; {fix}")


def parse_spec_config(text: str | None) -> tuple[SpecConfig | None, list[str]]:
    """Parse and validate `--speculative-config`; returns the config and warnings to log."""
    if text is None or not text.strip():
        return None, []
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EngineError(
            f"--speculative-config: not valid JSON ({exc}); pass a JSON object such as "
            '\'{"method": "dspark", "num_speculative_tokens": 5}\''
        ) from exc
    if not isinstance(raw, dict):
        raise _bad("(whole value)", raw, "pass a JSON object")
    warnings: list[str] = []
    raw = dict(raw)
    method = raw.pop("method", None)
    if method in MTP_ALIASES:
        warnings.append(f"method `{method}` is deprecated and replaced with mtp.")
        method = "mtp"
    if method is None:
        raise _bad("method", None, "set method to dspark (the builtin checkpoint's drafter) or mtp")
    if method not in SUPPORTED_METHODS:
        known = "a vLLM method" if method in VLLM_METHODS else "not a vLLM method"
        raise _bad("method", method, f"{known} the embedded engine does not model; use dspark or mtp")
    k = raw.pop("num_speculative_tokens", DSPARK_BLOCK_SIZE if method == "dspark" else None)
    if k is None:
        raise _bad("num_speculative_tokens", None, "set an integer > 0 (mtp has no default)")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise _bad("num_speculative_tokens", k, "must be an integer > 0")
    if k > MAX_SPECULATIVE_TOKENS:
        raise _bad(
            "num_speculative_tokens",
            k,
            f"the embedded engine drafts at most {MAX_SPECULATIVE_TOKENS} tokens per step; pass a smaller k",
        )
    old_name = raw.pop("num_speculative_tokens_per_batch_size", None)
    new_name = raw.pop(SCHEDULE_NEW_NAME, None)
    if old_name is not None and new_name is not None:
        raise _bad(
            SCHEDULE_NEW_NAME,
            new_name,
            "the same schedule as num_speculative_tokens_per_batch_size under "
            "its new name; give it once, under one name",
        )
    schedule = _parse_schedule(old_name if new_name is None else new_name, k, warnings)
    draft = raw.pop("draft_sample_method", "greedy")
    if draft not in ("greedy", "probabilistic"):
        raise _bad("draft_sample_method", draft, "use greedy or probabilistic")
    rejection = raw.pop("rejection_sample_method", "standard")
    if rejection not in ("standard", "block"):
        hint = (
            "a lossy or synthetic vLLM rule the embedded engine does not model"
            if rejection in ("synthetic", "fly")
            else "unknown"
        )
        raise _bad("rejection_sample_method", rejection, f"{hint}; use standard or block")
    topk = raw.pop("dspark_draft_topk", None)
    if topk is not None and method != "dspark":
        raise _bad("dspark_draft_topk", topk, "only valid with method dspark; remove it")
    if topk is None:
        topk = DEFAULT_DRAFT_TOPK
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= TOPK_MAX:
        raise _bad("dspark_draft_topk", topk, f"must be an integer in [1, {TOPK_MAX}] on the builtin checkpoint")
    adaptive = raw.pop("enable_adaptive_verification", False)
    if not isinstance(adaptive, bool):
        raise _bad("enable_adaptive_verification", adaptive, "must be true or false")
    ignored = []
    for key in sorted(raw):
        if key not in UNMODELLED_KEYS:
            raise _bad(key, raw[key], "not a speculative-config key; remove it (check the spelling)")
        ignored.append(key)
        warnings.append(f"speculative config key {key} is accepted but ignored by the embedded engine")
    if method == "dspark" and k > DSPARK_BLOCK_SIZE:
        warnings.append(
            f"num_speculative_tokens={k} exceeds the draft checkpoint's dspark_block_size={DSPARK_BLOCK_SIZE}; "
            "slots past the trained block are extrapolated"
        )
    return SpecConfig(
        method=method,
        num_speculative_tokens=k,
        num_speculative_tokens_per_batch_size=schedule,
        draft_sample_method=draft,
        rejection_sample_method=rejection,
        dspark_draft_topk=topk,
        enable_adaptive_verification=adaptive,
        ignored_keys=tuple(ignored),
    ), warnings


def _parse_schedule(value: Any, k: int, warnings: list[str]) -> tuple[tuple[int, int, int], ...] | None:
    key = "num_speculative_tokens_per_batch_size"
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise _bad(key, value, "must be a non-empty list of [range_start, range_end, k]")
    out = []
    prev_end = 0
    for i, item in enumerate(value):
        if (
            not isinstance(item, list)
            or len(item) != 3
            or any(isinstance(x, bool) or not isinstance(x, int) for x in item)
        ):
            raise _bad(f"{key}[{i}]", item, "each entry must be [range_start, range_end, k] integers")
        start, end, kk = item
        if start <= 0:
            raise _bad(f"{key}[{i}]", item, "range_start must be positive")
        if start > end:
            raise _bad(f"{key}[{i}]", item, "range_start must be <= range_end")
        if i == 0 and start != 1:
            raise _bad(f"{key}[0]", item, "the first range must start at 1")
        if start <= prev_end:
            raise _bad(f"{key}[{i}]", item, "ranges must be sorted and must not overlap")
        if kk < 0:
            raise _bad(f"{key}[{i}]", item, "k must be >= 0")
        if kk > k:
            warnings.append(f"{key}[{i}]: k={kk} clamped to num_speculative_tokens={k}")
            kk = k
        out.append((start, end, kk))
        prev_end = end
    return tuple(out)


def default_capture_sizes(max_num_seqs: int, k: int) -> list[int]:
    """vLLM's default cudagraph capture list: 1, 2, 4, then multiples of 8 up to max_num_seqs * (1 + k), capped at 512."""
    top = min(max_num_seqs * (1 + k), 512)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, top + 1, 8))
    return sizes or [1]


def compile_hash(
    *,
    model: str,
    spec: SpecConfig | None,
    compilation_config: dict[str, Any],
    max_num_seqs: int,
    max_model_len: int,
    dtype: str,
    tensor_parallel_size: int,
) -> tuple[str, list[int]]:
    """The torch.compile cache hash (10 hex chars, as vLLM's directory names) and the capture sizes."""
    k = spec.num_speculative_tokens if spec else 0
    sizes = compilation_config.get("cudagraph_capture_sizes")
    if sizes is None:
        sizes = default_capture_sizes(max_num_seqs, k)
    spec_part = None
    if spec is not None:
        spec_part = {
            "method": spec.method,
            "uses_aux_hidden_states": spec.method in AUX_HIDDEN_STATE_METHODS,
            "draft_model_config": sha256_bytes(json.dumps(DRAFT_CHECKPOINT, sort_keys=True))[:16],
            "enable_adaptive_verification": spec.enable_adaptive_verification if spec.method == "dspark" else None,
        }
    resolved = dict(compilation_config)
    resolved["cudagraph_capture_sizes"] = sorted(int(s) for s in sizes)
    payload = {
        "model": model,
        "speculative": spec_part,
        "compilation_config": resolved,
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "dtype": dtype,
        "tensor_parallel_size": tensor_parallel_size,
    }
    return sha256_bytes(json.dumps(payload, sort_keys=True, default=str))[:10], resolved["cudagraph_capture_sizes"]
