"""CLI group: promote, rollback, history, prune (top-level commands over `gb300lane.promote`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gb300lane.cli.common import console, err_console, fail, print_json
from gb300lane.cli.hosts import acts_on_host, current_placement
from gb300lane.cli.seams import crash_hook, promotion_ops

if TYPE_CHECKING:  # the promotion layer is imported when a command runs, not for `--help`
    from gb300lane import promote as core
    from gb300lane.promote.rollout import FleetPlan, FleetReport


def _progress(message: str) -> None:
    """Progress of a wait (a repair waiting for a booting instance) on stderr: stdout stays the report."""
    err_console.print(message, highlight=False, soft_wrap=True)


def _report(report: core.TransitionReport, as_json: bool) -> None:
    if as_json:
        print_json(report.model_dump())
    else:
        colour = "green" if report.ok else "red"
        if report.refusals:
            console.print(
                f"[{colour}]{report.kind}:[/] plan refused, {len(report.refusals)} reason"
                f"{'s' if len(report.refusals) != 1 else ''} (dry run: nothing done):",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
            for n, r in enumerate(report.refusals, 1):
                console.print(f"  ({n}) {escape(r)}", markup=True, highlight=False, soft_wrap=True)
        else:
            console.print(
                f"[{colour}]{report.kind}:[/] {escape(report.message)}", markup=True, highlight=False, soft_wrap=True
            )
        for note in report.notes:
            err_console.print(f"[yellow]note:[/] {escape(note)}", markup=True, highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


def _fleet_plan(plan: FleetPlan, as_json: bool) -> None:
    if as_json:
        print_json(plan.model_dump(mode="json"))
    else:
        for lp in plan.lanes:
            console.print(f"lane {lp.lane} (host {lp.host}, production {lp.previous or 'none'}):", highlight=False)
            for i, step in enumerate(lp.steps, 1):
                console.print(f"  {i}. {step}", highlight=False, markup=False, soft_wrap=True)
            for why in lp.refusals:
                console.print(f"  refused: {why}", highlight=False, markup=False, soft_wrap=True)
        console.print(
            f"dry run: nothing was changed; the rollout of {plan.recipe} "
            + ("would run" if plan.ok else "would be refused"),
            highlight=False,
        )
    if not plan.ok:
        raise typer.Exit(1)


def promote_cmd(
    recipe: Annotated[str, typer.Argument(help="Recipe to make production, e.g. local-v27.")],
    force: Annotated[bool, typer.Option("--force", help="Promote without a PASS verdict (needs --reason).")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why a forced promotion is made; recorded.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Complete an interrupted promotion of RECIPE.")] = False,
    port: Annotated[
        int | None, typer.Option("--port", help="Production port for a first promotion (default: the recipe's).")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Plan only: print the steps, or every reason the promotion would be refused (exit 1); change nothing.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    lanes: Annotated[
        str | None, typer.Option("--lanes", help="Roll out to these inventory lanes in order, a,b,c (a is the canary).")
    ] = None,
    fleet: Annotated[
        bool, typer.Option("--fleet", help="Roll out to every lane of the inventory, in its order.")
    ] = False,
    keep_going: Annotated[
        bool, typer.Option("--keep-going", help="Fleet: move the other lanes when one fails (else roll back all).")
    ] = False,
    from_card: Annotated[
        str | None,
        typer.Option(
            "--from-card",
            metavar="CARD",
            help="Start the candidate this card's run kept on the lane "
            "(`card run --take-lane`) as production instead of booting RECIPE afresh; needs the card's PASS.",
        ),
    ] = None,
) -> None:
    """Make RECIPE production: needs a PASS verdict; keeps the old production as the rollback pair.

    With --from-card, the candidate instance the card's run kept (stopped) on the production port becomes production
    without a fresh boot: only on that card's PASS, and only while the lane holds the very instance the card measured.

    With --lanes or --fleet, one lane at a time, each with its boot checks and smoke gates; the first failure
    rolls back the lanes already moved, so the fleet ends all-old or all-new (unless --keep-going).
    """
    if reason and not force:
        fail("--reason goes with --force: a promotion with a PASS verdict records the verdict, not a reason", 2)
    if from_card is not None and (force or resume):
        fail(
            "--from-card promotes on the card's own PASS; --force (no PASS) and --resume (an interrupted promotion, "
            "as it was planned) do not go with it",
            2,
        )
    if lanes is not None or fleet:
        if lanes is not None and fleet:
            fail("--lanes and --fleet both name the lanes; pass one of them", 2)
        if current_placement() is not None:
            fail("--host names one lane; --lanes and --fleet name the lanes of a rollout themselves", 2)
        if resume or port is not None or from_card is not None:
            fail(
                "--resume, --port and --from-card act on one lane; a fleet rollout is repaired with `rollback --fleet`",
                2,
            )
        from gb300lane.promote.rollout import plan_rollout, rollout

        names = None if fleet else [x.strip() for x in (lanes or "").split(",") if x.strip()]
        if names is not None and not names:
            fail("--lanes needs at least one lane name, e.g. --lanes a,b,c", 2)
        if dry_run:
            _fleet_plan(plan_rollout(recipe, lanes=names, keep_going=keep_going, force=force, reason=reason), as_json)
            return
        _fleet_report(
            rollout(recipe, lanes=names, keep_going=keep_going, force=force, reason=reason,
                    crash_hook=crash_hook(), progress=_progress),
            as_json,
        )  # fmt: skip
        return
    if keep_going:
        fail("--keep-going goes with --lanes or --fleet", 2)
    from gb300lane import promote as core

    report = core.promote(
        recipe, force=force, reason=reason, resume=resume, port=port, dry_run=dry_run, from_card=from_card,
        ops=promotion_ops(), crash_hook=crash_hook(), progress=_progress,
    )  # fmt: skip
    _report(report, as_json)


def _fleet_report(report: FleetReport, as_json: bool) -> None:
    if as_json:
        print_json(report.model_dump())
    else:
        colour = "green" if report.ok else "red"
        console.print(f"[{colour}]fleet {report.outcome}:[/] {escape(report.message)}", markup=True, highlight=False,
                      soft_wrap=True)  # fmt: skip
        for m in report.lanes:
            console.print(f"  {m.lane} ({m.host}): {m.status}", highlight=False, soft_wrap=True)
        console.print(f"journal: {report.journal}", highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


def rollback_cmd(
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Plan only: print the steps, or every reason the rollback would be refused (exit 1); change nothing.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    fleet: Annotated[
        bool,
        typer.Option(
            "--fleet", help="Repair an unfinished fleet rollout: every lane it touched back to its old recipe."
        ),
    ] = False,
) -> None:
    """Restore the kept rollback pair (or repair an interrupted promote/rollback) and report the time to restore."""
    if fleet:
        if current_placement() is not None:
            fail("--host names one lane; `rollback --fleet` repairs every lane of the unfinished rollout", 2)
        if dry_run:
            fail("--dry-run acts on one lane; `gb300lane status --fleet` shows what `rollback --fleet` would repair", 2)
        from gb300lane.promote.rollout import repair

        _fleet_report(repair(crash_hook=crash_hook(), progress=_progress), as_json)
        return
    from gb300lane import promote as core

    report = core.rollback(dry_run=dry_run, ops=promotion_ops(), crash_hook=crash_hook(), progress=_progress)
    _report(report, as_json)


def history_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the events as JSON.")] = False,
) -> None:
    """Promotions, rollbacks, forced actions, failures and prunes: when, what and why."""
    from gb300lane import promote as core

    events = core.history()
    if as_json:
        print_json([e.model_dump() for e in events])
        return
    if not events:
        console.print("no promotions recorded yet")
        return
    for e in events:
        console.print(_event_line(e), highlight=False, soft_wrap=True)


def _event_line(e: core.LedgerEvent) -> str:
    """One history line: id, when, what (forced), from -> to, timings, why."""
    what = e.kind + (" (forced)" if e.forced else "")
    move = f" {e.previous or '-'} -> {e.recipe or '-'}" if e.kind not in ("prune", "take_lane") else ""
    if e.kind == "take_lane":
        move = f" production {e.recipe} stopped and restarted"
    elif e.kind == "removed":
        move = ""
    if e.kind in ("promote_failed", "rollback_failed", "recover"):
        move += f" (production stays {e.previous})" if e.previous else " (nothing serves production)"
    timing = ""
    if e.restore_seconds is not None:
        timing = f" restore {e.restore_seconds:.2f} s" + (
            f" (tool {e.tool_seconds:.2f} s)" if e.tool_seconds is not None else ""
        )
    why = "; ".join(x for x in (e.reason, e.verdict if e.kind == "promote" else None, e.detail) if x)
    return f"#{e.id} {e.at} {what}{move}{timing}: {why}"


def prune_cmd(
    keep: Annotated[int, typer.Option("--keep", help="Kept instances to leave beside production and the pair.")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be removed; remove nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Remove old kept instances; never production or the current rollback pair."""
    from gb300lane import promote as core

    report = core.prune(keep=keep, dry_run=dry_run, ops=promotion_ops())
    if as_json:
        print_json(report.model_dump())
        return
    verb = "would remove" if report.dry_run else "removed"
    console.print(f"{verb}: {', '.join(report.removed) or 'nothing'}", highlight=False)
    for line in report.kept:
        console.print(f"kept: {line}", highlight=False)


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    app.command("promote")(acts_on_host(promote_cmd))
    app.command("rollback")(acts_on_host(rollback_cmd))
    app.command("history")(acts_on_host(history_cmd))
    app.command("prune")(acts_on_host(prune_cmd))
