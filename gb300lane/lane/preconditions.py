"""What must hold before an instance boots: not already up, not protected, ports free, images and GPUs present.

Each failure is an error that names what was found and what to do; nothing
is created before these pass. The GPU check that passes (or cannot confirm)
is returned as the boot report's first check.
"""

from __future__ import annotations

from gb300lane.errors import BootError, StateError
from gb300lane.lane import facts, instances
from gb300lane.lane.checks import CheckResult
from gb300lane.lane.protect import Protected
from gb300lane.recipes import RenderedLane
from gb300lane.runtime import LABEL_INSTANCE, LABEL_PORT, Runtime


def check_preconditions(
    rt: Runtime, rendered: RenderedLane, instance: str, port: int, protected: Protected
) -> CheckResult:
    """Raise if the instance cannot boot here now; return the GPU check."""
    existing = instances.load(instance)
    names = [f"{instance}-{spec.role}" for spec in rendered.containers]
    if existing is not None:
        running = [c for c in existing.containers if rt.inspect(c).state == "running"]
        if running:
            raise StateError(
                f"instance {instance} is already up ({', '.join(running)} running since run {existing.run}); "
                f"`gb300lane down {existing.recipe}{' --name ' + existing.arm if existing.arm else ''}` first, "
                "or boot another arm with --name"
            )
    present = existing is not None or any(rt.inspect(n).state != "missing" for n in names)
    why = protected.why(instance) if present else None
    if why is not None:
        raise StateError(
            f"instance {instance} exists and booting it again would replace it, but {why}; "
            "boot this recipe under another --name"
        )
    for info in rt.list({LABEL_PORT: str(port)}):
        if info.state == "running" and info.labels.get(LABEL_INSTANCE) != instance:
            raise BootError(
                f"port {port} is served by lane container {info.name} "
                f"(instance {info.labels.get(LABEL_INSTANCE)}); take it down first or pass --port"
            )
    for spec in rendered.containers:
        if facts.port_in_use(spec.port):
            where = "pass --port N (it moves the whole lane: main to N, the sidecar beside it)"
            raise BootError(f"port {spec.port} ({spec.role}) is in use by another process on this host; {where}")
    if rt.name == "docker":
        # Only a docker boot needs the image builder (and its imports).
        from gb300lane.runtime.image import ENGINE_IMAGE, ensure_engine_image

        if any(spec.image == ENGINE_IMAGE for spec in rendered.containers):
            # Built from this host, never pulled; without this a changed source tree would boot yesterday's engine.
            ensure_engine_image()
    for spec in rendered.containers:
        if rt.image_present(spec.image) is False and not rt.pull:
            raise BootError(
                f"image {spec.image} ({spec.role}) is not present on the Docker engine; build it with "
                "`gb300lane engine-image build` (gb300lane-engine:local) or pass --pull"
            )
    return _gpus(rendered)


def _gpus(rendered: RenderedLane) -> CheckResult:
    wanted = sorted({d for spec in rendered.containers for d in spec.device_ids})
    if not wanted:
        return CheckResult(name="gpus", status="pass", summary="no GPUs requested", evidence={"wanted": []})
    found = facts.discover_gpus()
    if found is None:
        return CheckResult(
            name="gpus", status="unknown", evidence={"wanted": wanted, "found": None},
            summary=f"GPUs {', '.join(wanted)} requested; nvidia-smi is not available to confirm them",
        )  # fmt: skip
    missing = [d for d in wanted if d not in found]
    if missing:
        raise BootError(
            f"GPU(s) {', '.join(missing)} requested by the recipe do not exist here (found {sorted(found)}); "
            "fix gpus.main / gpus.sidecar"
        )
    return CheckResult(name="gpus", status="pass", summary=f"GPUs {', '.join(wanted)} present", evidence={"wanted": wanted})
