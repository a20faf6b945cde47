"""The recipe schema: what one lane version declares, as frozen pydantic models.

A recipe file may be partial (it `extends` a parent); these models describe the
resolved recipe after the merge. Engine-specific rules that depend on the vLLM
version the image carries live in `engine_schema`; cross-field rules that are
advice rather than impossibilities live in `lint`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictInt, field_validator, model_validator

from gb300lane.models import FrozenModel
from gb300lane.names import RuntimeName, env_key_problem, image_ref_problem, name_problem
from gb300lane.workloads.content import BUILTIN, BUILTIN_CLASSES, MIXED

#: Most drafts per verify step a recipe may ask for. vLLM sizes its draft buffers and CUDA-graph
#: capture list by 1 + k, and the lane's checkpoints are trained on blocks of 5; the embedded
#: engine drafts at most 32. A k past this is a typo, not an experiment.
MAX_SPECULATIVE_TOKENS = 32
#: Largest embedded-engine pacing factor (1.0 is modelled time; 100x slower is already unusable).
MAX_TIME_SCALE = 100.0
#: Largest KV pool a recipe may declare, in tokens (a GB300 holds a few million).
MAX_KV_POOL_TOKENS = 1_000_000_000

#: Env names that set where a part of the lane listens (or opens a port): the lane's address comes from
#: lane.bind / lane.port and sidecar.port only, so a dark lane's bind check covers everything it opens.
ADDRESS_ENV = frozenset(
    {
        "HOST",
        "PORT",
        "VLLM_HOST_IP",
        "VLLM_PORT",
        "UVICORN_HOST",
        "UVICORN_PORT",
        "VLLM_RPC_BASE_PATH",
        "EXPERT_SIDECAR_HOST",
        "EXPERT_SIDECAR_PORT",
    }
)
#: `vllm serve` flags (extra_args keys, snake_case) that set the address or read other flags from a file.
ADDRESS_FLAGS = frozenset({"host", "port", "uds", "config"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: A GPU id as Docker's `--gpus device=` and CUDA_VISIBLE_DEVICES take it: an index, a GPU UUID or a MIG UUID.
GPU_ID_RE = re.compile(
    r"^(?:[0-9]{1,3}|GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}|MIG-[0-9A-Za-z/-]{1,80})$"
)
#: A Docker named volume (a volume source that is not a path).
VOLUME_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def option_value_problem(value: str) -> str | None:
    """Why `value` cannot be given where argv expects a value (it reads as an option), None when it can."""
    if value.startswith("-"):
        return f"{value!r} starts with `-`, so it would be read as an option, not a value"
    if any(ch in value for ch in "\0\n\r"):
        return f"{value!r} holds a NUL or line break"
    return None


def _plain_value(v: str | None, field: str) -> str | None:
    problem = None if v is None else option_value_problem(v)
    if problem:
        raise ValueError(f"{field}: {problem}; give the value itself")
    return v


def _path_parts_problem(path: str) -> str | None:
    if ":" in path:
        return "holds `:`, which separates a mount's parts (source:target:mode)"
    if ".." in path.split("/"):
        return "holds a `..` part; write the path it means"
    if any(ch in path for ch in "\0\n\r,"):
        return "holds a NUL, a line break or `,`"
    return None


def volume_source_problem(source: str) -> str | None:
    """Why an expanded volume source cannot be mounted, None when it can: an absolute path or a named volume."""
    problem = _path_parts_problem(source)
    if problem:
        return problem
    if not source.startswith("/") and not VOLUME_NAME_RE.match(source):
        return "is a relative path; give an absolute one (or a named volume: letters, digits, `_.-`)"
    if source.startswith("-"):
        return "starts with `-`"
    return None


def _class_name(v: str) -> str:
    problem = None if v == MIXED else name_problem(v, "class name")
    if problem:
        raise ValueError(problem)
    return v


#: A transcript class: one of the window's workload's classes, or `mixed` (the builtin's are checked by name here;
#: another workload's when the window runs, against its manifest).
TranscriptClass = Annotated[str, AfterValidator(_class_name)]
JsonScalar = str | int | float | bool | None


class Lane(FrozenModel):
    name: str = Field(description="Lane name; instances are named <lane>-<arm or recipe>.")
    port: StrictInt = Field(ge=1, le=65535, description="Port the main container serves the OpenAI API on.")
    bind: str = Field(default="127.0.0.1", description="Address the server binds; a dark lane must use loopback.")
    dark: bool = Field(default=False, description="A dark lane takes no production traffic and binds to loopback only.")

    @field_validator("name")
    @classmethod
    def _lane_name(cls, v: str) -> str:
        problem = name_problem(v, "lane name")
        if problem:
            raise ValueError(f"{problem}; it names containers")
        return v


class Image(FrozenModel):
    ref: str = Field(description="Container image reference the main container runs.")
    vllm_version: str = Field(description="vLLM version the image carries; selects the engine schema snapshot.")
    hash_inputs: tuple[str, ...] = Field(
        description="Dotted recipe keys the image's autotune/compile hash depends on; the fingerprint covers exactly these."
    )

    @field_validator("ref")
    @classmethod
    def _reference(cls, v: str) -> str:
        problem = image_ref_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class Checkpoint(FrozenModel):
    mtp_stages: StrictInt = Field(ge=0, description="MTP prediction stages trained into the checkpoint.")
    dspark_block_size: StrictInt = Field(ge=1, description="Draft block width the DSpark drafter was trained on.")
    draft_topk: StrictInt | None = Field(
        default=None, ge=1, description="Reduced draft vocabulary the checkpoint was trained with."
    )


class Model(FrozenModel):
    path: str = Field(description="Model path inside the container (or `builtin` for the embedded engine).")
    served_name: str = Field(description="Model name the API serves (--served-model-name).")
    checkpoint: Checkpoint = Field(description="Facts read from the checkpoint's config.")

    @field_validator("path", "served_name")
    @classmethod
    def _argv_value(cls, v: str, info: Any) -> str:
        value = _plain_value(v, f"model.{info.field_name}")
        assert value is not None
        if not value:
            raise ValueError(f"model.{info.field_name} is empty")
        return value


class EngineArgs(FrozenModel):
    max_num_seqs: StrictInt = Field(ge=1, description="--max-num-seqs: concurrent sequences per step.")
    max_model_len: StrictInt = Field(ge=1, description="--max-model-len: longest request in tokens.")
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, allow_inf_nan=False, description="--gpu-memory-utilization."
    )
    dtype: str | None = Field(default=None, description="--dtype of the weights and activations.")
    tensor_parallel_size: StrictInt | None = Field(default=None, ge=1, description="--tensor-parallel-size.")
    compilation_config: dict[str, Any] = Field(
        default_factory=dict,
        description="--compilation-config as a mapping; pin cudagraph_capture_sizes so k stays out of the hash.",
    )
    seed: StrictInt | None = Field(default=None, description="--seed of the engine's sampler.")
    time_scale: float | None = Field(
        default=None,
        ge=0,
        le=MAX_TIME_SCALE,
        allow_inf_nan=False,
        description="Embedded engine only: pacing, 1.0 = modelled time, 0 = as fast as possible.",
    )
    extra_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Other `vllm serve` flags by EngineArgs name (snake_case); true renders --flag, false --no-flag.",
    )

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str | None) -> str | None:
        return _plain_value(v, "engine_args.dtype")

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, value in v.items():
            flag = str(key).replace("-", "_").lstrip("_")
            if flag in ADDRESS_FLAGS:
                raise ValueError(
                    f"engine_args.extra_args.{key}: the lane's address comes from lane.bind and lane.port"
                    + (" (and a config file could set it)" if flag == "config" else "")
                    + "; remove it (a dark lane binds loopback, `up --port` moves the lane)"
                )
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, str):
                    _plain_value(item, f"engine_args.extra_args.{key}")
        return v


#: `${NAME}` or `${NAME:-default}` in a volume source, the shell's (and compose's) syntax.
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^${}]*))?\}")


def expand_source(source: str, environ: Mapping[str, str]) -> str:
    """A volume source with `${NAME}` / `${NAME:-default}` substituted from `environ`, then a leading `~` expanded.

    This is how one recipe names a per-user host directory (the compile cache
    root is `${VLLM_CACHE_ROOT:-~/.cache/vllm}`). As in the shell, the default
    applies when the variable is unset or empty; an unset `${NAME}` without a
    default is an error, never an empty path.
    """

    def one(m: re.Match[str]) -> str:
        value = environ.get(m.group(1), "")
        if value:
            return value
        if m.group(2) is None:
            raise ValueError(f"${{{m.group(1)}}} is not set; set it, or give a default as ${{{m.group(1)}:-/path}}")
        return m.group(2)

    out = _VAR_RE.sub(one, source)
    if out == "~" or out.startswith("~/"):
        home = environ.get("HOME") or str(Path.home())
        out = home + out[1:]
    return out


#: Env names whose values are credentials: compared by hash, kept out of reports, rendered into Secrets.
def _source_syntax(source: str) -> str | None:
    """Why a volume source is malformed, None when it is fine."""
    rest = _VAR_RE.sub("", source)
    if "$" in rest:
        return "`$` may only appear as ${NAME} or ${NAME:-default}"
    return None


def _check_env(v: Any) -> Any:
    """An env mapping: POSIX keys, string values (the values are checked as YAML gave them, before coercion)."""
    if isinstance(v, dict):
        for k in v:
            problem = env_key_problem(k)
            if problem:
                raise ValueError(problem)
        bad = [k for k, val in v.items() if not isinstance(val, str)]
        if bad:
            raise ValueError(f"env values must be strings (quote them in YAML): {', '.join(map(str, bad))}")
    return v


class Volume(FrozenModel):
    source: str = Field(
        description="Host path (or named volume) to mount; may start with ~ and use ${NAME} / ${NAME:-default}, "
        "expanded at render time against the tool's environment."
    )
    target: str = Field(description="Path inside the container.")
    read_only: bool = Field(default=False, description="Mount read-only.")

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        problem = _source_syntax(v)
        if problem:
            raise ValueError(f"{v!r}: {problem}")
        literal = _VAR_RE.sub("", v)
        if literal.startswith("~"):
            literal = "/" + literal[1:]
        problem = _path_parts_problem(literal) if "$" in v else volume_source_problem(literal)
        if problem:
            raise ValueError(f"volume source {v!r} {problem}")
        return v

    @property
    def expands(self) -> bool:
        """Whether the source depends on the environment (and must then expand to an absolute path)."""
        return "$" in self.source or self.source.startswith("~")

    @field_validator("target")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("the container path must be absolute (start with /)")
        problem = _path_parts_problem(v)
        if problem:
            raise ValueError(f"the container path {v!r} {problem}")
        return v


#: A Kubernetes label value: at most 63 characters, alphanumerics at both ends, `-_.` inside.
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class Gpus(FrozenModel):
    main: tuple[str, ...] = Field(default=(), description="GPU device ids for the main container (the GB300).")
    sidecar: tuple[str, ...] = Field(default=(), description="GPU device ids for the sidecar (the RTX PRO 6000).")
    main_product: str | None = Field(
        default=None,
        description="GPU product the main container needs, as NVIDIA GPU feature discovery labels a node "
        "(nvidia.com/gpu.product, e.g. NVIDIA-GB300); Kubernetes manifests select the node by it.",
    )
    sidecar_product: str | None = Field(
        default=None,
        description="GPU product the sidecar needs, as nvidia.com/gpu.product spells it "
        "(e.g. NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition).",
    )

    @field_validator("main_product", "sidecar_product")
    @classmethod
    def _label_value(cls, v: str | None) -> str | None:
        if v is not None and (not v or not LABEL_VALUE_RE.match(v)):
            raise ValueError(
                f"{v!r} is not a node label value (at most 63 characters, letters, digits, - _ . inside); "
                "copy it from `kubectl get nodes -L nvidia.com/gpu.product`"
            )
        return v

    @field_validator("main", "sidecar", mode="before")
    @classmethod
    def _ids_as_strings(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return tuple(str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v)
        return v

    @field_validator("main", "sidecar")
    @classmethod
    def _gpu_ids(cls, v: tuple[str, ...], info: Any) -> tuple[str, ...]:
        for gpu in v:
            if not GPU_ID_RE.match(gpu):
                raise ValueError(
                    f"gpus.{info.field_name}: {gpu!r} is not a GPU id (an index such as 0, a GPU-<uuid> or a "
                    "MIG-<uuid>, as `nvidia-smi -L` lists them); one id per item"
                )
        return v

    @model_validator(mode="after")
    def _product_needs_ids(self) -> Gpus:
        for role in ("main", "sidecar"):
            if getattr(self, f"{role}_product") is not None and not getattr(self, role):
                raise ValueError(
                    f"gpus.{role}_product is set but gpus.{role} lists no device ids; add the ids or drop the product"
                )
        return self


class Sidecar(FrozenModel):
    image: str = Field(description="Image of the sidecar container.")
    device: str | None = Field(
        default=None, description="Device the sidecar computes on, passed as EXPERT_SIDECAR_DEVICE."
    )
    args: tuple[str, ...] = Field(
        default=(),
        description="vllm recipes: the sidecar's full argv; embedded recipes: extra args after `gb300lane.engine sidecar`.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the sidecar container.")
    port: StrictInt = Field(ge=1, le=65535, description="Port the sidecar listens on (loopback).")
    connect_env: str = Field(
        default="EXPERT_SIDECAR_URL", description="Env var through which the main container learns the sidecar URL."
    )

    @field_validator("image")
    @classmethod
    def _reference(cls, v: str) -> str:
        problem = image_ref_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str | None) -> str | None:
        return _plain_value(v, "sidecar.device")

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        return _check_env(v)

    @field_validator("connect_env")
    @classmethod
    def _connect_env(cls, v: str) -> str:
        problem = env_key_problem(v)
        if problem:
            raise ValueError(problem)
        return v


def sidecar_args_problem(engine: str, args: tuple[str, ...], port: int) -> str | None:
    """Why a sidecar's args would move where it listens, None when they do not.

    Embedded recipes: the tool renders the sidecar's --host (loopback) and --port (sidecar.port), so the args may
    name neither. vllm recipes (the args are the sidecar's whole argv): --host must be loopback and --port must be
    sidecar.port, so the lane's bind check covers what the sidecar opens.
    """
    for i, arg in enumerate(args):
        flag, eq, inline = arg.partition("=")
        if flag not in ("--host", "--port", "--bind", "-H", "-p"):
            continue
        if engine == "embedded":
            return (
                f"{arg!r} would move where the sidecar listens; the tool gives it --host 127.0.0.1 and "
                "--port sidecar.port: remove it"
            )
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        if flag in ("--host", "--bind", "-H") and value not in LOOPBACK_HOSTS:
            return f"{flag} {value!r}: the sidecar must listen on loopback (127.0.0.1)"
        if flag in ("--port", "-p") and value != str(port):
            return f"{flag} {value!r} differs from sidecar.port ({port}); the lane's checks watch sidecar.port"
    return None


class Speculative(FrozenModel):
    method: str = Field(description="vLLM speculative method (dspark on this lane).")
    model: str | None = Field(
        default=None, description="Draft checkpoint path inside the container (method draft_model); none for dspark."
    )
    num_speculative_tokens: int | None = Field(
        default=None, gt=0, le=MAX_SPECULATIVE_TOKENS, description="k: drafts per verify step."
    )
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = Field(
        default=None, description="k schedule: [range_start, range_end, k] by batch size, inclusive ranges."
    )
    speculative_token_schedule: tuple[tuple[int, int, int], ...] | None = Field(
        default=None,
        description="The k schedule under vLLM's new name for num_speculative_tokens_per_batch_size "
        "(give one of the two); rendered under the name the image's vLLM version knows.",
    )
    draft_sample_method: str | None = Field(default=None, description="greedy or probabilistic drafts.")
    rejection_sample_method: str | None = Field(default=None, description="standard (token by token) or block.")
    dspark_draft_topk: StrictInt | None = Field(
        default=None, ge=1, description="Top-k candidates the DSpark Markov head scores."
    )
    enable_adaptive_verification: bool | None = Field(
        default=None, description="DSpark adaptive verification (a hash input)."
    )

    @field_validator("num_speculative_tokens_per_batch_size", "speculative_token_schedule")
    @classmethod
    def _schedule_k(cls, v: tuple[tuple[int, int, int], ...] | None) -> tuple[tuple[int, int, int], ...] | None:
        for row in v or ():
            # Negative ks and range errors are lint's (rules.py, with their fix); a k past the bound is not a recipe.
            if row[2] > MAX_SPECULATIVE_TOKENS:
                raise ValueError(f"k = {row[2]} in {list(row)} exceeds {MAX_SPECULATIVE_TOKENS}; use at most that")
        return v

    @model_validator(mode="after")
    def _one_schedule_name(self) -> Speculative:
        if self.num_speculative_tokens_per_batch_size is not None and self.speculative_token_schedule is not None:
            raise ValueError(
                "speculative.speculative_token_schedule is the new name of "
                "num_speculative_tokens_per_batch_size; give the schedule once, under one name"
            )
        return self

    @property
    def schedule(self) -> tuple[tuple[int, int, int], ...] | None:
        """The k schedule, under whichever name the recipe gives it."""
        if self.num_speculative_tokens_per_batch_size is not None:
            return self.num_speculative_tokens_per_batch_size
        return self.speculative_token_schedule

    @property
    def schedule_key(self) -> str:
        """The dotted key the recipe sets its schedule under."""
        new = self.speculative_token_schedule is not None
        return "speculative." + ("speculative_token_schedule" if new else "num_speculative_tokens_per_batch_size")

    def config_json_dict(self, *, schedule_name: str = "num_speculative_tokens_per_batch_size") -> dict[str, object]:
        """The keys the recipe sets, as `--speculative-config` carries them; the schedule under `schedule_name`
        (the name the engine's vLLM version knows), whichever name the recipe used."""
        out = self.model_dump(exclude_none=True)
        rows = out.pop("num_speculative_tokens_per_batch_size", None) or out.pop("speculative_token_schedule", None)
        out.pop("speculative_token_schedule", None)
        if rows is not None:
            out[schedule_name] = [list(r) for r in rows]
        return dict(sorted(out.items()))


class TokensPerStep(FrozenModel):
    min: float | None = Field(default=None, ge=0, description="Lowest acceptable tokens per verify step.")
    max: float | None = Field(default=None, ge=0, description="Highest acceptable tokens per verify step.")


class WindowSpec(FrozenModel):
    name: str = Field(description="Window name, unique within the recipe's gates.")
    classes: tuple[TranscriptClass, ...] = Field(
        min_length=1,
        description="Transcript classes the window runs: its workload's (builtin's are prose, "
        "structured, code, shell_ops, tool_json), or mixed (every class interleaved).",
    )
    transcripts_per_class: int = Field(ge=1, description="Transcripts drawn per class.")
    rounds: int = Field(default=1, ge=1, description="Times the window repeats.")
    concurrency: tuple[int, ...] = Field(min_length=1, description="Concurrency levels (C1, C8, ...).")
    temperature: float = Field(ge=0, description="Sampling temperature; 0 is the greedy path.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass.")
    seed_base: int | None = Field(
        default=None,
        description="Seed base: each request is seeded with a stable hash of (seed_base, transcript id, round); null sends no seed.",
    )
    forced_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Output tokens forced per request (max_tokens = min_tokens, ignore_eos): every request returns "
        "exactly this many, as a speed window needs. null: the requests may stop at EOS (set max_tokens), as a "
        "task-quality window needs (a forced length cuts a tool call or a JSON document off).",
    )
    # Left out of the dump when none, so the windows of forced-length receipts are byte for byte what they were.
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        exclude_if=lambda v: v is None,
        description="With forced_tokens null: the most output tokens a request may return (it stops at EOS or "
        "here). Absent with forced_tokens.",
    )
    tool_choice: Literal["auto", "required"] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="tool_choice sent with the transcripts that carry tools: auto (the model may answer in text) or "
        "required (the lane constrains decoding to a call of a declared tool, its structured-output path under "
        "speculative decoding); absent: none sent, which a chat with tools reads as auto.",
    )
    # Left out of the dump at their defaults, so every window (and the gates hash and registration over it) written
    # before workloads existed is byte for byte what it was.
    workload: str = Field(
        default=BUILTIN,
        exclude_if=lambda v: v == BUILTIN,
        description="The workload the window runs (`workloads/<name>/`, found like recipes: ./workloads, then the "
        "shipped ones); builtin: the shipped transcripts. A card's registration freezes its content hash.",
    )
    held_out: bool = Field(
        default=False,
        exclude_if=lambda v: v is False,
        description="Run the workload's held-out part (`gb300lane workload split`), which no selection step reads; "
        "false: its dev part (every transcript when it has no split).",
    )

    @field_validator("workload")
    @classmethod
    def _workload_name(cls, v: str) -> str:
        problem = name_problem(v, "workload name")
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(c < 1 for c in v):
            raise ValueError("concurrency levels must be >= 1")
        return v

    @model_validator(mode="after")
    def _length(self) -> WindowSpec:
        if self.workload == BUILTIN:
            known = (*BUILTIN_CLASSES, MIXED)
            unknown = [c for c in self.classes if c not in known]
            if unknown:
                raise ValueError(
                    f"window {self.name}: classes {', '.join(map(repr, unknown))} are not classes of "
                    f"the builtin workload ({', '.join(known)}); name them, or set workload: to the "
                    "workload that has them"
                )
        if self.held_out and self.workload == BUILTIN:
            raise ValueError(
                f"window {self.name}: held_out: true on the builtin workload, which has no split; "
                "import your traffic, split it (`gb300lane workload split`) and name it in workload:"
            )
        if self.forced_tokens is None and self.max_tokens is None:
            raise ValueError(
                f"window {self.name}: set forced_tokens (every request returns exactly that many "
                "tokens) or, with forced_tokens null, max_tokens (requests stop at EOS or there)"
            )
        if self.forced_tokens is not None and self.max_tokens is not None:
            raise ValueError(
                f"window {self.name}: forced_tokens {self.forced_tokens} and max_tokens "
                f"{self.max_tokens} both set; a forced length is its own cap: drop max_tokens, or set "
                "forced_tokens: null to let requests stop at EOS"
            )
        return self

    @property
    def stops_at_eos(self) -> bool:
        """True when the window's requests may stop at EOS (forced_tokens null)."""
        return self.forced_tokens is None

    @property
    def token_cap(self) -> int:
        """The most output tokens a request of the window returns: the forced length, else max_tokens."""
        cap = self.forced_tokens if self.forced_tokens is not None else self.max_tokens
        assert cap is not None  # _length holds one of them
        return cap

    def length_label(self) -> str:
        """`128 tokens`, or `up to 256 tokens (stops at EOS)`: the window's output length in words."""
        if self.forced_tokens is not None:
            return f"{self.forced_tokens} tokens"
        return f"up to {self.token_cap} tokens (stops at EOS)"


