"""Booting an instance: plan it, create and start its containers, wait for readiness, check, report.

`plan_boot` renders a recipe and checks the preconditions without creating
anything; `boot` creates and starts what a plan names; `up` is the two in
turn. `start_instance` restarts a kept instance. Both paths share `_start`:
start the containers (sidecar first, the main container connects to it),
wait for readiness (`readiness.wait_ready`) while watching for a container
that exits, then check what runs (`gather.check_booted`).

Failures leave nothing running: containers are stopped, kept with their labels
for `gb300lane logs`, and the error names them. Ctrl-C during the wait does
the same. `instance()` (in `instance`) removes them as well.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from gb300lane import placement
from gb300lane.errors import BootError, LaneError, RecipeError, StateError
from gb300lane.lane import checks, facts, hosts, logparse
from gb300lane.lane import hash_ledger as ledger
from gb300lane.lane import records as instances
from gb300lane.lane.checkkeys import choose_baseline
from gb300lane.lane.enginebuild import boots_anyway, check_engine_build
from gb300lane.lane.gather import check_booted
from gb300lane.lane.preconditions import check_preconditions
from gb300lane.lane.protect import NOTHING, Protected
from gb300lane.lane.readiness import Died, HttpReady, Readiness, wait_ready
from gb300lane.lane.report import Baseline, BootReport, latest_report
from gb300lane.models import FrozenModel
from gb300lane.names import name_problem
from gb300lane.recipes import (
    ContainerSpec,
    Recipe,
    RenderedLane,
    lane_base_name,
    load_recipe,
    render,
    requires_acknowledgement,
)
from gb300lane.recipes.boottime import boot_limit_s
from gb300lane.recipes.loader import recipe_path, validate_raw
from gb300lane.redact import redact
from gb300lane.runtime import (
    LABEL_ARM,
    LABEL_INSTANCE,
    LABEL_PORT,
    LABEL_RUN,
    LABEL_STATE,
    ContainerInfo,
    Runtime,
    get_runtime,
    state_label,
)


class BootProgress(FrozenModel):
    """One readiness poll, for a progress bar."""

    instance: str = Field(description="Instance booting.")
    elapsed_s: float = Field(description="Seconds since the containers started.")
    expected_s: float | None = Field(description="Expected boot time from earlier boots (None: never booted).")
    timeout_s: float = Field(description="Limit of the wait.")


ProgressFn = Callable[[BootProgress], None]


@dataclass(frozen=True)
class BootPlan:
    """An instance about to boot: rendered and its preconditions checked, nothing created yet."""

    recipe: Recipe
    rendered: RenderedLane
    instance: str
    arm: str | None
    dark: bool
    runtime: Runtime
    check_keys: tuple[str, ...]
    gpu_check: checks.CheckResult
    build_check: checks.CheckResult | None = None
    baseline: Baseline | None = None

    def steps(self) -> list[str]:
        """What `boot` will do, in order, one line each (`up --dry-run` prints them and does nothing)."""
        kept = instances.load(self.instance)
        out = [
            f"preconditions checked: {self.recipe.name} as {self.instance} on the {self.runtime.name} runtime"
            f"{' (dark: loopback only)' if self.dark else ''}, {self.gpu_check.summary}"
        ]
        if kept is not None:
            out.append(f"remove the kept {self.instance} ({', '.join(kept.containers)}, {kept.phase})")
        out.append(f"record instance {self.instance} (phase booting) before any container exists")
        for spec in self.rendered.containers:
            out.append(f"create and start {spec.name} ({spec.role}, port {spec.port}): {' '.join(spec.argv[:3])} ...")
        out.append(
            f"wait until {self.rendered.endpoint} answers (readiness), then run the boot checks"
            + (f" on {', '.join(self.check_keys)}" if self.check_keys else "")
        )
        out.append("write the boot report; a failed check stops and keeps the containers for `gb300lane logs`")
        return out


def instance_name(recipe: Recipe, arm: str | None) -> str:
    """The name `up` gives the instance it boots: the lane, the recipe and the arm, no prefix said twice.

    Recipe local-v27 on lane local is `local-v27` (not local-local-v27), its arm B `local-v27-B` (not local-B);
    v27 on lane gb300 is `gb300-v27`, its arm B `gb300-v27-B`. An arm that already starts with the recipe or the
    lane (a promotion's `local-v27-2`) is not prefixed again. The arm must be a name, not a path.
    """
    lane = hosts.instance_prefix(recipe)
    base = lane_base_name(recipe, lane)
    if arm is None or arm == recipe.name or arm == base:
        return instances.check_name(base)
    problem = name_problem(arm, "arm name")
    if problem:
        raise StateError(
            f"--name {problem}; it names the instance (<lane>-<recipe>-<arm>) and its files in the state directory"
        )
    if arm.startswith((f"{recipe.name}-", f"{base}-")):
        name = arm if arm.startswith(f"{lane}-") else f"{lane}-{arm}"
    else:
        name = f"{base}-{arm}"
    return instances.check_name(name)


def plan_boot(
    recipe: str | Recipe,
    *,
    dark: bool = False,
    arm: str | None = None,
    runtime: str | None = None,
    port: int | None = None,
    check_keys: Sequence[str] | None = None,
    baseline: str | None = None,
    baseline_role: str | None = None,
    allow_outside_trained_block: bool = False,
    pull: bool = False,
    protected: Protected = NOTHING,
) -> BootPlan:
    """Render the recipe and check every precondition; raises before anything is created."""
    if isinstance(recipe, str):
        recipe = load_recipe(recipe)
    findings = requires_acknowledgement(recipe)
    if findings and not allow_outside_trained_block:
        f = findings[0]
        raise RecipeError(f"{_recipe_file(recipe)}: {f.message}; {f.fix}")
    place = placement.current()
    if port is None and place is not None:
        port = place.port
    rendered = _render(recipe, dark=dark, port=port)
    instance = instance_name(recipe, arm)
    rt = get_runtime(runtime or (place.runtime if place else None) or recipe.runtime, pull=pull)
    products = {"main": recipe.gpus.main_product, "sidecar": recipe.gpus.sidecar_product}
    gpu_check = check_preconditions(rt, rendered, instance, rendered.containers[0].port, protected, products)
    build_check = _engine_build(recipe, instance)
    if check_keys is not None:
        base, keys = Baseline(kind="keys"), list(check_keys)
    else:
        base, keys = choose_baseline(recipe, baseline, role=baseline_role)
    return BootPlan(
        recipe=recipe, rendered=rendered, instance=instance, arm=arm, dark=dark, runtime=rt,
        check_keys=tuple(keys), gpu_check=gpu_check, build_check=build_check, baseline=base,
    )  # fmt: skip


def _engine_build(recipe: Recipe, instance: str) -> checks.CheckResult:
    """The engine build's known-defect check; raises when the build the recipe runs lacks a fix."""
    check = check_engine_build(recipe, os.environ)
    if check.status == "fail" and not boots_anyway(check):
        raise BootError(f"cannot boot {instance}: {check.summary}")
    return check


def _render(recipe: Recipe, *, dark: bool, port: int | None) -> RenderedLane:
    """Render for the acting lane: its sidecar port, and its box's address as the endpoint of a lane not dark."""
    place = placement.current()
    rendered = render(recipe, dark=dark, port=port, sidecar_port=place.sidecar_port if place else None)
    main_port = rendered.containers[0].port
    reached = hosts.endpoint(rendered.endpoint, main_port, dark=dark or recipe.lane.dark)
    return rendered if reached == rendered.endpoint else rendered.model_copy(update={"endpoint": reached})


def boot(plan: BootPlan, *, timeout_s: float | None = None, progress: ProgressFn | None = None) -> BootReport:
    """Create the plan's containers, start them, wait for readiness, check and report."""
    recipe, rendered, rt, arm = plan.recipe, plan.rendered, plan.runtime, plan.arm
    run = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)
    names = [f"{plan.instance}-{spec.role}" for spec in rendered.containers]
    _replace_kept(rt, plan.instance, names)
    specs = []
    for spec, name in zip(rendered.containers, names, strict=True):
        labels = {**spec.labels, LABEL_RUN: run, LABEL_ARM: arm or recipe.name, LABEL_INSTANCE: plan.instance}
        labels[LABEL_PORT] = str(spec.port)
        labels[LABEL_STATE] = state_label()
        specs.append(spec.model_copy(update={"name": name, "labels": labels}))
    now = time.time()
    rec = instances.InstanceRecord(
        name=plan.instance, lane=recipe.lane.name, recipe=recipe.name, arm=arm, runtime=rt.name,
        fingerprint=rendered.fingerprint, endpoint=rendered.endpoint, port=rendered.containers[0].port,
        served_model=rendered.served_model_name, dark=plan.dark or recipe.lane.dark, run=run,
        containers=tuple(names), extra_health=tuple(s.health_url for s in specs[1:]),
        check_keys=plan.check_keys, baseline=plan.baseline, recipe_json=_redacted_recipe(recipe), phase="booting",
        created_at=now, updated_at=now,
    )  # fmt: skip
    rec = instances.save(rec)
    try:
        for spec in specs:
            rt.create(spec)
    except BaseException:
        for name in names:
            rt.remove(name)
        instances.delete(plan.instance)
        raise
    return _start(
        rt,
        rec,
        specs,
        timeout_s=timeout_s,
        progress=progress,
        pre=[plan.gpu_check, *([plan.build_check] if plan.build_check is not None else [])],
    )


