"""Booting and running lane instances: up / down / status / logs, the boot checks and the boot report.

An instance is one booted recipe (main + sidecar) named `<lane>-<arm or recipe>`.
`up` proves what booted (autotune hash, flags, env as a set, KV pool, dark
lane); `foreign_clients` repeats the dark-lane request count on demand, for a
card to call right before its first window.
"""

from gb300lane.lane.boot import BootProgress, default_check_keys, foreign_clients, start_instance, up
from gb300lane.lane.checks import CheckResult
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
from gb300lane.lane.report import BootReport

__all__ = [
    "BootProgress",
    "BootReport",
    "CheckResult",
    "InstanceInfo",
    "InstanceStatus",
    "LaneStatus",
    "default_check_keys",
    "down",
    "follow",
    "foreign_clients",
    "list_instances",
    "logs",
    "remove_instance",
    "resolve",
    "start_instance",
    "status",
    "stop_instance",
    "up",
]
