"""`reproduce br1|br2`: the write-up's figures from its receipts, then the same card on the embedded engine.

Part 1 re-derives and scores the transcribed receipts (seconds, nothing
written). Part 2 registers the local card (`cards/local-br1.yaml`,
`cards/local-br2.yaml`: the same arms and gates on the embedded engine, at
the reduced sizes the card file states) into a fresh receipts directory,
runs every arm, scores it and renders the report, so re-running never
touches an earlier run's receipts.

Part 2 boots its arms on the recipes' own ports when they are free. On a
shared host where something holds them (another lane, production, any
process), it moves every arm to the lowest port at which the whole lane
fits (`lane.free_lane_port`) and says so through `notice`; `port` picks the
place instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gb300lane import lane
from gb300lane.cards.cardfile import load_card, read_card_text
from gb300lane.cards.present.report import ratio_rows, render_report
from gb300lane.cards.present.what_differs import arm_lines, run_differences
from gb300lane.cards.present.writeup import original_arms, reproduce_writeup, verdict_lines
from gb300lane.cards.record.receipts import Receipts, register
from gb300lane.cards.record.verdicts import score
from gb300lane.cards.run import ArmOps, LiveArmOps, run_card
from gb300lane.cards.schema import Card
from gb300lane.errors import CardError
from gb300lane.recipes import load_recipe

LOCAL_CARDS = {"br1": "local-br1", "br2": "local-br2"}

Say = Callable[[str], None]


def part1(which: str, say: Say) -> float:
    t0 = time.perf_counter()
    say(f"== {which.upper()} part 1: the write-up's figures from its transcribed receipts ==")
    for line in reproduce_writeup(which):
        say(line)
    dt = time.perf_counter() - t0
    say(f"(part 1 took {dt:.2f} s)")
    return dt


def arm_port(card: Card, port: int | None, notice: Say) -> int | None:
    """Where the card's arms boot: `port`, else their recipes' own ports (None) when free, else the nearest free place."""
    if port is not None:
        return port
    recipes = [load_recipe(name) for name in sorted({a.recipe for a in card.arms})]
    wanted = lane.ports_of(recipes)
    taken = lane.busy_ports(wanted)
    if not taken:
        return None
    moved = lane.free_lane_port(recipes, start=max(wanted) + 1)
    held = "; ".join(f"{p} by {who}" for p, who in taken.items())
    notice(
        f"port{'s' if len(taken) > 1 else ''} in use ({held}): the arms boot on "
        f"{', '.join(map(str, lane.ports_of(recipes, moved)))} instead (pass --port P to choose)"
    )
    return moved


def part2(
    which: str,
    say: Say,
    *,
    base: Path | None = None,
    ops: ArmOps | None = None,
    port: int | None = None,
    notice: Say | None = None,
) -> tuple[float, Receipts]:
    """Register, run, score and report the local card in a fresh receipts directory.

    The arms boot on `port` (the whole lane moved there), else where `arm_port` finds room; the move is told to
    `notice` (default `say`)."""
    if which not in LOCAL_CARDS:
        raise CardError(f"unknown write-up card {which!r}; use br1 or br2")
    t0 = time.perf_counter()
    card, path = load_card(LOCAL_CARDS[which])
    say(f"== {which.upper()} part 2: card {card.name} on the embedded engine ==")
    for w in card.windows:
        say(
            f"sizes (reduced from the write-up's 40 transcripts x 256 tokens): window {w.name}: "
            f"{len(w.classes)} classes ({', '.join(w.classes)}), {w.transcripts_per_class} transcripts per class, "
            f"{w.length_label()}, concurrency {list(w.concurrency)}, {w.rounds} rounds, "
            f"temperature {w.temperature}"
        )
    if ops is None:
        ops = LiveArmOps(port=arm_port(card, port, notice or say))
    # A run directory of its own (`<date>-<card>-reproduce[-runN]`): `card register CARD` never finds these receipts.
    rec = register(
        card,
        read_card_text(path),
        base=base,
        fresh=True,
        run="reproduce",
        aside="`card reproduce`: the write-up's card run again on this lane",
    )
    say(f"registered: {rec.root} (gates sha256 {rec.registration().gates_sha256[:16]})")
    run_card(rec, ops=ops, progress=lambda m: say(f"  {m}"))
    v = score(rec)
    for line in verdict_lines(v):
        say(line)
    cand = card.candidate.name
    arms = rec.load_arms(card)
    for line in arm_lines(arms) + run_differences(original_arms(which), arms):
        say(line)
    clocks = sorted({a.windows[card.primary_window].clock or "?" for a in arms if card.primary_window in a.windows})
    say(f"decode tok/s (clock: {', '.join(clocks)}), {cand} ÷ mean(controls), paired per-stream {cand} − ctrl:")
    for row in ratio_rows(card, arms):
        vals = "  ".join(f"{n} {v:.1f}" if v is not None else f"{n} —" for n, v in row.values.items())
        ratio = f"{row.ratio:.3f}" if row.ratio is not None else "—"
        ci = row.ci.describe() if row.ci else "—"
        say(f"  {row.cls:<11} C{row.concurrency:<2} {vals}  ->  {ratio}  paired {ci}")
    md = render_report(rec)
    dt = time.perf_counter() - t0
    say(f"report: {md}")
    say(f"receipts: {rec.root} (write-once; manifest.json and manifest-*.json hash every file)")
    say(f"(part 2 took {dt:.1f} s)")
    return dt, rec


def reproduce(
    which: str,
    say: Say,
    *,
    parts: tuple[int, ...] = (1, 2),
    base: Path | None = None,
    ops: ArmOps | None = None,
    port: int | None = None,
    notice: Say | None = None,
) -> dict[str, float]:
    times: dict[str, float] = {}
    if 1 in parts:
        times["part1_s"] = part1(which, say)
    if 2 in parts:
        if 1 in parts:
            say("")
        times["part2_s"], _ = part2(which, say, base=base, ops=ops, port=port, notice=notice)
    return times
