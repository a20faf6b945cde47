"""Rendering a window result: the write-up's table shapes, as rich tables.

Two views per clock: decode tok/s per class with load (C8, or 2/s open
loop) and round as columns (the write-up's headline table, rounds kept
apart), and one row per cell with request throughput, tokens/step and
TTFT/TPOT/E2E p50/p90/p99. On the embedded engine every table is printed
on the engine's modelled clock and again on the client's wall clock, each
labelled. Invalid cells print their reason and no numbers, so nothing
invalid is ever read as a measurement.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gb300lane.bench.cells import aggregate_spec
from gb300lane.bench.models import CellResult, Clock, ClockStats, WindowResult, load_label
from gb300lane.bench.stats import Percentiles
from gb300lane.spec.lossless_result import TempEstimate


def _num(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "—" if value is None else fmt.format(value)


def _ms(p: Percentiles) -> str:
    if p.count == 0 or p.p50 is None or p.p90 is None or p.p99 is None:
        return "—"
    return f"{p.p50 * 1e3:.1f} / {p.p90 * 1e3:.1f} / {p.p99 * 1e3:.1f}"


_CLOCK_NAME = {"modelled": "modelled clock (the engine's)", "wall": "wall clock (the client's)"}


def _view(cell: CellResult, clock: Clock) -> ClockStats | None:
    """The cell's statistics on `clock`, wherever the cell keeps them."""
    if cell.clock == clock:
        return ClockStats(
            clock=cell.clock,
            span_s=cell.span_s,
            decode_tok_s=cell.decode_tok_s,
            request_throughput=cell.request_throughput,
            decode_tok_s_per_stream=cell.decode_tok_s_per_stream,
            ttft_s=cell.ttft_s,
            tpot_s=cell.tpot_s,
            itl_s=cell.itl_s,
            e2e_s=cell.e2e_s,
        )
    if cell.other_clock is not None and cell.other_clock.clock == clock:
        return cell.other_clock
    return None


def clocks(result: WindowResult) -> list[Clock]:
    """The clocks the result's cells carry, modelled first."""
    have = {c.clock for c in result.cells} | {c.other_clock.clock for c in result.cells if c.other_clock}
    return [c for c in ("modelled", "wall") if c in have]


def _load_key(cell: CellResult) -> tuple[int, float]:
    return (1, cell.request_rate) if cell.request_rate is not None else (0, float(cell.concurrency))


def decode_table(result: WindowResult, clock: Clock | None = None) -> Table:
    """Decode tok/s (aggregate) on one clock: rows are classes, columns load x round."""
    clock = clock or (clocks(result) or ["wall"])[0]
    classes = list(dict.fromkeys(c.cls for c in result.cells))
    columns = sorted({(_load_key(c), load_label(c), c.round) for c in result.cells})
    temp = result.window.get("temperature")
    title = f"Decode tok/s, temp {temp}, {_CLOCK_NAME[clock]}"
    table = Table(title=title, title_justify="left", min_width=len(title))
    table.add_column("class")
    for _, label, rnd in columns:
        table.add_column(f"{label} r{rnd}", justify="right")
    by_key = {(c.cls, load_label(c), c.round): c for c in result.cells}
    for cls in classes:
        row: list[str | Text] = []
        for _, label, rnd in columns:
            cell = by_key.get((cls, label, rnd))
            view = _view(cell, clock) if cell is not None else None
            if cell is None:
                row.append("")
            elif not cell.valid:
                row.append(Text("invalid", style="red"))
            elif view is None or view.decode_tok_s is None:
                row.append("—")
            else:
                row.append(_num(view.decode_tok_s))
        table.add_row(cls, *row)
    return table