def up(
    recipe: str | Recipe,
    *,
    dark: bool = False,
    arm: str | None = None,
    runtime: str | None = None,
    port: int | None = None,
    check_keys: Sequence[str] | None = None,
    baseline: str | None = None,
    baseline_role: str | None = None,
    timeout_s: float | None = None,
    progress: ProgressFn | None = None,
    allow_outside_trained_block: bool = False,
    pull: bool = False,
    protected: Protected = NOTHING,
) -> BootReport:
    """Render, check preconditions, create, start, wait for readiness, check and report.

    `check_keys` are the recipe keys the flag check verifies; by default the keys that differ from the baseline
    `lane.checkkeys.choose_baseline` picks: `baseline` (a recipe the caller knows, such as production; its
    `baseline_role` names it in the report) when it serves the same lane, else the lane's last boot of this
    recipe, else the recipe's parent. `protected` instances are never replaced.
    """
    plan = plan_boot(
        recipe, dark=dark, arm=arm, runtime=runtime, port=port, check_keys=check_keys, baseline=baseline,
        baseline_role=baseline_role, allow_outside_trained_block=allow_outside_trained_block, pull=pull,
        protected=protected,
    )  # fmt: skip
    return boot(plan, timeout_s=timeout_s, progress=progress)


def _redacted_recipe(recipe: Recipe) -> dict[str, object]:
    data = recipe.model_dump(mode="json")
    data["env"] = {k: redact(k, v) for k, v in data.get("env", {}).items()}
    extra = (data.get("engine_args") or {}).get("extra_args")
    if isinstance(extra, dict):
        data["engine_args"]["extra_args"] = {k: redact(k, v) if isinstance(v, str) else v for k, v in extra.items()}
    if data.get("sidecar"):
        data["sidecar"]["env"] = {k: redact(k, v) for k, v in data["sidecar"]["env"].items()}
    return data


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


