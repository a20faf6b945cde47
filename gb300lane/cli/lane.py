"""CLI group: lane. `up`, `down`, `status`, `logs`, and `engine-image build` over `gb300lane.lane`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from gb300lane.cli.common import console, err_console, fail, print_json
from gb300lane.cli.hosts import acts_on_host

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from gb300lane.lane import BootProgress
    from gb300lane.promote.view import LaneView


def _progress_bar(json_out: bool) -> tuple[Progress | None, Callable[[BootProgress], None] | None]:
    """A progress callback drawing elapsed against expected boot time on stderr (None with --json)."""
    if json_out:
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn

    bar = Progress(
        TextColumn("{task.fields[instance]}", style="bold", markup=False),
        BarColumn(),
        TextColumn("{task.fields[text]}"),
        console=err_console,
        transient=True,
    )
    state: dict[str, TaskID] = {}

    def update(p: BootProgress) -> None:
        expected = p.expected_s
        text = f"{p.elapsed_s:5.1f} s / " + (f"expected {expected:.1f} s" if expected else "first boot of this hash")
        if "task" not in state:
            state["task"] = bar.add_task("boot", total=expected or p.timeout_s, instance=p.instance, text=text)
        bar.update(state["task"], completed=min(p.elapsed_s, (expected or p.timeout_s)), text=text)

    return bar, update


def up(
    recipe: str = typer.Argument(..., help="Recipe name (a file stem in recipes/)."),
    dark: bool = typer.Option(False, "--dark", help="Bind to 127.0.0.1 only and check for foreign clients."),
    name: str | None = typer.Option(None, "--name", help="Arm name; the instance becomes <lane>-<recipe>-<ARM>."),
    runtime: str | None = typer.Option(None, "--runtime", help="docker or process (default: the recipe's)."),
    port: int | None = typer.Option(
        None, "--port", help="Move the whole lane: main on this port, the sidecar as far from it as in the recipe."
    ),
    check: list[str] | None = typer.Option(
        None,
        "--check",
        help="Recipe key to verify where the engine renders it (repeatable; default: the keys that differ from production on the same lane, else from the lane's last boot of this recipe, else from the parent; the report names which).",
    ),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds to wait for readiness."),
    allow_outside_trained_block: bool = typer.Option(
        False, "--allow-outside-trained-block", help="Boot k above the checkpoint's dspark_block_size anyway."
    ),
    pull: bool = typer.Option(False, "--pull", help="Pull missing images (never done otherwise)."),
    json_out: bool = typer.Option(False, "--json", help="Print the boot report as JSON."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check the preconditions and print the steps a boot takes; create nothing."
    ),
) -> None:
    """Boot a recipe, wait until it serves, and report the boot checks."""
    from gb300lane.lane import up as lane_up
    from gb300lane.promote.view import production_recipe, protected_instances

    protected = protected_instances()
    baseline = production_recipe() if check is None else None
    if dry_run:
        from gb300lane.lane import plan_boot

        plan = plan_boot(
            recipe, dark=dark, arm=name, runtime=runtime, port=port, check_keys=check, baseline=baseline,
            baseline_role="production", allow_outside_trained_block=allow_outside_trained_block, pull=pull,
            protected=protected,
        )  # fmt: skip
        steps = plan.steps()
        if json_out:
            print_json({"instance": plan.instance, "steps": steps})
        else:
            console.print(
                "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1)),
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            console.print("dry run: nothing was created or started", highlight=False)
        return
    bar, update = _progress_bar(json_out)
    if bar is not None:
        bar.start()
    try:
        report = lane_up(
            recipe, dark=dark, arm=name, runtime=runtime, port=port, check_keys=check, baseline=baseline,
            baseline_role="production", timeout_s=timeout, progress=update, allow_outside_trained_block=allow_outside_trained_block, pull=pull,
            protected=protected,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.stop()
    if json_out:
        print_json(report.model_dump(mode="json"))
    else:
        console.print(report.to_text(), highlight=False, markup=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


def down(
    target: str | None = typer.Argument(None, metavar="[TARGET]", help="An instance, a recipe or an arm."),
    name: str | None = typer.Option(None, "--name", help="Arm name given to `up --name`."),
    all_: bool = typer.Option(
        False,
        "--all",
        help="Every instance TARGET matches (no TARGET: every one on this host), not production or the rollback pair.",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Take down every instance TARGET matches without asking."),
    force: bool = typer.Option(False, "--force", help="Also take down production or the kept rollback pair."),
    json_out: bool = typer.Option(False, "--json", help="Print the removed instance names as JSON."),
) -> None:
    """Stop and remove an instance's containers; several matches are listed, and taken down only with --all or --yes."""
    from gb300lane.lane import NOTHING, list_instances
    from gb300lane.lane import down as lane_down
    from gb300lane.promote.view import protected_instances

    recorded: list[str] = []
    if force:
        from gb300lane.promote import remove_recorded

        # Production or the rollback pair taken down is recorded in the ledger, so status, rollback and history
        # say what is true afterwards.
        removed, recorded = remove_recorded(
            lambda: lane_down(target, arm=name, all=all_, yes=yes, protected=NOTHING), why="gb300lane down --force"
        )
        protected = NOTHING
    else:
        protected = protected_instances()
        removed = lane_down(target, arm=name, all=all_, yes=yes, protected=protected)
    present = {i.name for i in list_instances()} if all_ and protected.instances else set()
    kept = {n: role for n, role in protected.instances.items() if n in present}
    if json_out:
        print_json({"removed": removed, "kept": kept, "recorded": recorded})
        return
    if removed:
        console.print("removed " + ", ".join(removed), highlight=False)
    else:
        console.print("nothing to take down", highlight=False)
    for line in recorded:
        console.print(f"recorded in the promotion ledger: {line}", highlight=False, soft_wrap=True)
    for inst, role in sorted(kept.items()):
        console.print(f"kept {inst} ({role}; --force to take it down)", highlight=False)


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def status(
    target: str | None = typer.Argument(
        None, metavar="[TARGET]", help="Only the instances of this instance name, recipe or arm."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    fleet: bool = typer.Option(False, "--fleet", help="Every lane of the hosts inventory (lanes.yaml) in one table."),
) -> None:
    """What runs where: health, hash, uptime, production or candidate, the rollback pair.

    Exits 1 when the promotion ledger cannot be read (the roles shown are then unknown) or written; with --fleet,
    when a lane cannot be read or a fleet rollout is unfinished.
    """
    from gb300lane.promote.view import lane_view

    if fleet:
        _fleet_status(json_out)
        return

    st = lane_view()
    if target is not None:
        from gb300lane.lane import resolve

        wanted = set(resolve(target, command="status"))
        st = st.model_copy(update={"instances": tuple(r for r in st.instances if r.info.name in wanted)})
    if json_out:
        print_json(st.model_dump(mode="json"))
    else:
        _print_status(st)
    if not st.ok:
        if not json_out:
            problem = st.ledger_error or st.ledger_read_only or ""
            err_console.print(f"[bold red]error:[/] {escape(problem)}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _fleet_status(json_out: bool) -> None:
    from rich.table import Table

    from gb300lane import placement
    from gb300lane.promote.fleet import fleet_view

    if placement.current() is not None:
        fail("--host names one lane and --fleet every lane; pass one of them", 2)
    view = fleet_view()
    if json_out:
        print_json(view.model_dump(mode="json"))
    else:
        table = Table(show_edge=False, header_style="bold", box=None)
        for col in (
            "host",
            "lane",
            "production",
            "fingerprint",
            "health",
            "rollback pair",
            "last verdict",
            "in flight",
        ):
            table.add_column(col)
        for r in view.lanes:
            table.add_row(
                r.host, r.lane, r.production or "-", r.fingerprint or "-", r.health if r.error is None else "unknown",
                r.rollback_pair or "-", r.last_verdict or "-", r.in_flight or "-",
            )  # fmt: skip
        console.print(table)
        for r in view.lanes:
            if r.error is not None:
                err_console.print(f"[bold red]{escape(r.lane)}:[/] {escape(r.error)}", markup=True, highlight=False,
                                  soft_wrap=True)  # fmt: skip
        if view.rollout is not None:
            colour = "red" if view.rollout.crashed else "yellow"
            console.print(f"[{colour}]{escape(view.rollout.explanation)}[/]", markup=True, highlight=False,
                          soft_wrap=True)  # fmt: skip
    if not view.ok:
        raise typer.Exit(1)


def _print_status(st: LaneView) -> None:
    unknown = st.ledger_error is not None
    if st.instances:
        from rich.table import Table

        table = Table(show_edge=False, header_style="bold", box=None)
        for col in ("instance", "recipe", "role", "runtime", "state", "health", "hash", "uptime", "endpoint"):
            table.add_column(col, no_wrap=col in ("instance", "endpoint"))
        for row in st.instances:
            i = row.info
            table.add_row(
                i.name, i.recipe, "unknown" if unknown else row.role, i.runtime, i.state, row.health,
                i.compile_hash or "-", _uptime(row.uptime_s), (i.endpoint or "-").removeprefix("http://"),
            )  # fmt: skip
        console.print(table)
        for row in st.instances:
            if row.dark_bind:
                console.print(
                    f"[red]{escape(row.info.name)} is dark but {escape(row.dark_bind)}: stop what opened it, "
                    f"or take the instance down (`gb300lane down {escape(row.info.name)}`)[/]",
                    markup=True,
                    highlight=False,
                    soft_wrap=True,
                )
    else:
        console.print("no lane instances on this host", highlight=False)
    prod = st.production
    if unknown:
        console.print("production: unknown (the promotion ledger cannot be read)", highlight=False)
    elif prod is not None:
        pair = prod.rollback_pair
        console.print(f"production: {prod.recipe or 'none'} ({prod.instance or '-'})", highlight=False)
        console.print(
            f"rollback pair: {pair.recipe if pair else 'none'} ({pair.instance if pair else '-'})", highlight=False
        )
        flight = prod.in_flight
        if flight is not None:
            colour = "red" if flight.crashed else "yellow"
            console.print(f"[{colour}]{escape(flight.explanation)}[/]", markup=True, highlight=False)
    else:
        console.print("production: none recorded", highlight=False)
    for rt, note in st.runtimes.items():
        if note != "reachable":
            err_console.print(f"[yellow]{escape(rt)}:[/] {escape(note)}", markup=True, highlight=False)
    for line in st.quarantined:
        err_console.print(
            f"[yellow]quarantined:[/] {escape(line)}; delete it once read", markup=True, highlight=False, soft_wrap=True
        )


def logs(
    target: str | None = typer.Argument(None, metavar="[TARGET]", help="An instance, a recipe or an arm."),
    name: str | None = typer.Option(None, "--name", help="Arm name given to `up --name`."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the container stops."),
    tail: int | None = typer.Option(None, "--tail", help="Only the last N lines."),
    sidecar: bool = typer.Option(False, "--sidecar", help="The sidecar container's log instead of the main one."),
) -> None:
    """Print an instance's container log."""
    from gb300lane import lane

    role = "sidecar" if sidecar else "main"
    if follow:
        try:
            for line in lane.follow(target, arm=name, role=role, tail=tail):
                typer.echo(line)
        except KeyboardInterrupt:
            return
        return
    typer.echo(lane.logs(target, arm=name, role=role, tail=tail), nl=False)


def image_build(
    force: bool = typer.Option(False, "--force", help="Rebuild even when the source hash matches."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Build gb300lane-engine:local (the embedded engine, FROM scratch) if the source changed."""
    from gb300lane.runtime.image import ensure_engine_image

    t0 = time.monotonic()
    result = ensure_engine_image(
        force=force, log=None if json_out else (lambda m: err_console.print(m, highlight=False))
    )
    if json_out:
        print_json(result.model_dump(mode="json"))
        return
    what = f"built in {time.monotonic() - t0:.1f} s" if result.built else "up to date"
    console.print(f"{result.tag}: {what} (source hash {result.source_hash})", highlight=False)


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    app.command("up")(acts_on_host(up))
    app.command("down")(acts_on_host(down))
    app.command("status")(acts_on_host(status))
    app.command("logs")(acts_on_host(logs))
    image = typer.Typer(help="The local image of the embedded engine.", no_args_is_help=True)
    image.command("build")(image_build)
    app.add_typer(image, name="engine-image")
