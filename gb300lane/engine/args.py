"""`serve` and `sidecar` command lines, parsed the way `vllm serve` would take them.

The flags the embedded engine models are parsed and validated (errors name the
flag and the fix, and come before anything binds); every other `--flag
[value]` is accepted and reported as ignored, never fatal, because a recipe
renders the full `vllm serve` command line for both engines.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any, Literal

import yaml
from pydantic import Field

from gb300lane.engine.config import SpecConfig, parse_spec_config
from gb300lane.engine.core import NUMERICS_JITTER
from gb300lane.engine.faults import FAULT_ENV, parse_faults
from gb300lane.engine.logprobs import LOGPROBS_MODES, MAX_LOGPROBS
from gb300lane.errors import EngineError
from gb300lane.models import FrozenModel

DEFAULT_KV_POOL_TOKENS = 4_400_013
DEFAULT_MAX_MODEL_LEN = 131_072
#: Wall seconds per modelled second at most: a hash-hit boot (about 528 modelled s) then takes
#: under 15 hours; anything slower is a typo, not a pace.
MAX_TIME_SCALE = 100.0


class EngineArgs(FrozenModel):
    """The resolved `serve` arguments."""

    model: str = Field(description="Model to serve; the embedded engine serves `builtin`.")
    served_model_name: str = Field(description="Name the API reports and metrics label.")
    host: str = Field(description="Bind address.")
    port: int = Field(description="Bind port.")
    spec: SpecConfig | None = Field(description="Resolved speculative config (None: no drafting).")
    spec_text: str | None = Field(description="The --speculative-config value as given.")
    max_num_seqs: int = Field(description="Largest running batch.")
    max_model_len: int = Field(description="Prompt plus output tokens per request.")
    seed: int = Field(description="Engine seed for requests without their own.")
    time_scale: float = Field(description="Wall seconds per modelled second (0: as fast as possible).")
    boot_seed: int | None = Field(
        default=None, description="Seed of this boot's numerics (None: drawn fresh at start, as a real boot's are)."
    )
    numerics_jitter: float = Field(
        default=NUMERICS_JITTER,
        description="Relative jitter of the target's numerics between boots (0: bit-identical).",
    )
    kv_pool_tokens: int = Field(description="KV cache pool size in tokens.")
    faults: str = Field(
        default="",
        description="Deliberate verifier faults, as --fault takes them ('' for none: an exact engine; see faults.py).",
    )
    logprobs_mode: Literal["raw_logprobs", "processed_logprobs"] = Field(
        default="raw_logprobs", description="What logprobs report: the target's raw distribution, or the sampled one."
    )
    max_logprobs: int = Field(
        default=MAX_LOGPROBS, description="The most logprobs or prompt_logprobs a request may ask for."
    )
    compilation_config: dict[str, Any] = Field(description="--compilation-config as a dict.")
    per_request_spec_decode_metrics: Literal["none", "summary", "detailed"] = Field(description="Per-response metrics.")
    expert_sidecar_url: str | None = Field(description="Expert sidecar base URL, or None.")
    enable_auto_tool_choice: bool = Field(default=False, description="Parse tool calls from `auto` answers.")
    tool_call_parser: str | None = Field(
        default=None,
        description="vLLM's tool-call parser name; the builtin model's calls read with the engine's parser.",
    )
    dtype: str = Field(description="Model dtype (hashed, not modelled).")
    tensor_parallel_size: int = Field(description="Tensor parallel size (hashed, not modelled).")
    data_parallel_size: int = Field(
        default=1,
        description="Data parallel size: above 1 the k schedule is dropped, as "
        "vLLM drops it (modelled for that alone).",
    )
    gpu_memory_utilization: float = Field(description="Fraction of GPU memory (logged, not modelled).")
    non_default: dict[str, Any] = Field(description="Flags given on the command line, as vLLM logs them.")
    ignored: tuple[str, ...] = Field(description="Flags accepted but not modelled, as given.")
    warnings: tuple[str, ...] = Field(description="Warnings to log at start.")


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        add_help=True,
        allow_abbrev=False,
        description="Serve the builtin model with vLLM's API (the embedded lane engine).",
    )
    p.add_argument("model_tag", nargs="?", default=None, help="model (positional form of --model)")
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", default="8000")
    p.add_argument("--speculative-config", default=None)
    p.add_argument("--max-num-seqs", default="32")
    p.add_argument("--max-model-len", default=str(DEFAULT_MAX_MODEL_LEN))
    p.add_argument("--seed", default="0")
    p.add_argument("--time-scale", default="0")
    p.add_argument("--kv-pool-tokens", default=str(DEFAULT_KV_POOL_TOKENS))
    p.add_argument("--compilation-config", "-O", default=None)
    p.add_argument("--per-request-spec-decode-metrics", default="none")
    p.add_argument("--expert-sidecar-url", default=None)
    p.add_argument("--enable-auto-tool-choice", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--tensor-parallel-size", "-tp", default="1")
    p.add_argument("--gpu-memory-utilization", default="0.9")
    p.add_argument("--data-parallel-size", "-dp", default="1")
    # Engine-only: the run-to-run variance of a real lane (see core.py); env vars let a recipe set them.
    p.add_argument("--boot-seed", default=os.environ.get("GB300LANE_BOOT_SEED") or None)
    p.add_argument("--numerics-jitter", default=os.environ.get("GB300LANE_NUMERICS_JITTER") or str(NUMERICS_JITTER))
    # Engine-only: a deliberately lossy verifier, for testing losslessness checks (faults.py).
    p.add_argument(
        "--fault",
        action="append",
        default=None,
        metavar="NAME[=VALUE]",
        help="make the verifier lossy on purpose, for testing losslessness checks (accept_bias=X, "
        "position_bias=I:X, temperature=T, top_p_ignored_in_verify, draft_temperature_only; "
        f"default: ${FAULT_ENV}, else none)",
    )
    p.add_argument(
        "--logprobs-mode",
        default="raw_logprobs",
        help="what logprobs report: raw_logprobs (the target's distribution, vLLM's default) or "
        "processed_logprobs (the distribution sampled from)",
    )
    p.add_argument(
        "--max-logprobs",
        default=str(MAX_LOGPROBS),
        help="the most logprobs or prompt_logprobs a request may ask for (vLLM's default 20)",
    )
    return p


def defaults_of(prog: str) -> dict[str, object]:
    return vars(_parser(prog).parse_args([]))


_VALUE_FLAGS = {
    "--model",
    "--host",
    "--port",
    "--speculative-config",
    "--max-num-seqs",
    "--max-model-len",
    "--seed",
    "--time-scale",
    "--kv-pool-tokens",
    "--compilation-config",
    "-O",
    "--per-request-spec-decode-metrics",
    "--expert-sidecar-url",
    "--dtype",
    "--tensor-parallel-size",
    "-tp",
    "--gpu-memory-utilization",
    "--boot-seed",
    "--numerics-jitter",
    "--tool-call-parser",
    "--data-parallel-size",
    "-dp",
    "--fault",
    "--logprobs-mode",
    "--max-logprobs",
}
_BOOL_FLAGS = {"--enable-auto-tool-choice", "--no-enable-auto-tool-choice"}


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
        return False  # a negative number is a value
    except ValueError:
        return True


def split_known(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate the modelled flags from the rest; the rest keep their values (`--x v`, `--x=v`, `--x`)."""
    known: list[str] = []
    ignored: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        if tok in ("-h", "--help") or tok in _BOOL_FLAGS:
            known.append(tok)
            i += 1
        elif name in _VALUE_FLAGS or name == "--served-model-name":
            known.append(tok)
            i += 1
            if "=" not in tok:
                while i < len(argv) and not _is_flag(argv[i]):
                    known.append(argv[i])
                    i += 1
                    if name != "--served-model-name":
                        break
        elif _is_flag(tok):
            i += 1
            if "=" not in tok and i < len(argv) and not _is_flag(argv[i]):
                ignored.append(f"{tok} {argv[i]}")
                i += 1
            else:
                ignored.append(tok)
        else:
            known.append(tok)
            i += 1
    return known, ignored


