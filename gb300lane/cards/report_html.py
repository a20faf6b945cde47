"""The card as one self-contained HTML page: verdict, gates, B / ctrl, a_p figures, receipts' hashes.

The page carries everything inline (CSS and the figures as SVG with text
kept as text), fetches nothing, reads at a laptop's width (tables scroll
sideways inside their box rather than widening the page) and prints (figures
and tables do not split across pages). Every number a reader checks carries
`data-*` attributes with the value as recorded, so a test (or a script) can
read the page's DOM and compare it with the receipts.
"""

from __future__ import annotations

from html import escape
from typing import Any

from gb300lane.cards.data import ArmData, tokens_per_step_from_a_p
from gb300lane.cards.receipts import Receipts
from gb300lane.cards.report import RatioRow, _arm_a_p, draw_accepted, draw_marginal, draw_ratio, svg_text
from gb300lane.cards.results import GateResult, GateTest
from gb300lane.cards.schema import Card
from gb300lane.cards.verdicts import Verdict
from gb300lane.fsio import sha256_file

CSS = """
:root { --pass: #1a7f37; --fail: #cf222e; --inc: #9a6700; --line: #d0d7de; --muted: #57606a; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1f2328;
       margin: 0 auto; padding: 1.2rem; max-width: 72rem; }
h1 { font-size: 1.5rem; margin: 0 0 .3rem; } h2 { font-size: 1.2rem; margin: 1.8rem 0 .5rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
.muted { color: var(--muted); } code { font-size: .88em; word-break: break-all; }
.verdict { display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; align-items: baseline; padding: .8rem 1rem;
           border: 2px solid var(--line); border-radius: 8px; margin: 1rem 0; }
.verdict .status { font-size: 2rem; font-weight: 700; }
.PASS { color: var(--pass); border-color: var(--pass); } .FAIL { color: var(--fail); border-color: var(--fail); }
.INCONCLUSIVE { color: var(--inc); border-color: var(--inc); }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: .4rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.reason td { color: var(--muted); font-size: .85rem; border-top: none; padding-left: 1.5rem; }
.small { font-size: .82rem; } table.gates { width: 100%; } tr.gate td { background: #fbfcfd; }
figure { margin: 1rem 0; break-inside: avoid; } figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: .85rem; }
.banner { background: #fff8c5; border: 1px solid #d4a72c; padding: .5rem .8rem; border-radius: 6px; }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  .scroll { overflow: visible; } table, figure, .verdict { break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
}
"""


def _pct(v: float | None, signed: bool = True) -> str:
    if v is None:
        return "—"
    return f"{v:+.2%}" if signed else f"{v:.2%}"


def _num(v: float | None, fmt: str = ",.1f") -> str:
    return "—" if v is None else format(v, fmt)


def _attr(v: Any) -> str:
    return "" if v is None else escape(repr(v) if isinstance(v, float) else str(v), quote=True)


def _td(text: str, *, num: bool = False, **data: Any) -> str:
    attrs = "".join(f' data-{k.replace("_", "-")}="{_attr(v)}"' for k, v in data.items())
    return f'<td{" class=num" if num else ""}{attrs}>{escape(text)}</td>'


def _margin(t: GateTest) -> str:
    if t.test == "equivalence":
        return f"±{t.margin:.2%}"
    if t.test == "non_inferiority":
        return f"> −{t.margin:.2%}"
    return f"> +{t.margin:.2%}"


def _test_rows(gate: GateResult) -> list[str]:
    rows = []
    for t in gate.tests:
        where = "window" if t.cls is None else f"{t.cls} C{t.concurrency}" if t.concurrency else t.cls
        interval = "—" if t.low is None or t.high is None else f"[{t.low:+.2%}, {t.high:+.2%}] ({t.level:.0%})"
        units = f"n={t.n}, {t.requests_per_arm} req/arm" + (f", p={t.p_value:.3g}" if t.p_value is not None else "")
        rows.append(
            f'<tr class="test" data-decision="{t.decision}" data-gate="{escape(gate.id)}">'
            f'<td>{escape(where)}<br><span class="muted small">{escape(t.test)} ({escape(t.method)}), '
            f"{escape(t.comparison)}, {escape(t.metric)}</span></td>"
            + _td(_pct(t.estimate), num=True, field="estimate", value=t.estimate)
            + _td(interval, num=True, field="interval", low=t.low, high=t.high, level=t.level)
            + _td(_margin(t), num=True, field="margin", value=t.margin)
            + f'<td class="small" data-field="n" data-value="{t.n}">{escape(units)}</td>'
            + f'<td class="{t.decision}" data-field="decision" data-value="{t.decision}"><b>{t.decision}</b></td></tr>'
            + f'<tr class="reason"><td colspan="6">{escape(t.reason)}</td></tr>'
        )
    return rows


