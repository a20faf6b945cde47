"""`card extend`: run the further looks an INCONCLUSIVE card registered, and write the verdict they reach.

The card must have registered `design.extension` (its hash covers it), its
newest verdict must be INCONCLUSIVE over the registered gates, and the plan
must have looks left (`cards.decide.extension.refusal` says why not, naming
the file, the key and the fix). Then, in order:

1. the chain of custody is checked (`require_intact`), and an extension
   receipt is written once (`cards.record.extensions`): the verdict it extends
   (its sha256), the stages it runs, sized from that verdict's `more_needed`,
   and each gate's nominal level at their looks;
2. the stages run through the same machinery as `card run`
   (`cards.run.run_stages`): every arm boots again each stage with its own
   seeds (`run.arm_seed_base`), a look after each stage, stopping at PASS or
   FAIL; an interrupted extension resumes at the next `card extend`;
3. a manifest seals the new receipts, the chain is checked again, and the
   next verdict is written (write-once) over the registered gates at the look
   the extension ended on, pointing at the verdict it extends.
"""

from __future__ import annotations

from pydantic import Field

from gb300lane import lane
from gb300lane.cards.decide.extension import plan_extension, refusal
from gb300lane.cards.decide.verdict import Verdict
from gb300lane.cards.record.card_custody import require_intact
from gb300lane.cards.record.extensions import ExtensionReceipt, pending_extension, record_extension
from gb300lane.cards.record.inputs import verdict_over
from gb300lane.cards.record.receipts import Receipts, read_verdict
from gb300lane.cards.run import ArmOps, LiveArmOps, Progress, run_stages
from gb300lane.cards.schema import gates_payload
from gb300lane.errors import CardError
from gb300lane.lane import Protected
from gb300lane.models import FrozenModel


class Extended(FrozenModel):
    """What one `card extend` did."""

    receipt: ExtensionReceipt = Field(description="The extension receipt (planned, or resumed).")
    resumed: bool = Field(description="True when an interrupted extension was taken up again.")
    lines: tuple[str, ...] = Field(description="One line per arm-stage and per look.")
    verdict: Verdict = Field(description="The verdict the extension reached (written).")


def plan_next(rec: Receipts) -> ExtensionReceipt:
    """Refuse, or write the extension receipt for the newest verdict (nothing is run)."""
    card = rec.card()
    nums = rec.verdict_numbers()
    latest = read_verdict(rec, nums[-1]) if nums else None
    done = rec.stages_done(card)
    why = refusal(
        card,
        card_file=str(rec.card_file),
        verdict_file=str(rec.verdict_file(nums[-1])) if nums else None,
        verdict=latest.verdict if latest else None,
        registered_gates=latest is not None and latest.gates == gates_payload(card.gates),
        stages_done=done,
        look_file=str(rec.look_file(done)),
    )
    if why is not None:
        raise CardError(why)
    assert latest is not None
    if latest.look != done:
        raise CardError(
            f"{rec.verdict_file(latest.number)}: verdict {latest.number} was decided at look "
            f"{latest.look} but stages 1..{done} have run (key look); the receipts are out of step: "
            "check them with `gb300lane verify --card CARD`"
        )
    require_intact(rec, "extend")
    return record_extension(
        rec,
        card,
        latest.number,
        plan_extension(card, card.gates, list(latest.results), done, share=rec.registration().alpha_share()),
    )


def extend_card(
    rec: Receipts, *, ops: ArmOps | None = None, progress: Progress | None = None, protected: Protected = lane.NOTHING
) -> Extended:
    """Extend the card's newest INCONCLUSIVE verdict by the further looks it registered (or resume one)."""
    card = rec.card()
    rec.check_frozen(card)
    if rec.registration().transcribed:
        raise CardError(
            f"{rec.root}: these receipts were transcribed from a write-up; they are never extended. "
            "Run the local card instead (e.g. `gb300lane card run local-br1-extend`)"
        )
    say = progress or (lambda _msg: None)
    receipt = pending_extension(rec)
    resumed = receipt is not None
    if receipt is None:
        receipt = plan_next(rec)
    plan = receipt.plan
    say(
        f"extension {receipt.number} of verdict {receipt.extends.number} ({receipt.extends.verdict}): stages "
        f"{plan.first_stage}..{plan.last_stage} of the plan's {plan.looks} looks ({plan.spending} spending)"
        + (", resumed" if resumed else "")
        + f"; {plan.reason}"
    )
    lines = run_stages(rec, card, ops or LiveArmOps(protected), say, plan.first_stage, plan.last_stage)
    rec.write_manifest(f"extension-{receipt.number}")
    require_intact(rec, "score the extension")
    number = rec.verdict_numbers()[-1] + 1
    reason = (
        f"extension {receipt.number}: further looks {plan.first_stage}..{plan.last_stage} of {plan.looks} "
        f"registered (design.extension), alpha spent by {plan.spending} over the plan"
    )
    v = verdict_over(rec, card, card.gates, number=number, previous=receipt.extends, reason=reason)
    rec.write_json(rec.verdict_file(number), v.payload())
    rec.write_manifest(f"verdict-{number}")
    return Extended(receipt=receipt, resumed=resumed, lines=tuple(lines), verdict=v)


__all__ = ["Extended", "extend_card", "plan_next"]
