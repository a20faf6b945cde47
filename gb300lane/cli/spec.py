"""CLI group `spec`: acceptance from saved /metrics scrapes, and the k advisor."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from gb300lane.cli.common import console, print_json
from gb300lane.errors import LaneError, MetricsError

if TYPE_CHECKING:  # the advisor pulls in numpy: imported when a command runs, not for `--help`
    from gb300lane.spec import AcceptanceCurve, MetricsScrape, StepTimePoint

spec_app = typer.Typer(
    help="Speculative decoding arithmetic: acceptance per position, tokens per step, which k to run.",
    no_args_is_help=True,
)


def _read_scrape(path: Path, model: str | None) -> MetricsScrape:
    from gb300lane.spec import parse_metrics_text

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MetricsError(
            f"{path}: cannot read the scrape ({exc.strerror}); save GET /metrics to a file first"
        ) from exc
    return parse_metrics_text(text, model_name=model, source=str(path))


@spec_app.command("from-metrics", help="Tokens per step, a_p and marginal per position from one or two saved scrapes.")
def from_metrics(
    after: Path = typer.Argument(..., help="a saved /metrics scrape (the later one when --before is given)"),
    before: Path | None = typer.Option(None, "--before", help="an earlier scrape of the same engine run"),
    model: str | None = typer.Option(None, "--model", help="model_name label to read, when the scrape has several"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    from gb300lane.spec import acceptance, delta

    scrape = _read_scrape(after, model)
    if before is not None:
        scrape = delta(_read_scrape(before, model), scrape)
    stats = acceptance(scrape.spec)
    if as_json:
        print_json({"counters": scrape.spec.model_dump(), "acceptance": stats.model_dump()})
        return
    console.print(
        f"tokens/step {stats.tokens_per_step:.3f}   drafts/step {stats.mean_drafts_per_step:.2f}   "
        f"draft acceptance {stats.draft_acceptance_rate:.1%}   drafts {scrape.spec.num_drafts}"
    )
    table = Table("position", "a_p", "marginal", "vLLM per-position (all drafts)")
    for p, (a, m, v) in enumerate(zip(stats.a_p, stats.marginal, stats.vllm_per_position), start=1):
        table.add_row(str(p), f"{a:.3f}", "-" if m is None else f"{m:.3f}", f"{v:.3f}")
    console.print(table)
    if not stats.a_p_exact:
        console.print(
            "[yellow]drafts had several lengths and the scrape has no drafts-by-length counter: "
            "a_p is shown in vLLM's all-drafts convention[/]",
            markup=True,
        )


def _curve(text: str, k_kind: str) -> AcceptanceCurve:
    from gb300lane.spec import AcceptanceCurve

    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError as exc:
        raise LaneError(
            f"--{k_kind}: {text!r} is not a comma-separated list of numbers, e.g. 0.717,0.476,0.310"
        ) from exc
    key = "a_p" if k_kind == "a-p" else "marginal"
    try:
        return AcceptanceCurve(k=len(values), **{key: values})
    except ValueError as exc:
        raise LaneError(f"--{k_kind} {text}: {exc}") from exc


def _step(text: str) -> StepTimePoint:
    from gb300lane.spec import StepTimePoint

    try:
        k, ms = text.split(":")
        return StepTimePoint(k=int(k), ms=float(ms))
    except ValueError as exc:
        raise LaneError(f"--step {text!r}: expected K:MS with MS > 0, e.g. --step 5:11.0") from exc


@spec_app.command(
    "advise", help="Predict tokens/step and tok/s per k from acceptance curves and step times; recommend k."
)
def advise_cmd(
    receipts: Path | None = typer.Option(
        None,
        "--receipts",
        help='JSON: {"schema_version": 1, "curves": [{"k", "a_p" | "marginal"}], '
        '"step_ms": [{"k", "ms"}], "trained_block"}',
    ),
    a_p: list[str] = typer.Option([], "--a-p", help="a_p per position measured at k = its length (repeatable)"),
    marginal: list[str] = typer.Option([], "--marginal", help="marginal per position at k = its length (repeatable)"),
    step: list[str] = typer.Option([], "--step", help="measured step time K:MS (repeat for two k or more)"),
    trained_block: int | None = typer.Option(None, "--trained-block", help="the checkpoint's dspark_block_size"),
    k: list[int] = typer.Option([], "--k", help="candidate k to consider (default 1..longest curve)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    from gb300lane.spec import advise, load_advisor_input

    curves = [_curve(t, "a-p") for t in a_p] + [_curve(t, "marginal") for t in marginal]
    points = [_step(t) for t in step]
    block = trained_block
    if receipts is not None:
        data = load_advisor_input(receipts)
        curves = list(data.curves) + curves
        points = list(data.step_ms) + points
        block = block if block is not None else data.trained_block
    advice = advise(curves, points, trained_block=block, candidates=k or None)
    if as_json:
        print_json(advice.model_dump())
        return
    table = Table("k", "tokens/step", "ms/step", "tok/s", "curve from k", "note")
    for row in advice.predictions:
        note = ", ".join(
            n
            for n, on in (("outside trained block", row.outside_trained_block), ("extrapolated", row.extrapolated))
            if on
        )
        mark = " *" if row.k == advice.recommended_k else ""
        table.add_row(
            f"{row.k}{mark}",
            f"{row.tokens_per_step:.3f}",
            f"{row.step_ms:.2f}",
            f"{row.tok_s:.1f}",
            str(row.curve_k),
            note,
        )
    console.print(table)
    m = advice.step_model
    console.print(f"step time model: {m.intercept_ms:.2f} ms + {m.slope_ms:.3f} ms x k ({len(m.points)} points)")
    console.print(f"recommended k = {advice.recommended_k}")
    for w in advice.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", markup=True)


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    app.add_typer(spec_app, name="spec")
