"""Promote and rollback: the state machine that moves production between recipes, and its crash repair.

Each command takes the transition lock, writes a transition (with its plan:
target, previous production, rollback pair, port, instance name) and then
drives the lane step by step. Every step journals `intent` before its side
effect and `done` after it. Steps read the lane's facts first (is it running,
does it exist), so the same drive both starts a transition and resumes one a
killed process left behind: `promote R --resume` completes a crashed
promotion, `rollback` reverts it, and `rollback` completes a crashed rollback.

Invariants: production is stopped (and kept) before anything boots on its
port, and the port is checked free before a boot, so two instances never
serve it. Only `prune` removes an instance; here everything stopped is kept.

Crash seam: a `crash_hook` callable receives the name of every point
(`<kind>.<step>` after the step's intent is journalled and before its side
effect, `<kind>.<step>:after` after the side effect, before `done`), so a test
can die there; `gb300lane.testing.crash` does it like kill -9 for the CLI.
"""

from __future__ import annotations

import time
from pathlib import Path

from gb300lane import keyed, paths, signing
from gb300lane.errors import LaneError, StateError
from gb300lane.fsio import require_free
from gb300lane.promote.ledger import Ledger, utcnow
from gb300lane.promote.live_ops import default_ops
from gb300lane.promote.lock import TransitionLock
from gb300lane.promote.models import (
    BootInfo,
    CustodyLinks,
    KeptCandidate,
    NewEvent,
    PlannedTransition,
    PromotePlan,
    RollbackPlan,
    Slot,
    TakeLanePlan,
    TransitionReport,
    VerdictCustody,
    VerdictInfo,
)
from gb300lane.promote.ops import Progress, PromotionOps
from gb300lane.promote.runs import CrashHook, Run, first_line, instance_fact, open_or_close_prune, report_link
from gb300lane.promote.state import explain, open_ledger
from gb300lane.promote.take_lane import give_back
from gb300lane.recipes import content_hash


