"""Extension receipts: what `card extend` planned, written once before its first further stage runs.

`extensions/extension-<k>.json` names the INCONCLUSIVE verdict it extends
(number, file and sha256, so the pointer cannot move) and the stages it plans
with each gate's nominal level at their looks (`cards.decide.extension`). An
extension whose verdict is not written yet is pending: the next `card extend`
resumes it (finished arms are skipped) instead of planning another.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gb300lane import __version__
from gb300lane.cards.decide.extension import ExtensionPlan
from gb300lane.cards.decide.verdict import PreviousVerdict
from gb300lane.cards.record.receipts import Receipts, read_verdict, utc_now
from gb300lane.cards.schema import Card
from gb300lane.fsio import sha256_file
from gb300lane.models import FrozenModel


class ExtensionReceipt(FrozenModel):
    """One `card extend`: the verdict it extends and the further looks it runs."""

    schema_version: Literal[1] = Field(description="File format version.")
    card: str = Field(description="Card name.")
    number: int = Field(ge=1, description="This extension (1-based).")
    written_at: str = Field(description="UTC time it was planned.")
    tool_version: str = Field(description="gb300lane version that planned it.")
    extends: PreviousVerdict = Field(description="The INCONCLUSIVE verdict it extends.")
    plan: ExtensionPlan = Field(description="The stages it runs and the alpha each look spends.")


def read_extension(rec: Receipts, k: int) -> ExtensionReceipt:
    return rec.read_model(rec.extension_file(k), ExtensionReceipt)


def pending_extension(rec: Receipts) -> ExtensionReceipt | None:
    """The newest extension when no verdict came after the one it extends (it was interrupted), else None."""
    nums = rec.extension_numbers()
    if not nums:
        return None
    ext = read_extension(rec, nums[-1])
    return ext if rec.verdict_numbers() and rec.verdict_numbers()[-1] == ext.extends.number else None


def record_extension(rec: Receipts, card: Card, verdict_number: int, plan: ExtensionPlan) -> ExtensionReceipt:
    """Write the next extension receipt (write-once), pointing at verdict `verdict_number`."""
    path = rec.verdict_file(verdict_number)
    pointer = PreviousVerdict(
        number=verdict_number,
        file=str(path.relative_to(rec.root)),
        sha256=sha256_file(path),
        verdict=read_verdict(rec, verdict_number).verdict,
    )
    k = (rec.extension_numbers() or [0])[-1] + 1
    receipt = ExtensionReceipt(
        schema_version=1,
        card=card.name,
        number=k,
        written_at=utc_now(),
        tool_version=__version__,
        extends=pointer,
        plan=plan,
    )
    rec.write_model(rec.extension_file(k), receipt)
    return receipt


__all__ = ["ExtensionReceipt", "pending_extension", "read_extension", "record_extension"]
