"""The card as one self-contained HTML page: verdict, gates, B / ctrl, a_p figures, receipts' hashes.

The page carries everything inline (CSS and the figures as SVG with text
kept as text), fetches nothing, reads at a laptop's width (tables scroll
sideways inside their box rather than widening the page) and prints (figures
and tables do not split across pages). Every number a reader checks carries
`data-*` attributes with the value as recorded, so a test (or a script) can
read the page's DOM and compare it with the receipts.

The page's layout and style are the `card.html` and `card.css` templates
(`templates/`, autoescaped; a user's `./templates/` copy wins); this module
gathers what they show.
"""

from __future__ import annotations

from typing import Any

from gb300lane import templating
from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.results import GateTest
from gb300lane.cards.decide.verdict import Verdict
from gb300lane.cards.present.figures import RatioRow, a_p_rows, draw_accepted, draw_marginal, draw_ratio, svg_text
from gb300lane.cards.record.receipts import Receipts
from gb300lane.cards.schema import Card
from gb300lane.fsio import sha256_file


def _pct(v: float | None, signed: bool = True) -> str:
    if v is None:
        return "—"
    return f"{v:+.2%}" if signed else f"{v:.2%}"


def _num(v: float | None, fmt: str = ",.1f") -> str:
    return "—" if v is None else format(v, fmt)


def _value(v: Any) -> str:
    """A `data-*` attribute's value as recorded: a float's repr (every digit), else its text; none is empty."""
    if v is None:
        return ""
    if isinstance(v, (tuple, list)):
        return " ".join(_value(x) for x in v)
    return repr(v) if isinstance(v, float) else str(v)


def _margin(t: GateTest) -> str:
    if t.test == "equivalence":
        return f"±{t.margin:.2%}"
    if t.test == "non_inferiority":
        return f"> −{t.margin:.2%}"
    return f"> +{t.margin:.2%}"


def _pp(v: float | None) -> str:
    """An absolute difference of rates, in points."""
    return "—" if v is None else f"{v * 100:+.1f} pts"


def _where(t: GateTest) -> str:
    return "window" if t.cls is None else f"{t.cls} C{t.concurrency}" if t.concurrency else t.cls


def _interval(t: GateTest) -> str:
    return "—" if t.low is None or t.high is None else f"[{t.low:+.2%}, {t.high:+.2%}] ({t.level:.0%})"


def _units(t: GateTest) -> str:
    return f"n={t.n}, {t.requests_per_arm} req/arm" + (f", p={t.p_value:.3g}" if t.p_value is not None else "")


def _hashes(rec: Receipts, card: Card, verdicts: list[Verdict]) -> list[dict[str, str]]:
    reg = rec.registration()
    rows = [
        ("registration: gates, windows and arms", "gates_sha256", reg.gates_sha256),
        ("registration: the card file", "card_sha256", reg.card_sha256),
    ]
    for a in card.arms:
        ref = reg.recipes.get(a.name)
        rows.append(
            (f"arm {a.name}: recipe {a.recipe}", "fingerprint", ref.fingerprint if ref and ref.fingerprint else "—")
        )
    for v in verdicts:
        f = rec.verdict_file(v.number)
        rows.append((f"verdict {v.number}", str(f.relative_to(rec.root)), sha256_file(f) if f.is_file() else "—"))
    for m in rec.manifests():
        rows.append(("manifest (sha256 of the manifest file itself)", m.name, sha256_file(m)))
    return [{"what": what, "key": key, "sha256": digest} for what, key, digest in rows]


def page(card: Card, rec: Receipts, arms: list[ArmData], verdicts: list[Verdict], rows: list[RatioRow]) -> str:
    """The whole page from the `card.html` template (a user's ./templates/card.html wins); `verdicts` in order,
    the last one the verdict reported."""
    figures = []
    for fig_id, fig, caption in (
        (
            "fig4",
            draw_accepted(card, arms),
            "Accepted at position per arm (the write-up's Figure 4): "
            "drafts accepted at position p over the drafts that had position p.",
        ),
        (
            "fig5",
            draw_marginal(card, arms),
            "Marginal acceptance a_p / a_(p−1) per position (the write-up's Figure 5); "
            "the dashed line is the controls' block width.",
        ),
        (
            "ratio",
            draw_ratio(card, rows),
            f"{card.candidate.name} ÷ mean(controls), decode tok/s per class and "
            "concurrency; bars are the paired bootstrap 95% CI.",
        ),
    ):
        if fig is not None:
            figures.append({"id": fig_id, "svg": templating.markup(svg_text(fig)), "caption": caption})
    manifests = rec.manifests()
    manifest = None
    if manifests:
        manifest = {"name": manifests[-1].name, "files": sorted(rec.manifest_files(manifests[-1]).items())}
    return templating.render(
        "card.html", card=card, reg=rec.registration(), verdict=verdicts[-1], verdicts=verdicts,
        sources={a.arm: a.source for a in arms}, window=card.window(card.primary_window),
        arm_names=[a.name for a in card.arms], candidate=card.candidate.name, rows=rows, a_p=a_p_rows(card, arms),
        figures=figures, hashes=_hashes(rec, card, verdicts), manifest=manifest,
        value=_value, pct=_pct, num=_num, margin=_margin, where=_where, interval=_interval, units=_units, pp=_pp,
    )  # fmt: skip
