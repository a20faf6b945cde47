"""Booting and running lane instances: up / down / status / logs, readiness, the boot checks and the boot report.

An instance is one booted recipe (main + sidecar) named from its lane, recipe and arm (`instance_name`).
`up` proves what booted (autotune hash, flags, env as a set, KV pool, dark
lane); `instance()` is the same boot for the length of a `with` block;
`foreign_clients` repeats the dark-lane request count on demand, for a card
to call right before its first window. The lane reports facts (instances,
health, hashes) and never roles: which instance is production is the
promotion layer's, which hands `up` and `down` the set they must protect.
"""

from gb300lane.lane.boot import (
    BootPlan,
    BootProgress,
    await_instance,
    boot,
    instance_name,
    plan_boot,
    start_instance,
    up,
)
from gb300lane.lane.checkkeys import default_check_keys
from gb300lane.lane.checks import CheckResult
from gb300lane.lane.foreign import foreign_clients
from gb300lane.lane.instance import instance
from gb300lane.lane.manage import (
    InstanceInfo,
    InstanceStatus,
    LaneStatus,
    down,
    follow,
    list_instances,
    logs,
    remove_instance,
    resolve,
    status,
    stop_instance,
)
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
from gb300lane.lane.report import BootReport

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
    "default_check_keys",
    "down",
    "follow",
    "foreign_clients",
    "instance",
    "instance_name",
    "list_instances",
    "logs",
    "plan_boot",
    "remove_instance",
    "resolve",
    "start_instance",
    "status",
    "stop_instance",
    "up",
    "wait_ready",
]
