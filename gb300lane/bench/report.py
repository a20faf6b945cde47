"""Rendering a window result: the write-up's table shapes, as rich tables.

Two views: decode tok/s per class with concurrency and round as columns
(the write-up's headline table, rounds kept apart), and one row per cell with
tokens/step and TTFT/TPOT p50/p90/p99. Invalid cells print their reason and
no numbers, so nothing invalid is ever read as a measurement.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gb300lane.bench.cells import aggregate_spec
from gb300lane.bench.models import CellResult, WindowResult
from gb300lane.bench.stats import Percentiles


def _num(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "—" if value is None else fmt.format(value)


def _ms(p: Percentiles) -> str:
    if p.count == 0:
        return "—"
    return f"{p.p50 * 1e3:.1f} / {p.p90 * 1e3:.1f} / {p.p99 * 1e3:.1f}"


def decode_table(result: WindowResult) -> Table:
    """Decode tok/s (aggregate, on the cell's clock): rows are classes, columns C x round."""
    classes = list(dict.fromkeys(c.cls for c in result.cells))
    columns = sorted({(c.concurrency, c.round) for c in result.cells})
    clocks = sorted({c.clock for c in result.cells})
    temp = result.window.get("temperature")
    title = f"Decode tok/s, temp {temp} ({'/'.join(clocks)} clock)"
    table = Table(title=title, title_justify="left", min_width=len(title))
    table.add_column("class")
    for conc, rnd in columns:
        table.add_column(f"C{conc} r{rnd}", justify="right")
    by_key = {(c.cls, c.concurrency, c.round): c for c in result.cells}
    for cls in classes:
        row = []
        for conc, rnd in columns:
            cell = by_key.get((cls, conc, rnd))
            if cell is None:
                row.append("")
            elif not cell.valid:
                row.append("[red]invalid[/]")
            else:
                row.append(_num(cell.decode_tok_s))
        table.add_row(cls, *row)
    return table


def cell_table(result: WindowResult) -> Table:
    """One row per cell: decode rates, tokens/step, TTFT and TPOT percentiles (ms), status."""
    table = Table(title="Cells (TTFT and TPOT in ms, p50 / p90 / p99)", title_justify="left")
    for name, justify in (
        ("class", "left"),
        ("C", "right"),
        ("r", "right"),
        ("tok/s", "right"),
        ("stream p50", "right"),
        ("tok/step", "right"),
        ("TTFT", "right"),
        ("TPOT", "right"),
        ("clock", "left"),
        ("status", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for c in result.cells:
        table.add_row(
            c.cls,
            str(c.concurrency),
            str(c.round),
            _num(c.decode_tok_s) if c.valid else "—",
            _num(c.decode_tok_s_per_stream.p50) if c.valid else "—",
            _num(c.spec.tokens_per_step, "{:.3f}") if c.valid and c.spec else "—",
            _ms(c.ttft_s) if c.valid else "—",
            _ms(c.tpot_s) if c.valid else "—",
            c.clock,
            _status(c),
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
            out.append(f" {c.cls} C{c.concurrency} r{c.round}: {reason}\n")
    notes: dict[str, list[str]] = {}
    for c in result.cells:
        for note in c.notes:
            notes.setdefault(note, []).append(f"{c.cls} C{c.concurrency} r{c.round}")
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


def render_window(result: WindowResult) -> Group:
    """Everything `gb300lane bench` prints after a window."""
    valid = sum(1 for c in result.cells if c.valid)
    head = Text(
        f"window {result.window.get('name')} against {result.endpoint} ({result.model}): "
        f"{valid}/{len(result.cells)} cells valid, {len(result.records)} requests",
        style="bold" if result.valid else "bold red",
    )
    parts = [head, decode_table(result), cell_table(result), acceptance_line(result)]
    notes = cell_notes(result)
    if notes.plain:
        parts.append(notes)
    return Group(*parts)
