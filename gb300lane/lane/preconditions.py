"""What must hold before an instance boots: not already up, not protected, ports free, images and GPUs present.

Each failure is an error that names what was found and what to do; nothing
is created before these pass. The GPU check that passes (or cannot confirm)
is returned as the boot report's first check.
"""

from __future__ import annotations

from gb300lane import placement
from gb300lane.errors import BootError, StateError
from gb300lane.lane import facts
from gb300lane.lane import records as instances
from gb300lane.lane.checks import CheckResult
from gb300lane.lane.protect import Protected
from gb300lane.recipes import RenderedLane
from gb300lane.runtime import LABEL_INSTANCE, LABEL_PORT, Runtime, image_fix


def check_preconditions(
    rt: Runtime,
    rendered: RenderedLane,
    instance: str,
    port: int,
    protected: Protected,
    products: dict[str, str | None] | None = None,
) -> CheckResult:
    """Raise if the instance cannot boot here now; return the GPU check."""
    existing = instances.load(instance)
    names = [f"{instance}-{spec.role}" for spec in rendered.containers]
    if existing is not None:
        running = [c for c in existing.containers if rt.inspect(c).state == "running"]
        if running:
            raise StateError(
                f"instance {instance} is already up ({', '.join(running)} running since run {existing.run}); "
                f"`gb300lane down {instance}` first, or boot another arm (`gb300lane up {rendered.recipe} --name ARM`)"
            )
    present = existing is not None or any(rt.inspect(n).state != "missing" for n in names)
    why = protected.why(instance) if present else None
    if why is not None:
        raise StateError(
            f"instance {instance} exists and booting it again would replace it, but {why}; "
            f"boot this recipe under another name (`gb300lane up {rendered.recipe} --name ARM`)"
        )
    # Everything else that is wrong is reported at once, each with the fix that applies to it.
    problems: list[str] = []
    for info in rt.list({LABEL_PORT: str(port)}):
        if info.state == "running" and info.labels.get(LABEL_INSTANCE) != instance:
            problems.append(
                f"port {port} is served by lane container {info.name} (instance {info.labels.get(LABEL_INSTANCE)}); "
                "take it down first, or pass --port N (it moves the whole lane: main and sidecar)"
            )
            break
    for spec in rendered.containers:
        if spec.port == port and problems:
            continue  # already named above, with the lane container that serves it
        if facts.port_in_use(spec.port):
            problems.append(
                f"port {spec.port} ({spec.role}) is in use by {facts.port_holders(spec.port)} on {_where()}; "
                "pass --port N (it moves the whole lane: main to N, the sidecar beside it)"
            )
    if rt.builds_engine_image:
        # Only a runtime that runs images needs the image builder (and its imports).
        from gb300lane.runtime.image import ENGINE_IMAGE, ensure_engine_image

        if any(spec.image == ENGINE_IMAGE for spec in rendered.containers):
            # Built from this host, never pulled; without this a changed source tree would boot yesterday's engine.
            ensure_engine_image()
    for image, roles in _images(rendered).items():
        if rt.image_present(image) is False and not rt.pull:
            problems.append(
                f"image {image} ({', '.join(roles)}) is not present on the Docker engine; {image_fix(image)}"
            )
    declared = _declared_gpus(rendered, products or {})
    gpu_check, gpu_problem = _gpus(rendered, products or {})
    problems.extend(declared or ([gpu_problem] if gpu_problem is not None else []))
    if len(problems) == 1:
        raise BootError(f"cannot boot {instance}: {problems[0]}")
    if problems:
        raise BootError(
            f"cannot boot {instance}, {len(problems)} problems: "
            + " ".join(f"({n}) {p};" for n, p in enumerate(problems, 1)).rstrip(";")
        )
    return gpu_check


def _where() -> str:
    """`this host`, or `host NAME` for a lane of the inventory."""
    place = placement.current()
    return f"host {place.host}" if place is not None else "this host"


def _here() -> str:
    """`here`, or `on host NAME` for a lane of the inventory."""
    return "here" if placement.current() is None else f"on {_where()}"


def _norm_product(product: str) -> str:
    return "-".join(product.split()).lower()


def _declared_gpus(rendered: RenderedLane, products: dict[str, str | None]) -> list[str]:
    """What the inventory already says the lane's host cannot hold: GPU ids it does not list, or another product."""
    place = placement.current()
    if place is None or place.gpu_ids is None:
        return []
    out = []
    for spec in rendered.containers:
        missing = [d for d in spec.device_ids if d not in place.gpu_ids]
        if missing:
            out.append(
                f"host {place.host} has no GPU {', '.join(missing)} for the {spec.role} container ({place.inventory} "
                f"lists {', '.join(place.gpu_ids) or 'none'}); fix the recipe's gpus.{spec.role} or boot it on another host "
                f"(`gb300lane up {rendered.recipe} --host HOST`)"
            )
        want = products.get(spec.role)
        for d in spec.device_ids:
            have = place.gpu_products.get(d)
            if want and have and _norm_product(want) != _norm_product(have):
                out.append(
                    f"host {place.host}: GPU {d} is {have} and the recipe's {spec.role} needs {want} "
                    f"(gpus.{spec.role}_product); pick the right device id or boot it on another host "
                    f"(`gb300lane up {rendered.recipe} --host HOST`)"
                )
    return out


def _images(rendered: RenderedLane) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for spec in rendered.containers:
        out.setdefault(spec.image, []).append(spec.role)
    return out


def _gpus(rendered: RenderedLane, products: dict[str, str | None]) -> tuple[CheckResult, str | None]:
    """The GPU check, and what is wrong (None when nothing is): requested GPUs that this host does not have."""
    wanted = sorted({d for spec in rendered.containers for d in spec.device_ids})
    if not wanted:
        return CheckResult(name="gpus", status="pass", summary="no GPUs requested", evidence={"wanted": []}), None
    needs = " and ".join(
        f"{spec.role} GPU {', '.join(spec.device_ids)}"
        + (f" ({product})" if (product := products.get(spec.role)) else "")
        for spec in rendered.containers
        if spec.device_ids
    )
    found = facts.discover_gpus()
    if found is None:
        check = CheckResult(
            name="gpus", status="fail", evidence={"wanted": wanted, "found": None},
            summary=f"GPUs {', '.join(wanted)} requested; no NVIDIA GPU found here (nvidia-smi is not available)",
        )  # fmt: skip
        return check, (
            f"the recipe needs {needs} and {_where()} shows no NVIDIA GPU (nvidia-smi is not available); "
            "boot it on the box that has them, or boot a local- recipe (no GPU)"
        )
    missing = [d for d in wanted if d not in found]
    if missing:
        check = CheckResult(
            name="gpus",
            status="fail",
            evidence={"wanted": wanted, "found": sorted(found)},
            summary=f"GPU(s) {', '.join(missing)} missing",
        )
        return check, (
            f"the recipe needs {needs}; GPU(s) {', '.join(missing)} do not exist {_here()} (found {sorted(found)}); "
            "fix gpus.main / gpus.sidecar in the recipe"
        )
    check = CheckResult(
        name="gpus", status="pass", summary=f"GPUs {', '.join(wanted)} present", evidence={"wanted": wanted}
    )
    return check, None
