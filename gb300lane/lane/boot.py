"""Booting an instance: preconditions, create and start, wait for readiness, check, report.

`up` renders a recipe and boots it as a new instance; `start_instance` restarts
a kept one. Both share `_boot`: start the containers (sidecar first, the main
container connects to it), wait for readiness while watching for a container
that exits, then gather facts (the log since this start, the container's
actual args and env, the listening socket, /metrics) and run the checks.

Failures leave nothing running: containers are stopped, kept with their labels
for `gb300lane logs`, and the error names them. Ctrl-C during the wait does
the same.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from gb300lane.errors import BootError, LaneError, MetricsError, RecipeError, StateError
from gb300lane.lane import checks, facts, instances, ledger, logparse, probe
from gb300lane.lane.report import BootReport, write_report
from gb300lane.models import FrozenModel
from gb300lane.runtime import (
    LABEL_ARM,
    LABEL_INSTANCE,
    LABEL_RUN,
    LABEL_STATE,
    ContainerInfo,
    ProcessRuntime,
    Runtime,
    get_runtime,
    state_label,
)
from gb300lane.runtime.process import mounted_env

LABEL_PORT = "gb300lane.port"
LOG_TAIL_LINES = 40
#: A real miss boot compiles and autotunes for about half an hour (the write-up's hit took 528 s).
VLLM_TIMEOUT_S = 3600.0
#: The embedded engine sleeps modelled seconds x time scale; a miss models about 1,910 s.
EMBEDDED_MISS_MODELLED_S = 1910.0


class BootProgress(FrozenModel):
    """One readiness poll, for a progress bar."""

    instance: str = Field(description="Instance booting.")
    elapsed_s: float = Field(description="Seconds since the containers started.")
    expected_s: float | None = Field(description="Expected boot time from earlier boots (None: never booted).")
    timeout_s: float = Field(description="Limit of the wait.")


ProgressFn = Callable[[BootProgress], None]


def _recipe_api() -> Any:
    import gb300lane.recipes as recipes

    return recipes


def default_check_keys(recipe: Any) -> list[str]:
    """Keys that differ from production (when recorded and not this recipe), else from the parent."""
    api = _recipe_api()
    base_name: str | None = None
    prod = current_production()
    if prod is not None and getattr(prod, "recipe", None) and prod.recipe != recipe.name:
        base_name = prod.recipe
    elif recipe.extends:
        base_name = recipe.extends
    if base_name is None:
        return []
    try:
        base = api.load_recipe(base_name)
    except RecipeError:
        return []
    return [c.key for c in api.diff_recipes(base, recipe).changes]


def current_production() -> Any | None:
    """gb300lane.promote's production state, None when that package or its ledger is absent."""
    try:
        from gb300lane.promote import current_production as _current
    except ImportError:
        return None
    try:
        return _current()
    except Exception:  # noqa: BLE001 - a broken ledger must not stop a boot; status reports it
        return None


def _expected_values(recipe: Any, keys: list[str]) -> dict[str, Any]:
    api = _recipe_api()
    out = {}
    for key in keys:
        try:
            out[key] = api.get_key(recipe, key)
        except RecipeError:
            out[key] = None
    return out


def _redacted_recipe(recipe: Any) -> dict[str, Any]:
    data = recipe.model_dump(mode="json")
    data["env"] = {k: checks.redact(k, v) for k, v in data.get("env", {}).items()}
    if data.get("sidecar"):
        data["sidecar"]["env"] = {k: checks.redact(k, v) for k, v in data["sidecar"]["env"].items()}
    return data


def _cache_root(rt: Runtime, spec: Any, env: dict[str, str]) -> Path | None:
    """The compile cache root as the host sees it, None when it is not visible."""
    root = env.get("VLLM_CACHE_ROOT") or (env.get("HOME", "/root") + "/.cache/vllm")
    return rt.host_path(spec, root)


