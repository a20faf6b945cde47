"""CLI command `verify`: check a chain of custody (a card's receipts, production, or everything) and say where it breaks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gb300lane.cli.common import console, fail, print_json

if TYPE_CHECKING:
    from pydantic import JsonValue


def verify_cmd(
    card: Annotated[
        str | None, typer.Option("--card", help="A card name, file or receipts directory: check its receipts.")
    ] = None,
    production: Annotated[
        bool, typer.Option("--production", help="Check production: ledger, promotion, verdict, boot report, recipe.")
    ] = False,
    evidence: Annotated[
        bool,
        typer.Option(
            "--evidence",
            help="Check the evidence log: every line's chain and signature, its head, "
            "every file it entered, and every scored card in it.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the chains as JSON.")] = False,
) -> None:
    """Check every link of a chain of custody (recipe -> boots -> receipts -> verdicts -> promotion); exit 1 where one breaks."""
    from gb300lane.promote.production_custody import verify_card, verify_everything, verify_evidence, verify_production

    if sum((card is not None, production, evidence)) > 1:
        fail("--card, --production and --evidence check different chains; give one (or none, for every chain)", 2)
    chains = (
        [verify_card(card)]
        if card is not None
        else [verify_production()]
        if production
        else [verify_evidence()]
        if evidence
        else verify_everything()
    )
    lines = _provenance_lines(card) if card is not None else {}
    if as_json:
        out = [c.as_json() for c in chains]
        if card is not None:
            prov: list[JsonValue] = list(lines.get("lines", []))
            out[0]["provenance"] = prov
        print_json(out)
    else:
        for chain in chains:
            console.print(chain.to_text(), highlight=False, soft_wrap=True)
        for line in lines.get("lines", []):
            console.print(line, highlight=False, soft_wrap=True)
    broken = [c for c in chains if not c.ok]
    if broken:
        if not as_json:
            fail(f"{len(broken)} chain(s) broken: " + "; ".join(c.subject for c in broken))
        raise typer.Exit(1)


def _provenance_lines(card: str) -> dict[str, list[str]]:
    """What the card's arms ran and what differs: between the arms, and between the receipts and this host now."""
    from gb300lane.cards.present.what_differs import verify_lines

    return {"lines": verify_lines(card)}


def register(app: typer.Typer) -> None:
    """Attach the command to the top-level app."""
    app.command("verify")(verify_cmd)