def _int(flag: str, value: str, minimum: int, fix: str = "") -> int:
    try:
        out = int(str(value).replace("_", ""))
    except ValueError as exc:
        raise EngineError(f"{flag} {value!r}: not an integer; pass a whole number{fix}") from exc
    if out < minimum:
        raise EngineError(f"{flag} {out}: must be >= {minimum}{fix}")
    return out


def _float(flag: str, value: str, minimum: float, maximum: float = math.inf) -> float:
    try:
        out = float(value)
    except ValueError as exc:
        raise EngineError(f"{flag} {value!r}: not a number") from exc
    if not math.isfinite(out):
        raise EngineError(f"{flag} {value}: must be a finite number")
    if not out >= minimum:
        raise EngineError(f"{flag} {out}: must be >= {minimum}")
    if out > maximum:
        raise EngineError(f"{flag} {out}: must be <= {maximum:g}")
    return out


def _compilation(value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    text = value.strip()
    if text.isdigit():
        return {"level": int(text)}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EngineError(f"--compilation-config: not valid JSON ({exc}); pass a JSON object or an -O level") from exc
    if not isinstance(raw, dict):
        raise EngineError(
            "--compilation-config: must be a JSON object such as '{\"cudagraph_capture_sizes\": [1, 2, 4]}'"
        )
    sizes = raw.get("cudagraph_capture_sizes")
    if sizes is not None and (
        not isinstance(sizes, list)
        or not sizes
        or any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in sizes)
    ):
        raise EngineError(
            f"--compilation-config: cudagraph_capture_sizes = {sizes!r}; must be a list of positive integers"
        )
    return raw