def _preconditions(rt: Runtime, rendered: Any, instance: str, port: int) -> checks.CheckResult:
    existing = instances.load(instance)
    if existing is not None:
        running = [c for c in existing.containers if rt.inspect(c).state == "running"]
        if running:
            raise StateError(
                f"instance {instance} is already up ({', '.join(running)} running since run {existing.run}); "
                f"`gb300lane down {existing.recipe}{' --name ' + existing.arm if existing.arm else ''}` first, "
                "or boot another arm with --name"
            )
    for info in rt.list({LABEL_PORT: str(port)}):
        if info.state == "running" and info.labels.get(LABEL_INSTANCE) != instance:
            raise BootError(
                f"port {port} is served by lane container {info.name} "
                f"(instance {info.labels.get(LABEL_INSTANCE)}); take it down first or pass --port"
            )
    for spec in rendered.containers:
        if facts.port_in_use(spec.port):
            where = "pass --port N" if spec.role == "main" else "change sidecar.port in the recipe"
            raise BootError(f"port {spec.port} ({spec.role}) is in use by another process on this host; {where}")
    if rt.name == "docker":
        _ensure_local_engine_image(rendered)
    for spec in rendered.containers:
        if rt.image_present(spec.image) is False and not getattr(rt, "pull", False):
            raise BootError(
                f"image {spec.image} ({spec.role}) is not present on the Docker engine; build it with "
                "`gb300lane engine-image build` (gb300lane-engine:local) or pass --pull"
            )
    wanted = sorted({d for spec in rendered.containers for d in spec.device_ids})
    if not wanted:
        return checks.CheckResult(name="gpus", status="pass", summary="no GPUs requested", evidence={"wanted": []})
    found = facts.discover_gpus()
    if found is None:
        return checks.CheckResult(
            name="gpus", status="unknown", evidence={"wanted": wanted, "found": None},
            summary=f"GPUs {', '.join(wanted)} requested; nvidia-smi is not available to confirm them",
        )  # fmt: skip
    missing = [d for d in wanted if d not in found]
    if missing:
        raise BootError(f"GPU(s) {', '.join(missing)} requested by the recipe do not exist here (found {sorted(found)}); fix gpus.main / gpus.sidecar")
    return checks.CheckResult(name="gpus", status="pass", summary=f"GPUs {', '.join(wanted)} present", evidence={"wanted": wanted})


def up(
    recipe: Any,
    *,
    dark: bool = False,
    arm: str | None = None,
    runtime: str | None = None,
    port: int | None = None,
    check_keys: list[str] | None = None,
    timeout_s: float | None = None,
    progress: ProgressFn | None = None,
    allow_outside_trained_block: bool = False,
    pull: bool = False,
) -> BootReport:
    """Render, check preconditions, create, start, wait for readiness, check and report."""
    api = _recipe_api()
    if isinstance(recipe, str):
        recipe = api.load_recipe(recipe)
    findings = api.requires_acknowledgement(recipe)
    if findings and not allow_outside_trained_block:
        f = findings[0]
        raise RecipeError(f"{_recipe_file(recipe)}: {f.message}; {f.fix}")
    rendered = api.render(recipe, dark=dark, port=port)
    instance = f"{recipe.lane.name}-{arm or recipe.name}"
    run = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)
    rt = get_runtime(runtime or recipe.runtime, pull=pull)
    main_port = rendered.containers[0].port
    gpu_check = _preconditions(rt, rendered, instance, main_port)
    keys = list(check_keys) if check_keys is not None else default_check_keys(recipe)

    names = [f"{instance}-{spec.role}" for spec in rendered.containers]
    _replace_kept(rt, instance, names)
    specs = []
    for spec, name in zip(rendered.containers, names, strict=True):
        labels = {**spec.labels, LABEL_RUN: run, LABEL_ARM: arm or recipe.name, LABEL_INSTANCE: instance}
        labels[LABEL_PORT] = str(spec.port)
        labels[LABEL_STATE] = state_label()
        specs.append(spec.model_copy(update={"name": name, "labels": labels}))
    now = time.time()
    rec = instances.InstanceRecord(
        name=instance, lane=recipe.lane.name, recipe=recipe.name, arm=arm, runtime=rt.name,
        fingerprint=rendered.fingerprint, endpoint=rendered.endpoint, port=main_port,
        served_model=rendered.served_model_name, dark=dark or recipe.lane.dark, run=run,
        containers=tuple(names), extra_health=tuple(s.health_url for s in specs[1:]),
        check_keys=tuple(keys), recipe_json=_redacted_recipe(recipe), phase="booting",
        created_at=now, updated_at=now,
    )  # fmt: skip
    rec = instances.save(rec)
    try:
        for spec in specs:
            rt.create(spec)
    except BaseException:
        for name in names:
            rt.remove(name)
        instances.delete(instance)
        raise
    return _boot(rt, rec, specs, timeout_s=timeout_s, progress=progress, pre=[gpu_check])


def _replace_kept(rt: Runtime, instance: str, names: list[str]) -> None:
    """Remove a stopped, kept copy of this same instance (on whichever runtime it was booted)."""
    old = instances.load(instance)
    old_rt = rt
    if old is not None and old.runtime != rt.name:
        try:
            old_rt = get_runtime(old.runtime)
        except LaneError as exc:
            raise StateError(
                f"instance {instance} was booted on {old.runtime}, which does not answer ({exc}); "
                f"remove it there first or boot this one with another --name"
            ) from exc
    for name in sorted(set(old.containers if old else ())):
        old_rt.remove(name)
    for name in names:
        rt.remove(name)


