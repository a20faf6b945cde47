"""Evaluating a card's gates over its arms' data.

Tested gates (tokens/step, decode tok/s, the controls' equivalence) are
decided by pre-registered paired tests in `cards.decide.evidence`; the
latency tail by `cards.decide.tails`, task quality by McNemar's exact test
in `cards.decide.quality_gate`. Boot checks and
parity compare facts across arms. The write-up's point-ratio gates
(`tokens_per_step_ratio`, `decode_ratio`, `controls_agree`) are kept so its
own cards score as they did: they report the controls' spread (A vs A2), the
rounds' spread (r1 vs r2) and a paired bootstrap CI beside every ratio, but
decide on the ratio alone. A bar derived from a spread is taken from the
controls only: the candidate never widens its own bar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import assert_never

from gb300lane.cards.decide.data import ArmData, BootFacts, CellAgg, NoiseFloor, merged_cells
from gb300lane.cards.decide.evidence import Look, eval_tested
from gb300lane.cards.decide.lossless_gate import eval_lossless
from gb300lane.cards.decide.quality_gate import eval_quality
from gb300lane.cards.decide.results import CellCheck, GateResult, Status, combine
from gb300lane.cards.decide.stats import bootstrap_seed, paired_bootstrap, spread
from gb300lane.cards.decide.tails import eval_tail
from gb300lane.cards.schema import (
    Bar,
    Card,
    ControlsAgreeGate,
    DecodeRatioGate,
    EnvEqualGate,
    FeatureLiveGate,
    FlagGate,
    ForeignClientsGate,
    Gate,
    HashHitGate,
    KvPoolGate,
    LatencyTailGate,
    LosslessGate,
    ParityGate,
    TaskQualityGate,
    TestedGate,
    TokensPerStepGate,
)
from gb300lane.errors import CardError

__all__ = ["CellCheck", "GateResult", "Look", "Status", "evaluate", "overall"]


#: Gates decided by the arms' boot facts.
BootGate = HashHitGate | FlagGate | EnvEqualGate | KvPoolGate | ForeignClientsGate | FeatureLiveGate
#: Gates over a window's cells.
WindowGate = (
    TokensPerStepGate
    | DecodeRatioGate
    | ControlsAgreeGate
    | ParityGate
    | LatencyTailGate
    | TaskQualityGate
    | LosslessGate
)
CellKey = tuple[str, int]


def _status(checks: list[Status]) -> Status:
    return combine(checks)


class _Ctx:
    def __init__(self, card: Card, arms: list[ArmData], stated_floor: NoiseFloor | None) -> None:
        self.card = card
        self.by_name = {a.arm: a for a in arms}
        self.cand = self.by_name.get(card.candidate.name)
        self.ctrls = [self.by_name[a.name] for a in card.controls if a.name in self.by_name]
        self.missing = [a.name for a in card.arms if a.name not in self.by_name]
        self.stated_floor = stated_floor.decode_tok_s if stated_floor is not None else {}

    def cells(self, window: str) -> tuple[dict[CellKey, CellAgg], list[dict[CellKey, CellAgg]]]:
        c = merged_cells(self.cand.windows.get(window)) if self.cand else {}
        return c, [merged_cells(a.windows.get(window)) for a in self.ctrls]

    def keys(
        self, gate: WindowGate, cand: dict[CellKey, CellAgg], ctrls: list[dict[CellKey, CellAgg]]
    ) -> list[CellKey]:
        keys = set(cand)
        for c in ctrls:
            keys |= set(c)
        win = self.card.window(gate.window)
        order: dict[str, int] = {cls: i for i, cls in enumerate(win.classes)}
        keys = {
            k
            for k in keys
            if (gate.classes is None or k[0] in gate.classes) and (gate.concurrency is None or k[1] in gate.concurrency)
        }
        return sorted(keys, key=lambda k: (k[1], order.get(k[0], 99), k[0]))

    def rounds_spread(self, cells: list[CellAgg | None]) -> float | None:
        """The class's own r1/r2 spread: the widest over the controls given (never the candidate's own)."""
        spreads = [s for c in cells if c is not None and c.rounds and (s := spread(c.rounds)) is not None]
        return max(spreads) if spreads else None

    def candidate(self) -> ArmData:
        """The candidate arm's data (callers run after `_missing_arms` found it)."""
        if self.cand is None:
            raise CardError(f"card {self.card.name}: no data for the candidate arm {self.card.candidate.name}")
        return self.cand

    def ratio_only(self, window: str) -> bool:
        """True where the source published only candidate / controls ratios (no controls' spread exists)."""
        arms = ([self.cand] if self.cand else []) + self.ctrls
        return any(window in a.windows and a.windows[window].unit == "ratio_to_controls_mean" for a in arms)

    def stated(self, concurrency: int) -> float | None:
        v = self.stated_floor.get(str(concurrency))
        return float(v) if v is not None else None

    def resolve_bar(
        self, bar: Bar, ctrl_spread: float | None, rounds_spread: float | None, concurrency: int
    ) -> tuple[float | None, str | None]:
        if bar.mode == "fixed":
            return bar.value, None
        if bar.source == "controls":
            s, note = ctrl_spread, None
        else:
            s, note = rounds_spread, None
            if s is None and self.stated(concurrency) is not None:
                s = self.stated(concurrency)
                note = f"rounds not published; the source's stated noise floor {s:.1%} at C{concurrency} used"
        if s is None:
            return None, f"no {bar.source} spread recorded"
        return max(bar.value, bar.multiplier * s), note


