"""Extending an INCONCLUSIVE card by the further looks its design registered: whether it may, and by how much.

A card that registers `design.extension: {looks: N}` plans one alpha-spending
plan of K = (the design's looks) + N equally sized stages from the start: its
own looks are looks 1.. of K, each spending what the plan's spending function
allows by then (so a fixed design's one look spends alpha(1 / K), not all of
alpha). `card extend` takes further looks of the same plan: the boundaries of
looks 1..K are fixed by the registration, and a look not taken only leaves
alpha unspent, so however many further looks a card takes, and whatever it
saw when it chose to, its one-sided error rates stay each gate's registered
alpha (`card calibrate` measures them over replicates extended the same way).

How many stages one extension runs comes from the verdict's `more_needed`
(`cards.decide.more`): from the registered effect and the observed variance,
the requests and boots per arm that reach the target power. Each stage adds
one stage's requests and one boot per arm, so the extension runs the fewest
stages that give every sized deciding gate both, never past the plan's last
look, looking after each stage and stopping at PASS or FAIL. Where no gate
can be sized (no registered effect), it runs the plan's remaining stages.

Pure: the caller passes what the receipts say (`cards.record.extensions`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from gb300lane.cards.decide.evidence import Look
from gb300lane.cards.decide.more import MoreNeeded, controls_for, more_needed
from gb300lane.cards.decide.results import GateResult, Status
from gb300lane.cards.schema import Card, Gate, TestedGate, extension_looks, plan_spending, planned_stages
from gb300lane.models import FrozenModel


class ExtensionPlan(FrozenModel):
    """What one `card extend` runs: stages first..last of the registered plan, a look after each."""

    first_stage: int = Field(ge=2, description="The first stage (look) the extension runs.")
    last_stage: int = Field(ge=2, description="The last stage it may run (it stops earlier at PASS or FAIL).")
    looks: int = Field(ge=2, description="Looks in the registered plan (the design's and the extension's).")
    spending: str = Field(description="The plan's alpha spending function.")
    levels: dict[str, tuple[float, ...]] = Field(
        description="Deciding tested gate -> its one-sided nominal level at each look first..last (alpha spent "
        "from its registered budget)."
    )
    more_needed: tuple[MoreNeeded, ...] = Field(description="What the extended verdict said would decide.")
    reason: str = Field(description="Why this many stages, in one line.")


def refusal(
    card: Card,
    *,
    card_file: str,
    verdict_file: str | None,
    verdict: Status | None,
    registered_gates: bool,
    stages_done: int,
    look_file: str,
) -> str | None:
    """Why `card extend` may not extend the card now (None: it may); each names the file, the key and the fix."""
    if card.design.extension is None:
        return (
            f"{card_file}: design.extension is not registered, so card {card.name} has no further looks: its "
            "design spent its whole alpha at its own looks, and a look added now would raise its error rates; "
            "add `extension: {looks: N}` under design in the card file; its registration then asks a new "
            f'question (`gb300lane card register {card.name} --fresh --new-question "why"`), since the '
            "design changed after a verdict"
        )
    if verdict is None or verdict_file is None:
        return (
            f"{verdict_file or card_file}: no verdict yet (key verdict); an extension continues an "
            f"INCONCLUSIVE verdict: run `gb300lane card score {card.name}` first"
        )
    if verdict != "INCONCLUSIVE":
        return (
            f"{verdict_file}: verdict is {verdict}, not INCONCLUSIVE (key verdict): a decided card is not "
            f"extended; its verdict stands (register a new card to ask again)"
        )
    if not registered_gates:
        return (
            f"{verdict_file}: the newest verdict applied gates other than the registered ones (key gates, a "
            "re-score): an extension continues the registered plan only; extend before re-scoring, or "
            f"register the card with the changed gates as a new question (`gb300lane card register {card.name} "
            '--fresh --new-question "why"`)'
        )
    total = planned_stages(card)
    if stages_done >= total:
        return (
            f"{look_file}: look {stages_done} of {total} was the plan's last (key design.extension.looks = "
            f"{extension_looks(card)}): this run's alpha is spent and its INCONCLUSIVE verdict is final. "
            f"`gb300lane card register {card.name} --fresh` starts the question's next run only where the card "
            "registered more runs (design.runs), spending the next share of the same alpha; otherwise a new run "
            'is a new question and needs --new-question "why" (recorded, and printed on every verdict and '
            "promotion)"
        )
    return None


def _requests_now(result: GateResult) -> int:
    return max((t.requests_per_arm for t in result.tests if t.decision == "INCONCLUSIVE"), default=0)


def plan_extension(
    card: Card, gates: Sequence[Gate], results: Sequence[GateResult], stages_done: int, share: float = 1.0
) -> ExtensionPlan:
    """The stages an extension of an INCONCLUSIVE look `stages_done` runs, from the requests and boots per arm
    its undecided gates need (`more_needed`), capped at the registered plan's last look."""
    total = planned_stages(card)
    if card.design.extension is None or stages_done >= total:
        raise ValueError(f"card {card.name}: no further look is registered after look {stages_done}")
    by_id = {g.id: g for g in gates}
    needed = [
        m
        for r in results
        if r.id in by_id
        and (m := more_needed(card, by_id[r.id], r, controls=controls_for(card, by_id[r.id], results))) is not None
    ]
    sized: list[tuple[int, MoreNeeded]] = []
    for r in results:
        m = next((x for x in needed if x.gate == r.id), None)
        now = _requests_now(r)
        if m is None or m.requests_per_arm is None or now <= 0:
            continue
        # each stage adds the stages' requests per arm in equal shares, and one boot per arm
        stages = max(math.ceil(stages_done * m.requests_per_arm / now), m.boots_per_arm or 1, stages_done + 1)
        sized.append((stages, m))
    if sized:
        want, worst = max(sized, key=lambda x: x[0])
        last = min(total, want)
        capped = "" if want <= total else f"; the plan ends at look {total}, so it runs to there"
        reason = (
            f"gate {worst.gate} needs {worst.requests_per_arm} requests over {worst.boots_per_arm or 1} boot(s) "
            f"per arm for {worst.target_power:.0%} power at its registered effect {worst.effect:+.1%}: "
            f"{want} stages in all{capped}"
        )
    else:
        last = total
        reason = (
            "no undecided gate has a registered effect to size it by (an mde): the extension runs the "
            f"plan's remaining looks, to look {total}"
        )
    spending = plan_spending(card)
    levels = {
        g.id: tuple(
            Look(number=s, looks=total, spending=spending, share=share).level(g.alpha)
            for s in range(stages_done + 1, last + 1)
        )
        for g in gates
        if isinstance(g, TestedGate) and g.decides
    }
    return ExtensionPlan(
        first_stage=stages_done + 1,
        last_stage=last,
        looks=total,
        spending=spending,
        levels=levels,
        more_needed=tuple(needed),
        reason=reason,
    )


__all__ = ["ExtensionPlan", "plan_extension", "refusal"]
