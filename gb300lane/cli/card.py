"""CLI group: card — register, plan, run, score, extend, rescore, report, show, list, noise, calibrate, reproduce.

`card score` exits 0 on PASS, 1 on FAIL and 3 on INCONCLUSIVE, so CI can gate
on it. Every command takes `--json`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from gb300lane.cli.common import console, err_console, print_json
from gb300lane.cli.hosts import acts_on_host

VERDICT_EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}

if TYPE_CHECKING:  # the cards package is imported when a card command runs
    from gb300lane.cards import Receipts, Verdict
    from gb300lane.cards.schema import Card
    from gb300lane.instrument.plan import PlanCheck
    from gb300lane.promote import TransitionReport

card_app = typer.Typer(
    help="Bracketed A -> B -> A2 cards: pre-registered tests, receipts, verdicts and re-scores.",
    no_args_is_help=True,
)

_RECEIPTS = typer.Option(None, "--receipts", help="Receipts directory (default: the card's newest registration).")
_JSON = typer.Option(False, "--json", help="Print the result as JSON (nothing else on stdout).")


def _receipts(card: str, receipts: Path | None) -> Receipts:
    from gb300lane.cards import Receipts
    from gb300lane.cards.record.receipts import receipts_for

    return Receipts(receipts) if receipts is not None else receipts_for(card)


def _say(as_json: bool) -> Callable[[str], None]:
    """Progress goes to the console, or to stderr when stdout carries JSON."""
    target = err_console if as_json else console
    return lambda m: target.print(m, highlight=False, markup=False, soft_wrap=True)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2%}"


def _print_verdict(v: Verdict) -> None:
    look = f" (look {v.look} of {v.looks})" if v.looks > 1 else ""
    console.print(f"verdict {v.number}: [bold]{v.verdict}[/]{escape(look)}", markup=True, highlight=False)
    if v.previous:
        what = "extends" if (v.reason or "").startswith("extension ") and not v.changes else "re-score of"
        console.print(f"  {what} verdict {v.previous.number} ({v.previous.verdict}): {v.reason}", highlight=False)
    for c in v.changes:
        console.print(f"  changed {c.gate}.{c.key}: {c.old} -> {c.new}", highlight=False)
    for w in v.workloads:
        part = {"held_out": "its held-out part", "dev": "its dev part", "all": "every transcript (no split)"}[w.part]
        console.print(
            f"  window {w.window} ran workload {w.workload}, {part} (sha256 {w.content_sha256[:12]})",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    for r in v.results:
        tag = r.status if r.decides else f"{r.status}, diagnostic"
        console.print(f"  [{tag}] {r.id}: {r.observed}", highlight=False, markup=False, soft_wrap=True)
        console.print(
            f"      bar: {r.bar}; noise floor: {r.noise_floor}", highlight=False, markup=False, soft_wrap=True
        )
        for t in r.tests if len(r.tests) > 1 else ():
            where = f"{t.cls} C{t.concurrency}"
            console.print(
                f"      {where:<14} {t.decision:<12} {_pct(t.estimate)} [{_pct(t.low)}, {_pct(t.high)}] n {t.n}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
        for reason in r.reasons:
            console.print(f"      - {reason}", highlight=False, markup=False, soft_wrap=True)
    for m in v.more_needed:
        console.print(f"  more would decide: {m.note}", highlight=False, markup=False, soft_wrap=True)
    for n in v.notes:
        err_console.print(f"[yellow]note:[/] {escape(n)}", markup=True, highlight=False, soft_wrap=True)
    console.print(f"exit code {VERDICT_EXIT[v.verdict]} (0 PASS, 1 FAIL, 3 INCONCLUSIVE)", highlight=False)


@card_app.command(
    "register",
    help="Freeze a card's gates, alpha, margins and design (their sha256 is recorded) "
    "before any arm runs; warns when the card is underpowered.",
)
def register_cmd(
    card: str = typer.Argument(..., help="Card file path or name in cards/."),
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Start a new receipts directory even if one exists today: "
        "the next run of the card's question, counted into its alpha (design.runs).",
    ),
    new_question: str | None = typer.Option(
        None,
        "--new-question",
        metavar="REASON",
        help="This run asks a new "
        "question (another workload, another lane, a changed design): its alpha "
        "starts afresh, and the reason is recorded and printed on every later "
        "verdict and on promote.",
    ),
    boot_sd_override: str | None = typer.Option(
        None,
        "--boot-sd-override",
        metavar="REASON",
        help="Register "
        "a deciding gate's boot sd that the lane's noise ledger rules out "
        "(refused without it); the reason is recorded in the registration.",
    ),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards import load_card, register
    from gb300lane.cards.cardfile import read_card_text
    from gb300lane.cards.record.receipts import next_run, receipts_state
    from gb300lane.cards.record.verified import planning_receipts
    from gb300lane.instrument.plan import check_boot_sds, registration_plan, registration_warnings

    loaded, path = load_card(card)
    upcoming = next_run(loaded, new_question=new_question)  # refused, if it will be, before anything is planned
    check_boot_sds(loaded, boot_sd_override)
    plan = registration_plan(loaded, share=1.0 if isinstance(upcoming, str) else upcoming.share)
    rec = register(
        loaded,
        read_card_text(path),
        fresh=fresh,
        plan=plan,
        new_question=new_question,
        boot_sd_override=boot_sd_override,
    )
    reg = rec.registration()
    left_out = planning_receipts().note(besides=str(rec.root))
    warnings = registration_warnings(loaded, reg.plan) + ([left_out] if left_out and not rec.reused else [])
    found = receipts_state(rec, card) if rec.reused else None
    if as_json:
        print_json(
            {
                "card": loaded.name,
                "receipts": str(rec.root),
                "gates_sha256": reg.gates_sha256,
                "registered_at": reg.registered_at,
                "warnings": warnings,
                "plan": reg.plan.model_dump(mode="json") if reg.plan else None,
                "question": reg.question.model_dump(mode="json") if reg.question else None,
                "existing": found.model_dump(mode="json") if found else None,
            }
        )
        return
    if found is not None:
        console.print(f"{loaded.name}: {found.describe()}", highlight=False, markup=False, soft_wrap=True)
        return
    console.print(f"{loaded.name}: registered in {rec.root} (gates sha256 {reg.gates_sha256[:16]})", highlight=False)
    q = reg.question
    if q is not None:
        for r in q.follows:
            console.print(f"  earlier: {r.describe()}", highlight=False, markup=False, soft_wrap=True)
        console.print(
            f"  run {q.run} of {q.runs} of its question: each gate spends {q.share:.1%} of its alpha here"
            + (f"; a new question: {q.new_question}" if q.new_question else ""),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if reg.plan and reg.plan.power is not None:
        e = reg.plan.extension
        whole = (
            ""
            if e is None or e.power is None
            else f" at the design's own look{'s' if e.design_looks > 1 else ''}; {e.power:.1%} by look {e.looks} of "
            "the registered plan, every further look taken"
        )
        console.print(
            f"  planned power {reg.plan.power:.1%} at the gates' effects{whole} ({reg.plan.source})",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    for w in warnings:
        err_console.print(f"[yellow]warning:[/] {escape(w)}", markup=True, highlight=False, soft_wrap=True)


@card_app.command(
    "plan",
    help="Power and size before any arm runs: requests per arm for 90% power at each "
    "gate's minimum detectable effect, and the power of the card as written. Uses earlier control "
    "receipts of the same lane, else boots arm A for a short pilot.",
)
def plan_cmd(
    card: str = typer.Argument(..., help="Card file path or name in cards/."),
    pilot: bool | None = typer.Option(
        None,
        "--pilot/--no-pilot",
        help="Force a pilot of arm A, or refuse to boot one (default: only when no earlier control data exists).",
    ),
    effect: float | None = typer.Option(
        None, "--effect", help="Plan the tokens/step gate at this relative effect instead of its mde (0.02 = 2%)."
    ),
    power: float = typer.Option(0.9, "--power", help="Target power."),
    boots: int = typer.Option(
        0,
        "--boots",
        help="First run a boot study: this many boots of the control recipe "
        "(in process on the embedded engine; real boots through the lane, dark, for any other engine), to "
        "measure each gate's boot sd (kept as receipts "
        "under results/pilots/; later plans pool every study).",
    ),
    port: int | None = typer.Option(
        None,
        "--port",
        min=1,
        max=65535,
        help="Boot the pilot's lane (main and sidecar) moved to this port, beside whatever serves the recipe's ports.",
    ),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards import load_card
    from gb300lane.cards.record.receipts import planned_run
    from gb300lane.cards.record.verified import planning_receipts
    from gb300lane.cards.run import LiveArmOps
    from gb300lane.instrument.plan import LEDGER_MIN_CARDS, control_windows, plan_for
    from gb300lane.instrument.timeplan import time_plan
    from gb300lane.promote.view import protected_instances

    loaded, _ = load_card(card)
    ops = LiveArmOps(protected_instances(), port=port) if pilot is not False else None
    upcoming, unheld = planned_run(loaded)
    if unheld is not None:
        err_console.print(f"[yellow]warning:[/] {escape(unheld)}", markup=True, highlight=False, soft_wrap=True)
    share = 1.0 if isinstance(upcoming, str) else upcoming.share
    p = plan_for(
        loaded, pilot=pilot, effect=effect, target=power, progress=_say(as_json), ops=ops, boots=boots, share=share
    )
    if not isinstance(upcoming, str) and upcoming.runs > 1:
        _say(as_json)(
            f"{loaded.name}: planned for run {upcoming.run} of {upcoming.runs} of its question, each gate at "
            f"{upcoming.share:.1%} of its alpha"
        )
    left_out = planning_receipts().note()
    if left_out:
        err_console.print(f"[yellow]warning:[/] {escape(left_out)}", markup=True, highlight=False, soft_wrap=True)
    found = control_windows(loaded)
    tp = time_plan(loaded, p, found[0] if found else [])
    if as_json:
        print_json({**p.model_dump(mode="json"), "timing": tp.model_dump(mode="json")})
        return
    out = _say(False)
    out(f"{p.card}: {p.requests_per_arm} requests per arm in the primary window as written; design {p.design}")
    out(f"  noise from {p.source} ({p.source_requests} requests)")
    fallback = [g.gate for g in p.gates if g.boot_sd_source in ("the boot study", "registered")]
    if fallback or not p.gates:
        out(
            f"  boot sd from {p.boot_source or 'the gates as registered (no boot study: card plan --boots N runs one)'}"
            + (f" for {', '.join(fallback)}" if len(fallback) < len(p.gates) else "")
        )
    for src in sorted({g.boot_sd_source for g in p.gates if g.boot_sd_source.startswith("the lane's")}):
        users = [g.gate for g in p.gates if g.boot_sd_source == src]
        out(f"  boot sd of {', '.join(users)} from {src}; `gb300lane card noise` lists it")
    if fallback:
        err_console.print(
            f"[yellow]warning:[/] no noise ledger of this lane and window shape rests on "
            f"{LEDGER_MIN_CARDS} scored cards yet: {', '.join(fallback)} use "
            + ("the boot study" if p.boot_source else "the registered boot sd"),
            markup=True,
            highlight=False,
            soft_wrap=True,
        )
    out(
        f"  {'gate':<30} {'test':<16} {'alpha':>6} {'margin':>7} {'effect':>7} {'boot sd':>8} {'se':>7} "
        f"{'power':>7} {'req/arm for ' + format(p.target_power, '.0%'):>16}"
    )
    for g in p.gates:
        se = f"{g.se:.2%}" if g.se is not None else "-"
        pw = f"{g.power:.1%}" if g.power is not None else "-"
        need = str(g.requests_per_arm_for_target) if g.requests_per_arm_for_target is not None else "-"
        name = g.gate if g.decides else f"{g.gate} (diagnostic)"
        out(
            f"  {name:<30} {g.test:<16} {g.alpha:>6.1%} {g.margin:>7.1%} {g.effect:>+7.1%} {g.boot_sd:>8.3%} "
            f"{se:>7} {pw:>7} {need:>16}" + (f"  {g.note}" if g.note else "")
        )
    for g in p.gates:
        if g.boot_sd_measured is not None:
            df = "-" if g.boot_df_measured is None else str(g.boot_df_measured) if g.boot_df_measured else "<1"
            up = "-" if g.boot_sd_upper is None else f"{g.boot_sd_upper:.3%}"
            by = g.boot_sd_source if g.boot_sd_source and g.boot_sd_source != "registered" else "the boot study"
            out(
                f"  {g.gate}: {by} measures a boot sd of {g.boot_sd_measured:.3%} (df {df}, F "
                f"{g.boot_f_ratio:.2f}, one-sided 95% upper bound {up}); registered {g.boot_sd_registered:.3%}"
                + (
                    f". To register it: boot_sd: {g.boot_sd_measured:.4f}, boot_df: {max(1, g.boot_df_measured)}"
                    if g.boot_df_measured is not None and abs(g.boot_sd_measured - g.boot_sd_registered) > 5e-5
                    else ""
                )
            )
        if g.boot_check:
            err_console.print(
                f"[yellow]warning:[/] {escape(g.boot_check)}", markup=True, highlight=False, soft_wrap=True
            )
    if p.power is not None:
        need = (
            f"{p.requests_per_arm_for_target} requests per arm for {p.target_power:.0%}"
            if p.requests_per_arm_for_target is not None
            else f"no size reaches {p.target_power:.0%}"
        )
        out(
            f"  card (deciding gates together): power {p.power:.1%} as written"
            + (f" (its own look{'s' if p.extension.design_looks > 1 else ''} only)" if p.extension else "")
            + f"; {need}"
        )
    if p.extension is not None:
        _print_extension_plan(out, p)
    if p.expected_requests_per_arm is not None:
        out(
            f"  sequential: maximum {p.inflation:.2f} x the fixed size for the same power; expected "
            f"{p.expected_requests_per_arm:.0f} requests per arm at the tokens/step effect"
        )
    _print_time_plan(out, tp)


def _print_extension_plan(out: Callable[[str], None], p: Any) -> None:
    e = p.extension
    first = "; ".join(f"{g} {lv[0]:.3%}" for g, lv in e.levels.items())
    own = "look is the first" if e.design_looks == 1 else f"{e.design_looks} looks are the first ones"
    out(
        f"  registered extension: the design's {own} of a {e.looks}-look plan "
        f"({e.spending} spending), so look 1 tests at a one-sided {first}, not the whole alpha"
    )
    pw = "-" if e.power is None else f"{e.power:.1%}"
    exp = (
        ""
        if e.expected_requests_per_arm is None
        else f"; expected {e.expected_requests_per_arm:.0f} requests per arm over {e.expected_looks:.2f} looks at the "
        "tokens/step effect"
    )
    need = (
        f"the plan needs at most {e.requests_per_arm_for_target} requests per arm for {p.target_power:.0%}"
        if e.requests_per_arm_for_target is not None
        else f"no size of the plan reaches {p.target_power:.0%}"
    )
    out(
        f"  extended look by look until it decides ({e.stage_requests_per_arm} requests per arm per stage, each a "
        f"boot of every arm): power {pw} by look {e.looks}, at most {e.requests_per_arm} requests per arm{exp}; "
        f"{need}"
    )


def _hours(s: float | None) -> str:
    return "-" if s is None else f"{s / 3600:.2f} h"


def _print_time_plan(out: Callable[[str], None], tp: Any) -> None:
    out(
        f"  wall-clock per design, sized for {tp.target_power:.0%} power (3 arms booted in turn; requests on the "
        f"{tp.request_clock or 'unknown'} clock):"
    )
    for b in tp.boots:
        hit = "-" if b.hit_s is None else f"{b.hit_s:.0f} s"
        miss = "-" if b.miss_s is None else f"{b.miss_s:.0f} s"
        src = "the embedded engine's modelled GB300 boot" if b.clock == "modelled" else f"{b.boots} boots on record"
        if b.misses == 0:
            src += "; no miss among them: the miss is booked at the median boot"
        out(f"    boot ({b.clock}): hit {hit}, miss {miss} ({src})")
    clocks = [b.clock for b in tp.boots]
    head = "".join(f" {'expected (' + c + ' boots)':>24} {'worst (' + c + ' boots)':>21}" for c in clocks)
    out(f"    {'design':<50} {'req/arm':>8} {'exp req':>9}{head}")
    for d in tp.designs:
        n = "-" if d.requests_per_arm is None else str(d.requests_per_arm)
        e = "-" if d.expected_requests_per_arm is None else f"{d.expected_requests_per_arm:.0f}"
        cols = "".join(f" {_hours(d.expected_s.get(c)):>24} {_hours(d.worst_s.get(c)):>21}" for c in clocks)
        out(f"    {d.design:<50} {n:>8} {e:>9}{cols}")
    for clock, design in tp.cheapest.items():
        out(f"  cheapest design reaching {tp.target_power:.0%} power (expected, {clock} boots): {design}")
    if tp.note:
        out(f"  time plan: {tp.note}")


@card_app.command(
    "run",
    help="Boot each arm dark in turn, run the windows, stop it (kept); resumes where it "
    "stopped. A sequential card takes a look after each stage and stops at PASS or FAIL.",
)
@acts_on_host
def run_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    receipts: Path | None = _RECEIPTS,
    port: int | None = typer.Option(
        None,
        "--port",
        help="Boot every arm's lane (main and sidecar) moved to this port, beside whatever serves the recipe's ports.",
    ),
    take_lane: bool = typer.Option(
        False,
        "--take-lane",
        help="Take the lane from production for the "
        "bracket: stop production (kept), run the arms, restart production "
        "afterwards, also when an arm fails or on Ctrl-C.",
    ),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards import LiveArmOps, run_card
    from gb300lane.promote.view import protected_instances

    rec = _receipts(card, receipts)
    say = _say(as_json)
    given = None
    if take_lane and port is not None:
        raise typer.BadParameter(
            "--take-lane runs the arms on the production lane; --port runs them beside it: pass one",
            param_hint="--take-lane",
        )
    if not take_lane:
        protected = protected_instances()
        lines = run_card(rec, ops=LiveArmOps(protected, port=port), progress=say, protected=protected)
    else:
        lines, given = _run_taking_the_lane(rec, say)
        if given is not None and not given.ok:
            raise typer.Exit(1)
    if as_json:
        print_json(
            {
                "receipts": str(rec.root),
                "lines": lines,
                "looks": rec.look_numbers(),
                "lane": given.model_dump(mode="json") if take_lane and given else None,
            }
        )
        return
    console.print(f"receipts: {rec.root}", highlight=False)
    if lines and all(line.endswith("; skipped") for line in lines):
        from gb300lane.cards.record.receipts import receipts_state

        state = receipts_state(rec, card)
        console.print(
            "every arm had finished earlier; " + "; or ".join(f"`{c}`" for c in state.next),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


def _run_taking_the_lane(rec: Receipts, say: Callable[[str], None]) -> tuple[list[str], TransitionReport | None]:
    """`card run --take-lane`: `promote.bracket.run_card_taking_the_lane`, a failed give-back said in red."""
    from gb300lane.cli.seams import crash_hook, promotion_ops
    from gb300lane.promote.bracket import run_card_taking_the_lane

    def failed(message: str) -> None:
        err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)

    return run_card_taking_the_lane(rec, ops=promotion_ops(), crash_hook=crash_hook(), progress=say, failed=failed)


@card_app.command(
    "score",
    help="Write verdict 1: the registered gates over the receipts. Exits 0 on PASS, "
    "1 on FAIL, 3 on INCONCLUSIVE (and 1 with an error message when it cannot score).",
)
def score_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    receipts: Path | None = _RECEIPTS,
    dry_run: bool = typer.Option(False, "--dry-run", help="Compute and print; write nothing."),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards import score

    v = score(_receipts(card, receipts), dry_run=dry_run)
    print_json(v.payload()) if as_json else _print_verdict(v)
    raise typer.Exit(VERDICT_EXIT[v.verdict])


@card_app.command(
    "extend",
    help="Run the further looks an INCONCLUSIVE card registered (design.extension): "
    "the stages its verdict says would decide, a look after each, alpha spent from the card's budget; "
    "writes the next verdict. Exits 0 on PASS, 1 on FAIL, 3 on INCONCLUSIVE.",
)
@acts_on_host
def extend_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    receipts: Path | None = _RECEIPTS,
    port: int | None = typer.Option(
        None,
        "--port",
        help="Boot every arm's lane (main and sidecar) moved to this port, beside whatever serves the recipe's ports.",
    ),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards.extend import extend_card
    from gb300lane.cards.run import LiveArmOps
    from gb300lane.promote.view import protected_instances

    rec = _receipts(card, receipts)
    protected = protected_instances()
    done = extend_card(rec, ops=LiveArmOps(protected, port=port), progress=_say(as_json), protected=protected)
    if as_json:
        print_json(
            {
                "receipts": str(rec.root),
                "extension": done.receipt.model_dump(mode="json"),
                "resumed": done.resumed,
                "lines": list(done.lines),
                "verdict": done.verdict.payload(),
            }
        )
    else:
        console.print(f"receipts: {rec.root}", highlight=False)
        _print_verdict(done.verdict)
    raise typer.Exit(VERDICT_EXIT[done.verdict.verdict])


@card_app.command(
    "rescore",
    help="Write verdict n+1 with changed gates and a reason; earlier verdicts stay. "
    "Exits 0 once written, whatever the verdict.",
)
def rescore_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    reason: str = typer.Option(..., "--reason", help="Why the gates change (kept on the record)."),
    change: list[str] = typer.Option(..., "--set", help="GATE.KEY=VALUE (YAML value), e.g. env-equal.compare=set."),
    receipts: Path | None = _RECEIPTS,
    dry_run: bool = typer.Option(False, "--dry-run", help="Compute and print; write nothing."),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards import compute_rescore, rescore

    rec = _receipts(card, receipts)
    v = compute_rescore(rec, reason, change)[1] if dry_run else rescore(rec, reason, change)
    print_json(v.payload()) if as_json else _print_verdict(v)


@card_app.command(
    "report", help="Render the card into the receipts: markdown, PNG figures and one self-contained HTML page."
)
def report_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    receipts: Path | None = _RECEIPTS,
    verdict: int | None = typer.Option(None, "--verdict", help="Verdict number to report (default: the newest)."),
    html: bool = typer.Option(
        False,
        "--html",
        help="Print the HTML page's path; where the markdown report already exists, write the page alone.",
    ),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards import render_html, render_report
    from gb300lane.cards.present.report import HTML

    rec = _receipts(card, receipts)
    if html and rec.verdict_numbers() and (rec.report_dir(verdict or rec.verdict_numbers()[-1]) / "card.md").exists():
        page = render_html(rec, verdict)
        md = page.parent / "card.md"
    else:
        md = render_report(rec, verdict)
        page = md.parent / HTML
    if as_json:
        print_json({"report": str(md), "html": str(page), "files": sorted(str(p) for p in md.parent.iterdir())})
        return
    console.print(f"{'page' if html else 'report'}: {page if html else md}", highlight=False)
    if not html:
        console.print(f"page: {page}", highlight=False)


@card_app.command("show", help="Show a card's registration, arms, looks and verdicts.")
def show_cmd(
    card: str = typer.Argument(..., help="Card name, file or receipts directory."),
    receipts: Path | None = _RECEIPTS,
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards.record.look_receipts import read_look
    from gb300lane.cards.record.receipts import read_verdict

    rec = _receipts(card, receipts)
    reg = rec.registration()
    c = rec.card()
    arms = {
        a.name: (
            "transcribed"
            if (rec.arm_dir(a.name) / "transcribed.json").is_file()
            else f"attempt {rec.finished_attempt(a.name)} done"
            if rec.finished_attempt(a.name)
            else "not finished"
        )
        for a in c.arms
    }
    verdicts = [read_verdict(rec, n) for n in rec.verdict_numbers()]
    looks = [read_look(rec, n) for n in rec.look_numbers()]
    if as_json:
        print_json(
            {
                "receipts": str(rec.root),
                "registration": reg.model_dump(mode="json"),
                "arms": arms,
                "looks": [
                    {
                        "look": lk.look,
                        "verdict": lk.verdict,
                        "action": lk.action,
                        "requests_per_arm": lk.requests_per_arm,
                    }
                    for lk in looks
                ],
                "verdicts": [{"number": v.number, "verdict": v.verdict, "written_at": v.written_at} for v in verdicts],
            }
        )
        return
    console.print(f"{c.name}: {c.title}", highlight=False)
    console.print(
        f"  receipts {rec.root}; registered {reg.registered_at}; gates sha256 {reg.gates_sha256[:16]}"
        + ("; TRANSCRIBED" if reg.transcribed else ""),
        highlight=False,
    )
    for note in reg.question.notes() if reg.question is not None else ():
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    for a in c.arms:
        console.print(f"  {a.name:<3} {a.role:<9} {a.recipe:<12} {arms[a.name]}", highlight=False)
    for lk in looks:
        console.print(
            f"  look {lk.look} of {lk.looks}: {lk.verdict} with {lk.requests_per_arm} requests per arm -> {lk.action}",
            highlight=False,
        )
    for v in verdicts:
        console.print(
            f"  verdict {v.number}: {v.verdict} ({v.written_at})" + (f" — {v.reason}" if v.reason else ""),
            highlight=False,
        )


@card_app.command("list", help="List card files and their registered receipts.")
def list_cmd(as_json: bool = _JSON) -> None:
    from gb300lane.cards import all_receipts
    from gb300lane.cards.cardfile import known_cards

    files = known_cards()
    regs = [(r.registration(), r) for r in all_receipts()]
    rows = [
        {
            "card": f.stem,
            "file": str(f),
            "receipts": [str(r.root) for reg, r in regs if reg.card == f.stem],
            "verdicts": [n for reg, r in regs if reg.card == f.stem for n in r.verdict_numbers()],
        }
        for f in files
    ]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        console.print(f"{row['card']:<28} {len(row['receipts'])} receipts dir(s)", highlight=False)


@card_app.command(
    "noise",
    help="The lanes' noise ledger: the between-boot sd every scored card's controls (A "
    "against A2) measured, pooled per lane, engine, metric and window shape, with its df, one-sided 95% "
    "bounds, the cards it rests on and their dates. `card plan` and `card register` use it.",
)
def noise_cmd(
    lane: str | None = typer.Option(None, "--lane", help="Only this lane (a recipe's lane.name: cpu, local, gb300)."),
    cells: bool = typer.Option(False, "--cells", help="Also each class x concurrency cell, not only all cells."),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards.record.noise import ALL_CELLS, ledger
    from gb300lane.cards.record.verified import planning_receipts

    rows = [
        e
        for k, e in sorted(
            ledger().items(),
            key=lambda kv: (kv[0].lane, kv[0].metric, repr(kv[0].shape), kv[0].unit != ALL_CELLS, kv[0].unit),
        )
        if (lane is None or k.lane == lane) and (cells or k.unit == ALL_CELLS)
    ]
    planning = planning_receipts()
    skipped = planning.skipped
    if skipped:
        err_console.print(
            f"[yellow]warning:[/] {escape(planning.note() or '')}", markup=True, highlight=False, soft_wrap=True
        )
        for s in skipped:
            err_console.print(
                f"  left out: {escape(s.receipts)}: {escape(s.why)}", markup=True, highlight=False, soft_wrap=True
            )
    if as_json:
        print_json(
            [
                {
                    "lane": e.key.lane,
                    "engine": e.key.engine,
                    "metric": e.key.metric,
                    "unit": e.key.unit,
                    "shape": e.key.shape.describe(),
                    "boot_sd": e.sd,
                    "signed": e.signed,
                    "df": e.df,
                    "upper": e.upper,
                    "lower": e.lower,
                    "cards": e.cards,
                    "dates": list(e.dates),
                    "samples": [
                        {
                            "card": s.card,
                            "receipts": s.receipts,
                            "recipe": s.recipe,
                            "fingerprint": s.fingerprint,
                            "transcripts": s.transcripts,
                            "s2": s.s2,
                        }
                        for s in e.samples
                    ],
                }
                for e in rows
            ]
        )
        return
    if not rows:
        console.print(
            "no scored card with two measured controls"
            + (f" on lane {lane}" if lane else "")
            + "; every `card score` adds one",
            highlight=False,
        )
        return
    console.print(
        f"{'lane':<7} {'engine':<9} {'metric':<16} {'window':<38} {'unit':<16} {'boot sd':>8} {'df':>4} "
        f"{'upper':>8} {'cards':>5}  dates",
        highlight=False,
    )
    for e in rows:
        df = "-" if e.df is None else f"{e.df:.0f}"
        first, last = e.dates
        console.print(
            f"{e.key.lane:<7} {e.key.engine:<9} {e.key.metric:<16} {e.key.shape.describe():<38} "
            f"{e.key.unit:<16} {e.sd:>8.3%} {df:>4} {e.upper:>8.3%} {e.cards:>5}  "
            f"{first if first == last else first + ' .. ' + last}",
            highlight=False,
        )


@card_app.command(
    "calibrate",
    help="Measure the card's instrument on the embedded engine (or, with --lane, through "
    "any lane's own boots and HTTP): N replicates with fresh "
    "seed bases of A/A (B replaced by A) and of the card as written, in process; false 'B better', "
    "false FAIL and power with 95% Clopper-Pearson intervals. Results are receipts under "
    "results/calibrations/.",
)
def calibrate_cmd(
    card: str = typer.Argument(..., help="Card file path or name in cards/ (local- recipes only)."),
    replicates: int = typer.Option(200, "--replicates", help="Replicates per scenario."),
    seed: int = typer.Option(0, "--seed", help="Calibration seed (replicate seed bases derive from it)."),
    workers: int | None = typer.Option(None, "--workers", help="Processes (default: up to 2)."),
    resume: bool = typer.Option(
        True,
        "--resume/--no-resume",
        help="Keep replicates as they finish, and take those "
        "an interrupted run of the same card gates, seed and engine kept; arms a run of any "
        "gates kept (same windows, arms, seed and engine) are re-scored, not run again.",
    ),
    on_lane: bool = typer.Option(
        False,
        "--lane",
        help="Run the replicates as real cards through the lane's own "
        "boots and HTTP (any engine; each replicate a receipts directory under "
        "results/calibrations/), not on the engine core in process.",
    ),
    budget: float | None = typer.Option(
        None,
        "--budget",
        min=1,
        help="With --lane: start no replicate after this "
        "many seconds; the rates are over the replicates that finished.",
    ),
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="With --lane: boot the arms' lane moved to this port."
    ),
    extend: bool = typer.Option(
        True,
        "--extend/--no-extend",
        help="A card that registers an extension: extend "
        "every replicate INCONCLUSIVE at the design's last look as `card extend` would "
        "(default), or score the design's own looks alone.",
    ),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards import load_card
    from gb300lane.instrument.calibrate import calibrate, default_workers, progress_file, raw_file, write_calibration

    loaded, path = load_card(card)
    say = _say(as_json)
    if on_lane:
        _calibrate_on_lane(loaded, replicates, seed=seed, budget=budget, port=port, as_json=as_json, extend=extend)
        return
    keep, raw = progress_file(loaded, seed, extend=extend), raw_file(loaded, seed)
    if not resume:
        keep.unlink(missing_ok=True)
        raw.unlink(missing_ok=True)
    cal, outcomes = calibrate(
        loaded,
        replicates,
        seed=seed,
        workers=workers or default_workers(),
        progress=say,
        resume=keep,
        raw=raw,
        extend=extend,
    )
    d = write_calibration(loaded, path.read_text(encoding="utf-8"), cal, outcomes)  # `keep` stays for longer runs
    from gb300lane.instrument.plan import plan_check

    check = plan_check(loaded, cal)
    if as_json:

        def ci(r: Any) -> list[float]:
            return [r.low, r.high]

        print_json(
            {
                "card": cal.card,
                "replicates": cal.replicates,
                "requests_per_arm": cal.requests_per_arm,
                "false_better_rate": cal.false_better.rate,
                "false_better_ci": ci(cal.false_better),
                "false_fail_rate": cal.false_fail.rate,
                "false_fail_ci": ci(cal.false_fail),
                "power": cal.power.rate,
                "power_ci": ci(cal.power),
                "fail_when_real_rate": cal.fail_when_real.rate,
                "fail_when_real_ci": ci(cal.fail_when_real),
                "mean_requests_per_arm_aa": cal.mean_requests_per_arm_aa,
                "mean_requests_per_arm_card": cal.mean_requests_per_arm_card,
                "extended_aa": cal.extended_aa,
                "extended_decided_aa": cal.extended_decided_aa,
                "extended_card": cal.extended_card,
                "boot_check": {k: v.model_dump(mode="json") for k, v in cal.boot_check.items()},
                "interval": "95% Clopper-Pearson",
                "fast_path": cal.fast_path,
                "receipts": str(d),
                "plan_check": check.model_dump(mode="json") if check is not None else None,
                "calibration": cal.model_dump(mode="json"),
            }
        )
        return

    def line(name: str, r: Any) -> str:
        return f"  {name:<22} {r.rate:>6.1%}  [{r.low:.1%}, {r.high:.1%}]  ({r.events}/{r.replicates})"

    console.print(
        f"{cal.card}: {cal.replicates} replicates per scenario, design {cal.design}, "
        f"{cal.requests_per_arm} requests per arm as written",
        highlight=False,
        markup=False,
    )
    console.print(
        f"  B = {cal.candidate_recipe} (as written) and B = {cal.control_recipe} (A/A); rates with 95% "
        "Clopper-Pearson intervals",
        highlight=False,
        markup=False,
    )
    for name, r in (
        ("false 'B better' (A/A)", cal.false_better),
        ("false FAIL (A/A)", cal.false_fail),
        ("power (as written)", cal.power),
        ("FAIL (as written)", cal.fail_when_real),
    ):
        console.print(line(name, r), highlight=False, markup=False)
    console.print(
        f"  mean requests per arm: A/A {cal.mean_requests_per_arm_aa:.0f}, as written "
        f"{cal.mean_requests_per_arm_card:.0f}",
        highlight=False,
        markup=False,
    )
    if loaded.design.extension is not None and extend:
        console.print(
            f"  extended (INCONCLUSIVE at the design's last look, run on as `card extend` runs it): A/A "
            f"{cal.extended_aa} ({cal.extended_decided_aa} of them then decided), as written "
            f"{cal.extended_card}",
            highlight=False,
            markup=False,
        )
    for gid, b in cal.boot_check.items():
        df = "-" if b.df is None else f"{b.df:.0f}"
        console.print(
            f"  boot sd {gid}: registered {b.registered_sd:.3%}; the {b.boots} control boots show "
            f"{b.measured_sd_signed:+.3%} (df {df}, F {b.f_ratio:.2f}, 95% upper bound {b.upper:.3%})",
            highlight=False,
            markup=False,
        )
        if b.registered_sd > 0 and b.lower > b.registered_sd:
            err_console.print(
                f"[yellow]warning:[/] boot sd {escape(gid)}: the control boots' 95% lower bound "
                f"{b.lower:.3%} is above the registered {b.registered_sd:.3%}: register "
                f"boot_sd {b.measured_sd:.4f}",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
    _print_plan_check(loaded, check)
    console.print(
        f"  gates scored: {', '.join(cal.gates_exercised)}; not exercised (no boot): "
        f"{', '.join(cal.gates_not_exercised) or 'none'}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    console.print(f"  fast path: {cal.fast_path}", highlight=False, markup=False, soft_wrap=True)
    console.print(f"  receipts: {d}", highlight=False, markup=False)


def _print_plan_check(card: Card, check: PlanCheck | None) -> None:
    """The plan's power at the gates' mdes and at the effects the replicates met, beside the measured power."""
    if check is None:
        console.print(
            f"  plan: none to check (no earlier control data of {card.controls[0].recipe}; "
            f"`gb300lane card plan {card.name}` boots a pilot)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return
    at_mde = "-" if check.planned_at_mde is None else f"{check.planned_at_mde:.1%}"
    whole = " by the registered plan's last look (every replicate extended to a decision)" if check.extended else ""
    console.print(
        f"  plan (noise from {check.source}): power {at_mde} at the gates' mdes{whole}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if check.planned_at_measured is None:
        return
    met = ", ".join(f"{g} {e:+.2%}" for g, e in check.effects.items())
    m = check.measured
    verdict = "inside" if check.inside else "OUTSIDE"
    console.print(
        f"  plan at the effects the as-written replicates met at look 1 ({met}): power "
        f"{check.planned_at_measured:.1%}{whole and ' by the last look'}; measured {m.rate:.1%} "
        f"[{m.low:.1%}, {m.high:.1%}]: {verdict} the measured interval",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def _calibrate_on_lane(
    card: Any, replicates: int, *, seed: int, budget: float | None, port: int | None, as_json: bool, extend: bool = True
) -> None:
    from gb300lane.cards.run import LiveArmOps
    from gb300lane.instrument.lanecal import calibrate_lane
    from gb300lane.promote.view import protected_instances

    cal = calibrate_lane(
        card,
        replicates,
        ops=LiveArmOps(protected_instances(), port=port),
        seed=seed,
        budget_s=budget,
        progress=_say(as_json),
        extend=extend,
    )
    if as_json:
        print_json(cal.model_dump(mode="json"))
        return

    def line(name: str, r: Any) -> str:
        rate = "-" if r.replicates == 0 else f"{r.rate:>6.1%}"
        return f"  {name:<22} {rate:>6}  [{r.low:.1%}, {r.high:.1%}]  ({r.events}/{r.replicates})"

    console.print(
        f"{cal.card}: {cal.false_better.replicates} A/A and {cal.power.replicates} as-written replicates "
        f"through the lane ({cal.requested} asked for{', stopped by the time budget' if cal.stopped_by_budget else ''}; "
        f"{cal.seconds:.0f} s); rates with 95% Clopper-Pearson intervals",
        highlight=False,
        markup=False,
    )
    for name, r in (
        ("false 'B better' (A/A)", cal.false_better),
        ("false FAIL (A/A)", cal.false_fail),
        ("power (as written)", cal.power),
        ("FAIL (as written)", cal.fail_when_real),
    ):
        console.print(line(name, r), highlight=False, markup=False)
    if cal.extended:
        console.print(
            f"  extended as `card extend` extends them: A/A {cal.extended_aa}, as written {cal.extended_card}; "
            "the rates are the registered plan's, by its last look",
            highlight=False,
            markup=False,
        )
    planned = "-" if cal.planned_power is None else f"{cal.planned_power:.1%}"
    inside = (
        ""
        if cal.planned_power is None or cal.power.replicates == 0
        else " (inside the measured interval)"
        if cal.power.low <= cal.planned_power <= cal.power.high
        else " (OUTSIDE the measured interval)"
    )
    what = "the registered plan, extended to its last look" if cal.extended else "the card as written"
    console.print(
        f"  planned power of {what}: {planned}{inside}; plan noise from {cal.plan_source or '-'}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    console.print(f"  receipts: {cal.root}", highlight=False, markup=False)
    for n in cal.notes:
        err_console.print(f"[yellow]warning:[/] {escape(n)}", markup=True, highlight=False, soft_wrap=True)


@card_app.command(
    "reproduce",
    help="Re-derive the write-up's BR1/BR2 figures and verdicts, with what the new "
    "design says of the same data (part 1), then run the card locally (part 2).",
)
def reproduce_cmd(
    which: str = typer.Argument(..., help="br1 or br2."),
    part: list[int] = typer.Option([1, 2], "--part", help="Which parts to run (1, 2); default both."),
    port: int | None = typer.Option(
        None,
        "--port",
        min=1,
        max=65535,
        help="Boot part 2's arms (main and sidecar) "
        "moved to this port. Default: the recipes' own ports, or the nearest free "
        "ones when those are taken (said on stderr).",
    ),
    as_json: bool = _JSON,
) -> None:
    from gb300lane.cards.reproduce import reproduce

    lines: list[str] = []
    say = _say(False)

    def keep(m: str) -> None:
        lines.append(m)
        if not as_json:
            say(m)

    times = reproduce(which, keep, parts=tuple(part), port=port, notice=_say(True))
    if as_json:
        print_json({"card": which, "parts": list(part), "lines": lines, "times_s": times})


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    app.add_typer(card_app, name="card")
