"""The card's figures and the tables beside them: drawn once, for the markdown report and the HTML page alike.

Accepted-at-position per arm (the write-up's Figure 4), marginal acceptance per position (Figure 5) and
B / ctrl per class, as PNG files for the report and as SVG text for the page; the ratio and a_p rows both
pages tabulate. matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from gb300lane.cards.decide.data import ArmData, marginal, merged_cells, tokens_per_step_from_a_p
from gb300lane.cards.decide.stats import PairedCI, paired_bootstrap, spread
from gb300lane.cards.schema import Card
from gb300lane.fsio import write_once

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIG4 = "fig4-accepted-at-position.png"
FIG5 = "fig5-marginal-acceptance.png"
FIG_RATIO = "b-over-ctrl-per-class.png"


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def _integer_positions(ax: Axes) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Figure, path: Path) -> None:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    write_once(path, buf.getvalue())


def arm_a_p(a: ArmData, window: str) -> tuple[tuple[float, ...] | None, str]:
    """An arm's a_p in `window` and where it came from (the window's own, else the one-user cells')."""
    w = a.windows.get(window)
    if w is None:
        return None, ""
    if w.a_p:
        return w.a_p, "all cells"
    cells = merged_cells(w)
    for (cls, conc), c in sorted(cells.items(), key=lambda kv: kv[0][1]):
        if c.a_p:
            return c.a_p, f"{cls} C{conc}"
    return None, ""


def _one_user_a_p(a: ArmData, window: str) -> tuple[tuple[float, ...] | None, str]:
    """The write-up's Figure 5 view: the first class at the lowest concurrency, over drafts that had p."""
    cells = merged_cells(a.windows.get(window))
    for (cls, conc), c in sorted(cells.items(), key=lambda kv: kv[0][1]):
        ap = c.a_p_given or c.a_p
        if ap:
            return ap, f"{cls} C{conc}"
    return None, ""


def fig_accepted(card: Card, arms: list[ArmData], path: Path) -> bool:
    return _save_drawn(draw_accepted(card, arms), path)


def fig_marginal(card: Card, arms: list[ArmData], path: Path) -> bool:
    return _save_drawn(draw_marginal(card, arms), path)


def _save_drawn(fig: Figure | None, path: Path) -> bool:
    if fig is None:
        return False
    _save(fig, path)
    _pyplot().close(fig)
    return True


def svg_text(fig: Figure) -> str:
    """The figure as an inline <svg> element: text kept as text (readable, searchable), no external reference."""
    import io

    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gb300lane"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def draw_accepted(card: Card, arms: list[ArmData]) -> Figure | None:
    """The write-up's Figure 4: accepted at position per arm; None when no arm has a_p."""
    plt = _pyplot()
    fig: Figure
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = False
    for a in arms:
        ap, where = arm_a_p(a, card.primary_window)
        if not ap:
            continue
        xs = list(range(1, len(ap) + 1))
        ax.plot(xs, ap, marker="o", label=f"{a.arm} ({a.recipe}, {tokens_per_step_from_a_p(ap):.3f} tok/step, {where})")
        drawn = True
    if drawn:
        ax.set_xlabel("position in block")
        _integer_positions(ax)
        ax.set_ylabel("accepted ÷ drafts")
        ax.set_title(f"{card.name}: accepted at position per arm")
        ax.legend(fontsize=7)
        return fig
    plt.close(fig)
    return None


def draw_marginal(card: Card, arms: list[ArmData]) -> Figure | None:
    """The write-up's Figure 5: marginal acceptance per position; None when no arm has a_p."""
    plt = _pyplot()
    fig: Figure
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = False
    widths = []
    for a in arms:
        ap, where = _one_user_a_p(a, card.primary_window)
        if not ap:
            continue
        m = marginal(ap)
        ax.plot(
            range(1, len(m) + 1),
            [v if v is not None else float("nan") for v in m],
            marker="o",
            label=f"{a.arm} k={len(ap)} ({where})",
        )
        if a.role == "control":
            widths.append(len(ap))
        drawn = True
    if drawn:
        if widths:
            ax.axvline(max(widths), linestyle="--", color="grey", linewidth=1)
        ax.set_xlabel("position in block")
        _integer_positions(ax)
        ax.set_ylabel("marginal acceptance a_p / a_(p-1)")
        ax.set_title(f"{card.name}: marginal acceptance per position")
        ax.legend(fontsize=7)
        return fig
    plt.close(fig)
    return None