def _missing_arms(ctx: _Ctx, gate: Gate) -> GateResult | None:
    if ctx.cand is None or not ctx.ctrls:
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status="INCONCLUSIVE",
            observed="arms not finished",
            bar="-",
            noise_floor="-",
            reasons=(f"no data for arms {', '.join(ctx.missing)}",),
        )
    return None


def _ratio_cells(ctx: _Ctx, gate: DecodeRatioGate | ControlsAgreeGate) -> list[CellCheck]:
    cand, ctrls = ctx.cells(gate.window)
    out: list[CellCheck] = []
    for key in ctx.keys(gate, cand, ctrls):
        cc = cand.get(key)
        cs = [c.get(key) for c in ctrls]
        ctrl_vals = [c.decode_tok_s for c in cs if c is not None and c.decode_tok_s is not None]
        c_spread = None if ctx.ratio_only(gate.window) else spread(ctrl_vals)
        r_spread = ctx.rounds_spread(cs)
        bar, note = ctx.resolve_bar(gate.bar, c_spread, r_spread, key[1])
        if isinstance(gate, ControlsAgreeGate):
            observed = c_spread
            ok = None if observed is None or bar is None else observed <= bar + 1e-12
            ci = None
        else:
            ctrl_mean = sum(ctrl_vals) / len(ctrl_vals) if ctrl_vals else None
            observed = cc.decode_tok_s / ctrl_mean if cc and cc.decode_tok_s is not None and ctrl_mean else None
            ok = None if observed is None or bar is None else observed >= 1.0 - bar - 1e-12
            pc = (
                paired_bootstrap(
                    cc.per_transcript,
                    [c.per_transcript for c in cs if c is not None],
                    seed=bootstrap_seed(gate.id, key),
                )
                if cc
                else None
            )
            ci = pc.describe() if pc else None
        status: Status = "INCONCLUSIVE" if ok is None else ("PASS" if ok else "FAIL")
        out.append(
            CellCheck(
                cls=key[0],
                concurrency=key[1],
                status=status,
                observed=observed,
                bar=bar,
                controls_spread=c_spread,
                rounds_spread=r_spread,
                paired_ci=ci,
                note=note,
            )
        )
    return out


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1%}" if pct else f"{v:.3f}"


