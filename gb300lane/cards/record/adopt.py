"""`gb300lane evidence adopt`: enter in the evidence log a receipts directory it never saw, after its chain holds.

Receipts made before the log existed, on another machine, or whose last entry a crash cut off, are unknown to
the log, and promotion refuses a recipe whose verdicts the log never saw. Adoption checks the directory's
whole chain of custody first (seals by a chosen signer, every file as its manifests hashed it, every verdict
what its receipts score to), then enters its registration (kind `adopted`, with the reason) and each of its
manifests in the order written, so its verdicts count from then on, ordered after everything entered before.
It proves no more than the chain does: a directory copied from another run, seals intact, is adopted as what
it is, a run of the card it registered, never as the run it was copied over (that run's entries stay, and
its missing files stay breaks).
"""

from __future__ import annotations

from gb300lane import evidencelog
from gb300lane.cards.record.card_custody import require_intact
from gb300lane.cards.record.logged import logged_runs, receipts_key
from gb300lane.cards.record.receipts import Receipts, enter_registration
from gb300lane.errors import CardError


def adopt(rec: Receipts, reason: str) -> int:
    """Enter `rec` in the evidence log (its chain must hold); returns the entries made."""
    if not reason.strip():
        raise CardError('evidence adopt needs --reason "...": the log says why a directory was entered late')
    reg = rec.registration()
    if reg.transcribed:
        raise CardError(f"{rec.root}: a write-up's transcribed receipts ship with the package and are never entered")
    log = evidencelog.require_intact(f"adopt {rec.root}")
    if receipts_key(rec.root) in logged_runs(log):
        raise CardError(
            f"{rec.root}: already in the evidence log ({log.path}); `gb300lane verify --evidence` shows "
            "what it remembers of it"
        )
    require_intact(rec, "adopt")
    card = rec.card()
    detail = f"adopted: {reason.strip()}"
    enter_registration(rec, card, reg, kind="adopted", detail=detail)
    made = 1
    for path in rec.manifests():
        body = rec.read_json(path)
        stage = str(body.get("stage", "run")) if isinstance(body, dict) else "run"
        rec.enter_stage(reg, stage, path.name, detail=detail)
        made += 1
    return made


__all__ = ["adopt"]
