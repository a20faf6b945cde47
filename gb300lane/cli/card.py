"""CLI group: card — register, run, score, rescore, report, show, list, reproduce."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gb300lane.cli.common import console, print_json

if TYPE_CHECKING:  # the cards package is imported when a card command runs
    from gb300lane.cards import Receipts, Verdict

card_app = typer.Typer(
    help="Bracketed A -> B -> A2 cards: pre-registered gates, receipts, verdicts and re-scores.",
    no_args_is_help=True,
)

_RECEIPTS = typer.Option(None, "--receipts", help="Receipts directory (default: the card's newest registration).")


def _receipts(card: str, receipts: Path | None) -> Receipts:
    from gb300lane.cards import Receipts, find_receipts, load_card

    if receipts is not None:
        return Receipts(receipts)
    p = Path(card)
    if p.is_dir() and (p / "registration.json").is_file():
        return Receipts(p)
    loaded, _ = load_card(card)
    return find_receipts(loaded.name)


def _print_verdict(v: Verdict) -> None:
    console.print(f"verdict {v.number}: [bold]{v.verdict}[/]", highlight=False)
    if v.previous:
        console.print(f"  re-score of verdict {v.previous.number} ({v.previous.verdict}): {v.reason}", highlight=False)
    for c in v.changes:
        console.print(f"  changed {c.gate}.{c.key}: {c.old} -> {c.new}", highlight=False)
    for r in v.results:
        console.print(f"  [{r.status:<4}] {r.id:<20} {r.observed}  (bar: {r.bar}; noise floor: {r.noise_floor})",
                      highlight=False, markup=False)
        for reason in r.reasons:
            console.print(f"           - {reason}", highlight=False, markup=False)


@card_app.command("register", help="Freeze a card's gates (their sha256 is recorded) before any arm runs.")
def register_cmd(
    card: str = typer.Argument(..., help="Card file path or name in cards/."),
    fresh: bool = typer.Option(False, "--fresh", help="Start a new receipts directory even if one exists today."),
) -> None:
    from gb300lane.cards import load_card, register

    loaded, path = load_card(card)
    rec = register(loaded, path.read_text(encoding="utf-8"), fresh=fresh)
    reg = rec.registration()
    console.print(f"{loaded.name}: registered in {rec.root} (gates sha256 {reg.gates_sha256[:16]})", highlight=False)


@card_app.command("run", help="Boot each arm dark in turn, run the windows, stop it (kept); resumes where it stopped.")
def run_cmd(card: str = typer.Argument(..., help="Card name, file or receipts directory."),
            receipts: Path | None = _RECEIPTS) -> None:
    from gb300lane.cards import run_card
    from gb300lane.promote.view import protected_instances

    rec = _receipts(card, receipts)
    run_card(
        rec, progress=lambda m: console.print(m, highlight=False, markup=False), protected=protected_instances()
    )
    console.print(f"receipts: {rec.root}", highlight=False)


@card_app.command("score", help="Write verdict 1: the registered gates over the receipts.")
def score_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    receipts: Path | None = _RECEIPTS,
    dry_run: bool = typer.Option(False, "--dry-run", help="Compute and print; write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
) -> None:
    from gb300lane.cards import score

    v = score(_receipts(card, receipts), dry_run=dry_run)
    print_json(v.model_dump(mode="json")) if as_json else _print_verdict(v)


@card_app.command("rescore", help="Write verdict n+1 with changed gates and a reason; earlier verdicts stay.")
def rescore_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    reason: str = typer.Option(..., "--reason", help="Why the gates change (kept on the record)."),
    change: list[str] = typer.Option(..., "--set", help="GATE.KEY=VALUE (YAML value), e.g. env-equal.compare=set."),
    receipts: Path | None = _RECEIPTS,
    dry_run: bool = typer.Option(False, "--dry-run", help="Compute and print; write nothing."),
) -> None:
    from gb300lane.cards import compute_rescore, rescore

    rec = _receipts(card, receipts)
    v = compute_rescore(rec, reason, change)[1] if dry_run else rescore(rec, reason, change)
    _print_verdict(v)


@card_app.command("report", help="Render the markdown card and PNG figures into the receipts.")
def report_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    receipts: Path | None = _RECEIPTS,
    verdict: int | None = typer.Option(None, "--verdict", help="Verdict number to report (default: the newest)."),
) -> None:
    from gb300lane.cards import render_report

    console.print(f"report: {render_report(_receipts(card, receipts), verdict)}", highlight=False)


@card_app.command("show", help="Show a card's registration, arms and verdicts.")
def show_cmd(card: str = typer.Argument(..., help="Card name, file or receipts directory."),
             receipts: Path | None = _RECEIPTS,
             as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    from gb300lane.cards.verdicts import read_verdict

    rec = _receipts(card, receipts)
    reg = rec.registration()
    c = rec.card()
    arms = {a.name: ("transcribed" if (rec.arm_dir(a.name) / "transcribed.json").is_file()
                     else f"attempt {rec.finished_attempt(a.name)} done" if rec.finished_attempt(a.name)
                     else "not finished") for a in c.arms}
    verdicts = [read_verdict(rec, n) for n in rec.verdict_numbers()]
    if as_json:
        print_json({"receipts": str(rec.root), "registration": reg.model_dump(mode="json"), "arms": arms,
                    "verdicts": [{"number": v.number, "verdict": v.verdict, "written_at": v.written_at} for v in verdicts]})
        return
    console.print(f"{c.name}: {c.title}", highlight=False)
    console.print(f"  receipts {rec.root}; registered {reg.registered_at}; gates sha256 {reg.gates_sha256[:16]}"
                  + ("; TRANSCRIBED" if reg.transcribed else ""), highlight=False)
    for a in c.arms:
        console.print(f"  {a.name:<3} {a.role:<9} {a.recipe:<12} {arms[a.name]}", highlight=False)
    for v in verdicts:
        console.print(f"  verdict {v.number}: {v.verdict} ({v.written_at})" + (f" — {v.reason}" if v.reason else ""),
                      highlight=False)


@card_app.command("list", help="List card files and their registered receipts.")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    from gb300lane.cards import all_receipts
    from gb300lane.cards.schema import known_cards

    files = known_cards()
    regs = [(r.registration(), r) for r in all_receipts()]
    rows = [{"card": f.stem, "file": str(f), "receipts": [str(r.root) for reg, r in regs if reg.card == f.stem],
             "verdicts": [n for reg, r in regs if reg.card == f.stem for n in r.verdict_numbers()]} for f in files]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        console.print(f"{row['card']:<28} {len(row['receipts'])} receipts dir(s)", highlight=False)


@card_app.command("reproduce", help="Re-derive the write-up's BR1/BR2 figures (part 1), then run the card locally (part 2).")
def reproduce_cmd(
    which: str = typer.Argument(..., help="br1 or br2."),
    part: list[int] = typer.Option([1, 2], "--part", help="Which parts to run (1, 2); default both."),
) -> None:
    from gb300lane.cards.reproduce import reproduce

    reproduce(which, lambda m: console.print(m, highlight=False, markup=False, soft_wrap=True), parts=tuple(part))


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    app.add_typer(card_app, name="card")
