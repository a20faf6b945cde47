"""CLI group: evidence — the evidence log of what the cards wrote: show it, adopt a receipts directory, reset it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gb300lane.cli.common import console, print_json

evidence_app = typer.Typer(
    help="The evidence log: every registration, run, verdict, re-score and extension, entered when written "
    "(signed, hash-chained, in the state directory); promotion asks it which verdict is the newest.",
    no_args_is_help=True,
)


@evidence_app.command("show", help="Print the log's entries (and its breaks); exit 1 when it breaks.")
def show_cmd(
    card: Annotated[str | None, typer.Option("--card", help="Only this card's entries.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the entries as JSON.")] = False,
) -> None:
    from gb300lane import evidencelog

    log = evidencelog.read_log(signatures="all")
    records = [r for r in log.records if card is None or r.entry.card == card]
    if as_json:
        print_json(
            {
                "log": log.path,
                "ok": log.ok,
                "breaks": list(log.breaks),
                "notes": list(log.notes),
                "entries": [r.model_dump(mode="json", exclude={"seal"}) for r in records],
            }
        )
    else:
        console.print(f"{log.path}: {len(log.records)} entries", highlight=False, soft_wrap=True)
        for r in records:
            e = r.entry
            what = (
                f"verdict {e.number} {e.verdict}"
                if e.verdict
                else f"run {e.run} of {e.runs}"
                if e.kind in ("registration", "adopted") and e.run
                else e.stage or ""
            )
            extra = f" ({e.new_question or e.detail})" if e.new_question or e.detail else ""
            console.print(
                f"  {r.seq:>5} {e.at} {e.kind:<12} {e.card or '-':<20} {what}{extra}  {e.receipts or ''}",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
        for br in log.breaks:
            console.print(f"  BROKEN {br}", highlight=False, soft_wrap=True, markup=False)
        for note in log.notes:
            console.print(f"  note   {note}", highlight=False, soft_wrap=True, markup=False)
    if not log.ok:
        raise typer.Exit(1)


@evidence_app.command(
    "adopt",
    help="Enter a receipts directory the log never saw (made before the log, elsewhere, "
    "or cut off by a crash) after its whole chain of custody verifies; the reason is recorded.",
)
def adopt_cmd(
    receipts: Annotated[Path, typer.Argument(help="The receipts directory.")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is entered late (kept in the log).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    from gb300lane.cards import Receipts
    from gb300lane.cards.record.adopt import adopt

    made = adopt(Receipts(receipts), reason)
    if as_json:
        print_json({"receipts": str(receipts), "entries": made})
    else:
        console.print(
            f"{receipts}: entered in the evidence log ({made} entries, adopted: {reason})",
            highlight=False,
            soft_wrap=True,
        )


@evidence_app.command(
    "reset",
    help="Start a new evidence log when the old one cannot be restored; the old file is "
    "kept beside it, and what it knew no longer counts for promotion.",
)
def reset_cmd(
    reason: Annotated[str, typer.Option("--reason", help="Why the old log is set aside (the new log's first line).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the new log's first line as JSON.")] = False,
) -> None:
    from gb300lane import evidencelog

    rec = evidencelog.reset(reason)
    if as_json:
        print_json(rec.model_dump(mode="json", exclude={"seal"}))
    else:
        console.print(
            f"{evidencelog.log_path()}: a new evidence log ({rec.entry.detail})", highlight=False, soft_wrap=True
        )


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    app.add_typer(evidence_app, name="evidence")