def start_instance(instance: str, *, timeout_s: float | None = None, progress: ProgressFn | None = None) -> BootReport:
    """Restart a kept instance's containers and wait for readiness; the checks run again."""
    rec = instances.load(instance)
    if rec is None:
        raise StateError(f"no instance named {instance}; see `gb300lane status` for the instances this host has")
    rt = get_runtime(rec.runtime)
    if any(rt.inspect(c).state == "missing" for c in rec.containers):
        raise StateError(
            f"instance {instance} lost a container ({', '.join(rec.containers)}); boot it again with `gb300lane up`"
        )
    recipe = validate_raw(rec.recipe_json, f"instance {instance}")
    rendered = _render(recipe, dark=rec.dark, port=rec.port)
    specs = [s.model_copy(update={"name": n}) for s, n in zip(rendered.containers, rec.containers, strict=True)]
    if any(rt.inspect(c).state == "running" for c in rec.containers):
        raise StateError(f"instance {instance} is already running; stop it first (`gb300lane down` or stop_instance)")
    if facts.port_in_use(rec.port):
        raise BootError(
            f"port {rec.port} is in use by {facts.port_holders(rec.port)}; instance {instance} cannot start on it"
        )
    build_check = _engine_build(recipe, instance)
    return _start(rt, rec, specs, timeout_s=timeout_s, progress=progress, pre=[build_check], values=_env_values(rec))