def crash_points() -> dict[str, tuple[str, ...]]:
    """Every crash point, by transition kind (the tests walk all of them)."""
    promote = ("stop_production", "check_port", "boot_candidate", "smoke_candidate", "record")
    from_card = ("stop_production", "check_port", "start_candidate", "smoke_candidate", "record")  # a kept candidate
    failure = ("stop_candidate", "restore_previous")
    rollback = ("stop_production", "check_port", "start_pair", "smoke_pair", "record")
    rb_failure = ("stop_pair", "restore_previous")
    take = ("stop_production", "stop_arm", "check_port", "restore_production", "record")

    def both(kind: str, steps: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(p for s in steps for p in (f"{kind}.{s}", f"{kind}.{s}:after"))

    return {
        "promote": both("promote", promote),
        "promote_from_card": both("promote", from_card),
        "promote_failure": both("promote", failure),
        "rollback": both("rollback", rollback),
        "rollback_failure": both("rollback", rb_failure),
        "take_lane": both("take_lane", take),
    }


def preflight(ops: PromotionOps, *, starts: tuple[str | None, ...] = ()) -> list[str]:
    """Everything a transition needs before it stops anything, as refusals (empty: it may go on): the state key,
    the signing key (a test message signed and verified as the record at the end will be), and each kept
    instance it may start (the pair, or production to restore)."""
    return key_refusals() + start_refusals(ops, starts)


def key_refusals() -> list[str]:
    """The state key reads, and the signing key signs a test message that verifies (a garbage, zeroed or foreign
    key refuses here, not after production was stopped)."""
    out: list[str] = []
    try:
        keyed.state_key()
    except LaneError as exc:
        out.append(first_line(exc))
    try:
        signing.check_key()
    except LaneError as exc:
        out.append(f"the transition's record is signed at its end, and {first_line(exc)}")
    return out


def start_refusals(ops: PromotionOps, starts: tuple[str | None, ...]) -> list[str]:
    """Each kept instance the transition may start that could not be started as it stands."""
    out = []
    for instance in starts:
        if instance is None:
            continue
        problem = ops.start_problem(instance)
        if problem is not None:
            out.append(f"{instance} {problem}; fix it first (`gb300lane status` shows the lane)")
    return out


def _refuse(what: str, refusals: list[str]) -> StateError:
    """One error for every refusal: the first in full, then the others; nothing was stopped."""
    head = refusals[0] if refusals[0].startswith("refusing to ") else f"refusing to {what}: {refusals[0]}"
    more = "".join(f"; also: {r}" for r in refusals[1:])
    tail = "" if head.rstrip().endswith("nothing was stopped") else "; nothing was stopped"
    return StateError(f"{head}{more}{tail}")


def _since(slot: Slot | None, since: str, **changes: str) -> Slot | None:
    """The slot taking a new role at `since` (None stays None)."""
    return slot.model_copy(update={"since": since, **changes}) if slot is not None else None


# -- promote -----------------------------------------------------------------------------------


def promote(
    recipe: str,
    *,
    force: bool = False,
    reason: str | None = None,
    resume: bool = False,
    port: int | None = None,
    dry_run: bool = False,
    from_card: str | None = None,
    ops: PromotionOps | None = None,
    crash_hook: CrashHook | None = None,
    progress: Progress | None = None,
) -> TransitionReport:
    """Make `recipe` production: plan (every refusal found before anything is stopped), then stop-and-keep
    production, boot, smoke, record.

    A candidate that fails to boot or fails smoke is stopped and kept, the
    previous production is restarted, and the report says so with ok=False.
    `dry_run` returns the plan (`plan_promotion`: its steps and every refusal) without touching the lane.

    `from_card` promotes the candidate that card's run kept on the lane (its
    candidate arm's instance, stopped) instead of booting the recipe afresh:
    only on that card's PASS, the recipe's newest verdict, and only when the
    lane still holds the very instance the card measured, on the production
    port and serving as production would. It is started like a rollback pair
    and smoke-tested, journaled and repaired like any promotion.
    """
    ops = ops or default_ops()
    if force and not (reason and reason.strip()):
        raise StateError('promote --force needs --reason "...": a forced promotion is recorded with why')
    if force and from_card is not None:
        raise StateError(
            f"--from-card promotes on card {from_card}'s own PASS; --force promotes without one: pass one of them"
        )
    with TransitionLock(f"promote {recipe}"), open_ledger() as ledger:
        open_tr = ledger.open_transition() if dry_run else open_or_close_prune(ledger)
        if open_tr is not None and not (dry_run and open_tr.kind == "prune"):
            if resume and isinstance(open_tr.plan, PromotePlan) and open_tr.recipe == recipe:
                refused = preflight(ops)
                if refused:
                    raise _refuse(f"resume the promotion of {recipe}", refused)
                run = Run(ledger, ops, open_tr, crash_hook, resumed=True, progress=progress)
                return _drive_promote(run, open_tr.plan)
            text, _ = explain(ledger, open_tr, crashed=True)
            raise StateError(f"{ledger.path}: {text}")
        if resume:
            raise StateError(
                f"{ledger.path}: no interrupted promotion of {recipe} to resume; run `gb300lane promote {recipe}`"
            )
        planned = plan_promotion(ledger, ops, recipe, force=force, reason=reason, port=port, from_card=from_card)
        prod, pair = ledger.production(), ledger.rollback_pair()
        if planned.nothing is not None:
            return TransitionReport(
                kind="promote",
                ok=True,
                production=recipe,
                rollback_pair=pair.recipe if pair else None,
                message=planned.nothing,
                notes=planned.notes,
            )
        if dry_run:
            if planned.refusals:
                return TransitionReport(
                    kind="promote", ok=False, production=prod.recipe if prod else None,
                    rollback_pair=pair.recipe if pair else None, refusals=planned.refusals, notes=planned.notes,
                    message=f"plan refused ({len(planned.refusals)} reason{'s' if len(planned.refusals) != 1 else ''}"
                            "): " + "; ".join(planned.refusals) + " (dry run: nothing done)",
                )  # fmt: skip
            return TransitionReport(
                kind="promote", ok=True, production=prod.recipe if prod else None,
                rollback_pair=pair.recipe if pair else None, steps=planned.steps, notes=planned.notes,
                message=f"plan ({_because(planned)}): " + "; ".join(planned.steps) + " (dry run: nothing done)",
            )  # fmt: skip
        if planned.refusals:
            raise _refuse(f"promote {recipe}", list(planned.refusals))
        plan = planned.plan
        assert isinstance(plan, PromotePlan)
        require_free(paths.state_dir(), action=f"promote {recipe}")
        tid = ledger.begin(recipe, prod.recipe if prod else None, plan)
        report = _drive_promote(Run(ledger, ops, ledger.transition(tid), crash_hook, progress=progress), plan)
        return report.model_copy(update={"notes": planned.notes})


def _because(planned: PlannedTransition) -> str:
    plan = planned.plan
    if isinstance(plan, PromotePlan):
        return f"forced: {plan.reason}" if plan.forced else str(plan.verdict or "")
    return "rollback"


def plan_promotion(
    ledger: Ledger,
    ops: PromotionOps,
    recipe: str,
    *,
    force: bool = False,
    reason: str | None = None,
    port: int | None = None,
    from_card: str | None = None,
) -> PlannedTransition:
    """What `promote` will do, and every reason it may not, found without changing anything: the keys (a test
    message signed and verified), production's chain of custody, the verdict (a PASS, its chain, what the evidence
    log knows of the recipe's runs, the recipe's content as the card measured it), the kept candidate of
    `from_card`, the port, every boot refusal that needs no engine (`ops.preflight`), and that production can be
    restarted if the candidate fails. `promote` raises them all before it stops anything."""
    refusals = key_refusals()
    try:
        fingerprint, recipe_port = ops.describe(recipe)
    except LaneError as exc:
        return PlannedTransition(kind="promote", steps=(), refusals=(*refusals, first_line(exc)), plan=None)
    prod, pair = ledger.production(), ledger.rollback_pair()
    if prod and prod.recipe == recipe and prod.fingerprint == fingerprint:
        _, running = instance_fact(ops, prod.instance)
        if running and not refusals:
            return PlannedTransition(
                kind="promote", steps=(), refusals=(), plan=None,
                nothing=f"{recipe} is already production ({prod.instance}, fingerprint {fingerprint}); nothing to do",
            )  # fmt: skip
    who = f"refusing to promote {recipe}"
    broken = ops.production_custody()
    if broken is not None and not force:
        refusals.append(
            f"{who}: production's chain of custody breaks at {broken}; `gb300lane verify --production` shows every "
            'link (or --force --reason "..." to promote anyway)'
        )
    verdict = ops.verdict(recipe)
    notes = (verdict.question,) if verdict is not None and verdict.question else ()
    if verdict is not None and not force:
        if verdict.custody:
            refusals.append(
                f"{who}: its newest verdict ({verdict.reference}) does not verify: {verdict.custody}; "
                '`gb300lane verify` shows the chain (or --force --reason "..." to promote anyway)'
            )
        for br in verdict.evidence:
            refusals.append(
                f"{who}: {br} (promotion rests on what the evidence log remembers: `gb300lane verify "
                '--evidence` shows it; or --force --reason "..." to promote anyway)'
            )
        if verdict.binding:
            refusals.append(f"{who}: {verdict.binding}")
    kept: KeptCandidate | None = None
    if from_card is not None:
        candidate = ops.kept_candidate(from_card)  # a card with no receipts is named at once
        try:
            kept = _kept(candidate, recipe, fingerprint, verdict)
        except StateError as exc:
            refusals.append(first_line(exc))
    passed = bool(verdict and verdict.passed)
    if not (verdict and verdict.verdict == "PASS") and not force:
        found = (
            f"its newest verdict is {verdict.verdict} ({verdict.reference})"
            if verdict and verdict.verdict != "none"
            else "no card has it as its B arm"
        )
        refusals.append(
            f"{who}: {found}; promotion needs a PASS verdict (first or re-scored) from a card whose B arm is {recipe}, "
            'or --force --reason "..." to record a forced promotion'
        )
    if port is not None and ledger.port() not in (None, port):
        refusals.append(
            f"{ledger.path}: the production port is {ledger.port()}; --port only sets it on a first promotion"
        )
    lane_port = ledger.port() or port or recipe_port
    instance = ops.plan_instance(recipe, recipe)
    tag = recipe
    if kept is not None:
        if kept.port != lane_port:
            refusals.append(
                f"refusing to promote {recipe} from card {kept.card}: its kept candidate {kept.instance} serves on "
                f"port {kept.port} and production on {lane_port} (the card ran beside production, not with "
                f"--take-lane); a kept instance keeps its port: `gb300lane promote {recipe}` boots it on {lane_port}"
            )
        tag, instance = kept.arm, str(kept.instance)
    elif from_card is None:
        taken = {f.name for f in ops.instances()}
        n = 1
        while ops.plan_instance(recipe, tag) in taken:
            n += 1
            tag = f"{recipe}-{n}"
        instance = ops.plan_instance(recipe, tag)
    prod_running = prod is not None and instance_fact(ops, prod.instance)[0]
    # A failed candidate is reverted by restarting production: it must be startable before it is stopped.
    refusals += start_refusals(
        ops, (prod.instance if prod is not None and prod_running else None, instance if kept is not None else None)
    )
    if kept is None:
        refusals.extend(
            ops.preflight(recipe, port=lane_port, production=prod.instance if prod_running and prod else None)
        )
    refusals = list(dict.fromkeys(refusals))
    if refusals:
        return PlannedTransition(kind="promote", steps=(), refusals=tuple(refusals), notes=notes, plan=None)
    plan = PromotePlan(
        recipe=recipe, fingerprint=fingerprint, port=lane_port, tag=tag, instance=instance,
        previous=prod, pair=pair, verdict=verdict.reference if verdict else None, forced=not passed,
        reason=reason, verdict_custody=_verdict_custody(verdict), from_card=kept.card if kept else None,
        content=ops.recipe_content(recipe),
    )  # fmt: skip
    steps = []
    if prod:
        steps.append(f"stop {prod.instance} ({prod.recipe}) and keep it as the rollback pair")
    steps.append(
        f"start {instance}, the candidate card {plan.from_card} kept, on port {lane_port} (no fresh boot)"
        if plan.from_card
        else f"boot {recipe} as {plan.instance} on port {lane_port}"
    )
    steps += ["run its smoke gates", "record the promotion"]
    return PlannedTransition(kind="promote", steps=tuple(steps), refusals=(), notes=notes, plan=plan)


def _drive_promote(run: Run, p: PromotePlan) -> TransitionReport:
    recipe, instance, prev = p.recipe, p.instance, p.previous
    t0 = time.monotonic()
    if prev:
        _, running = run.fact(prev.instance)
        if running:
            with run.step("stop_production", instance=prev.instance):
                run.ops.stop_keep(prev.instance)
    run.stop_others(instance, "stop_stray")
    exists, running = run.fact(instance)
    boot: BootInfo | None = None
    try:
        if not exists:
            run.free_port()
            with run.step("boot_candidate", instance=instance, port=p.port) as out:
                boot = run.ops.boot(recipe, port=p.port, tag=p.tag, baseline=prev.recipe if prev else None)
                out["endpoint"] = boot.endpoint
        elif not running:
            run.free_port()
            with run.step("start_candidate", instance=instance):
                boot = run.ops.start_kept(instance)
        else:
            # Booted by the process that was killed, maybe still booting: wait for it and run the boot checks
            # that process never got to, so no candidate becomes production unchecked.
            with run.step("start_candidate", instance=instance, awaited=True):
                boot = run.ops.await_ready(instance, progress=run.progress)
    except LaneError as exc:
        return _revert_promote(run, p, f"{recipe} failed to boot: {first_line(exc)}", t0)
    endpoint = boot.endpoint if boot else _endpoint(run.ops, instance, p.port)
    try:
        with run.step("smoke_candidate", recipe=recipe) as out:
            smoke = run.ops.smoke(recipe, endpoint)
            out.update(passed=smoke.passed, summary=smoke.summary)
    except LaneError as exc:
        # A smoke that could not run or be recorded (a full disk) is not a pass: put production back.
        return _revert_promote(run, p, f"{recipe}'s smoke could not be run or recorded: {first_line(exc)}", t0)
    if not smoke.passed:
        return _revert_promote(run, p, f"{recipe} failed smoke: {smoke.summary}", t0)
    with run.step("record"):
        pass
    now = utcnow()
    fingerprint = boot.fingerprint if boot and boot.fingerprint else p.fingerprint
    new_prod = Slot(recipe=recipe, instance=instance, fingerprint=fingerprint, endpoint=endpoint, since=now)
    new_pair = _since(prev, now) if prev else p.pair
    kept_txt = f"started {instance}, the candidate card {p.from_card} kept (no fresh boot); " if p.from_card else ""
    event_id = run.ledger.finish(
        run.tr.id, "promoted", production=new_prod, rollback=new_pair, port=p.port,
        kept=[(new_pair, "rollback pair")] if prev and new_pair else [],
        links=CustodyLinks(recipe=recipe, fingerprint=new_prod.fingerprint, verdict=p.verdict_custody,
                           forced=p.forced, boot_report=report_link(boot),
                           content_sha256=content_hash(p.content) if p.content is not None else None,
                           content=p.content),
        event=NewEvent(
            kind="promote", recipe=recipe, instance=instance, fingerprint=new_prod.fingerprint,
            previous=prev.recipe if prev else None, verdict=p.verdict, forced=p.forced, reason=p.reason,
            detail=f"{kept_txt}smoke: {smoke.summary}",
        ),
    )  # fmt: skip
    pair_txt = (
        f"{prev.recipe} ({prev.instance}) stopped and kept as the rollback pair"
        if prev
        else "no rollback pair (first promotion)"
    )
    forced = " (forced: " + str(p.reason) + ")" if p.forced else ""
    return TransitionReport(
        kind="promote",
        ok=True,
        production=recipe,
        rollback_pair=new_pair.recipe if new_pair else None,
        message=f"promoted {recipe} to production on {endpoint}{forced}; {kept_txt}smoke: {smoke.summary}; {pair_txt}",
        smoke_seconds=smoke.seconds,
        event_id=event_id,
    )


def _revert_promote(run: Run, p: PromotePlan, why: str, t0: float, *, recovering: bool = False) -> TransitionReport:
    """Put the previous production back: stop (keep) the candidate, restart the previous, record why."""
    prev = p.previous
    exists, _ = run.fact(p.instance)
    # A failed candidate is stopped and kept for inspection; only prune removes it.
    run.stop_others(prev.instance if prev else None, "stop_candidate", also=p.instance)
    endpoint = _endpoint(run.ops, p.instance, p.port)
    candidate = Slot(recipe=p.recipe, instance=p.instance, fingerprint=p.fingerprint, endpoint=endpoint, since=utcnow())
    kept = [(candidate, "failed candidate")] if exists else []
    restored: BootInfo | None = None
    restore_error = None
    try:
        restored = run.bring_up(prev, "restore_previous")
    except LaneError as exc:
        restore_error = first_line(exc)
    restore_s = time.monotonic() - t0
    with run.step("record"):
        pass
    kind = "recover" if recovering else "promote_failed"
    report_kind = "recover" if recovering else "promote"
    if restore_error is not None and prev is not None:
        event_id = run.ledger.finish(
            run.tr.id, "failed", production=None, rollback=prev, kept=kept,
            event=NewEvent(kind=kind, recipe=p.recipe, instance=p.instance, previous=prev.recipe, verdict=p.verdict,
                           forced=p.forced, reason=why,
                           detail=f"restoring {prev.recipe} failed too: {restore_error}; production is down"),
        )  # fmt: skip
        return TransitionReport(
            kind=report_kind, ok=False, production=None, rollback_pair=prev.recipe,
            message=f"{why}; restoring {prev.recipe} failed too ({restore_error}); nothing serves production: "
                    f"fix it and run `gb300lane rollback` to start {prev.recipe} again",
            event_id=event_id,
        )  # fmt: skip
    back = f"restored {prev.recipe} ({prev.instance})" if prev else "no previous production to restore"
    event_id = run.ledger.finish(
        run.tr.id, "reverted", production=prev, rollback=p.pair, kept=kept,
        event=NewEvent(
            kind=kind, recipe=p.recipe, instance=p.instance, fingerprint=p.fingerprint,
            previous=prev.recipe if prev else None, verdict=p.verdict, forced=p.forced, reason=why,
            restore_seconds=restore_s if prev else None,
            detail=f"{back}; {p.recipe} stopped and kept as {p.instance}" if exists else back,
        ),
    )  # fmt: skip
    return TransitionReport(
        kind=report_kind,
        ok=recovering,
        production=prev.recipe if prev else None,
        rollback_pair=p.pair.recipe if p.pair else None,
        message=f"{why}; {back}" + (f" in {restore_s:.1f} s" if prev else ""),
        restore_seconds=restore_s if prev else None,
        boot_seconds=restored.boot_seconds if restored else None,
        event_id=event_id,
    )


# -- rollback ----------------------------------------------------------------------------------


def rollback(
    *,
    dry_run: bool = False,
    ops: PromotionOps | None = None,
    crash_hook: CrashHook | None = None,
    progress: Progress | None = None,
    reason: str | None = None,
) -> TransitionReport:
    """Restore the kept rollback pair; with an interrupted transition in the ledger, repair it instead.

    `dry_run` returns the plan (`plan_rollback`: its steps and every refusal) without touching the lane;
    `reason` is recorded with the rollback.
    """
    ops = ops or default_ops()
    with TransitionLock("rollback"), open_ledger() as ledger:
        open_tr = ledger.open_transition() if dry_run else open_or_close_prune(ledger)
        keys = key_refusals()
        if dry_run and open_tr is not None and open_tr.kind != "prune":
            text, _ = explain(ledger, open_tr, crashed=True)
            action = (
                f"restore {open_tr.previous or 'nothing'}"
                if open_tr.kind in ("promote", "take_lane")
                else "complete it"
            )
            return TransitionReport(
                kind="recover",
                ok=not keys,
                production=None,
                rollback_pair=None,
                refusals=tuple(keys),
                message=f"plan: {text.split(';')[0]}; {action}"
                + "".join(f"; refused: {k}" for k in keys)
                + " (dry run: nothing done)",
            )
        if open_tr is not None:
            if keys:
                raise _refuse("repair the interrupted transition", keys)
            run = Run(ledger, ops, open_tr, crash_hook, resumed=True, progress=progress)
            if isinstance(open_tr.plan, PromotePlan):
                text, _ = explain(ledger, open_tr, crashed=True)
                return _revert_promote(run, open_tr.plan, text.split(";")[0], time.monotonic(), recovering=True)
            if isinstance(open_tr.plan, RollbackPlan):
                return _drive_rollback(run, open_tr.plan)
            if isinstance(open_tr.plan, TakeLanePlan):
                return give_back(run, open_tr.plan, held_s=None)
        planned = plan_rollback(ledger, ops, reason=reason, keys=keys)
        prod, pair = ledger.production(), ledger.rollback_pair()
        if dry_run:
            return TransitionReport(
                kind="rollback", ok=not planned.refusals, production=prod.recipe if prod else None,
                rollback_pair=pair.recipe if pair else None, steps=planned.steps, refusals=planned.refusals,
                message=("plan: " + "; ".join(planned.steps) if not planned.refusals else
                         "plan refused: " + "; ".join(planned.refusals)) + " (dry run: nothing done)",
            )  # fmt: skip
        if planned.refusals:
            raise _refuse("roll back", list(planned.refusals))
        plan = planned.plan
        assert isinstance(plan, RollbackPlan)
        require_free(paths.state_dir(), action="roll back")
        tid = ledger.begin(plan.target.recipe, plan.previous.recipe if plan.previous else None, plan)
        return _drive_rollback(Run(ledger, ops, ledger.transition(tid), crash_hook, progress=progress), plan)


def plan_rollback(
    ledger: Ledger, ops: PromotionOps, *, reason: str | None = None, keys: list[str] | None = None
) -> PlannedTransition:
    """What `rollback` will do, and every reason it may not, found without changing anything: the keys, a kept
    pair that still exists and can start, and that production can be restarted if the pair fails."""
    refusals = list(key_refusals() if keys is None else keys)
    prod, pair = ledger.production(), ledger.rollback_pair()
    if pair is None:
        refusals.append(
            f"{ledger.path}: no rollback pair in the ledger (production: {prod.recipe if prod else 'none'}); "
            "a pair is kept by `gb300lane promote` when it replaces a production recipe"
        )
        return PlannedTransition(kind="rollback", steps=(), refusals=tuple(refusals), plan=None)
    if not instance_fact(ops, pair.instance)[0]:
        # A plan is offered only when it can run: the pair's containers must still exist to be started.
        refusals.append(
            f"{ledger.path}: the rollback pair {pair.recipe} ({pair.instance}) no longer exists on this host "
            "(removed outside gb300lane); there is nothing to roll back to: `gb300lane promote "
            f'{pair.recipe} --force --reason "..."` boots it again as production'
        )
        return PlannedTransition(kind="rollback", steps=(), refusals=tuple(refusals), plan=None)
    if prod is not None and not instance_fact(ops, prod.instance)[0]:
        prod = None  # production's instance is gone: nothing to stop, nothing to keep as the next pair
    refusals += start_refusals(ops, (pair.instance, prod.instance if prod is not None else None))
    try:
        port = ledger.port() or ops.describe(pair.recipe)[1]
    except LaneError as exc:
        refusals.append(first_line(exc))
        port = 0
    if refusals:
        return PlannedTransition(kind="rollback", steps=(), refusals=tuple(refusals), plan=None)
    plan = RollbackPlan(target=pair, previous=prod, port=port, reason=reason)
    steps = ([f"stop {prod.instance} ({prod.recipe}) and keep it as the rollback pair"] if prod else []) + [
        f"start the kept pair {pair.instance} ({pair.recipe}) on port {port}",
        "wait until ready",
        "run its smoke gates",
        "record the rollback",
    ]
    return PlannedTransition(kind="rollback", steps=tuple(steps), refusals=(), plan=plan)


def _drive_rollback(run: Run, p: RollbackPlan) -> TransitionReport:
    target, prev = p.target, p.previous
    t0 = time.monotonic()
    if prev:
        _, running = run.fact(prev.instance)
        if running:
            with run.step("stop_production", instance=prev.instance):
                run.ops.stop_keep(prev.instance)
    run.stop_others(target.instance, "stop_stray")
    try:
        boot = run.bring_up(target, "start_pair")
    except LaneError as exc:
        return _revert_rollback(run, p, f"the kept pair {target.recipe} failed to start: {first_line(exc)}")
    restore_s = time.monotonic() - t0
    endpoint = boot.endpoint if boot else target.endpoint
    try:
        with run.step("smoke_pair", recipe=target.recipe) as out:
            smoke = run.ops.smoke(target.recipe, endpoint)
            out.update(passed=smoke.passed, summary=smoke.summary)
    except LaneError as exc:
        return _revert_rollback(
            run, p, f"the kept pair {target.recipe}'s smoke could not be run or recorded: {first_line(exc)}"
        )
    if not smoke.passed:
        return _revert_rollback(run, p, f"the kept pair {target.recipe} failed smoke: {smoke.summary}")
    # The tool's share: everything in the restore outside the pair's own start-to-ready.
    boot_s = boot.boot_seconds if boot else None
    tool_s = max(0.0, restore_s - boot_s) if boot_s is not None else None
    with run.step("record"):
        pass
    now = utcnow()
    new_prod = target.model_copy(update={"since": now, "endpoint": endpoint})
    new_pair = _since(prev, now)
    event_id = run.ledger.finish(
        run.tr.id, "rolled_back", production=new_prod, rollback=new_pair, port=p.port,
        kept=[(new_pair, "rollback pair")] if new_pair else [],
        links=CustodyLinks(recipe=target.recipe, fingerprint=target.fingerprint, boot_report=report_link(boot)),
        event=NewEvent(
            kind="rollback", recipe=target.recipe, instance=target.instance, fingerprint=target.fingerprint,
            previous=prev.recipe if prev else None,
            reason=(p.reason or "rollback") + (" (completed after an interruption)" if run.resumed else ""),
            restore_seconds=restore_s, tool_seconds=tool_s, detail=f"smoke: {smoke.summary}",
        ),
    )  # fmt: skip
    kept_txt = f"; {prev.recipe} stopped and kept as the rollback pair" if prev else ""
    return TransitionReport(
        kind="rollback", ok=True, production=target.recipe, rollback_pair=prev.recipe if prev else None,
        message=f"rolled back to {target.recipe} ({target.instance}) in {restore_s:.2f} s"
                f"{'' if tool_s is None else f' (tool: {tool_s:.2f} s)'}; smoke: {smoke.summary}{kept_txt}",
        restore_seconds=restore_s, tool_seconds=tool_s, boot_seconds=boot_s,
        smoke_seconds=smoke.seconds, event_id=event_id,
    )  # fmt: skip


def _revert_rollback(run: Run, p: RollbackPlan, why: str) -> TransitionReport:
    """The pair would not serve: stop (keep) it and put back what was production."""
    target, prev = p.target, p.previous
    run.stop_others(prev.instance if prev else None, "stop_pair", also=target.instance)
    error = None
    try:
        run.bring_up(prev, "restore_previous")
    except LaneError as exc:
        error = first_line(exc)
    with run.step("record"):
        pass
    production = None if error or not prev else prev
    event_id = run.ledger.finish(
        run.tr.id, "reverted" if production else "failed", production=production, rollback=target,
        event=NewEvent(
            kind="rollback_failed", recipe=target.recipe, instance=target.instance,
            previous=prev.recipe if prev else None, reason=why,
            detail=f"restoring {prev.recipe} failed: {error}" if error and prev
            else (f"restored {prev.recipe}" if prev else "nothing was production before"),
        ),
    )  # fmt: skip
    back = (
        f"restoring {prev.recipe} failed too ({error}); nothing serves production"
        if error and prev
        else f"{prev.recipe} restored"
        if prev
        else "nothing serves production"
    )
    return TransitionReport(
        kind="rollback",
        ok=False,
        production=production.recipe if production else None,
        rollback_pair=target.recipe,
        message=f"{why}; {back}",
        event_id=event_id,
    )


# -- shared ------------------------------------------------------------------------------------


def _kept(kc: KeptCandidate, recipe: str, fingerprint: str, verdict: VerdictInfo | None) -> KeptCandidate:
    """The card's kept candidate, when it may become production as it stands; StateError saying why not otherwise."""
    who = f"refusing to promote {recipe} from card {kc.card}"
    if kc.recipe != recipe:
        raise StateError(
            f"{who}: its candidate arm {kc.arm} runs {kc.recipe}, not {recipe}; "
            f"run `gb300lane promote {kc.recipe} --from-card {kc.card}`"
        )
    if kc.verdict is None:
        raise StateError(
            f"{who}: the card has no verdict yet ({kc.receipts}); run `gb300lane card score {kc.card}`: "
            "promoting its kept candidate needs its PASS"
        )
    if kc.verdict != "PASS":
        again = f"`gb300lane card register {kc.card} --fresh`, `gb300lane card run {kc.card} --take-lane`"
        raise StateError(
            f"{who}: its verdict is {kc.verdict} ({kc.receipts}), and promoting its kept candidate needs "
            f"a PASS; a further run of the card's question spends its next share of alpha where the card "
            f"registered more runs (design.runs): {again}, then `gb300lane card score {kc.card}`"
        )
    mine = verdict is not None and verdict.receipts is not None and _same_dir(verdict.receipts, kc.receipts)
    if not mine:
        newest = verdict.reference if verdict is not None else "none"
        raise StateError(
            f"{who}: the card's PASS ({kc.receipts}) is not {recipe}'s newest verdict ({newest}); "
            f"promotion rests on the newest: `gb300lane promote {recipe}` boots it afresh on that one"
        )
    if kc.instance is None:
        raise StateError(
            f"{who}: its arm {kc.arm} has no finished boot in {kc.receipts}; "
            f"run `gb300lane card run {kc.card} --take-lane` first"
        )
    if kc.problem is not None:
        raise StateError(f"{who}: {kc.problem}")
    if kc.fingerprint != fingerprint:
        raise StateError(
            f"{who}: its kept candidate {kc.instance} was booted with fingerprint {kc.fingerprint}, and "
            f"{recipe}'s is now {fingerprint} (the recipe changed since the card ran); run the card "
            f"again, or `gb300lane promote {recipe}` boots the recipe as it is now"
        )
    return kc


def _same_dir(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _verdict_custody(verdict: VerdictInfo | None) -> VerdictCustody | None:
    """What the ledger keeps of the verdict a promotion rests on: its file and the manifest that seals it, hashed."""
    if verdict is None or verdict.file is None:
        return None
    return VerdictCustody(
        file=verdict.file,
        sha256=verdict.sha256,
        receipts=verdict.receipts,
        manifest=verdict.manifest,
        manifest_sha256=verdict.manifest_sha256,
        verdict=verdict.verdict,
    )


def _endpoint(ops: PromotionOps, instance: str, port: int) -> str:
    """The instance's endpoint as the lane recorded it (loopback on the port when it has none)."""
    for f in ops.instances():
        if f.name == instance and f.endpoint:
            return f.endpoint
    return f"http://127.0.0.1:{port}"