def cell_table(result: WindowResult, clock: Clock | None = None) -> Table:
    """One row per cell on one clock: rates, tokens/step, TTFT, TPOT and E2E percentiles (ms), status."""
    clock = clock or (clocks(result) or ["wall"])[0]
    table = Table(title=f"Cells, {_CLOCK_NAME[clock]} (TTFT, TPOT, E2E in ms: p50 / p90 / p99)", title_justify="left")
    for name, justify in (
        ("class", "left"),
        ("load", "right"),
        ("r", "right"),
        ("tok/s", "right"),
        ("req/s", "right"),
        ("stream p50", "right"),
        ("tok/step", "right"),
        ("TTFT", "right"),
        ("TPOT", "right"),
        ("E2E", "right"),
        ("status", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for c in result.cells:
        v = _view(c, clock)
        ok = c.valid and v is not None
        table.add_row(
            c.cls,
            load_label(c),
            str(c.round),
            _num(v.decode_tok_s) if ok else "—",  # type: ignore[union-attr]
            _num(v.request_throughput, "{:.2f}") if ok else "—",  # type: ignore[union-attr]
            _num(v.decode_tok_s_per_stream.p50) if ok else "—",  # type: ignore[union-attr]
            _num(c.spec.tokens_per_step, "{:.3f}") if c.valid and c.spec else "—",
            _ms(v.ttft_s) if ok else "—",  # type: ignore[union-attr]
            _ms(v.tpot_s) if ok else "—",  # type: ignore[union-attr]
            _ms(v.e2e_s) if ok else "—",  # type: ignore[union-attr]
            _status(c) if v is not None else Text("no times on this clock", style="yellow"),
        )
    return table


def _status(c: CellResult) -> Text:
    if not c.valid:
        return Text("invalid", style="red")
    if c.spec is None:
        return Text("ok, no spec", style="yellow")
    return Text("ok", style="green")


def cell_notes(result: WindowResult) -> Text:
    """Why cells are invalid (one line each), then notes, each note once with the cells it concerns."""
    out = Text()
    for c in result.cells:
        for reason in c.invalid_reasons:
            # Reasons quote server bodies and SSE text, so they are appended as plain text, never markup.
            out.append("invalid", style="red")
            out.append(f" {c.cls} {load_label(c)} r{c.round}: {reason}\n")
    notes: dict[str, list[str]] = {}
    for c in result.cells:
        for note in c.notes:
            notes.setdefault(note, []).append(f"{c.cls} {load_label(c)} r{c.round}")
    for note, where in notes.items():
        scope = f"all {len(where)} cells" if len(where) == len(result.cells) else ", ".join(where)
        out.append(f"note ({scope}): {note}\n")
    out.rstrip()
    return out


def acceptance_line(result: WindowResult) -> Text:
    """Tokens per verify step and a_p over all valid cells, or why there are none."""
    agg = aggregate_spec(result.cells)
    if agg is None:
        return Text("acceptance: no spec-decode counters over the valid cells", style="yellow")
    a_p = ", ".join(f"{x:.3f}" for x in agg.a_p)
    marg = ", ".join("—" if m is None else f"{m:.3f}" for m in agg.marginal)
    exact = "" if agg.a_p_exact else " (all-drafts convention: draft-length mix unknown)"
    return Text(
        f"tokens/step {agg.tokens_per_step:.3f} over {agg.num_drafts} verify steps; "
        f"a_p [{a_p}]{exact}; marginal [{marg}]; mean drafts/step {agg.mean_drafts_per_step:.2f}"
    )


def quality_table(result: WindowResult) -> Table | None:
    """Task-quality pass rates per class and check, with exact 95% intervals; None when no request has one."""
    rates = result.quality_rates()
    if not rates:
        return None
    table = Table(title="Task quality (outputs checked without a model; 95% Clopper-Pearson)", title_justify="left")
    for name, justify in (
        ("class", "left"),
        ("check", "left"),
        ("passed", "right"),
        ("rate", "right"),
        ("95% interval", "right"),
        ("cut at max", "right"),
        ("most frequent error", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rates:
        check = r.check + (f" ({r.from_content} from content)" if r.from_content else "")
        table.add_row(
            r.cls,
            check,
            f"{r.passed}/{r.checked}",
            f"{r.rate:.1%}",
            f"[{r.low:.1%}, {r.high:.1%}]",
            str(r.cut_at_max_tokens),
            Text(r.top_error or "—"),
        )
    return table


def lossless_table(result: WindowResult) -> Table | None:
    """The losslessness check per class and overall (`bench --referee`); None when the window was not checked."""
    ll = result.lossless
    if ll is None:
        return None
    p = "—" if ll.p is None else f"{ll.p:.3g}"
    table = Table(
        title=f"Lossless at temperature {ll.temperature:g}, top_p {ll.top_p:g}: {ll.status} (p {p}, alpha "
        f"{ll.alpha:g}, margin {ll.margin:g}; referee {ll.referee or '—'})",
        title_justify="left",
    )
    for name, justify in (
        ("class", "left"),
        ("tokens", "right"),
        ("transcripts", "right"),
        ("T_eff", "right"),
        (f"{1 - ll.alpha:.0%} interval", "right"),
        ("top-1 observed", "right"),
        ("top-1 expected", "right"),
        ("PIT Z", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]

    def row(name: str, e: TempEstimate) -> None:
        iv = "—" if e.t_low is None or e.t_high is None else f"[{e.t_low:.3f}, {e.t_high:.3f}]"
        table.add_row(
            name,
            str(e.tokens),
            str(e.transcripts),
            "—" if e.t_eff is None else f"{e.t_eff:.3f}",
            iv,
            "—" if e.top1_observed is None else f"{e.top1_observed:.1%}",
            "—" if e.top1_expected is None else f"{e.top1_expected:.1%}",
            "—" if e.z_mean is None else f"{e.z_mean:+.2f}",
        )

    for name, est in ll.per_class.items():
        row(name, est)
    for pos, est in (ll.per_position or {}).items():
        row(f"block position {pos}" if pos != "0" else "no draft (position 0)", est)
    row("all", ll.overall)
    return table


def render_window(result: WindowResult) -> Group:
    """Everything `gb300lane bench` prints after a window."""
    valid = sum(1 for c in result.cells if c.valid)
    load = ""
    if result.load.mode == "open":
        rates = ", ".join(f"{r:g}" for r in result.load.request_rates or [])
        seed = f", seed {result.load.arrival_seed}" if result.load.arrival_seed is not None else ""
        load = (
            f", open loop at the trace's recorded arrival times x {rates}"
            if result.load.arrivals == "trace"
            else f", open loop at {rates} requests/s ({result.load.arrivals} arrivals{seed})"
        )
    head = Text(
        f"window {result.window.get('name')} against {result.endpoint} ({result.model}): "
        f"{valid}/{len(result.cells)} cells valid, {len(result.records)} requests{load}",
        style="bold" if result.valid else "bold red",
    )
    parts: list[Any] = [head]
    for clock in clocks(result) or ["wall"]:
        parts += [decode_table(result, clock), cell_table(result, clock)]
    parts.append(acceptance_line(result))
    quality = quality_table(result)
    if quality is not None:
        parts.append(quality)
    lossless = lossless_table(result)
    if lossless is not None:
        parts.append(lossless)
    notes = cell_notes(result)
    if notes.plain:
        parts.append(notes)
    return Group(*parts)
