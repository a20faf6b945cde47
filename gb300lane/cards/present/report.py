"""The card report: a markdown page and PNG figures rendered into the receipts.

Tables come in the write-up's shapes (decode tok/s per class x C1/C8 x
A/A2/B with B / ctrl; tokens/step per arm; a_p per position), every verdict
on record is listed (the pre-registered one first), and the figures are
accepted-at-position per arm (the write-up's Figure 4), marginal acceptance
per position (Figure 5) and B / ctrl per class.
"""

from __future__ import annotations

from pathlib import Path

from gb300lane import templating
from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.verdict import Verdict
from gb300lane.cards.present.figures import (
    FIG4,
    FIG5,
    FIG_RATIO,
    RatioRow,
    a_p_rows,
    fig_accepted,
    fig_marginal,
    fig_ratio,
    ratio_rows,
    table_value,
)
from gb300lane.cards.present.report_html import page
from gb300lane.cards.record.card_custody import require_intact
from gb300lane.cards.record.receipts import Receipts, read_verdict
from gb300lane.cards.schema import Card
from gb300lane.errors import CardError, ReceiptExists
from gb300lane.fsio import write_once


def markdown(
    card: Card, rec: Receipts, arms: list[ArmData], verdicts: list[Verdict], rows: list[RatioRow], figures: list[str]
) -> str:
    """The report as markdown, from the `card.md` template (a user's ./templates/card.md wins)."""
    w = card.window(card.primary_window)
    clocks = {a.windows[w.name].clock for a in arms if w.name in a.windows}
    return templating.render(
        "card.md", card=card, reg=rec.registration(), sources={a.arm: a.source for a in arms}, verdicts=verdicts,
        window=w, clocks=sorted(c or "?" for c in clocks), arm_names=[a.name for a in card.arms],
        candidate=card.candidate.name, rows=rows, a_p=a_p_rows(card, arms), figures=figures, f=table_value,
    )  # fmt: skip


HTML = "card.html"

__all__ = ["HTML", "markdown", "ratio_rows", "render_html", "render_report"]


def _reported(rec: Receipts, number: int | None) -> tuple[Card, int, list[int]]:
    card = rec.card()
    nums = rec.verdict_numbers()
    if not nums:
        raise CardError(f"{rec.root}: no verdict yet; run `gb300lane card score {card.name}` first")
    n = number or nums[-1]
    if n not in nums:
        raise CardError(f"{rec.root}: no verdict {n}; verdicts on record: {nums}")
    return card, n, nums


def _write_html(
    rec: Receipts, card: Card, arms: list[ArmData], verdicts: list[Verdict], rows: list[RatioRow], path: Path
) -> Path:
    return write_once(path, page(card, rec, arms, verdicts, rows))


def render_report(rec: Receipts, number: int | None = None, *, html: bool = True) -> Path:
    """Write report/verdict-<n>/card.md, its figures and (unless html=False) card.html, write-once.

    Returns the markdown path; the HTML page is `HTML` beside it.
    """
    card, n, nums = _reported(rec, number)
    out = rec.report_dir(n)
    if (out / "card.md").exists():
        raise ReceiptExists(f"{out / 'card.md'}: the report of verdict {n} already exists; receipts are write-once")
    if html and (out / HTML).exists():
        raise ReceiptExists(f"{out / HTML}: the page of verdict {n} already exists; receipts are write-once")
    require_intact(rec, "report")
    verdicts = [read_verdict(rec, k) for k in nums if k <= n]
    arms = rec.load_arms(card)
    rows = ratio_rows(card, arms)
    figures = []
    if fig_accepted(card, arms, out / FIG4):
        figures.append(FIG4)
    if fig_marginal(card, arms, out / FIG5):
        figures.append(FIG5)
    if fig_ratio(card, rows, out / FIG_RATIO):
        figures.append(FIG_RATIO)
    path = write_once(out / "card.md", markdown(card, rec, arms, verdicts, rows, figures))
    if html:
        _write_html(rec, card, arms, verdicts, rows, out / HTML)
    rec.write_manifest(f"report-{n}")
    return path


def render_html(rec: Receipts, number: int | None = None) -> Path:
    """Write report/verdict-<n>/card.html alone (for a report rendered before pages were; write-once)."""
    card, n, nums = _reported(rec, number)
    path = rec.report_dir(n) / HTML
    if path.exists():
        raise ReceiptExists(f"{path}: the page of verdict {n} already exists; receipts are write-once")
    require_intact(rec, "report")
    verdicts = [read_verdict(rec, k) for k in nums if k <= n]
    arms = rec.load_arms(card)
    written = _write_html(rec, card, arms, verdicts, ratio_rows(card, arms), path)
    rec.write_manifest(f"report-{n}-html")
    return written