def _eval_ratio(ctx: _Ctx, gate: DecodeRatioGate | ControlsAgreeGate) -> GateResult:
    cells = _ratio_cells(ctx, gate)
    agree = isinstance(gate, ControlsAgreeGate)
    cand = ctx.card.candidate.name
    failing = [c for c in cells if c.status == "FAIL"]
    undecided = [c for c in cells if c.status == "INCONCLUSIVE"]
    reasons = []
    for c in failing:
        what = f"controls differ by {_fmt(c.observed, True)}" if agree else f"{cand}/ctrl {_fmt(c.observed)}"
        bar = f"bar ±{_fmt(c.bar, True)}" if agree else f"bar {_fmt(1 - (c.bar or 0))}"
        stated = ctx.stated(c.concurrency)
        floor = (
            f"; r1/r2 spread {_fmt(c.rounds_spread, True)}"
            if c.rounds_spread is not None
            else f"; stated noise floor {_fmt(stated, True)}"
            if stated is not None
            else ""
        )
        reasons.append(
            f"{c.cls} C{c.concurrency}: {what} > {bar}{floor}"
            if agree
            else f"{c.cls} C{c.concurrency}: {what} < {bar}{floor}"
        )
    reasons += [f"{c.cls} C{c.concurrency}: undecided ({c.note or 'missing data'})" for c in undecided]
    vals = [c.observed for c in cells if c.observed is not None]
    if agree:
        observed = (
            f"controls' spread {_fmt(min(vals), True)}..{_fmt(max(vals), True)} over {len(cells)} cells"
            if vals
            else "no cells"
        )
    else:
        observed = f"{cand}/ctrl {_fmt(min(vals))}..{_fmt(max(vals))} over {len(cells)} cells" if vals else "no cells"
    bar = ("controls agree within " if agree else f"{cand}/ctrl >= 1 - ") + gate.bar.describe()
    bars = [c.bar for c in cells if c.bar is not None]
    if gate.bar.mode == "spread" and bars:
        bar += f" -> {_fmt(min(bars), True)}..{_fmt(max(bars), True)}"
        notes = sorted({c.note for c in cells if c.note})
        bar += f" ({'; '.join(notes)})" if notes else ""
    cs = [c.controls_spread for c in cells if c.controls_spread is not None]
    rs = [c.rounds_spread for c in cells if c.rounds_spread is not None]
    floor = f"A vs A2 {_fmt(min(cs), True)}..{_fmt(max(cs), True)}" if cs else "A vs A2 n/a"
    floors = sorted({(c.concurrency, v) for c in cells if (v := ctx.stated(c.concurrency)) is not None})
    if rs:
        floor += f"; r1 vs r2 {_fmt(min(rs), True)}..{_fmt(max(rs), True)}"
    elif floors:
        floor += "; r1 vs r2 not published, stated floor " + ", ".join(f"{_fmt(v, True)} at C{k}" for k, v in floors)
    else:
        floor += "; r1 vs r2 not recorded"
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status=_status([c.status for c in cells]),
        observed=observed,
        bar=bar,
        noise_floor=floor,
        reasons=tuple(reasons),
        cells=tuple(cells),
    )