def _env_values(rec: instances.InstanceRecord) -> dict[str, dict[str, str]]:
    """Container -> the env its recipe gives now, in clear: the record keeps secrets only as digests, and a runtime
    that does too (the process runtime) checks each value against the digest of what it was created with."""
    try:
        recipe = load_recipe(rec.recipe)
        rendered = _render(recipe, dark=rec.dark, port=rec.port)
    except LaneError:
        return {}  # the runtime then names the secret it cannot restore
    # The args too, each under its position: a runtime that keeps a secret flag value as a digest (the process
    # runtime) finds the value by the digest, so every arg is offered.
    return {
        n: {**{f"argv[{i}]": a for i, a in enumerate(s.argv)}, **dict(s.env)}
        for s, n in zip(rendered.containers, rec.containers, strict=False)
    }


def kept_problem(instance: str, run: str) -> str | None:
    """Why the lane's `instance` is not boot `run`'s kept instance, able to start as production as it stands.

    None when it is. Otherwise what is wrong, as a phrase about the instance: it is gone, was booted again since
    (another run), lost a container, or was booted dark on a recipe that serves production on another address (a
    kept instance keeps the address it was created with).
    """
    rec = instances.load(instance)
    if rec is None:
        return "is no longer on the lane (removed since)"
    if rec.run != run:
        return f"was booted again since (run {rec.run}, not {run})"
    rt = get_runtime(rec.runtime)
    lost = [c for c in rec.containers if rt.inspect(c).state == "missing"]
    if lost:
        return f"lost {', '.join(lost)}"
    recipe = validate_raw(rec.recipe_json, f"instance {instance}")
    if _render(recipe, dark=rec.dark, port=rec.port) != _render(recipe, dark=False, port=rec.port):
        return (
            f"was booted dark and listens on loopback only, while {recipe.name} serves production on "
            f"{recipe.lane.bind} (a kept instance keeps the address it was created with)"
        )
    return None


def start_problem(instance: str) -> str | None:
    """Why the kept `instance` cannot be started as it stands, as a phrase about it; None when it can.

    What `start_instance` needs, read without starting anything: a readable record, every container, a recipe that
    validates. A transition asks before it stops production, so it never stops what it cannot replace.
    """
    path = instances.record_path(instance)
    rec = instances.load(instance)
    if rec is None:
        return (
            f"has no readable instance record ({path} is missing or was quarantined: `gb300lane status` "
            "lists it), so it cannot be started"
        )
    try:
        rt = get_runtime(rec.runtime)
        lost = [c for c in rec.containers if rt.inspect(c).state == "missing"]
        validate_raw(rec.recipe_json, f"instance {instance}")
    except LaneError as exc:
        return f"cannot be started: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    if lost:
        return f"lost {', '.join(lost)}, so it cannot be started"
    values = _env_values(rec)
    for c in rec.containers:
        problem = rt.start_problem(c, secrets=values.get(c))
        if problem is not None:
            return f"cannot be started: {problem}"
    return None