def _gates_table(v: Verdict) -> str:
    head = ("<tr><th>gate · test</th><th>estimate</th><th>interval</th><th>margin</th><th>units</th>"
            "<th>decision</th></tr>")
    rows = []
    for g in v.results:
        kind = g.kind + ("" if g.decides else ", diagnostic (not in the verdict)")
        rows.append(
            f'<tr class="gate" data-gate="{escape(g.id)}" data-status="{g.status}">'
            f'<td><b>{escape(g.id)}</b><br><span class="muted small">{escape(kind)}</span></td>'
            f'<td colspan="4"><span data-field="observed">{escape(g.observed)}</span><br>'
            f'<span class="muted small">bar: <span data-field="bar">{escape(g.bar)}</span>; noise floor: '
            f'<span data-field="noise-floor">{escape(g.noise_floor)}</span></span></td>'
            f'<td class="{g.status}" data-field="status" data-value="{g.status}"><b>{g.status}</b></td></tr>'
        )
        rows += _test_rows(g)
        said = {t.reason for t in g.tests}
        for reason in g.reasons:
            if reason not in said:
                rows.append(f'<tr class="reason"><td colspan="6">↳ {escape(reason)}</td></tr>')
    return (f'<div class="scroll"><table class="gates" data-verdict-number="{v.number}">'
            f"<thead>{head}</thead><tbody>{''.join(rows)}</tbody></table></div>")


def _verdict_section(rec: Receipts, v: Verdict) -> str:
    parts = [f'<section class="verdict-record" id="verdict-{v.number}" data-number="{v.number}" data-verdict="{v.verdict}">',
             f'<h3>Verdict {v.number}: <span class="{v.verdict}">{v.verdict}</span> '
             f'<span class="muted">({escape(v.written_at)}, look {v.look} of {v.looks})</span></h3>']
    if v.previous:
        parts.append(f'<p class="rescore" data-previous="{v.previous.number}">Re-score of verdict {v.previous.number} '
                     f"({v.previous.verdict}, sha256 <code>{escape(v.previous.sha256)}</code>): "
                     f"<b>reason:</b> <span class=\"reason\">{escape(v.reason or '')}</span></p>")
        if v.changes:
            parts.append("<ul>" + "".join(f"<li>changed <code>{escape(c.gate)}.{escape(c.key)}</code>: "
                                          f"<code>{escape(str(c.old))}</code> → <code>{escape(str(c.new))}</code></li>"
                                          for c in v.changes) + "</ul>")
    parts.append(_gates_table(v))
    parts.append("</section>")
    return "".join(parts)


def _ratio_table(card: Card, rows: list[RatioRow]) -> str:
    names = [a.name for a in card.arms]
    cand = card.candidate.name
    head = ("<tr><th>class</th><th>C</th>" + "".join(f"<th>{escape(n)}</th>" for n in names)
            + f"<th>{escape(cand)} ÷ ctrl</th><th>A vs A2</th><th>paired per-stream {escape(cand)} − ctrl (95% CI)</th></tr>")
    body = []
    for r in rows:
        body.append(
            f'<tr class="ratio" data-class="{escape(r.cls)}" data-concurrency="{r.concurrency}">'
            + _td(r.cls) + _td(str(r.concurrency), num=True)
            + "".join(_td(_num(r.values.get(n)), num=True, arm=n, value=r.values.get(n)) for n in names)
            + _td(_num(r.ratio, ".3f"), num=True, field="ratio", value=r.ratio)
            + _td(_pct(r.spread, signed=False), num=True, field="spread", value=r.spread)
            + _td(r.ci.describe() if r.ci else "—", field="ci") + "</tr>"
        )
    return f'<div class="scroll"><table class="b-over-ctrl"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table></div>'


def _a_p_table(card: Card, arms: list[ArmData]) -> str:
    body = []
    for arm in arms:
        win = arm.windows.get(card.primary_window)
        ap, where = _arm_a_p(arm, card.primary_window)
        tps = win.tokens_per_step if win else None
        body.append(
            f'<tr class="arm" data-arm="{escape(arm.arm)}">' + _td(arm.arm) + _td(arm.recipe)
            + _td(_num(tps, ".3f"), num=True, field="tokens-per-step", value=tps)
            + _td(_num(tokens_per_step_from_a_p(ap) if ap else None, ".3f"), num=True)
            + _td(" ".join(f"{v:.3f}" for v in ap) + f" ({where})" if ap else "—", field="a-p",
                  value=" ".join(repr(v) for v in ap) if ap else None) + "</tr>"
        )
    return ('<div class="scroll"><table class="a-p"><thead><tr><th>arm</th><th>recipe</th><th>tokens/step</th>'
            "<th>1 + Σ a_p</th><th>a_p by position</th></tr></thead>" f"<tbody>{''.join(body)}</tbody></table></div>")


