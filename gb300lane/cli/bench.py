"""CLI commands `bench` (run a window, `export`, `selftest`) and `smoke` (run a recipe's smoke gates)."""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from gb300lane.cli.common import console, err_console, fail, print_json
from gb300lane.cli.hosts import acts_on_host

if TYPE_CHECKING:  # the bench package pulls in aiohttp and numpy: import it when a command runs
    from gb300lane.bench.models import WindowResult
    from gb300lane.bench.progress import RichWindowProgress
    from gb300lane.bench.smoke import SmokeReport


def _int_list(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint=option) from None


def _float_list(text: str | None, option: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of numbers", param_hint=option) from None


def _progress(as_json: bool) -> AbstractContextManager[RichWindowProgress | None]:
    from gb300lane.bench.progress import RichWindowProgress

    if as_json or not sys.stderr.isatty():
        return nullcontext(None)
    return RichWindowProgress(console=err_console)


def _summary(
    result: WindowResult, out: Path | None, check: dict[str, Any] | None = None, schedule: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "counter_check": check,
        "schedule_check": schedule,
        "out": str(out) if out else None,
        "valid": result.valid,
        "endpoint": result.endpoint,
        "model": result.model,
        "recipe": result.recipe,
        "fingerprint": result.fingerprint,
        "window": result.window,
        "load": result.load.model_dump(mode="json"),
        "cells": [c.model_dump(mode="json") for c in result.cells],
        "quality": [r.model_dump(mode="json") for r in result.quality_rates()],
        "lossless": result.lossless.model_dump(mode="json") if result.lossless is not None else None,
    }


def bench_cmd(
    ctx: typer.Context,
    window: str | None = typer.Option(
        None, "--window", help="window name (recipe gate, primary-t1, parity-t0) or a YAML/JSON file"
    ),
    endpoint: str | None = typer.Option(None, "--endpoint", help="base URL of the lane, e.g. http://127.0.0.1:30106"),
    lane: str | None = typer.Option(None, "--lane", help="recipe whose rendered endpoint to measure"),
    out: Path | None = typer.Option(None, "--out", help="write the window result here (never overwrites)"),
    model: str | None = typer.Option(None, "--model", help="served model name (default: the recipe's, or /v1/models)"),
    transcripts: int | None = typer.Option(None, "--transcripts", help="override transcripts per class"),
    tokens: int | None = typer.Option(
        None, "--tokens", help="override the forced output tokens (max_tokens where the window stops at EOS)"
    ),
    rounds: int | None = typer.Option(None, "--rounds", help="override the number of rounds"),
    concurrency: str | None = typer.Option(
        None, "--concurrency", help="closed loop: override concurrency levels, e.g. 1,8 (above the transcripts: cycled)"
    ),
    request_rate: str | None = typer.Option(
        None, "--request-rate", help="open loop instead: arrival rates in requests/s, e.g. 2,4"
    ),
    arrivals: str = typer.Option(
        "poisson",
        "--arrivals",
        help="open loop: poisson (seeded), constant spacing, or trace (a trace workload's recorded arrival times; "
        "--request-rate is then the replay speed, 1 = as recorded)",
    ),
    arrival_seed: int | None = typer.Option(
        None, "--arrival-seed", help="open loop: seed base of the Poisson arrivals (default: the window's seed base)"
    ),
    classes: str | None = typer.Option(None, "--classes", help="override classes, e.g. prose,code"),
    workload: str | None = typer.Option(
        None, "--workload", help="run this workload's transcripts (its dev part; default: the window's, builtin)"
    ),
    port: int | None = typer.Option(None, "--port", help="with --lane: the lane moved to this port (`up --port`)"),
    referee: str | None = typer.Option(
        None,
        "--referee",
        help="check losslessness: score the window's outputs by this endpoint's prompt_logprobs "
        "(a base URL, or 'self' for the lane's own prefill); exit 1 on FAIL",
    ),
    lossless_alpha: float = typer.Option(0.01, "--lossless-alpha", help="with --referee: the false-FAIL rate"),
    lossless_margin: float = typer.Option(
        0.05, "--lossless-margin", help="with --referee: the deviation of T_eff/T and the top-1 ratio tolerated"
    ),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary instead of tables (no progress bar)"),
) -> None:
    if ctx.invoked_subcommand is not None:
        return  # `bench export ...`: the subcommand does the work
    from gb300lane.bench.catalog import lane_endpoint, resolve_window, with_overrides
    from gb300lane.bench.models import LoadSpec
    from gb300lane.bench.report import render_window
    from gb300lane.bench.store import save_result
    from gb300lane.bench.window import run_window

    if window is None:
        raise typer.BadParameter("pass --window NAME (or run a subcommand: export)", param_hint="--window")
    if (endpoint is None) == (lane is None):
        raise typer.BadParameter("pass exactly one of --endpoint URL or --lane RECIPE", param_hint="--endpoint/--lane")
    if port is not None and lane is None:
        raise typer.BadParameter(
            "--port goes with --lane RECIPE (with --endpoint, put the port in the URL)", param_hint="--port"
        )
    conc = _int_list(concurrency, "--concurrency")
    rates = _float_list(request_rate, "--request-rate")
    if rates is not None and conc is not None:
        raise typer.BadParameter(
            "--concurrency (closed loop) and --request-rate (open loop) cannot be combined: pass one",
            param_hint="--request-rate",
        )
    if arrivals not in ("poisson", "constant", "trace"):
        raise typer.BadParameter(f"{arrivals!r}: expected poisson, constant or trace", param_hint="--arrivals")
    if rates is not None and (not rates or any(not (r > 0 and r != float("inf")) for r in rates)):
        raise typer.BadParameter(
            f"{request_rate!r}: rates must be positive finite numbers", param_hint="--request-rate"
        )
    recipe = fp = None
    if lane is not None:
        from gb300lane.recipes import load_recipe, render

        recipe = load_recipe(lane)
        rendered = render(recipe, port=port)
        endpoint = rendered.endpoint if port is not None else lane_endpoint(recipe)[0]
        fp = rendered.fingerprint
        model = model or rendered.served_model_name
    if out is not None and out.exists():
        fail(f"{out} already exists; window results are never overwritten: pass another --out path")
    spec = with_overrides(
        resolve_window(window, recipe),
        transcripts=transcripts,
        tokens=tokens,
        rounds=rounds,
        concurrency=conc,
        classes=[c.strip() for c in classes.split(",")] if classes else None,
        workload=workload,
    )
    with _progress(as_json) as bar:
        result = run_window(
            endpoint,  # type: ignore[arg-type]
            spec,
            model=model,
            progress=bar,
            recipe=recipe.name if recipe else None,
            fingerprint=fp,
            load=(
                LoadSpec(
                    mode="open",
                    request_rates=rates,
                    arrivals=arrivals,
                    arrival_seed=arrival_seed if arrivals == "poisson" else None,
                )
                if rates is not None
                else None
            ),
        )
    if referee is not None:
        from gb300lane.bench.referee import referee_window

        result = result.model_copy(
            update={
                "lossless": referee_window(
                    result,
                    endpoint if referee == "self" else referee,  # type: ignore[arg-type]
                    model=model,
                    alpha=lossless_alpha,
                    margin=lossless_margin,
                )
            }
        )
    if out is not None:
        save_result(result, out)
    from gb300lane.bench.crosscheck import cross_check

    # k bounds what the engine may count and not send; without a recipe the widest the lane allows.
    k = (recipe.speculative.num_speculative_tokens if recipe else None) or 32
    check = cross_check(result, k)
    from gb300lane.bench.schedule import check_schedule
    from gb300lane.recipes import effective_k

    schedule = check_schedule(result, recipe.speculative.schedule, effective_k(recipe)) if recipe else None
    if as_json:
        print_json(
            _summary(
                result,
                out,
                check.model_dump(mode="json") if check else None,
                schedule.model_dump(mode="json") if schedule else None,
            )
        )
    else:
        console.print(render_window(result), highlight=False)
        if check is not None:
            console.print(check.line(), highlight=False, style=None if check.ok else "red")
        if schedule is not None:
            console.print(
                f"{'PASS' if schedule.status == 'pass' else schedule.status.upper():<7} {schedule.summary}",
                highlight=False,
                style=None if schedule.ok else "red",
            )
        if result.lossless is not None:
            ll = result.lossless
            console.print(
                f"{ll.status:<12} lossless: {ll.reason}; referee {ll.referee_tokens} tokens in {ll.referee_s:.1f} s",
                highlight=False,
                markup=False,
                style={"PASS": None, "FAIL": "red", "INCONCLUSIVE": "yellow"}[ll.status],
            )
        if out is not None:
            console.print(f"window result written to {out}")
    if not result.valid:
        bad = sum(1 for c in result.cells if not c.valid)
        fail(f"{bad} of {len(result.cells)} cells invalid (reasons above); they are not averaged in")
    if schedule is not None and not schedule.ok:
        fail(f"the k schedule is not live: {schedule.summary}")
    if result.lossless is not None and result.lossless.status == "FAIL":
        fail(f"not lossless at temperature {result.lossless.temperature:g}: {result.lossless.reason}")


def _print_smoke(report: SmokeReport) -> None:
    style = {"PASS": "green", "FAIL": "red", "INCONCLUSIVE": "yellow"}
    for gate in report.gates:
        line = Text(f"{gate.status:<12}", style=f"bold {style[gate.status]}")
        line.append(f" {gate.name} ({gate.kind}): {gate.reason}")  # reasons are plain text, never markup
        console.print(line, soft_wrap=True, highlight=False)
    if not report.gates:
        console.print("[red]recipe has no smoke gates: nothing was checked[/]", markup=True)
    console.print(f"report: {report.report_path}", soft_wrap=True)


def smoke_cmd(
    recipe_name: str = typer.Argument(..., metavar="RECIPE", help="recipe whose smoke gates to run, e.g. v27"),
    endpoint: str | None = typer.Option(None, "--endpoint", help="base URL of the lane (default: the recipe's)"),
    reference: list[Path] | None = typer.Option(
        None,
        "--reference",
        help="the control's parity window result; pass twice (A, A2) to use their flips as the floor",
    ),
    port: int | None = typer.Option(None, "--port", help="the lane moved to this port (`up --port`)"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    from gb300lane.bench.catalog import lane_endpoint
    from gb300lane.bench.smoke import run_smoke
    from gb300lane.recipes import load_recipe, render

    recipe = load_recipe(recipe_name)
    rendered = render(recipe, port=port)
    if endpoint is not None and port is not None:
        raise typer.BadParameter("pass --endpoint or --port, not both", param_hint="--port")
    if reference and len(reference) > 2:
        raise typer.BadParameter("pass at most two references (A and A2)", param_hint="--reference")
    report = run_smoke(
        recipe,
        endpoint or (rendered.endpoint if port is not None else lane_endpoint(recipe)[0]),
        reference=reference or None,
        model=rendered.served_model_name,
        fingerprint=rendered.fingerprint,
        progress=lambda: _progress(as_json),
    )
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        _print_smoke(report)
    if not report.passed:
        raise typer.Exit(1)


def export_cmd(
    result: Path = typer.Argument(..., help="a window result file written by `gb300lane bench --out`"),
    fmt: str = typer.Option(
        ...,
        "--format",
        help="vllm (vllm bench serve --save-result keys, one JSON line per cell) or csv (one row per cell)",
    ),
    out: Path | None = typer.Option(None, "--out", help="write here (never overwrites); default: standard output"),
) -> None:
    from gb300lane.bench.export import FORMATS, export
    from gb300lane.bench.store import load_result
    from gb300lane.fsio import write_once

    if fmt not in FORMATS:
        raise typer.BadParameter(f"{fmt!r}: expected one of {', '.join(FORMATS)}", param_hint="--format")
    if out is not None and out.exists():
        fail(f"{out} already exists; exports are never overwritten: pass another --out path")
    text = export(load_result(result), fmt)
    if out is None:
        sys.stdout.write(text)
    else:
        write_once(out, text)
        err_console.print(f"{fmt} export written to {out}", highlight=False)


def selftest_cmd(
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from gb300lane.bench.selftest import run_selftest, selftest_table

    result = run_selftest()
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        load = "" if result.load_average is None else f", load average {result.load_average:.1f}"
        console.print(selftest_table(result, f"client self-test against a mock with known timing (ms){load}"))
        console.print(
            f"mean ITL, several events a write: client {result.client_itl_ms or 0:.3f} ms, vLLM-style "
            f"per-line stamping {result.vllm_itl_ms or 0:.3f} ms",
            highlight=False,
        )
        for line in result.failures():
            err_console.print(f"FAIL {line}", highlight=False, markup=False)
    if not result.passed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Attach `bench` (with `bench export`) and `smoke` to the top-level app."""
    bench_app = typer.Typer(
        invoke_without_command=True,
        help="Run a bench window against a lane and print the write-up's tables; `bench export` converts a result.",
    )
    bench_app.callback()(acts_on_host(bench_cmd))
    bench_app.command("export", help="Write a window result as vllm bench serve JSON lines or a CSV of cells.")(
        export_cmd
    )
    bench_app.command(
        "selftest",
        help="Check the client's timing against a mock with known TTFT and ITL at C1, C64 and C1000; "
        "exit 1 when a registered bound is missed.",
    )(selftest_cmd)
    app.add_typer(bench_app, name="bench")
    app.command("smoke", help="Run a recipe's smoke gates (parity, bounds) against its running lane.")(
        acts_on_host(smoke_cmd)
    )