@dataclass(frozen=True)
class RatioRow:
    """One class x concurrency cell of the B / ctrl table."""

    cls: str
    concurrency: int
    values: dict[str, float | None]  # arm name -> decode tok/s (None: the arm has no such cell)
    ratio: float | None  # candidate over the controls' mean
    spread: float | None  # 1 - min/max of the controls
    ci: PairedCI | None  # paired per-stream candidate - controls, bootstrap


def ratio_rows(card: Card, arms: list[ArmData]) -> list[RatioRow]:
    """Per class x concurrency: each arm's decode tok/s, B / ctrl, the controls' spread and the paired CI."""
    by = {a.arm: merged_cells(a.windows.get(card.primary_window)) for a in arms}
    cand = card.candidate.name
    rows = []
    w = card.window(card.primary_window)
    for conc in w.concurrency:
        for cls in w.classes:
            vals: dict[str, float | None] = {}
            for n, c in by.items():
                cell = c.get((cls, conc))
                vals[n] = cell.decode_tok_s if cell else None
            ctrl = [v for a in card.controls if (v := vals.get(a.name)) is not None]
            b = vals.get(cand)
            if b is None and not ctrl:
                continue
            ratio = b / (sum(ctrl) / len(ctrl)) if b is not None and ctrl else None
            cc = by.get(cand, {}).get((cls, conc))
            ci = (
                paired_bootstrap(
                    cc.per_transcript,
                    [
                        by[a.name][(cls, conc)].per_transcript
                        for a in card.controls
                        if (cls, conc) in by.get(a.name, {})
                    ],
                )
                if cc
                else None
            )
            rows.append(RatioRow(cls=cls, concurrency=conc, values=vals, ratio=ratio, spread=spread(ctrl), ci=ci))
    return rows


def fig_ratio(card: Card, rows: list[RatioRow], path: Path) -> bool:
    return _save_drawn(draw_ratio(card, rows), path)


def draw_ratio(card: Card, rows: list[RatioRow]) -> Figure | None:
    """B / ctrl per class and concurrency with the paired bootstrap CI; None when no cell has a ratio."""
    rows = [r for r in rows if r.ratio is not None]
    if not rows:
        return None
    plt = _pyplot()
    fig: Figure
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    concs = sorted({r.concurrency for r in rows})
    classes = list(dict.fromkeys(r.cls for r in rows))
    width = 0.8 / max(1, len(concs))
    for j, conc in enumerate(concs):
        xs: list[float] = []
        ys: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        for i, cls in enumerate(classes):
            row = next((r for r in rows if r.cls == cls and r.concurrency == conc), None)
            if row is None or row.ratio is None:
                continue
            xs.append(i + j * width)
            ys.append(row.ratio)
            ci = row.ci
            lo.append(row.ratio - (1 + ci.low_rel) if ci else 0)
            hi.append((1 + ci.high_rel) - row.ratio if ci else 0)
        ax.bar(
            xs,
            [y - 1 for y in ys],
            width=width,
            bottom=1,
            label=f"C{conc}",
            yerr=[[max(0, v) for v in lo], [max(0, v) for v in hi]],
            capsize=3,
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(concs) - 1) / 2 for i in range(len(classes))], classes, fontsize=8)
    ax.set_ylabel(f"{card.candidate.name} ÷ mean(controls), decode tok/s")
    ax.set_title(f"{card.name}: {card.candidate.name} / ctrl per class (bars: paired bootstrap 95% CI)")
    ax.legend(fontsize=7)
    return fig


def table_value(v: float | None, fmt: str = ",.1f") -> str:
    """A table cell: the value formatted, or a dash where there is none."""
    return "—" if v is None else format(v, fmt)


@dataclass(frozen=True)
class APRow:
    """One arm's tokens per verify step and a_p in the primary window, as the report tables show them."""

    arm: str
    recipe: str
    tokens_per_step: float | None  # measured (None: not measured)
    from_a_p: float | None  # 1 + the sum of a_p (None: no a_p)
    a_p: tuple[float, ...] | None  # accepted at position p over the drafts that had it
    text: str  # a_p by position with where it came from, or "—"


def a_p_rows(card: Card, arms: list[ArmData]) -> list[APRow]:
    """Each arm's row of the a_p table (markdown and HTML)."""
    out = []
    for arm in arms:
        win = arm.windows.get(card.primary_window)
        ap, where = arm_a_p(arm, card.primary_window)
        out.append(APRow(
            arm=arm.arm, recipe=arm.recipe, tokens_per_step=win.tokens_per_step if win else None,
            from_a_p=tokens_per_step_from_a_p(ap) if ap else None, a_p=ap,
            text=" ".join(f"{v:.3f}" for v in ap) + f" ({where})" if ap else "—",
        ))  # fmt: skip
    return out