def _eval_tps(ctx: _Ctx, gate: TokensPerStepGate) -> GateResult:
    bar = f"{ctx.card.candidate.name} / mean(controls) >= {gate.min_ratio:.3f}"
    if gate.scope == "aggregate":
        b = ctx.candidate().windows.get(gate.window)
        cv = [
            v
            for a in ctx.ctrls
            if gate.window in a.windows and (v := a.windows[gate.window].tokens_per_step) is not None
        ]
        if b is None or b.tokens_per_step is None or not cv:
            return GateResult(
                id=gate.id,
                kind=gate.kind,
                status="INCONCLUSIVE",
                observed="tokens/step not recorded",
                bar=bar,
                noise_floor="n/a",
                reasons=("tokens/step missing on an arm",),
            )
        ratio = b.tokens_per_step / (sum(cv) / len(cv))
        status: Status = "PASS" if ratio >= gate.min_ratio - 1e-12 else "FAIL"
        arms = " / ".join(
            _fmt(ctx.by_name[n.name].windows[gate.window].tokens_per_step)
            if gate.window in ctx.by_name[n.name].windows
            else "n/a"
            for n in ctx.card.arms
        )
        reasons: tuple[str, ...] = (
            () if status == "PASS" else (f"tokens/step ratio {ratio:.3f} < {gate.min_ratio:.3f}",)
        )
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status=status,
            observed=f"{arms} ({'/'.join(a.name for a in ctx.card.arms)}) -> {ratio:.3f}",
            bar=bar,
            noise_floor=f"A vs A2 {_fmt(spread(cv), True)}",
            reasons=reasons,
        )
    cand, ctrls = ctx.cells(gate.window)
    cells = []
    for key in ctx.keys(gate, cand, ctrls):
        cc = cand.get(key)
        cv = [v for c in ctrls if key in c and (v := c[key].tokens_per_step) is not None]
        cell_ratio = cc.tokens_per_step / (sum(cv) / len(cv)) if cc and cc.tokens_per_step and cv else None
        st: Status = (
            "INCONCLUSIVE" if cell_ratio is None else ("PASS" if cell_ratio >= gate.min_ratio - 1e-12 else "FAIL")
        )
        note = None if len(cv) == len(ctrls) else f"{len(cv)} of {len(ctrls)} controls recorded tokens/step"
        cells.append(
            CellCheck(
                cls=key[0],
                concurrency=key[1],
                status=st,
                observed=cell_ratio,
                bar=gate.min_ratio,
                controls_spread=spread(cv),
                rounds_spread=None,
                note=note,
            )
        )
    vals = [c.observed for c in cells if c.observed is not None]
    reasons = tuple(
        f"{c.cls} C{c.concurrency}: tokens/step ratio {_fmt(c.observed)} < {gate.min_ratio:.3f}"
        for c in cells
        if c.status == "FAIL"
    )
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status=_status([c.status for c in cells]),
        observed=f"ratio {_fmt(min(vals))}..{_fmt(max(vals))} over {len(cells)} cells" if vals else "no cells",
        bar=bar,
        noise_floor="per cell",
        reasons=reasons,
        cells=tuple(cells),
    )


def _outputs(a: ArmData, gate: ParityGate) -> dict[tuple[str, int, int | None, str], str]:
    w = a.windows.get(gate.window)
    out = {}
    for c in w.cells if w else ():
        if (gate.classes is None or c.cls in gate.classes) and (
            gate.concurrency is None or c.concurrency in gate.concurrency
        ):
            for tid, digest in c.outputs.items():
                out[(c.cls, c.concurrency, c.round, tid)] = digest
    return out


def _eval_parity(ctx: _Ctx, gate: ParityGate) -> GateResult:
    """Request-by-request output equality, the controls' own flips being the floor.

    Block verification leaves the output distribution unchanged, and at
    temperature 0 it is not even reached: B must flip no more outputs against
    A than A2 does.
    """
    cand = _outputs(ctx.candidate(), gate)
    ref = _outputs(ctx.ctrls[0], gate)
    other = _outputs(ctx.ctrls[1], gate) if len(ctx.ctrls) > 1 else {}
    common = sorted(set(cand) & set(ref))
    bar = (
        f"flips {ctx.card.candidate.name} vs {ctx.ctrls[0].arm} <= flips between the controls + {gate.max_extra_flips}"
    )
    if not common:
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status="INCONCLUSIVE",
            observed="no outputs recorded",
            bar=bar,
            noise_floor="-",
            reasons=("the window recorded no outputs on the arms",),
            decides=gate.decides,
        )
    flips = [k for k in common if cand[k] != ref[k]]
    floor_keys = sorted(set(ref) & set(other))
    floor = sum(1 for k in floor_keys if ref[k] != other[k])
    ok = len(flips) <= floor + gate.max_extra_flips
    observed = f"{len(flips)} of {len(common)} outputs differ ({ctx.card.candidate.name} vs {ctx.ctrls[0].arm})"
    reasons = (
        ()
        if ok
        else tuple(
            [f"{len(flips)} flips > {floor} between the controls + {gate.max_extra_flips}"]
            + [f"{c} C{n} r{r} {t}" for c, n, r, t in flips[:5]]
        )
    )
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status="PASS" if ok else "FAIL",
        observed=observed,
        bar=bar,
        noise_floor=f"A vs A2 {floor} of {len(floor_keys)} flips" if floor_keys else "A vs A2 n/a",
        reasons=reasons,
        decides=gate.decides,
    )


