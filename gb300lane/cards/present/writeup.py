"""The write-up's own cards, re-derived from their transcribed receipts.

`reproduce_br1` / `reproduce_br2` recompute every figure of the write-up's
BR1 and BR2 sections from the receipts shipped in `results/`, score the registered gates
over them (the pre-registered verdict), apply the write-up's re-score, and
return the lines to print beside what the write-up states. Nothing is
written: the transcribed receipts stay as shipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from gb300lane import paths
from gb300lane.cards.decide.data import ArmData, CellAgg, NoiseFloor, marginal, merged_cells, tokens_per_step_from_a_p
from gb300lane.cards.decide.gates import evaluate, overall
from gb300lane.cards.decide.stats import arms_as_units
from gb300lane.cards.decide.verdict import Verdict, apply_changes
from gb300lane.cards.record.models import TranscribedRescore
from gb300lane.cards.record.receipts import Receipts
from gb300lane.cards.record.verdicts import transcribed_verdicts
from gb300lane.cards.schema import Card
from gb300lane.errors import CardError

BR1_DIR, BR2_DIR = paths.WRITEUP_RUNS


def writeup_receipts(dirname: str) -> Receipts:
    """The shipped receipts of a written-up card (always the package's own, never an override)."""
    rec = Receipts(paths.writeup_receipts(dirname))
    if not rec.registration().transcribed:
        raise CardError(f"{rec.root}: expected the write-up's transcribed receipts (registration.transcribed true)")
    bad = rec.verify_manifest()
    if bad:
        raise CardError(
            f"{rec.root}: files differ from manifest.json: {', '.join(bad)}; reinstall gb300lane (or restore them from git)"
        )
    return rec


def _v(value: float | None, what: str) -> float:
    """A number the write-up's receipts must carry; CardError naming it when they do not."""
    if value is None:
        raise CardError(f"the transcribed receipts lack {what}; restore results/ from git")
    return value


def _rate(cells: dict[tuple[str, int], CellAgg], cls: str, conc: int) -> float:
    return _v(cells[(cls, conc)].decode_tok_s, f"decode tok/s of {cls} C{conc}")


def _check(computed: float, stated: float, places: int) -> str:
    return "matches" if round(computed, places) == round(stated, places) else f"write-up says {stated:.{places}f}"


def verdict_lines(v: Verdict) -> list[str]:
    """A verdict as printed lines: every gate's status, what it saw, its bar and why (diagnostics marked)."""
    out = [f"verdict {v.number}: {v.verdict}" + (f" (look {v.look} of {v.looks})" if v.looks > 1 else "")]
    for r in v.results:
        tag = r.status if r.decides else f"{r.status}, diagnostic"
        out.append(f"  [{tag:<4}] {r.id:<20} {r.observed}  (bar: {r.bar}; noise floor: {r.noise_floor})")
        for reason in r.reasons:
            out.append(f"           - {reason}")
    return out


def reproduce_br1() -> list[str]:
    rec = writeup_receipts(BR1_DIR)
    card = rec.card()
    stated = json.loads((rec.root / "writeup.json").read_text(encoding="utf-8"))
    arms = {a.arm: a for a in rec.load_arms(card)}
    A, B, A2 = arms["A"].windows["primary"], arms["B"].windows["primary"], arms["A2"].windows["primary"]
    ca, cb, ca2 = merged_cells(A), merged_cells(B), merged_cells(A2)
    out = [card.title, f"receipts: {rec.root} (transcribed from the write-up; manifest verified)", ""]
    out.append("Decode tok/s, temp 1.0     C1 A    C1 A2    C1 B  B/ctrl      C8 A    C8 A2     C8 B  B/ctrl")
    worst = []
    for cls in card.window("primary").classes:
        row = f"  {cls:<22}"
        for conc in (1, 8):
            a, a2, b = _rate(ca, cls, conc), _rate(ca2, cls, conc), _rate(cb, cls, conc)
            ratio = b / ((a + a2) / 2)
            want = stated["b_over_ctrl"][cls][str(conc)]
            ok = round(ratio, 3) == round(want, 3)
            if not ok:
                worst.append(f"{cls} C{conc} {ratio:.3f} vs {want:.3f}")
            row += f"{a:>9,.1f}{a2:>9,.1f}{b:>9,.1f}{ratio:>7.3f}{'' if ok else '!'} "
        out.append(row)
    out.append(
        "  B/ctrl column: "
        + (
            "all 10 cells match the write-up"
            if not worst
            else f"{10 - len(worst)} of 10 match; ! marks the write-up's rounding of unrounded rates: "
            + ", ".join(worst)
        )
    )
    spreads = sorted(
        1 - min(_rate(ca, c, 1), _rate(ca2, c, 1)) / max(_rate(ca, c, 1), _rate(ca2, c, 1))
        for c in card.window("primary").classes
    )
    out.append(
        f"  the two controls agree at C1 within {spreads[0]:.1%}–{spreads[-1]:.1%} per class "
        f"(write-up: {stated['controls_agree_c1']})"
    )
    tj = (_rate(ca, "tool_json", 1) + _rate(ca2, "tool_json", 1)) / 2
    gain = _rate(cb, "tool_json", 1) / tj - 1
    out.append(
        f"  best class, one user: tool_json {_rate(cb, 'tool_json', 1):.1f} vs {tj:.1f} tok/s, "
        f"{gain:+.1%} ({_check(gain, stated['best_class_c1']['gain'], 3)})"
    )
    out.append("")
    tps = {n: _v(arms[n].windows["primary"].tokens_per_step, f"{n}'s tokens per step") for n in ("A", "B", "A2")}
    ratio = tps["B"] / ((tps["A"] + tps["A2"]) / 2)
    out.append(
        f"Tokens per verify step A / B / A2: {tps['A']:.3f} / {tps['B']:.3f} / {tps['A2']:.3f} "
        f"-> B / mean(A, A2) = {ratio:.3f} ({_check(ratio, stated['tokens_per_step_ratio'], 3)})"
    )
    out.append("")
    out.append("Figure 4, accepted ÷ drafts per position (temp 1.0, all classes):")
    for n, w in (("A", A), ("B", B)):
        ap = w.a_p or ()
        derived = tokens_per_step_from_a_p(ap)
        out.append(
            f"  {n:<2} "
            + " ".join(f"{v:.3f}" for v in ap)
            + f"   1 + sum = {derived:.3f} (stated {w.tokens_per_step:.3f})"
        )
    gaps = [b - a for a, b in zip(A.a_p or (), B.a_p or ())]
    out.append(
        "  gaps B - A: "
        + " ".join(f"{g:+.3f}" for g in gaps)
        + f"  sum {sum(gaps):+.3f} (write-up: +{stated['gap_sum_a_p']:.3f}, from unrounded values)"
    )
    out.append("")
    v1, v2, rs = transcribed_verdicts(rec)
    out.append(f"Pre-registered gates over the transcribed receipts (write-up: {stated['verdict_1']}):")
    out += verdict_lines(v1)
    out.append("  instrument reasons: " + (rs.reason if rs else "-"))
    if v2 is not None:
        out.append("")
        out.append(
            f"Re-score (write-up: {stated['verdict_2']}): "
            + "; ".join(f"{c.gate}.{c.key}: {c.old} -> {c.new}" for c in v2.changes)
        )
        out += verdict_lines(v2)
        if v2.previous is not None:
            prev = v2.previous
            out.append(f"  points at verdict {prev.number} ({prev.verdict}, sha256 {prev.sha256[:12]}); both kept")
    out.append("")
    out += new_design_br1(rec, card, rs)
    return out


ALPHA = 0.025


def new_design_br1(rec: Receipts, card: Card, rs: TranscribedRescore | None) -> list[str]:
    """What the pre-registered-test design says of BR1's transcribed data (printed beside the write-up's verdicts)."""
    arms = {a.arm: a for a in rec.load_arms(card)}
    cells = {n: merged_cells(arms[n].windows["primary"]) for n in ("A", "B", "A2")}

    def rate(arm: str, cls: str, conc: int) -> float:
        return _rate(cells[arm], cls, conc)

    out = ["What the new design says of the same data (pre-registered tests, one-sided alpha 2.5%):"]
    stated = rec.noise_floor_stated()
    floor = stated.decode_tok_s.get("1") if stated is not None else None
    gaps = {
        cls: 1 - min(rate("A", cls, 1), rate("A2", cls, 1)) / max(rate("A", cls, 1), rate("A2", cls, 1))
        for cls in card.window("primary").classes
    }
    widest = max(gaps, key=lambda c: gaps[c])
    if rs is not None and floor is not None:
        gates, _ = apply_changes(card, card.gates, rs.changes)
        lower = NoiseFloor(decode_tok_s={"1": round(floor - 0.001, 3)})
        again = overall(evaluate(card, gates, list(arms.values()), lower))
        out.append(
            f"  circular bar: the re-score's controls-agree bar is the stated noise floor {floor:.1%}, which is "
            f"the widest A vs A2 gap at C1 ({widest} {gaps[widest]:.1%}), the very statistic the gate tests; "
            f"a bar derived from the data it judges cannot fail on them (at {floor - 0.001:.1%} the re-score "
            f"is {again} again)"
        )
    tps = {n: _v(arms[n].windows["primary"].tokens_per_step, f"tokens/step of arm {n}") for n in ("A", "B", "A2")}
    t, df, pval = arms_as_units(tps["B"], [tps["A"], tps["A2"]])
    out.append(
        f"  one degree of freedom: with arms as the units, B's tokens/step {tps['B']:.3f} against the controls "
        f"{tps['A']:.3f} and {tps['A2']:.3f} (their one difference is the only noise estimate) gives "
        f"t = {t:.1f} on {df} degree of freedom, one-sided p = {pval:.3f} "
        f"{'<' if pval < ALPHA else '>'} {ALPHA}: {'shown' if pval < ALPHA else 'not shown'}"
    )
    cell_ps = []
    for conc in (1, 8):
        for cls in card.window("primary").classes:
            _, _, cp = arms_as_units(rate("B", cls, conc), [rate("A", cls, conc), rate("A2", cls, conc)])
            cell_ps.append(f"{cls} C{conc} p={cp:.2f}")
    out.append("  decode tok/s per cell the same way (B better?): " + ", ".join(cell_ps))
    out.append(
        "  the paired per-transcript tests need per-request tokens/step and decode rates, which the write-up "
        "did not publish, so its tested gates cannot run on these receipts"
    )
    verdict = "PASS" if pval < ALPHA else "INCONCLUSIVE"
    out.append(
        f"  new design's verdict on the same data: {verdict} (not enough evidence either way: the 2% gain "
        "may be real, but one bracket cannot show it at 2.5%)"
        if verdict == "INCONCLUSIVE"
        else f"  new design's verdict on the same data: {verdict}"
    )
    return out


def reproduce_br2() -> list[str]:
    rec = writeup_receipts(BR2_DIR)
    card = rec.card()
    stated = json.loads((rec.root / "writeup.json").read_text(encoding="utf-8"))
    arms: dict[str, ArmData] = {a.arm: a for a in rec.load_arms(card)}
    cand = card.candidate.name
    cc = merged_cells(arms[cand].windows["primary"])
    ctrl = [merged_cells(arms[a.name].windows["primary"]) for a in card.controls]
    classes = card.window("primary").classes
    out = [card.title, f"receipts: {rec.root} (transcribed from the write-up; manifest verified)", ""]
    out.append(f"{cand} ÷ mean(A, A2), temp 1.0  " + "".join(f"{c:>11}" for c in classes))
    for conc in (1, 8):
        row = f"  C{conc:<27}"
        for c in classes:
            if (c, conc) in cc:
                base = sum(_rate(x, c, conc) for x in ctrl) / len(ctrl)
                row += f"{_rate(cc, c, conc) / base:>11.3f}"
            else:
                row += f"{'—':>11}"
        out.append(row)
    out.append("  (published as ratios; the controls are the ratio's base)")
    for label, src in (("k=5", ctrl[0]), ("k=9", cc)):
        out.append(
            f"  tokens/step at C1, {label}     " + "".join(f"{src[(c, 1)].tokens_per_step:>11.2f}" for c in classes)
        )
    out.append("")
    ap5 = ctrl[0][("prose", 1)].a_p or ()
    ap9 = cc[("prose", 1)].a_p or ()
    t5, t9 = tokens_per_step_from_a_p(ap5), tokens_per_step_from_a_p(ap9)
    out.append("Prose at one user, from the per-position numbers:")
    out.append(
        f"  k=5: 1 + ({' + '.join(f'{v:.3f}' for v in ap5)}) = {t5:.2f} "
        f"({_check(t5, stated['tokens_per_step_prose_c1']['k5'], 2)})"
    )
    out.append(
        f"  k=9: 1 + ({' + '.join(f'{v:.3f}' for v in ap9)}) = {t9:.2f} "
        f"({_check(t9, stated['tokens_per_step_prose_c1']['k9'], 2)})"
    )
    tail = sum(ap9[5:])
    out.append(f"  positions 6..9 contribute {tail:.3f} tokens ({_check(tail, stated['positions_6_9_sum'], 3)})")
    m5 = [_v(m, f"a_{i} > 0 at k=5") for i, m in enumerate(marginal(ap5))]
    m9 = [_v(m, f"a_{i} > 0 at k=9") for i, m in enumerate(marginal(ap9))]
    out.append("Figure 5, marginal acceptance a_p / a_(p-1):")
    out.append(
        "  k=5: "
        + " ".join(f"{v:.3f}" for v in m5)
        + f"   (range {min(m5):.2f}–{max(m5):.2f}; write-up: between 0.65 and 0.72)"
    )
    out.append(
        "  k=9: "
        + " ".join(f"{v:.3f}" for v in m9)
        + f"   (position 1 {m9[0]:.3f} vs {m5[0]:.3f} at k=5; past position 6 about {sum(m9[6:]) / len(m9[6:]):.2f})"
    )
    st = stated["step_time_ms_peer_2k_c1"]
    prod = (t9 / t5) * (st["k5"] / st["k9"])
    tok = stated["prose_c1_tok_s"]
    out.append(
        f"  tok/s = tokens/step ÷ seconds/step: ({t9:.2f}/{t5:.2f}) × ({st['k5']}/{st['k9']} ms) = {prod:.3f}; "
        f"measured prose C1 {tok['k9']}/{tok['k5']} tok/s = {tok['k9'] / tok['k5']:.3f} "
        "(the step times come from the peer 2K cell, not this one)"
    )
    out.append("")
    v1, _, _ = transcribed_verdicts(rec)
    out.append(
        f"Pre-registered gates over the transcribed receipts (write-up: nine drafts lost in every class; "
        f"{stated['changed']}):"
    )
    out += verdict_lines(v1)
    return out


def reproduce_writeup(which: str) -> list[str]:
    if which == "br1":
        return reproduce_br1()
    if which == "br2":
        return reproduce_br2()
    raise CardError(f"unknown write-up card {which!r}; use br1 or br2")


def writeup_dir(which: str) -> Path:
    return paths.writeup_receipts(BR1_DIR if which == "br1" else BR2_DIR)


def original_arms(which: str) -> list[ArmData]:
    """The write-up card's arms as its transcribed receipts hold them (what a reproduction is compared with)."""
    rec = writeup_receipts(BR1_DIR if which == "br1" else BR2_DIR)
    return rec.load_arms(rec.card())