def await_instance(instance: str, *, timeout_s: float | None = None, progress: ProgressFn | None = None) -> BootReport:
    """An instance whose containers already run (a boot or restart a killed process began): wait until it is ready
    within the lane's boot limit (the time since its start counts), then run the boot checks and report.

    An instance that finished its boot (phase `up`, with a report) only waits for readiness and returns that report.
    """
    rec = instances.load(instance)
    if rec is None:
        raise StateError(f"no instance named {instance}; see `gb300lane status` for the instances this host has")
    rt = get_runtime(rec.runtime)
    infos = [rt.inspect(c) for c in rec.containers]
    if any(i.state != "running" for i in infos):
        states = ", ".join(f"{i.name} {i.state}" for i in infos)
        raise BootError(f"instance {instance} is not running ({states}); start it again instead of waiting for it")
    if rec.phase == "up" and rec.report:
        done = latest_report(instance)
        if done is not None and done.path == rec.report:
            recipe = validate_raw(rec.recipe_json, f"instance {instance}")
            wait_ready(
                readiness_checks(rec),
                timeout_s=timeout_s or default_timeout_s(recipe, None),
                hint=f"`gb300lane logs {rec.name}` shows why it stopped answering",
            )
            return done
    recipe = validate_raw(rec.recipe_json, f"instance {instance}")
    rendered = _render(recipe, dark=rec.dark, port=rec.port)
    specs = [s.model_copy(update={"name": n}) for s, n in zip(rendered.containers, rec.containers, strict=True)]
    started = infos[0].started_at or time.time()
    return _start(rt, rec, specs, timeout_s=timeout_s, progress=progress, pre=[], started_at=started)


def default_timeout_s(recipe: Recipe, expected_s: float | None) -> float:
    """Readiness limit without --timeout: generous for a miss (`recipes.boottime`), never under 3x what boots took here."""
    return max(boot_limit_s(recipe), 3 * (expected_s or 0.0))


def _recipe_file(recipe: Recipe) -> str:
    try:
        return str(recipe_path(recipe.name))
    except LaneError:  # only used to name the file in a message
        return f"recipe {recipe.name}"


def _forced_load_failure(rt: Runtime, main: str, since: float) -> str | None:
    """Why a boot under VLLM_FORCE_AOT_LOAD=1 died of a cache load that failed (None: it did not)."""
    try:
        return logparse.parse(rt.logs(main, since=since)).forced_load_failure
    except LaneError:
        return None


def _death(infos: list[ContainerInfo]) -> Died | None:
    for info in infos:
        if info.state != "running":
            return Died(
                description=f"{info.name} exited during boot ({info.detail or info.state})", container=info.name
            )
    return None


def stop_all(rt: Runtime, names: Sequence[str]) -> list[str]:
    """Stop every running container of `names` (keeping them); returns the names now stopped."""
    stopped = []
    for name in names:
        try:
            if rt.inspect(name).state == "running":
                rt.stop(name, timeout_s=5)
            stopped.append(name)
        except LaneError:  # keep stopping the others; the error names what is left
            continue
    return stopped


def readiness_checks(rec: instances.InstanceRecord) -> list[Readiness]:
    """The lane is ready when `/health` (and each sidecar's) answers 200 and `/v1/models` lists the model."""
    return [
        HttpReady(url=f"{rec.endpoint}/health"),
        *(HttpReady(url=url) for url in rec.extra_health),
        HttpReady(url=f"{rec.endpoint}/v1/models", contains=f'"{rec.served_model}"'),
    ]


def _cache_root(rt: Runtime, spec: ContainerSpec, env: dict[str, str]) -> Path | None:
    """The compile cache root as the host sees it, None when it is not visible."""
    root = env.get("VLLM_CACHE_ROOT") or (env.get("HOME", "/root") + "/.cache/vllm")
    return rt.host_path(spec, root)


