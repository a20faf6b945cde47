"""Everything after boot: list, status, logs, stop (and keep), remove, down.

Instances are found through their records and, for leftovers without one,
through the labels on the containers themselves (`gb300lane.instance`),
among the containers this state directory created (`gb300lane.state`).
Docker is asked only where an instance uses it or it answers; an unreachable
engine is reported in `status`, never fatal to the process runtime's view.
Without an instance on Docker, the local engine is pinged without the SDK and
asked for leftovers only while some may exist (`gb300lane.runtime.dockerhost`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from gb300lane.errors import LaneError, StateError
from gb300lane.lane import probe
from gb300lane.lane import records as instances
from gb300lane.lane.protect import NOTHING, Protected
from gb300lane.models import FrozenModel

if TYPE_CHECKING:
    from gb300lane.lane.checks import CheckResult

from gb300lane.runtime import (
    LABEL_INSTANCE,
    LABEL_LANE,
    LABEL_STATE,
    ContainerInfo,
    Runtime,
    get_runtime,
    state_label,
    unasked_note,
)

InstanceState = Literal["running", "stopped", "partial", "missing", "failed"]


class InstanceInfo(FrozenModel):
    """One instance as the runtimes see it now."""

    name: str = Field(description="Instance name.")
    recipe: str = Field(description="Recipe name.")
    arm: str | None = Field(description="Arm name, if booted with --name.")
    runtime: str = Field(description="process or docker.")
    state: InstanceState = Field(description="running, stopped (kept), partial, missing (containers gone), failed.")
    endpoint: str | None = Field(description="Base URL of the OpenAI API.")
    fingerprint: str | None = Field(description="Recipe fingerprint.")
    compile_hash: str | None = Field(default=None, description="Compile hash of the last boot report.")
    phase: str = Field(description="Outcome of the last transition recorded (or `unrecorded` for a leftover).")
    containers: dict[str, str] = Field(description="Container name -> state.")
    labels: dict[str, str] = Field(description="Labels of the main container.")
    started_at: float | None = Field(default=None, description="When the main container last started.")
    recorded: bool = Field(description="False for a labelled leftover with no instance record.")
    dark: bool | None = Field(default=None, description="Booted dark (None: a leftover, unknown).")
    report: str | None = Field(default=None, description="Path of the last boot report, as recorded.")


class InstanceStatus(FrozenModel):
    """An instance with its health and uptime: facts only (roles are the promotion layer's)."""

    info: InstanceInfo = Field(description="The instance.")
    health: str = Field(description="healthy, unhealthy (HTTP n), unreachable, or not running.")
    uptime_s: float | None = Field(description="Seconds since the main container started, while running.")
    dark_bind: str | None = Field(
        default=None,
        description="A running dark instance's bind check now: why it fails (a socket reachable beyond "
        "loopback, a port no longer listening); None when it passes, cannot be read, or the instance is not dark.",
    )


class LaneStatus(FrozenModel):
    """What runs where on this host, as the runtimes see it."""

    instances: tuple[InstanceStatus, ...] = Field(description="Every instance, recorded or leftover.")
    runtimes: dict[str, str] = Field(description="Runtime name -> reachable / the reason it is not.")
    quarantined: tuple[str, ...] = Field(
        default=(), description="Unreadable instance records moved aside: where each is now, and why."
    )


def _runtimes(names: set[str]) -> tuple[dict[str, Runtime], dict[str, str]]:
    found: dict[str, Runtime] = {}
    notes: dict[str, str] = {}
    for name in sorted(names | {"process", "docker"}):
        note = unasked_note(name) if name not in names else None
        if note is not None:
            notes[name] = note
            continue
        try:
            found[name] = get_runtime(name)
            notes[name] = "reachable"
        except LaneError as exc:
            notes[name] = str(exc)
    return found, notes


def _state(infos: list[ContainerInfo], phase: str) -> InstanceState:
    states = {i.state for i in infos}
    if states == {"running"}:
        return "running"
    if states <= {"missing"}:
        return "missing"
    if "running" in states:
        return "partial"
    return "failed" if phase in ("failed", "interrupted") else "stopped"


def _info(rec: instances.InstanceRecord, rt: Runtime | None) -> InstanceInfo:
    from gb300lane.lane.report import latest_report  # the boot checks' models: only where an instance is recorded

    infos = [
        rt.inspect(c) if rt else ContainerInfo(name=c, runtime=rec.runtime, state="missing") for c in rec.containers
    ]
    report = latest_report(rec.name)
    return InstanceInfo(
        name=rec.name, recipe=rec.recipe, arm=rec.arm, runtime=rec.runtime, state=_state(infos, rec.phase),
        endpoint=rec.endpoint, fingerprint=rec.fingerprint, compile_hash=report.compile_hash if report else None,
        phase=rec.phase if rt else f"{rec.phase} (runtime {rec.runtime} unreachable)",
        containers={i.name: i.state for i in infos}, labels=infos[0].labels if infos else {},
        started_at=infos[0].started_at if infos else None, recorded=True, dark=rec.dark, report=rec.report,
    )  # fmt: skip


def list_instances() -> list[InstanceInfo]:
    """Recorded instances, then labelled leftovers that have no record."""
    recs = instances.load_all()
    rts, _ = _runtimes({r.runtime for r in recs})
    return _list(recs, rts)


def _list(recs: list[instances.InstanceRecord], rts: dict[str, Runtime]) -> list[InstanceInfo]:
    out = [_info(rec, rts.get(rec.runtime)) for rec in recs]
    known = {c for rec in recs for c in rec.containers}
    for rt_name, rt in rts.items():
        listed = rt.list_state({LABEL_STATE: state_label()})
        leftovers: dict[str, list[ContainerInfo]] = {}
        for c in listed:
            if c.name not in known and LABEL_LANE in c.labels:
                leftovers.setdefault(c.labels.get(LABEL_INSTANCE, c.name), []).append(c)
        for inst, infos in sorted(leftovers.items()):
            main = next((i for i in infos if i.labels.get("gb300lane.role") == "main"), infos[0])
            out.append(
                InstanceInfo(
                    name=inst, recipe=main.labels.get("gb300lane.recipe", "?"), arm=main.labels.get("gb300lane.arm"),
                    runtime=rt_name, state=_state(infos, "unrecorded"), endpoint=None,
                    fingerprint=main.labels.get("gb300lane.fingerprint"), phase="unrecorded",
                    containers={i.name: i.state for i in infos}, labels=main.labels,
                    started_at=main.started_at, recorded=False,
                )
            )  # fmt: skip
    return out


def dark_bind(name: str) -> CheckResult | None:
    """The bind check of dark instance `name` as it stands now (boot checks it once; a lane runs for hours): every
    socket on its ports, or held by its processes, on loopback only. None when it is not a running dark instance."""
    from gb300lane.lane import checks, facts

    rec = instances.load(name)
    if rec is None or not rec.dark:
        return None
    try:
        rt = get_runtime(rec.runtime)
        pids = [pid for c in rec.containers if (pid := rt.inspect(c).pid) is not None]
    except LaneError:
        return None
    if not pids:
        return None
    ports = sorted({rec.port, *(p for h in rec.extra_health if (p := _port(h)) is not None)})
    return checks.check_bind(facts.lane_listeners(ports, pids), ports)


def _port(url: str) -> int | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).port
    except ValueError:
        return None


