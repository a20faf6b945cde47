"""Reading the ledger back: the production state and, for an unfinished transition, what happened and what to run.

`current_production()` is what `gb300lane status` shows. An unfinished
transition is explained from its journal: the last step written, whether its
side effect had finished (`done`) or was under way (`intent`), and the one
command that completes it or reverts it.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from gb300lane.errors import LedgerError, StateError
from gb300lane.placement import scope_suffix
from gb300lane.promote import lock as lock_mod
from gb300lane.promote import witness
from gb300lane.promote.ledger import Ledger, Transition, ledger_path, read_ledger, read_only_error, write_problem
from gb300lane.promote.models import InFlight, ProductionState, TakeLanePlan

# step -> (while it runs, once it is done); {recipe} is the target, {previous} what production was.
_STEP_WORDS: dict[str, tuple[str, str]] = {
    "stop_production": ("while stopping {previous}", "after stopping {previous}"),
    "check_port": ("while waiting for the production port to be free", "after the production port was freed"),
    "boot_candidate": ("while booting {recipe}", "after booting {recipe}"),
    "start_candidate": ("while restarting {recipe}", "after restarting {recipe}"),
    "smoke_candidate": ("while smoke-testing {recipe}", "after smoke-testing {recipe}"),
    "stop_candidate": ("while stopping {recipe} to restore {previous}", "after stopping {recipe}"),
    "restore_previous": ("while restarting {previous}", "after restarting {previous}"),
    "start_pair": ("while starting the kept pair {recipe}", "after starting the kept pair {recipe}"),
    "smoke_pair": ("while smoke-testing {recipe}", "after smoke-testing {recipe}"),
    "stop_pair": ("while stopping {recipe} to restore {previous}", "after stopping {recipe}"),
    "stop_stray": (
        "while stopping an instance left on the production port",
        "after stopping an instance left on the production port",
    ),
    "remove": ("while removing a kept instance", "after removing a kept instance"),
    "record": ("while recording the result", "while recording the result"),
    "restore_production": ("while restarting production {previous}", "after restarting production {previous}"),
    "stop_arm": (
        "while stopping a card arm left on the production port",
        "after stopping a card arm left on the production port",
    ),
}


def _on_lane(command: str) -> str:
    """`command`, with the `--host` that names the acting lane of an inventory (as it is, on this machine's lane)."""
    return command + scope_suffix()


def describe_progress(ledger: Ledger, tr: Transition) -> tuple[str | None, str]:
    """(last step label, 'after stopping local-v26' / 'before anything changed')."""
    entries = ledger.entries(tr.id)
    if not entries:
        return None, "before anything changed"
    last = entries[-1]
    words = _STEP_WORDS.get(last.step, (f"during {last.step}", f"after {last.step}"))
    fmt = {"recipe": tr.recipe or "?", "previous": tr.previous or "nothing"}
    phrase = (words[1] if last.phase == "done" else words[0]).format(**fmt)
    if last.phase == "failed":
        phrase = f"after {last.step} failed ({last.detail.get('error', '')})"
    return f"{last.step} ({last.phase})", phrase


def explain(ledger: Ledger, tr: Transition, *, crashed: bool) -> tuple[str, tuple[str, ...]]:
    """One sentence on where the transition stopped, and the commands that finish or revert it."""
    step, where = describe_progress(ledger, tr)
    plan = tr.plan
    if isinstance(plan, TakeLanePlan):
        if not crashed:
            return (
                f"card {plan.card} holds the lane (pid {tr.pid}, {where}): production {tr.previous} is stopped "
                "and kept, and is restored when the card's bracket ends"
            ), ()
        rollback = _on_lane("gb300lane rollback")
        return (
            f"card {plan.card} took the lane from production {tr.previous} and was interrupted {where}; "
            f"run `{rollback}` to restart {tr.previous} as production"
        ), (rollback,)
    if not crashed:
        return f"{tr.kind} of {tr.recipe or 'kept instances'} in progress (pid {tr.pid}, {where})", ()
    rollback, prune = _on_lane("gb300lane rollback"), _on_lane("gb300lane prune")
    if tr.kind == "promote":
        resume = _on_lane(f"gb300lane promote {tr.recipe} --resume")
        restore = f"restore {tr.previous}" if tr.previous else f"stop {tr.recipe} (there was no production before it)"
        text = (
            f"promotion of {tr.recipe} interrupted {where}; run `{rollback}` to {restore} or `{resume}` to complete it"
        )
        return text, (rollback, resume)
    if tr.kind == "rollback":
        text = f"rollback to {tr.recipe} interrupted {where}; run `{rollback}` to complete it"
        return text, (rollback,)
    return f"prune interrupted {where}; run `{prune}` again to finish it", (prune,)


def process_alive(tr: Transition) -> bool:
    """True when the process that began `tr` still runs (the same process: not a later one given its pid)."""
    import psutil  # only an unfinished transition is looked at: `status` of a settled lane never loads it

    try:
        proc = psutil.Process(tr.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False  # killed, not yet reaped by its parent
        created = proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # it exists; whose it is cannot be told, so do not call it dead
    try:
        began = datetime.fromisoformat(tr.started_at).timestamp()
    except ValueError:
        return True
    # A pid reused by a process started after the transition began is not its holder.
    return created <= began + 1.0


def running(tr: Transition, *, state_dir: Path | None = None) -> bool:
    """True while a transition is being driven: the lock is held, or the process that began it is alive.

    Both are asked, so neither a deleted holder file nor a lock taken some other
    way makes a live transition look interrupted.
    """
    if lock_mod.holder(state_dir) is not None:
        return True
    # This process holds the lock for as long as it drives a transition; without it, it is not driving this one.
    return tr.pid != os.getpid() and process_alive(tr)


def refuse_if_running(ledger: Ledger, tr: Transition) -> None:
    """StateError when the process that began `tr` is still alive (called with the lock held)."""
    if tr.pid != os.getpid() and process_alive(tr):
        raise StateError(
            f"{ledger.path}: the {tr.kind} of {tr.recipe or 'kept instances'} begun by pid {tr.pid} is still "
            f"running although it does not hold the lock on {ledger.path.parent}; wait for it to finish "
            f"or stop that process, then run the command again"
        )


def in_flight(ledger: Ledger, *, state_dir: Path | None = None) -> InFlight | None:
    tr = ledger.open_transition()
    if tr is None:
        return None
    crashed = not running(tr, state_dir=state_dir)
    step, _ = describe_progress(ledger, tr)
    text, commands = explain(ledger, tr, crashed=crashed)
    return InFlight(
        transition_id=tr.id,
        kind=tr.kind,
        recipe=tr.recipe,
        previous=tr.previous,
        started_at=tr.started_at,
        pid=tr.pid,
        crashed=crashed,
        last_step=step,
        explanation=text,
        commands=commands,
    )


def current_production(*, ledger_file: Path | None = None, state_dir: Path | None = None) -> ProductionState | None:
    """Production, the rollback pair and any unfinished transition; None when nothing was ever promoted.

    Reads the ledger read-only and creates nothing. A ledger that exists and cannot be
    read raises `LedgerError` (corrupt, empty, unreadable, read-only with unmerged
    changes): an unreadable ledger is never "nothing recorded".
    """
    ledger = read_ledger(ledger_file)
    if ledger is None:
        check_witnesses(None, ledger_file)
        return None
    with ledger:
        check_witnesses(ledger)
        prod = ledger.production()
        pair = ledger.rollback_pair()
        flight = in_flight(ledger, state_dir=state_dir)
        if prod is None and pair is None and flight is None:
            return None
        return ProductionState(
            recipe=prod.recipe if prod else None,
            instance=prod.instance if prod else None,
            fingerprint=prod.fingerprint if prod else None,
            endpoint=prod.endpoint if prod else None,
            port=ledger.port(),
            since=prod.since if prod else None,
            rollback_pair=pair,
            in_flight=flight,
        )


def check_witnesses(ledger: Ledger | None, ledger_file: Path | None = None) -> None:
    """LedgerError (kind `witnesses`) when the other witnesses of production disagree with the ledger (None: missing).

    Called wherever the ledger is read for a decision, so a deleted or emptied ledger with a production still
    witnessed elsewhere fails closed like a corrupt one.
    """
    path = ledger.path if ledger is not None else (ledger_file or ledger_path())
    acted_on: tuple[str, ...] = ()
    if ledger is None:
        said: tuple[str | None, str | None] = (None, None)
        newest, what = 0, "is missing"
    else:
        prod, pair = ledger.production(), ledger.rollback_pair()
        said = (prod.instance if prod else None, pair.instance if pair else None)
        newest = ledger.last_event_id()
        what = "reads" if prod or pair else "records no production and no rollback pair"
        tr = ledger.open_transition()
        if tr is not None:
            acted_on = _acted_on(tr.plan)
    problem = witness.disagreement(said, newest, what, path, acted_on)
    if problem is not None:
        raise LedgerError(problem, kind="witnesses", path=str(path))


def _acted_on(plan: object) -> tuple[str, ...]:
    """The instances an unfinished transition's plan boots, starts or stops (they serve between ledger writes)."""
    names = [getattr(plan, "instance", None)]
    for field in ("previous", "pair", "target", "production"):
        slot = getattr(plan, field, None)
        names.append(getattr(slot, "instance", None))
    names.extend(getattr(plan, "remove", ()))
    return tuple(n for n in names if isinstance(n, str))


def open_ledger() -> Ledger:
    """The writable ledger for a transition, once the witnesses agree with it (checked before one is created)."""
    if not ledger_path().exists():
        check_witnesses(None)
    ledger = Ledger()
    try:
        check_witnesses(ledger)
    except BaseException:
        ledger.close()
        raise
    return ledger


def ledger_read_only(ledger_file: Path | None = None) -> str | None:
    """Why transitions could not record in an existing ledger (its directory or file is read-only), or None."""
    path = ledger_file or ledger_path()
    if not path.is_file():
        return None
    why = write_problem(path)
    return None if why is None else str(read_only_error(path, why))