def _config_flags(key: str, value: Any) -> list[str]:
    """One `--config` entry as command-line tokens, the way `vllm serve --config` reads it."""
    flag = "--" + str(key)
    if value is None:
        return []
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + str(key)]
    if isinstance(value, list):
        return [flag, *(str(v) for v in value)] if value else []
    if isinstance(value, dict):
        return [flag, json.dumps(value, separators=(",", ":"))]
    return [flag, str(value)]


def expand_config_file(argv: list[str]) -> list[str]:
    """Replace `--config FILE` with the flags the YAML file holds, as `vllm serve --config` does.

    Keys are long flag names (`speculative-config: '{...}'`). The command line
    wins over the file: a flag given on both is taken from the command line,
    and a positional model replaces the file's `model`. Kubernetes manifests
    use this to keep the speculative config in a ConfigMap.
    """
    at = [i for i, tok in enumerate(argv) if tok == "--config" or tok.startswith("--config=")]
    if not at:
        return argv
    if len(at) > 1:
        raise EngineError("--config given more than once; pass one config file")
    i = at[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise EngineError("--config needs a file; pass --config /path/to/serve.yaml")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2 :]
    else:
        path, rest = argv[i].split("=", 1)[1], argv[:i] + argv[i + 1 :]
    fix = 'pass a YAML file of `long-flag-name: value` pairs, e.g. speculative-config: \'{"method": "dspark"}\''
    if not path.endswith((".yaml", ".yml")):
        raise EngineError(f"--config {path}: not a .yaml or .yml file; {fix}")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise EngineError(
            f"--config {path}: cannot be read ({exc.strerror or exc}); mount the file or fix the path"
        ) from exc
    except yaml.YAMLError as exc:
        raise EngineError(f"--config {path}: not valid YAML ({exc}); {fix}") from exc
    if data is None:
        return rest
    if not isinstance(data, dict):
        raise EngineError(f"--config {path}: the file holds a {type(data).__name__}, not a mapping; {fix}")
    # Flags the command line gives are dropped from the file's, so the order
    # below decides nothing; the file's go last so a positional model stays first.
    given = {tok.split("=", 1)[0] for tok in rest if tok.startswith("--")}
    if rest and not _is_flag(rest[0]):
        given.add("--model")
    from_file: list[str] = []
    for key, value in data.items():
        if "--" + str(key) not in given:
            from_file.extend(_config_flags(str(key), value))
    return rest + from_file