def _hashes(rec: Receipts, card: Card, verdicts: list[Verdict]) -> str:
    reg = rec.registration()
    rows = [("registration: gates, windows and arms", "gates_sha256", reg.gates_sha256),
            ("registration: the card file", "card_sha256", reg.card_sha256)]
    for a in card.arms:
        ref = reg.recipes.get(a.name)
        rows.append((f"arm {a.name}: recipe {a.recipe}", "fingerprint", ref.fingerprint if ref and ref.fingerprint else "—"))
    for v in verdicts:
        f = rec.verdict_file(v.number)
        rows.append((f"verdict {v.number}", str(f.relative_to(rec.root)), sha256_file(f) if f.is_file() else "—"))
    for m in rec.manifests():
        rows.append(("manifest (sha256 of the manifest file itself)", m.name, sha256_file(m)))
    out = ['<div class="scroll"><table class="hashes"><thead><tr><th>what</th><th>file or key</th><th>sha256</th>'
           "</tr></thead><tbody>"]
    for what, key, digest in rows:
        out.append(f'<tr data-key="{escape(key)}" data-sha256="{escape(digest)}"><td>{escape(what)}</td>'
                   f"<td><code>{escape(key)}</code></td><td><code>{escape(digest)}</code></td></tr>")
    out.append("</tbody></table></div>")
    manifests = rec.manifests()
    if manifests:
        last = rec.read_json(manifests[-1])
        out.append(f"<details><summary>Every file in {escape(manifests[-1].name)} ({len(last['files'])} files)</summary>"
                   '<div class="scroll"><table class="manifest-files"><tbody>')
        out += [f'<tr data-file="{escape(p)}"><td><code>{escape(p)}</code></td><td><code>{escape(d)}</code></td></tr>'
                for p, d in sorted(last["files"].items())]
        out.append("</tbody></table></div></details>")
    return "".join(out)


def page(card: Card, rec: Receipts, arms: list[ArmData], verdicts: list[Verdict], rows: list[RatioRow]) -> str:
    """The whole page; `verdicts` in order, the last one the verdict reported."""
    reg = rec.registration()
    v = verdicts[-1]
    src = {a.arm: a.source for a in arms}
    w = card.window(card.primary_window)
    figures = []
    for fig_id, fig, caption in (
        ("fig4", draw_accepted(card, arms), "Accepted at position per arm (the write-up's Figure 4): "
                                            "drafts accepted at position p over the drafts that had position p."),
        ("fig5", draw_marginal(card, arms), "Marginal acceptance a_p / a_(p−1) per position (the write-up's Figure 5); "
                                            "the dashed line is the controls' block width."),
        ("ratio", draw_ratio(card, rows), f"{card.candidate.name} ÷ mean(controls), decode tok/s per class and "
                                          "concurrency; bars are the paired bootstrap 95% CI."),
    ):
        if fig is not None:
            figures.append(f'<figure id="{fig_id}">{svg_text(fig)}<figcaption>{escape(caption)}</figcaption></figure>')
    arms_rows = "".join(
        f'<tr data-arm="{escape(a.name)}">' + _td(a.name) + _td(a.role) + _td(a.recipe)
        + _td(reg.recipes[a.name].fingerprint or "—" if a.name in reg.recipes else "—")
        + _td(src.get(a.name, "not run")) + "</tr>" for a in card.arms
    )
    rescored = f", re-score of verdict {v.previous.number}: {escape(v.reason or '')}" if v.previous else ""
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(card.name)}: verdict {v.number} {v.verdict}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(card.title)}</h1>",
        f'<p class="muted">Card <code>{escape(card.name)}</code>, registered {escape(reg.registered_at)} '
        f"(gates sha256 <code>{escape(reg.gates_sha256[:16])}</code>); {len(verdicts)} verdict(s) on record.</p>",
        '<p class="banner">Transcribed receipts: the numbers below were copied from the write-up, not measured here.</p>'
        if reg.transcribed else "",
        f'<div class="verdict {v.verdict}" id="verdict" data-verdict="{v.verdict}" data-number="{v.number}">'
        f'<span class="status">{v.verdict}</span><span>verdict {v.number} of card <b>{escape(card.name)}</b>'
        f"{rescored}</span><span class=muted>candidate {escape(v.candidate_recipe)} vs controls "
        f"{escape(v.control_recipe)}; written {escape(v.written_at)}</span></div>",
        '<div class="scroll"><table class="arms"><thead><tr><th>arm</th><th>role</th><th>recipe</th><th>fingerprint</th>'
        f"<th>source</th></tr></thead><tbody>{arms_rows}</tbody></table></div>",
        "<h2>Gates</h2>", _verdict_section(rec, v),
        f"<h2>Decode tok/s, window <code>{escape(w.name)}</code></h2>",
        f'<p class="muted">temperature {w.temperature}, {w.transcripts_per_class} transcripts per class, '
        f"{w.forced_tokens} tokens, {w.rounds} rounds.</p>",
        _ratio_table(card, rows),
        "<h2>Tokens per verify step and a_p</h2>", _a_p_table(card, arms),
        *figures,
        "<h2>Verdicts on record</h2>" if len(verdicts) > 1 else "",
        *(_verdict_section(rec, old) for old in verdicts[:-1]),
        "<h2>Receipts' hashes</h2>", _hashes(rec, card, verdicts),
        "</body></html>\n",
    ])