def status() -> LaneStatus:
    """What runs where: every instance with its health, hash and uptime, and which runtimes answer."""
    recs = instances.load_all()
    rts, notes = _runtimes({r.runtime for r in recs})
    rows = []
    for info in _list(recs, rts):
        running = info.state == "running"
        health = probe.health(info.endpoint) if running and info.endpoint else "not running"
        uptime = time.time() - info.started_at if running and info.started_at else None
        bind = dark_bind(info.name) if running and info.dark else None
        rows.append(
            InstanceStatus(
                info=info,
                health=health,
                uptime_s=uptime,
                dark_bind=bind.summary if bind is not None and bind.status == "fail" else None,
            )
        )
    return LaneStatus(instances=tuple(rows), runtimes=notes, quarantined=tuple(instances.quarantined()))


def _find(name: str) -> tuple[instances.InstanceRecord | None, Runtime, list[str]]:
    rec = instances.load(name)
    if rec is not None:
        return rec, get_runtime(rec.runtime), list(rec.containers)
    for info in list_instances():
        if info.name == name:
            return None, get_runtime(info.runtime), list(info.containers)
    raise StateError(f"no instance named {name}; `gb300lane status` lists the instances on this host")


def stop_instance(instance: str) -> None:
    """Stop an instance's containers and keep them (the rollback pair, card arms)."""
    rec, rt, names = _find(instance)
    for name in names:
        if rt.inspect(name).state == "running":
            rt.stop(name)
    if rec is not None:
        instances.save(rec, phase="stopped", detail="stopped and kept")