class SmokeLossless(FrozenModel):
    """A bounds gate's losslessness check: its window's outputs scored by the lane's own prefill (bench.referee)."""

    alpha: float = Field(default=0.01, gt=0, lt=0.5, description="The false-FAIL rate under exact sampling.")
    margin: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="The deviation of T_eff / T and of the top-1 ratio tolerated where a deviation is detected.",
    )
    min_tokens: int = Field(default=200, ge=50, description="Fewest scored tokens; below it INCONCLUSIVE.")
    fail_when: Literal["beyond_margin", "detected"] = Field(
        default="beyond_margin",
        description="beyond_margin: FAIL only a deviation shown larger than the margin (a smoke's bar: a broken "
        "sampler on a short window, not a lane whose sampling differs from its prefill by a few percent); "
        "detected: FAIL any detected deviation not shown within it (a card's lossless gate).",
    )


class SmokeGate(FrozenModel):
    name: str = Field(description="Gate name.")
    kind: Literal["parity", "bounds"] = Field(
        description="parity: outputs match the reference; bounds: numbers in range."
    )
    window: WindowSpec = Field(description="The window the gate runs.")
    max_flips: int | None = Field(
        default=None, ge=0, description="parity: outputs allowed to differ from the reference."
    )
    tokens_per_step: TokensPerStep | None = Field(default=None, description="bounds: tokens per verify step range.")
    decode_tok_s_min: float | None = Field(default=None, ge=0, description="bounds: lowest decode tokens/s.")
    lossless: SmokeLossless | None = Field(
        default=None,
        description="bounds, on a window at temperature > 0: also check that the outputs are the "
        "target's distribution (scored by the lane's own prefill; costs one prefill of each output).",
    )


