"""A card's chain of custody: registration -> recipe fingerprints -> boot reports -> receipts -> verdicts.

Every file in a receipts directory is hashed into a manifest when a stage
ends (the run, each verdict, each report), each manifest hashes the ones
before it, and each is signed with the user's SSH key in the config directory
(`gb300lane.signing`), checked against the allowed signers. `verify_receipts` walks the chain link by link:

- registration.json is readable, card.yaml is the file it registered, the gates are the frozen ones;
- every manifest's seal holds, every file it lists still has its sha256, and
  one manifest (the newest) seals all the others: no file is outside the chain;
- each arm's boot report booted the fingerprint registration recorded for its recipe;
- each re-score points at the sha256 of the verdict it supersedes, and verdict 1
  applied the registered gates;
- each verdict is what its receipts score to now (re-scored, not trusted).

`require_intact` is what `card score`, `rescore`, `report` and promotion call
before a receipt counts: a broken link is a `CardError` naming the file.

What this proves, and what it cannot: an edit to any one file (a verdict turned
from FAIL to PASS, a window's numbers) breaks a sha256 or a seal, and a verdict
that does not follow from its receipts fails the re-score. Someone who rewrites
every file consistently must also re-sign the manifests, which needs the
private key in the config directory (a new `state.key` does not help); the
re-score then still ties the verdict to the numbers in the receipts, and a
verdict that scores differently is a break unless a re-score supersedes it.
Against someone who can read the signing key (the same user, root) the
signatures prove nothing, and fabricated numbers re-score to whatever they say. What is
promoted is fixed at that moment: the ledger records the verdict file's and the
head manifest's sha256 in a signed chain of its own (`gb300lane.promote.production_custody`),
so a later edit of the receipts still shows.
"""

from __future__ import annotations

from gb300lane import __version__
from gb300lane.cards.decide.verdict import Verdict, gates_of
from gb300lane.cards.record.chain import Chain, Link, LinkStatus, _first_line, _json, walk
from gb300lane.cards.record.inputs import verdict_over
from gb300lane.cards.record.receipts import Receipts
from gb300lane.cards.schema import Card
from gb300lane.errors import CardError, LaneError


def verify_receipts(rec: Receipts, *, rescore: bool = True) -> Chain:
    """Check a card's receipts directory link by link (see the module docstring); never raises for a bad link.
    `rescore`: each verdict is also re-scored over its receipts (what `require_intact` and promotion ask)."""
    return walk(rec, _rescore if rescore else None)


def _rescore(rec: Receipts, card: Card, verdict: Verdict, name: str, n: int, numbers: list[int]) -> Link:
    return _rescored(rec, card, verdict, name, _superseded(rec, n, numbers))


def _superseded(rec: Receipts, n: int, numbers: list[int]) -> Verdict | None:
    """The re-score that supersedes verdict `n` (the next verdict, pointing at it), or None."""
    if n + 1 not in numbers:
        return None
    data, problem = _json(rec.verdict_file(n + 1))
    try:
        later = Verdict.model_validate(data) if problem is None else None
    except ValueError:
        return None
    return later if later is not None and later.previous is not None and later.previous.number == n else None


def _rescored(rec: Receipts, card: Card, verdict: Verdict, name: str, superseded: Verdict | None) -> Link:
    """The verdict against what its own gates give over the receipts now."""
    try:
        # at the verdict's own look: an extension's later stages are the next verdict's data, not this one's
        again = verdict_over(rec, card, gates_of(verdict), number=verdict.number, stages=verdict.look)
    except (LaneError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError, OSError) as exc:
        return Link(
            kind="verdict", file=name, status="broken", detail=f"its receipts cannot be re-scored ({_first_line(exc)})"
        )
    said = {r.id: r.status for r in verdict.results}
    now = {r.id: r.status for r in again.results}
    if again.verdict == verdict.verdict and said == now:
        return Link(
            kind="verdict",
            file=name,
            status="ok",
            detail=f"verdict {verdict.number} {verdict.verdict}: its receipts score the same, gate by gate",
        )
    differing = sorted(g for g in set(said) | set(now) if said.get(g) != now.get(g))
    detail = f"says {verdict.verdict}, its receipts score {again.verdict}" + (
        f" (gates {', '.join(differing)})" if differing else ""
    )
    # No field the verdict itself carries (its version string) can excuse a difference: only a signed re-score
    # that supersedes it says why (the manifests sealing it are signed; the re-score is checked in turn).
    if superseded is not None:
        return Link(
            kind="verdict",
            file=name,
            status="note",
            detail=f"{detail}; superseded by verdict {superseded.number} (re-score: {superseded.reason or '-'})",
        )
    again_ = (
        ""
        if verdict.tool_version == __version__
        else (
            f"; it says it was scored by gb300lane {verdict.tool_version} (this is {__version__}): "
            "`gb300lane card rescore` records a signed re-score that says why"
        )
    )
    return Link(kind="verdict", file=name, status="broken", detail=detail + " (edited by hand?)" + again_)


def require_intact(rec: Receipts, action: str, *, rescore: bool = True) -> Chain:
    """The chain, when no link is broken; CardError naming the first broken file otherwise."""
    chain = verify_receipts(rec, rescore=rescore)
    br = chain.first_break
    if br is not None:
        try:
            card = rec.registration().card
        except (LaneError, ValueError):
            card = str(rec.root)
        where = rec.root / br.file if br.file else rec.root
        raise CardError(
            f"{where}: {br.detail}; refusing to {action} on receipts whose chain of custody is broken "
            f"(`gb300lane verify --card {card}` shows every link)"
        )
    return chain


__all__ = ["Chain", "Link", "LinkStatus", "require_intact", "verify_receipts"]