def parse_serve_args(argv: list[str], prog: str = "gb300lane engine serve") -> EngineArgs:
    """Parse and validate a `serve` command line; raises EngineError naming the flag and the fix."""
    known, ignored = split_known(expand_config_file(list(argv)))
    parser = _parser(prog)
    ns, extra = parser.parse_known_args(known)
    if extra:
        ignored.extend(extra)
    model = ns.model or ns.model_tag or "builtin"
    if ns.model and ns.model_tag and ns.model != ns.model_tag:
        raise EngineError(f"model given twice ({ns.model_tag!r} and --model {ns.model!r}); pass one")
    if model != "builtin":
        raise EngineError(f"--model {model!r}: the embedded engine serves only the builtin model; pass --model builtin")
    spec, warnings = parse_spec_config(ns.speculative_config)
    port = _int("--port", ns.port, 1)
    if port > 65535:
        raise EngineError(f"--port {port}: must be <= 65535")
    max_model_len = _int("--max-model-len", ns.max_model_len, 16)
    kv_pool = _int("--kv-pool-tokens", ns.kv_pool_tokens, 1)
    if kv_pool < max_model_len:
        raise EngineError(
            f"--kv-pool-tokens {kv_pool:,} cannot hold one request of --max-model-len {max_model_len:,}; "
            "raise --kv-pool-tokens or lower --max-model-len"
        )
    metrics_mode = ns.per_request_spec_decode_metrics
    if metrics_mode not in ("none", "summary", "detailed"):
        raise EngineError(f"--per-request-spec-decode-metrics {metrics_mode!r}: use none, summary or detailed")
    sidecar = ns.expert_sidecar_url or os.environ.get("EXPERT_SIDECAR_URL") or None
    if sidecar and not sidecar.startswith(("http://", "https://")):
        raise EngineError(
            f"expert sidecar URL {sidecar!r} (--expert-sidecar-url or EXPERT_SIDECAR_URL): "
            "must start with http:// such as http://127.0.0.1:30107"
        )
    given = {key for key, value in vars(ns).items() if value != defaults_of(prog).get(key)}
    max_num_seqs = _int("--max-num-seqs", ns.max_num_seqs, 1)
    seed = _int("--seed", ns.seed, 0)
    time_scale = _float("--time-scale", ns.time_scale, 0.0, MAX_TIME_SCALE)
    boot_seed = None if ns.boot_seed is None else _int("--boot-seed (or GB300LANE_BOOT_SEED)", ns.boot_seed, 0)
    jitter = _float("--numerics-jitter (or GB300LANE_NUMERICS_JITTER)", ns.numerics_jitter, 0.0)
    if not jitter <= 1.0:
        raise EngineError(f"--numerics-jitter {jitter}: must lie in [0, 1]; 0 makes boots bit-identical")
    compilation = _compilation(ns.compilation_config)
    fault_specs = ns.fault if ns.fault is not None else [os.environ.get(FAULT_ENV, "")]
    faults = parse_faults(fault_specs)
    if ns.logprobs_mode not in LOGPROBS_MODES:
        raise EngineError(
            f"--logprobs-mode {ns.logprobs_mode!r}: the embedded engine computes "
            f"{' or '.join(LOGPROBS_MODES)}; pass one of them"
        )
    max_logprobs = _int("--max-logprobs", ns.max_logprobs, 0)
    parser_name = ns.tool_call_parser or None
    if ns.enable_auto_tool_choice and not parser_name:
        raise EngineError(
            "--enable-auto-tool-choice requires --tool-call-parser; pass the lane's parser name "
            "(the builtin model's calls are read with the engine's own parser whatever the name)"
        )
    tp = _int("--tensor-parallel-size", ns.tensor_parallel_size, 1)
    dp = _int("--data-parallel-size", ns.data_parallel_size, 1)
    if dp > 1 and spec is not None and spec.num_speculative_tokens_per_batch_size:
        # vLLM's VllmConfig does the same (`vllm/config/vllm.py`): ranks could pick different k and deadlock.
        warnings.append(
            "Dynamic speculative decoding is not supported with data parallelism because data-parallel ranks can "
            "select different speculative-token counts, causing DP divergence and deadlocks. Disabling "
            "num_speculative_tokens_per_batch_size and falling back to static "
            f"num_speculative_tokens={spec.num_speculative_tokens}."
        )
        spec = spec.model_copy(update={"num_speculative_tokens_per_batch_size": None})
    gpu_util = _float("--gpu-memory-utilization", ns.gpu_memory_utilization, 0.0)
    typed = {
        "model_tag": ns.model_tag,
        "model": model,
        "served_model_name": ns.served_model_name,
        "host": ns.host,
        "port": port,
        "speculative_config": spec.as_log_dict() if spec else None,
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "seed": seed,
        "time_scale": time_scale,
        "kv_pool_tokens": kv_pool,
        "compilation_config": compilation,
        "per_request_spec_decode_metrics": metrics_mode,
        "expert_sidecar_url": ns.expert_sidecar_url,
        "dtype": ns.dtype,
        "tensor_parallel_size": tp,
        "gpu_memory_utilization": gpu_util,
        "enable_auto_tool_choice": ns.enable_auto_tool_choice,
        "data_parallel_size": dp,
        "tool_call_parser": parser_name,
        "fault": faults.describe() if faults else None,
        "logprobs_mode": ns.logprobs_mode,
        "max_logprobs": max_logprobs,
    }
    non_default = {key: typed[key] for key in typed if key in given}
    return EngineArgs(
        model=model,
        served_model_name=(ns.served_model_name or [model])[0],
        host=ns.host,
        port=port,
        spec=spec,
        spec_text=ns.speculative_config,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        seed=seed,
        time_scale=time_scale,
        boot_seed=boot_seed,
        numerics_jitter=jitter,
        kv_pool_tokens=kv_pool,
        faults=faults.describe() if faults else "",
        logprobs_mode=ns.logprobs_mode,
        max_logprobs=max_logprobs,
        compilation_config=compilation,
        per_request_spec_decode_metrics=metrics_mode,
        expert_sidecar_url=sidecar.rstrip("/") if sidecar else None,
        enable_auto_tool_choice=bool(ns.enable_auto_tool_choice),
        tool_call_parser=parser_name,
        dtype=ns.dtype,
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        gpu_memory_utilization=gpu_util,
        non_default=non_default,
        ignored=tuple(ignored),
        warnings=tuple(warnings),
    )


def parse_sidecar_args(argv: list[str], prog: str = "gb300lane engine sidecar") -> tuple[str, int, list[str]]:
    """`sidecar --host H --port P`; other flags are accepted and reported as ignored."""
    p = argparse.ArgumentParser(prog=prog, description="Serve the expert-sidecar stand-in (routed-expert lookups).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", default="30107")
    ns, extra = p.parse_known_args(argv)
    port = _int("--port", ns.port, 1)
    if port > 65535:
        raise EngineError(f"--port {port}: must be <= 65535")
    return ns.host, port, list(extra)