class Smoke(FrozenModel):
    gates: tuple[SmokeGate, ...] = Field(default=(), description="Gates run after boot, in order.")


class Process(FrozenModel):
    """How the process runtime starts real vLLM where no image is used (the CPU lane): an interpreter, not an image."""

    python: str = Field(
        description="Interpreter of the environment vLLM is installed in; may start with ~ and use ${NAME} / "
        "${NAME:-default}, expanded at render time. vLLM runs as `<python> -m vllm.entrypoints.openai.api_server`."
    )

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        problem = _source_syntax(v)
        if problem:
            raise ValueError(f"{v!r}: {problem}")
        return v


class Recipe(FrozenModel):
    schema_version: Literal[1] = Field(description="Recipe file format version.")
    name: str = Field(description="Recipe name and version (v26, v27, ...); equals the file stem.")
    description: str = Field(description="One line: what this version is.")
    extends: str | None = Field(default=None, description="Parent recipe this one was merged onto.")
    engine: Literal["vllm", "embedded"] = Field(description="vllm (real image) or the embedded lane engine.")
    runtime: RuntimeName = Field(description="Default runtime that boots the containers.")
    lane: Lane = Field(description="Where the lane serves.")
    image: Image = Field(description="The image and what its compile hash covers.")
    model: Model = Field(description="The model and its checkpoint facts.")
    kv_pool_tokens: StrictInt | None = Field(
        default=None, ge=1, le=MAX_KV_POOL_TOKENS, description="KV pool size the boot must report, in tokens."
    )
    engine_args: EngineArgs = Field(description="Engine arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the main container.")
    volumes: tuple[Volume, ...] = Field(default=(), description="Mounts of the main container (model, cache root).")
    process: Process | None = Field(
        default=None, description="vllm recipes on the process runtime: the interpreter vLLM runs under (no image)."
    )
    gpus: Gpus = Field(default_factory=Gpus, description="GPU device ids per container.")
    sidecar: Sidecar | None = Field(default=None, description="The expert-sidecar container, if the lane has one.")
    speculative: Speculative = Field(description="The speculative config (--speculative-config).")
    smoke: Smoke = Field(default_factory=Smoke, description="Smoke gates run after boot.")

    @field_validator("name", "extends")
    @classmethod
    def _name_shape(cls, v: str | None) -> str | None:
        problem = None if v is None else name_problem(v, "recipe name")
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        return _check_env(v)

    @model_validator(mode="after")
    def _engine_rules(self) -> Recipe:
        if self.engine == "vllm" and self.engine_args.time_scale is not None:
            raise ValueError("engine_args.time_scale applies to the embedded engine only; remove it from a vllm recipe")
        if self.engine == "embedded" and (self.gpus.main or self.gpus.sidecar):
            raise ValueError("the embedded engine uses no GPUs; remove gpus.main / gpus.sidecar")
        names = [g.window.name for g in self.smoke.gates]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"smoke window names must be unique: {', '.join(dupes)}")
        if self.process is not None and self.engine != "vllm":
            raise ValueError("process applies to engine vllm (the embedded engine runs under the tool's own python)")
        if self.sidecar is not None and self.sidecar.port == self.lane.port:
            raise ValueError("sidecar.port equals lane.port; give the sidecar its own port")
        for where, env in (("env", self.env), ("sidecar.env", self.sidecar.env if self.sidecar else {})):
            for key in env:
                if key.upper() in ADDRESS_ENV:
                    raise ValueError(
                        f"{where}.{key} sets where a part of the lane listens; the lane's address comes "
                        "from lane.bind, lane.port and sidecar.port: remove it"
                    )
        if self.sidecar is not None:
            problem = sidecar_args_problem(self.engine, self.sidecar.args, self.sidecar.port)
            if problem:
                raise ValueError(f"sidecar.args: {problem}")
        for name, value in (
            ("speculative.method", self.speculative.method),
            ("speculative.draft_sample_method", self.speculative.draft_sample_method),
            ("speculative.rejection_sample_method", self.speculative.rejection_sample_method),
        ):
            _plain_value(value, name)
        return self