def _start(
    rt: Runtime,
    rec: instances.InstanceRecord,
    specs: Sequence[ContainerSpec],
    *,
    timeout_s: float | None,
    progress: ProgressFn | None,
    pre: list[checks.CheckResult],
    started_at: float | None = None,
    values: dict[str, dict[str, str]] | None = None,
) -> BootReport:
    """Start the containers (or, with `started_at`, take over ones already started then), wait, check, report."""
    recipe = validate_raw(rec.recipe_json, f"instance {rec.name}")
    main = specs[0]
    env_baseline = {**rt.image_env(main.image), **rt.base_env(main.name)}
    cache_root = _cache_root(rt, main, {**env_baseline, **dict(main.env)})
    prediction = ledger.predict(rec.fingerprint, cache_root)
    pace = recipe.engine_args.time_scale if recipe.engine == "embedded" else None
    expected_s = ledger.expected_boot_seconds(rec.fingerprint, prediction.outcome, time_scale=pace)
    limit = timeout_s or default_timeout_s(recipe, expected_s)
    started = time.time() if started_at is None else started_at
    # Time already spent booting counts against the limit (a boot taken over from a killed process).
    waited = max(0.0, time.time() - started)
    names = rec.containers
    again = f"`gb300lane logs {rec.name}`"
    try:
        if started_at is None:
            given = {s.name: dict(s.env) for s in specs} if values is None else values
            for name in reversed(names):  # sidecar first: the main container connects to it
                rt.start(name, secrets=given.get(name))
        boot_s = waited + wait_ready(
            readiness_checks(rec),
            timeout_s=limit if started_at is None else max(1.0, limit - waited),
            logs=lambda container: rt.logs(container or names[0], since=started),
            watch=lambda: _death([rt.inspect(n) for n in names]),
            progress=None if progress is None else (
                lambda e: progress(
                    BootProgress(instance=rec.name, elapsed_s=waited + e, expected_s=expected_s, timeout_s=limit)
                )
            ),
            hint=f"a first boot (hash miss) compiles and takes longer, pass --timeout, and read {again}; "
                 "the containers are stopped and kept",
            died_hint=f"the other containers were stopped and kept for {again}",
        )  # fmt: skip
    except KeyboardInterrupt:
        stopped = stop_all(rt, names)
        instances.save(rec, phase="interrupted", detail="Ctrl-C during boot")
        raise BootError(
            f"boot of {rec.name} interrupted after {time.time() - started:.1f} s; containers "
            f"{', '.join(stopped)} stopped and kept (label gb300lane.instance={rec.name}); "
            f"remove them with `gb300lane down {rec.name}`"
        ) from None
    except BaseException as exc:
        stop_all(rt, names)
        why = str(exc).splitlines()[0] if isinstance(exc, BootError) and str(exc) else "boot raised"
        forced = _forced_load_failure(rt, names[0], started) if isinstance(exc, BootError) else None
        if forced is not None:
            why = (
                f"VLLM_FORCE_AOT_LOAD=1: the compile cache did not load ({forced}), so the boot failed instead "
                "of compiling again"
            )
        instances.save(rec, phase="failed", detail=why)
        if forced is not None:
            raise BootError(
                f"{rec.name}: {why}; unset VLLM_FORCE_AOT_LOAD to compile, or boot where this hash is "
                f"cached (`gb300lane logs {rec.name}` has the traceback)"
            ) from exc
        raise
    report = check_booted(rt, rec, recipe, specs, prediction, started, boot_s, expected_s, pre)
    bind = report.check("dark_bind")
    if bind is not None and bind.status == "fail":
        # A dark lane reachable beyond loopback is stopped at once (and kept for its logs), never left serving.
        stop_all(rt, names)
        instances.save(
            rec,
            phase="failed",
            report=report.path,
            detail=f"dark check failed ({bind.summary}); stopped and kept: `gb300lane down {rec.name}`",
        )
        return report
    autotune = report.check("autotune")
    observed = str(autotune.evidence.get("observed", "unknown")) if autotune is not None else "unknown"
    ledger.record_boot(rec.fingerprint, report.compile_hash, observed, boot_s, time_scale=pace)
    instances.save(rec, phase="up", report=report.path, detail="")
    return report
