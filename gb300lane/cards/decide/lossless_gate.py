"""The lossless gate: each arm's text against its target's distribution at the served temperature.

Each arm is judged absolutely (a lossy production would hide a lossy candidate from any comparison with the
controls): its window's `lossless` result, computed when the arm ran by the arm's own referee at the gate's
alpha and margin (`bench.referee`, `spec.lossless`), is read here. The gate FAILs when any arm FAILs (each
arm's false-FAIL rate is alpha, so an exact card of three arms FAILs at most 3 alpha), is INCONCLUSIVE when an
arm was not checked or could not be decided, and PASSes otherwise. B's effective temperature against each
control's (the difference and its interval, `spec.lossless.t_difference`) is reported, not decided on.
"""

from __future__ import annotations

from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.results import GateResult, Status, combine
from gb300lane.cards.schema import LosslessGate
from gb300lane.spec.lossless import t_difference


def _t(est_t: float | None, low: float | None, high: float | None) -> str:
    if est_t is None:
        return "T_eff ?"
    iv = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    return f"T_eff {est_t:.3f}{iv}"


def eval_lossless(gate: LosslessGate, cand: ArmData | None, ctrls: list[ArmData]) -> GateResult:
    """Every arm's losslessness on the gate's window; B against the controls' effective temperature beside it."""
    arms = [a for a in [*ctrls, cand] if a is not None]
    statuses: list[Status] = []
    observed: list[str] = []
    reasons: list[str] = []
    for arm in arms:
        w = arm.windows.get(gate.window)
        ll = w.lossless if w is not None else None
        if ll is None:
            statuses.append("INCONCLUSIVE")
            observed.append(f"{arm.arm}: not checked")
            reasons.append(
                f"{arm.arm}: window {gate.window} has no losslessness check (the arm ran without a referee: "
                "a transcribed or in-process arm, or a receipt from before the gate)"
            )
            continue
        mismatch = ll.alpha != gate.alpha or ll.margin != gate.margin
        status: Status = "INCONCLUSIVE" if mismatch else ll.status
        statuses.append(status)
        o = ll.overall
        observed.append(
            f"{arm.arm}: {status} ({_t(o.t_eff, o.t_low, o.t_high)}, {ll.tokens_scored} tokens, "
            f"p {'?' if ll.p is None else f'{ll.p:.3g}'})"
        )
        if mismatch:
            reasons.append(
                f"{arm.arm}: checked at alpha {ll.alpha}, margin {ll.margin}, not the gate's "
                f"{gate.alpha}, {gate.margin}"
            )
        elif status != "PASS":
            reasons.append(f"{arm.arm}: {ll.reason}")
    diff = ""
    b = cand.windows.get(gate.window) if cand is not None else None
    if b is not None and b.lossless is not None:
        for c in ctrls:
            cw = c.windows.get(gate.window)
            if cw is not None and cw.lossless is not None:
                d = t_difference(b.lossless.overall, cw.lossless.overall, alpha=gate.alpha)
                if d.difference is not None and d.low is not None and d.high is not None:
                    diff += (
                        f"; T_eff/T {cand.arm if cand else 'B'} - {c.arm}: {d.difference:+.3f} "
                        f"[{d.low:+.3f}, {d.high:+.3f}]"
                    )
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status=combine(statuses) if statuses else "INCONCLUSIVE",
        observed="; ".join(observed) + diff,
        bar=f"every arm PASSes at alpha {gate.alpha} (false-FAIL per arm), margin {gate.margin} on T_eff/T and top-1",
        noise_floor="each arm judged absolutely: no floor from the controls",
        reasons=tuple(reasons),
        decides=gate.decides,
    )