def _ensure_local_engine_image(rendered: Any) -> None:
    """Build gb300lane-engine:local when a container uses it and it is missing or older than the source.

    That image is built from this host, never pulled, so building it is not a
    pull; without this, a changed source tree would boot yesterday's engine.
    """
    from gb300lane.runtime.image import ENGINE_IMAGE, ensure_engine_image

    if any(spec.image == ENGINE_IMAGE for spec in rendered.containers):
        ensure_engine_image()


def start_instance(instance: str, *, timeout_s: float | None = None, progress: ProgressFn | None = None) -> BootReport:
    """Restart a kept instance's containers and wait for readiness; the checks run again."""
    api = _recipe_api()
    rec = instances.load(instance)
    if rec is None:
        raise StateError(f"no instance named {instance}; see `gb300lane status` for the instances this host has")
    rt = get_runtime(rec.runtime)
    if any(rt.inspect(c).state == "missing" for c in rec.containers):
        raise StateError(f"instance {instance} lost a container ({', '.join(rec.containers)}); boot it again with `gb300lane up`")
    recipe = api.validate_raw(rec.recipe_json, f"instance {instance}")
    rendered = api.render(recipe, dark=rec.dark, port=rec.port)
    specs = [s.model_copy(update={"name": n}) for s, n in zip(rendered.containers, rec.containers, strict=True)]
    if any(rt.inspect(c).state == "running" for c in rec.containers):
        raise StateError(f"instance {instance} is already running; stop it first (`gb300lane down` or stop_instance)")
    if facts.port_in_use(rec.port):
        raise BootError(f"port {rec.port} is in use by another process; instance {instance} cannot start on it")
    return _boot(rt, rec, specs, timeout_s=timeout_s, progress=progress, pre=[])


def default_timeout_s(recipe: Any, expected_s: float | None) -> float:
    """Readiness limit without --timeout: generous for a miss, and never under 3x what boots took here."""
    if recipe.engine == "embedded":
        base = 60.0 + 2 * EMBEDDED_MISS_MODELLED_S * (recipe.engine_args.time_scale or 0.0)
    else:
        base = VLLM_TIMEOUT_S
    return max(base, 3 * (expected_s or 0.0))


def _recipe_file(recipe: Any) -> str:
    try:
        from gb300lane.recipes.loader import recipe_path

        return str(recipe_path(recipe.name))
    except Exception:  # noqa: BLE001 - only used to name the file in a message
        return f"recipe {recipe.name}"


def _describe_death(infos: list[ContainerInfo]) -> str | None:
    for info in infos:
        if info.state != "running":
            return f"{info.name} exited during boot ({info.detail or info.state})"
    return None


def _stop_all(rt: Runtime, names: tuple[str, ...]) -> list[str]:
    stopped = []
    for name in names:
        try:
            if rt.inspect(name).state == "running":
                rt.stop(name, timeout_s=5)
            stopped.append(name)
        except Exception:  # noqa: BLE001 - keep stopping the others; the error names what is left
            continue
    return stopped


def _boot(
    rt: Runtime,
    rec: instances.InstanceRecord,
    specs: list[Any],
    *,
    timeout_s: float | None,
    progress: ProgressFn | None,
    pre: list[checks.CheckResult],
) -> BootReport:
    recipe = _recipe_api().validate_raw(rec.recipe_json, f"instance {rec.name}")
    main = specs[0]
    env_baseline = {**rt.image_env(main.image), **rt.base_env(main.name)}
    cache_root = _cache_root(rt, main, {**env_baseline, **dict(main.env)})
    prediction = ledger.predict(rec.fingerprint, cache_root)
    pace = recipe.engine_args.time_scale if recipe.engine == "embedded" else None
    expected_s = ledger.expected_boot_seconds(rec.fingerprint, prediction.outcome, time_scale=pace)
    limit = timeout_s or default_timeout_s(recipe, expected_s)
    started = time.time()
    names = rec.containers
    try:
        for name in reversed(names):  # sidecar first: the main container connects to it
            rt.start(name)
        outcome = probe.wait_ready(
            rec.endpoint,
            rec.served_model,
            extra_health=list(rec.extra_health),
            timeout_s=limit,
            watch=lambda: _describe_death([rt.inspect(n) for n in names]),
            progress=None if progress is None else (
                lambda e: progress(BootProgress(instance=rec.name, elapsed_s=e, expected_s=expected_s, timeout_s=limit))
            ),
        )  # fmt: skip
    except KeyboardInterrupt:
        stopped = _stop_all(rt, names)
        instances.save(rec, phase="interrupted", detail="Ctrl-C during boot")
        raise BootError(
            f"boot of {rec.name} interrupted after {time.time() - started:.1f} s; containers "
            f"{', '.join(stopped)} stopped and kept (label gb300lane.instance={rec.name}); "
            f"remove them with `gb300lane down {rec.recipe}{' --name ' + rec.arm if rec.arm else ''}`"
        ) from None
    except BaseException:
        _stop_all(rt, names)
        instances.save(rec, phase="failed", detail="boot raised")
        raise
    if not outcome.ready:
        tail = rt.logs(names[0], tail=LOG_TAIL_LINES, since=started)
        _stop_all(rt, names)
        dead = outcome.died
        if dead:
            dead_name = dead.split(" ", 1)[0]
            tail = rt.logs(dead_name, tail=LOG_TAIL_LINES, since=started)
            instances.save(rec, phase="failed", detail=dead)
            raise BootError(
                f"{dead}; the other containers were stopped and kept for `gb300lane logs {rec.recipe}`.\n"
                f"last {LOG_TAIL_LINES} log lines of {dead_name}:\n{tail}",
                log_tail=tail,
            )
        instances.save(rec, phase="failed", detail="readiness timeout")
        raise BootError(
            f"{rec.endpoint} not ready after {outcome.elapsed_s:.1f} s (limit {limit:g} s): {outcome.last_reason}; "
            f"hint: a first boot (hash miss) compiles and takes longer, pass --timeout, and read "
            f"`gb300lane logs {rec.recipe}`. Containers stopped and kept.\nlast {LOG_TAIL_LINES} log lines:\n{tail}",
            log_tail=tail,
        )
    boot_s = outcome.elapsed_s
    report = _check(rt, rec, recipe, specs, prediction, started, boot_s, expected_s, pre)
    observed = report.check("autotune").evidence["observed"]  # type: ignore[union-attr]
    ledger.record_boot(rec.fingerprint, report.compile_hash, observed, boot_s, time_scale=pace)
    instances.save(rec, phase="up", report=report.path, detail="")
    return report