def _per_arm(
    ctx: _Ctx, gate: Gate, values: Mapping[str, object], ok: bool | None, observed: str, bar: str, reason: str
) -> GateResult:
    missing = [k for k, v in values.items() if v is None]
    if missing:
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status="INCONCLUSIVE",
            observed=observed,
            bar=bar,
            noise_floor="-",
            reasons=(f"not recorded on {', '.join(missing)}",),
        )
    st: Status = "PASS" if ok else "FAIL"
    return GateResult(
        id=gate.id,
        kind=gate.kind,
        status=st,
        observed=observed,
        bar=bar,
        noise_floor="-",
        reasons=() if ok else (reason,),
    )


def _eval_env(ctx: _Ctx, gate: EnvEqualGate, boots: dict[str, BootFacts]) -> GateResult:
    bar = f"equal as {'ordered lists' if gate.compare == 'ordered' else 'sets'}"
    lists = {k: b.env for k, b in boots.items()}
    recorded = {k: e for k, e in lists.items() if e is not None}
    if len(recorded) == len(lists):
        first = next(iter(recorded.values()))
        same_order = all(list(e) == list(first) for e in recorded.values())
        same_set = all(set(e) == set(first) for e in recorded.values())
        ok = same_order if gate.compare == "ordered" else same_set
        obs = (
            f"{len(first)} variables; sets {'identical' if same_set else 'differ'}; "
            f"order {'identical' if same_order else 'differs'}"
        )
        why = "container environments differ " + (
            "in order only (compared as ordered lists)" if same_set else "in content"
        )
        return _per_arm(ctx, gate, lists, ok, obs, bar, why)
    digests = {k: b.env_set_digest for k, b in boots.items()}
    if gate.compare == "set" and all(d is not None for d in digests.values()):
        ok = len(set(digests.values())) == 1
        obs = "set digests " + " / ".join(str(d)[:8] for d in digests.values())
        return _per_arm(ctx, gate, digests, ok, obs, bar, "container environments differ as sets")
    return _per_arm(ctx, gate, lists, None, "env lists not recorded", bar, "")