def remove_instance(instance: str) -> None:
    """Stop and remove an instance's containers and forget it."""
    rec, rt, names = _find(instance)
    for name in names:
        rt.remove(name)
    instances.delete(instance)


def matches(info: InstanceInfo, target: str | None, arm: str | None = None) -> bool:
    """True when `target` names the instance (its name, its recipe or its arm) and `arm` (if given) its arm."""
    if target is not None and target not in (info.name, info.recipe, info.arm):
        return False
    return arm is None or arm in ((info.arm or info.recipe), info.name)


def resolve(
    target: str | None = None, *, arm: str | None = None, all: bool = False, command: str = "down"
) -> list[str]:
    """The instance names a `down` / `logs` / `status` argument designates: an instance, a recipe or an arm.

    An instance's own name designates it alone (even when it is also another instance's recipe); a recipe or
    an arm designates every instance of it. No argument designates the only instance, or with `all` every one.
    """
    known = list_instances()
    if target is None and arm is None:
        if all or len(known) <= 1:
            return [i.name for i in known]
        more = ", or pass --all for every one" if command == "down" else ""
        raise StateError(
            f"{len(known)} instances exist ({', '.join(i.name for i in known)}); name one: an instance, a recipe "
            f"or an arm (`gb300lane {command} {known[0].name}`){more}"
        )
    if arm is None and any(i.name == target for i in known):
        return [str(target)]
    hits = [i.name for i in known if matches(i, target, arm)]
    if not hits:
        what = " ".join(x for x in (target, f"--name {arm}" if arm else None) if x)
        raise StateError(f"no instance matches {what}; `gb300lane status` lists the instances on this host")
    return hits


def down(
    target: str | None = None,
    *,
    arm: str | None = None,
    all: bool = False,
    yes: bool = False,
    protected: Protected = NOTHING,
) -> list[str]:
    """Stop and remove the designated instances; returns their names.

    A target that designates several instances (a recipe booted as several arms) takes them all down only
    with `all` or `yes`; otherwise the error lists them. A `protected` instance (production and the rollback
    pair, as the promotion layer says) is refused when named and passed over by `all`; when the protected set
    is unknown, anything that would take an instance down is refused.
    """
    names = resolve(target, arm=arm, all=all)
    if len(names) > 1 and (target is not None or arm is not None) and not (all or yes):
        what = " ".join(x for x in (target, f"--name {arm}" if arm else None) if x)
        raise StateError(
            f"{len(names)} instances match {what}: {', '.join(names)}; name one (`gb300lane down {names[0]}`), "
            f"or pass --all (or --yes) to take down all {len(names)}"
        )
    held = {n: why for n in names if (why := protected.why(n)) is not None}
    if held and (not all or protected.unknown is not None):
        n = next(iter(held))
        fix = (
            "`gb300lane rollback` and `gb300lane prune` manage it"
            if protected.unknown is None
            else "fix the ledger first"
        )
        raise StateError(
            f"refusing to take down {n}: {held[n]}; {fix}. Pass --force to take it down anyway "
            "(the promotion ledger then records that it was removed)"
        )
    names = [n for n in names if n not in held]
    for name in names:
        remove_instance(name)
    return names


def logs(target: str | None = None, *, arm: str | None = None, role: str = "main", tail: int | None = None) -> str:
    rec, rt, names = _find(_one(target, arm))
    return rt.logs(_container(names, role), tail=tail)


def follow(
    target: str | None = None, *, arm: str | None = None, role: str = "main", tail: int | None = None
) -> Iterator[str]:
    rec, rt, names = _find(_one(target, arm))
    return rt.follow(_container(names, role), tail=tail)


def _one(target: str | None, arm: str | None) -> str:
    names = resolve(target, arm=arm, command="logs")
    if not names:
        raise StateError("no lane instances on this host; `gb300lane up RECIPE` boots one")
    if len(names) != 1:
        raise StateError(
            f"{len(names)} instances match {target or '--name ' + str(arm)} ({', '.join(names)}); name one of them "
            f"(`gb300lane logs {names[0]}`)"
        )
    return names[0]


def _container(names: list[str], role: str) -> str:
    match = [n for n in names if n.endswith(f"-{role}")]
    if not match:
        raise StateError(f"the instance has no {role} container ({', '.join(names)})")
    return match[0]
