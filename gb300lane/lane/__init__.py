"""Booting and running lane instances: up / down / status / logs, readiness, the boot checks and the boot report.

An instance is one booted recipe (main + sidecar) named from its lane, recipe and arm (`instance_name`).
`up` proves what booted (autotune hash, flags, env as a set, KV pool, dark
lane); `instance()` is the same boot for the length of a `with` block;
`foreign_clients` repeats the dark-lane request count on demand, for a card
to call right before its first window. The lane reports facts (instances,
health, hashes) and never roles: which instance is production is the
promotion layer's, which hands `up` and `down` the set they must protect.

Each name loads its submodule when first used (`gb300lane.lazy`): `status`
reads instances without loading the boot, its checks or the recipe schemas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gb300lane.lazy import attach

if TYPE_CHECKING:
    from gb300lane.lane.boot import (
        BootPlan,
        BootProgress,
        await_instance,
        boot,
        instance_name,
        kept_problem,
        plan_boot,
        start_instance,
        start_problem,
        up,
    )
    from gb300lane.lane.checkkeys import default_check_keys
    from gb300lane.lane.checks import CheckResult
    from gb300lane.lane.foreign import foreign_clients
    from gb300lane.lane.hosts import on_lane
    from gb300lane.lane.instance_scope import instance
    from gb300lane.lane.manage import (
        InstanceInfo,
        InstanceStatus,
        LaneStatus,
        dark_bind,
        down,
        follow,
        list_instances,
        logs,
        remove_instance,
        resolve,
        status,
        stop_instance,
    )
    from gb300lane.lane.ports import busy_ports, free_lane_port, ports_of
    from gb300lane.lane.protect import NOTHING, Protected
    from gb300lane.lane.readiness import (
        ContainerDied,
        Died,
        HttpReady,
        LogReady,
        Readiness,
        ReadinessTimeout,
        wait_ready,
    )
    from gb300lane.lane.records import hold, holds
    from gb300lane.lane.report import BootReport

__getattr__, __dir__ = attach(
    __name__,
    {
        "BootPlan": "boot",
        "BootProgress": "boot",
        "await_instance": "boot",
        "boot": "boot",
        "instance_name": "boot",
        "kept_problem": "boot",
        "on_lane": "hosts",
        "plan_boot": "boot",
        "start_instance": "boot",
        "start_problem": "boot",
        "up": "boot",
        "default_check_keys": "checkkeys",
        "CheckResult": "checks",
        "foreign_clients": "foreign",
        "instance": "instance_scope",
        "hold": "records",
        "holds": "records",
        "InstanceInfo": "manage",
        "InstanceStatus": "manage",
        "LaneStatus": "manage",
        "down": "manage",
        "follow": "manage",
        "list_instances": "manage",
        "logs": "manage",
        "remove_instance": "manage",
        "resolve": "manage",
        "status": "manage",
        "stop_instance": "manage",
        "dark_bind": "manage",
        "busy_ports": "ports",
        "free_lane_port": "ports",
        "ports_of": "ports",
        "NOTHING": "protect",
        "Protected": "protect",
        "ContainerDied": "readiness",
        "Died": "readiness",
        "HttpReady": "readiness",
        "LogReady": "readiness",
        "Readiness": "readiness",
        "ReadinessTimeout": "readiness",
        "wait_ready": "readiness",
        "BootReport": "report",
    },
)

__all__ = [
    "BootPlan",
    "BootProgress",
    "BootReport",
    "CheckResult",
    "ContainerDied",
    "Died",
    "HttpReady",
    "InstanceInfo",
    "InstanceStatus",
    "LaneStatus",
    "LogReady",
    "NOTHING",
    "Protected",
    "Readiness",
    "ReadinessTimeout",
    "await_instance",
    "boot",
    "busy_ports",
    "dark_bind",
    "default_check_keys",
    "down",
    "follow",
    "foreign_clients",
    "free_lane_port",
    "hold",
    "holds",
    "instance",
    "instance_name",
    "kept_problem",
    "list_instances",
    "logs",
    "on_lane",
    "plan_boot",
    "ports_of",
    "remove_instance",
    "resolve",
    "start_instance",
    "start_problem",
    "status",
    "stop_instance",
    "up",
    "wait_ready",
]