def _eval_boot(ctx: _Ctx, gate: BootGate) -> GateResult:
    arms = [ctx.by_name[a.name] for a in ctx.card.arms if a.name in ctx.by_name]
    boots = {a.arm: a.boot for a in arms if a.boot is not None}
    if len(boots) < len(arms) or ctx.missing:
        return GateResult(
            id=gate.id,
            kind=gate.kind,
            status="INCONCLUSIVE",
            observed="boot facts missing",
            bar="-",
            noise_floor="-",
            reasons=(f"no boot facts for {', '.join(ctx.missing) or 'some arms'}",),
        )
    names = "/".join(boots)
    if isinstance(gate, HashHitGate):
        v = {k: b.hash_hit for k, b in boots.items() if gate.arms is None or k in gate.arms}
        names = "/".join(v)
        obs = " / ".join("hit" if x else ("miss" if x is not None else "?") for x in v.values())
        covered = "every arm" if gate.arms is None else ", ".join(gate.arms)
        return _per_arm(
            ctx,
            gate,
            v,
            all(v.values()),
            f"{obs} ({names})",
            f"hash hit on {covered}",
            "a boot missed the compile cache: " + ", ".join(k for k, x in v.items() if not x),
        )
    if isinstance(gate, FlagGate):
        present = {k: (b.flags.get(gate.key) == gate.value) for k, b in boots.items()}
        cand = ctx.card.candidate.name
        ok = all(p == (k == cand) for k, p in present.items())
        obs = " / ".join("1" if p else "0" for p in present.values())
        return _per_arm(
            ctx,
            gate,
            present,
            ok,
            f"{gate.key}={gate.value}: {obs} ({names})",
            f"on {cand} only",
            f"{gate.key}={gate.value} found on {[k for k, p in present.items() if p]}",
        )
    if isinstance(gate, EnvEqualGate):
        return _eval_env(ctx, gate, boots)
    if isinstance(gate, KvPoolGate):
        pools = {k: b.kv_pool_tokens for k, b in boots.items()}
        ok = len(set(pools.values())) == 1
        obs = " / ".join(f"{x:,}" if x is not None else "?" for x in pools.values())
        return _per_arm(
            ctx, gate, pools, ok, f"{obs} tokens ({names})", "same KV pool on every arm", "KV pools differ: " + obs
        )
    if isinstance(gate, ForeignClientsGate):
        seen = {k: b.foreign_clients for k, b in boots.items()}
        ok = all(x == 0 for x in seen.values() if x is not None)
        obs = " / ".join(str(x) if x is not None else "?" for x in seen.values())
        return _per_arm(ctx, gate, seen, ok, f"{obs} ({names})", "zero on every arm", "foreign clients seen: " + obs)
    if isinstance(gate, FeatureLiveGate):
        live = {k: b.feature_live for k, b in boots.items()}
        dead = [k for k, x in live.items() if x is False]
        obs = " / ".join({True: "live", False: "NOT LIVE", None: "-"}[x] for x in live.values())
        why = "; ".join(f"{k}: {boots[k].feature_live_summary}" for k in dead)
        return _per_arm(ctx, gate, live, not dead, f"{obs} ({names})", "every asked-for feature runs", why)
    assert_never(gate)


def evaluate(
    card: Card,
    gates: Sequence[Gate],
    arms: list[ArmData],
    stated_floor: NoiseFloor | None = None,
    look: Look | None = None,
) -> list[GateResult]:
    """Evaluate `gates` (the registered ones, or a re-score's) over the arms' data, at `look` (default: fixed)."""
    ctx = _Ctx(card, arms, stated_floor)
    out: list[GateResult] = []
    for gate in gates:
        if isinstance(gate, TestedGate):
            miss = _missing_arms(ctx, gate)
            out.append(miss if miss is not None else eval_tested(card, gate, ctx.cand, ctx.ctrls, look or Look()))
        elif isinstance(gate, WindowGate):
            miss = _missing_arms(ctx, gate)
            if miss is not None:
                out.append(miss)
            elif isinstance(gate, ParityGate):
                out.append(_eval_parity(ctx, gate))
            elif isinstance(gate, LatencyTailGate):
                out.append(eval_tail(gate, ctx.cand, ctx.ctrls, look or Look()))
            elif isinstance(gate, TaskQualityGate):
                out.append(eval_quality(gate, ctx.candidate(), ctx.ctrls, look or Look()))
            elif isinstance(gate, LosslessGate):
                out.append(eval_lossless(gate, ctx.cand, ctx.ctrls))
            elif isinstance(gate, TokensPerStepGate):
                out.append(_eval_tps(ctx, gate))
            else:
                out.append(_eval_ratio(ctx, gate))
        elif isinstance(gate, BootGate):
            out.append(_eval_boot(ctx, gate))
        else:
            assert_never(gate)  # a new gate kind: add it to one of the unions above and evaluate it
    return out


def overall(results: list[GateResult]) -> Status:
    """The verdict: FAIL if a deciding gate failed, INCONCLUSIVE if one is undecided, else PASS."""
    return combine([r.status for r in results if r.decides])
