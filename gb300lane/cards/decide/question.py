"""One alpha budget per question: a card's runs are linked, and a re-run spends its share of the same plan.

A question is a card's name and its candidate's whole resolved recipe (`recipes.content_hash`). Its runs
(each a registration and its receipts directory) are looks of one Pocock spending plan over `design.runs`
runs (`sequential.run_share`): run r may spend the share ln(1 + (e-1) r/R) - ln(1 + (e-1)(r-1)/R) of each
gate's alpha, within which its own design spends as registered. Registering again after a final verdict
(INCONCLUSIVE, FAIL, or a PASS to be confirmed) counts into that plan; when its runs are spent, or the gates
differ from the question's earlier runs, a further run is a new question, which needs a reason the
registration records and every later verdict and promotion prints. The runs' data are independent, so a
question's chance of any false PASS is at most the sum of its runs' shares: each gate's registered alpha.

Pure: `plan_run` takes what the evidence log remembers of the earlier runs (`cards.record.logged`), never the
results directory, which an edit can empty.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from gb300lane.cards.decide.sequential import run_share
from gb300lane.models import FrozenModel


class EarlierRun(FrozenModel):
    """A run of the question the log remembers."""

    receipts: str = Field(description="Its receipts directory.")
    registered_at: str = Field(description="When it was registered (UTC).")
    run: int | None = Field(
        description="Its number among the question's runs (None: registered before runs were counted)."
    )
    runs: int | None = Field(description="The runs its question allowed (None: not recorded).")
    gates_sha256: str | None = Field(description="Its registered gates' sha256.")
    verdict: str | None = Field(description="Its newest verdict (None: not scored).")
    measured: bool = Field(description="True once any arm's data was sealed (a run, verdict or extension entered).")
    new_question: str | None = Field(default=None, description="The reason it gave for asking a new question.")

    def describe(self) -> str:
        what = self.verdict or ("measured, not scored" if self.measured else "registered, never measured")
        number = f"run {self.run}" if self.run is not None else "a run"
        return f"{number} ({self.receipts}, {self.registered_at}: {what})"


class QuestionRun(FrozenModel):
    """Which run of its question a registration is, and the share of each gate's alpha it may spend."""

    card: str = Field(description="The card's name.")
    candidate_sha256: str | None = Field(description="sha256 of the candidate's resolved recipe (the question).")
    run: int = Field(ge=1, description="This run's number among the question's runs.")
    runs: int = Field(ge=1, description="The runs the question's plan allows (the card's design.runs).")
    share: float = Field(
        gt=0,
        le=1,
        description="The share of each gate's alpha this run spends (Pocock over the "
        "runs; 1.0 for a question of one run).",
    )
    follows: tuple[EarlierRun, ...] = Field(
        default=(),
        description="The question's earlier runs it follows (or, "
        "with new_question, the card's earlier runs it sets aside).",
    )
    new_question: str | None = Field(
        default=None,
        description="Why this run asks a new question (`card register "
        "--new-question`); None when it is a run of the same question.",
    )

    def notes(self) -> tuple[str, ...]:
        """What a verdict of this run says about it (every verdict, re-scores and extensions included)."""
        out = []
        if self.new_question is not None:
            aside = "; ".join(r.describe() for r in self.follows) or "none"
            out.append(
                f"a new question, registered with --new-question: {self.new_question} (earlier runs of card "
                f"{self.card} set aside: {aside})"
            )
        if self.runs > 1:
            follows = (
                "; follows " + "; ".join(r.describe() for r in self.follows)
                if self.follows and self.new_question is None
                else ""
            )
            out.append(
                f"run {self.run} of {self.runs} of card {self.card}'s question (candidate recipe "
                f"{(self.candidate_sha256 or '?')[:12]}){follows}: each gate spends {self.share:.1%} of its "
                "alpha in this run (Pocock shares over the question's runs)"
            )
        return tuple(out)


def plan_run(
    card: str,
    candidate_sha256: str | None,
    runs: int,
    gates_sha256: str,
    earlier: Sequence[EarlierRun],
    new_question: str | None = None,
    other_candidates: Sequence[EarlierRun] = (),
) -> QuestionRun | str:
    """This registration's run of its question, or why it may not be one (a line naming the earlier runs and the
    fix). `earlier`: the question's registrations the log remembers, oldest first; `other_candidates`: the card's
    registrations of another candidate recipe, oldest first.

    A card whose candidate recipe changed after it was measured asks a new question, and a new question needs a
    reason like any other: otherwise an edit to any key of the candidate (a port, a comment-like env value) would
    be a free restart of alpha."""
    reason = (new_question or "").strip() or None
    if reason is not None:
        return QuestionRun(
            card=card,
            candidate_sha256=candidate_sha256,
            run=1,
            runs=runs,
            share=run_share(1, runs),
            follows=tuple(earlier) or tuple(r for r in other_candidates if r.measured),
            new_question=reason,
        )
    fix = (
        "if the question itself changed (another workload, another lane, a fix measured anew), register with "
        '--new-question "why": the reason is recorded and printed on every later verdict and on promote'
    )
    # The question's current series: from its newest run that declared a new question (or its first run).
    start = max((i for i, r in enumerate(earlier) if r.new_question is not None), default=0)
    series = list(earlier[start:])
    measured = [r for r in series if r.measured]
    if not earlier:
        moved = [r for r in other_candidates if r.measured]
        if moved:
            return (
                f"card {card}: its candidate recipe changed (now {(candidate_sha256 or '?')[:12]}) since its "
                f"earlier runs measured another ({'; '.join(r.describe() for r in moved)}); a changed "
                f"candidate is a new question, not a free restart of the old one's alpha: {fix}"
            )
    if not measured:
        return QuestionRun(card=card, candidate_sha256=candidate_sha256, run=1, runs=runs, share=run_share(1, runs))
    listed = "; ".join(r.describe() for r in measured)
    other = [r for r in measured if r.gates_sha256 is not None and r.gates_sha256 != gates_sha256]
    if other:
        return (
            f"card {card}: its gates or design differ from its earlier runs of the same candidate recipe "
            f"({listed}); changing them after seeing a verdict is a new question, not another run of this one: "
            f"{fix}"
        )
    allowed = measured[0].runs or 1
    if len(measured) >= allowed:
        return (
            f"card {card}: the question (this card and candidate recipe {(candidate_sha256 or '?')[:12]}) has had "
            f"{len(measured)} run{'s' if len(measured) != 1 else ''} ({listed}), all the {allowed} its plan allows "
            f"(design.runs = {allowed}): its alpha is spent, and another run would raise the chance of a false "
            f"PASS above the registered alpha. The verdict on record stands; {fix}. A card that expects re-runs "
            "registers them from its first run (design.runs: N)"
        )
    run = len(measured) + 1
    return QuestionRun(
        card=card,
        candidate_sha256=candidate_sha256,
        run=run,
        runs=allowed,
        share=run_share(run, allowed),
        follows=tuple(measured),
    )


__all__ = ["EarlierRun", "QuestionRun", "plan_run"]