def _check(
    rt: Runtime,
    rec: instances.InstanceRecord,
    recipe: Any,
    specs: list[Any],
    prediction: checks.Prediction,
    started: float,
    boot_s: float,
    expected_s: float | None,
    pre: list[checks.CheckResult],
) -> BootReport:
    main = specs[0]
    info = rt.inspect(main.name)
    log_facts = logparse.parse(rt.logs(main.name, since=started))
    env_baseline = {**rt.image_env(main.image), **rt.base_env(main.name)}
    spec_env = dict(main.env)
    if isinstance(rt, ProcessRuntime):
        # No mount namespace: the process is handed the host side of a mounted path (VLLM_CACHE_ROOT).
        spec_env = mounted_env(spec_env, main.volumes)
    expected_env = {**env_baseline, **spec_env}
    if rt.name == "process" and main.device_ids:
        expected_env["CUDA_VISIBLE_DEVICES"] = ",".join(main.device_ids)
    results = [
        *pre,
        checks.check_autotune(prediction, log_facts, boot_s),
        checks.check_flags(info.argv, _expected_values(recipe, list(rec.check_keys))),
        checks.check_env(
            info.env, expected_env,
            baseline_note=(
                "recipe env + the image's default env (docker inspect of the image)" if rt.name == "docker"
                else "recipe env + PATH/HOME/LANG/VLLM_CACHE_ROOT... passed through from the invoking shell"
            ),
        ),  # fmt: skip
        checks.check_kv_pool(log_facts, recipe.kv_pool_tokens),
    ]
    if rec.dark:
        results.append(checks.check_bind(facts.listeners(rec.port), rec.port))
        results.append(foreign_clients(rec.endpoint))
    report = BootReport(
        instance=rec.name, lane=rec.lane, recipe=rec.recipe, arm=rec.arm, run=rec.run, runtime=rt.name,
        fingerprint=rec.fingerprint, compile_hash=log_facts.compile_hash, endpoint=rec.endpoint,
        served_model=rec.served_model, dark=rec.dark, containers=rec.containers, started_at=started,
        boot_seconds=round(boot_s, 3), expected_boot_seconds=expected_s,
        engine_boot_seconds=log_facts.engine_logged_seconds, checks=tuple(results),
    )  # fmt: skip
    return write_report(report)


def foreign_clients(endpoint: str, *, sent_by_tool: float = 0) -> checks.CheckResult:
    """Requests counted in /metrics since boot that the tool did not send (cards call this before a window)."""
    try:
        text = probe.scrape_metrics(endpoint)
    except Exception as exc:  # noqa: BLE001 - reported as unknown with the reason
        return checks.CheckResult(
            name="foreign_clients", status="unknown", summary=str(exc), evidence={"endpoint": endpoint}
        )
    try:
        counts = facts.parse_request_counts(text)
    except MetricsError as exc:
        return checks.CheckResult(
            name="foreign_clients", status="unknown", summary=str(exc), evidence={"endpoint": endpoint}
        )
    return checks.check_foreign(counts, sent_by_tool)
