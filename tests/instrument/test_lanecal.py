"""`card calibrate --lane`: replicates of a card run as real cards through the lane's ops, resumable, budgeted."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest

from gb300lane.cards import load_card
from gb300lane.cards.record.receipts import Receipts
from gb300lane.instrument.lanecal import calibrate_lane, replicate_card

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"


class RecipeLane(fakes.FakeLane):
    """A fake lane whose numbers follow the recipe an arm boots (as a real lane's do), not the arm's name."""

    @contextmanager
    def instance(self, recipe, *, arm, check_keys=None, **kw):  # type: ignore[no-untyped-def]
        with super().instance(recipe, arm=arm, check_keys=check_keys, **kw) as rep:
            self._arm_by_endpoint[rep.endpoint] = recipe
            yield rep


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


def test_replicates_are_cards_with_their_own_seeds_and_a_bs_control_recipe_in_aa() -> None:
    card, _ = load_card(DATA / "tested.yaml")
    aa0, aa1, w0 = (
        replicate_card(card, "aa", 0, 0),
        replicate_card(card, "aa", 0, 1),
        replicate_card(card, "card", 0, 0),
    )
    assert aa0.candidate.recipe == card.controls[0].recipe and w0.candidate.recipe == card.candidate.recipe
    seeds = {c.window(c.primary_window).seed_base for c in (aa0, aa1)}
    assert len(seeds) == 2 and w0.window(w0.primary_window).seed_base == aa0.window(aa0.primary_window).seed_base
    assert aa0.name == "tested-lane-aa-000" and w0.name == "tested-lane-card-000"
    # only the tests are calibrated: a boot gate (here hash-hit) is a fact of one boot, not an error rate
    assert "hash_hit" in {g.kind for g in card.gates} and "hash_hit" not in {g.kind for g in aa0.gates}
    assert [g.id for g in w0.gates] == [g.id for g in card.gates if g.kind != "hash_hit"]


@pytest.mark.slow
def test_calibration_through_the_lane_counts_verdicts_resumes_and_keeps_every_replicate_a_receipt(
    tmp_path: Path,
) -> None:
    card, _ = load_card(DATA / "tested.yaml")
    # B as written is 8% better in tokens per step: the card should PASS; A/A has nothing to find
    lane = RecipeLane(card, {}, tps={"local-v27": 1.08}, noise=0.01)
    cal = calibrate_lane(card, 3, ops=lane.ops(), seed=5)
    assert cal.false_better.replicates == 3 and cal.power.replicates == 3
    assert cal.false_better.events == 0 and cal.power.events == 3, cal
    assert 0.0 <= cal.power.low <= 1.0 <= cal.power.high + 1e-9
    for rep in cal.replicates:
        rec = Receipts(Path(rep.receipts))
        assert rec.verdict_numbers() == [1] and rec.verify_manifest() == []
    on_disk = json.loads((Path(cal.root) / "calibration.json").read_text())
    assert on_disk["power"]["events"] == 3
    # a second run of the same seed reads every replicate back and boots nothing
    again = RecipeLane(card, {}, tps={"local-v27": 1.08}, noise=0.01)
    cal2 = calibrate_lane(card, 3, ops=again.ops(), seed=5)
    assert not [c for c in again.calls if c[0] == "up"] and cal2.power.events == 3
    assert all(r.seconds == 0.0 for r in cal2.replicates)


def test_a_spent_budget_starts_no_replicate_and_says_so() -> None:
    card, _ = load_card(DATA / "tested.yaml")
    lane = fakes.FakeLane(card, {}, noise=0.01)
    cal = calibrate_lane(card, 50, ops=lane.ops(), seed=9, budget_s=0.0)
    assert cal.stopped_by_budget and cal.false_better.replicates <= 1 and cal.power.replicates <= 1


@pytest.mark.slow
def test_a_registered_extension_takes_every_inconclusive_replicate_on_to_a_decision_or_the_plan_s_end() -> None:
    from gb300lane.cards.record.receipts import read_verdict
    from gb300lane.cards.schema import planned_stages

    card, _ = load_card(DATA / "extension.yaml")
    # B a little better: look 1 (a quarter of the plan's alpha) rarely decides; A/A has nothing to find
    lane = RecipeLane(card, {}, tps={card.candidate.recipe: 1.004}, noise=0.03, n_transcripts=20)
    cal = calibrate_lane(card, 2, ops=lane.ops(), seed=3)
    assert cal.extended and cal.extended_aa == 2 and cal.extended_card >= 1, cal
    for rep in cal.replicates:
        rec = Receipts(Path(rep.receipts))
        numbers = rec.verdict_numbers()
        # every extension is a verdict of its own, pointing at the one it extends; the newest is the replicate's
        assert numbers == list(range(1, rep.extensions + 2)) and rec.verify_manifest() == []
        assert rep.verdict == read_verdict(rec, numbers[-1]).verdict
        assert rep.looks == read_verdict(rec, numbers[-1]).look
        if rep.verdict == "INCONCLUSIVE":  # undecided only when the registered plan had no look left
            assert rep.looks == planned_stages(card)
    assert cal.false_better.replicates == 2 and cal.power.replicates == 2
    # read back: every replicate is done, nothing boots
    again = RecipeLane(card, {}, tps={card.candidate.recipe: 1.004}, noise=0.03, n_transcripts=20)
    cal2 = calibrate_lane(card, 2, ops=again.ops(), seed=3)
    assert not [c for c in again.calls if c[0] == "up"] and cal2.replicates == tuple(
        r.model_copy(update={"seconds": 0.0}) for r in cal.replicates
    )
    # --no-extend: the design's own look alone, in replicates of their own
    own = calibrate_lane(
        card,
        2,
        ops=RecipeLane(card, {}, tps={card.candidate.recipe: 1.004}, noise=0.03, n_transcripts=20).ops(),
        seed=3,
        extend=False,
    )
    assert not own.extended and own.root != cal.root and all(r.extensions == 0 and r.looks == 1 for r in own.replicates)


@pytest.mark.slow
def test_an_a_a_rate_beyond_the_gates_alpha_is_named() -> None:
    from gb300lane.instrument.calibrate import rate_ci
    from gb300lane.instrument.lanecal import rate_notes

    card, _ = load_card(DATA / "tested.yaml")
    lane = fakes.FakeLane(card, {}, noise=0.01)
    cal = calibrate_lane(card, 1, ops=lane.ops(), seed=9)
    assert rate_notes(card, cal.model_copy(update={"false_fail": rate_ci(1, 8)})) == ()  # 1/8: 0.3% lower bound
    (note,) = rate_notes(card, cal.model_copy(update={"false_fail": rate_ci(4, 8)}))
    assert note.startswith("false FAIL on this lane is 4/8") and "one-sided 2.5%" in note and "card noise" in note


@pytest.mark.slow
def test_a_a_estimates_that_spread_beyond_their_standard_errors_are_named() -> None:
    from gb300lane.instrument.lanecal import spread_notes

    card, _ = load_card(DATA / "tested.yaml")
    # B's recipe shifts every A/A arm by a fresh few percent: a boot-level share the request noise does not show
    calm = calibrate_lane(card, 6, ops=RecipeLane(card, {}, noise=0.01).ops(), seed=11)
    assert not spread_notes(card, [r for r in calm.replicates if r.scenario == "aa"])
    import numpy as np

    class ShiftingLane(RecipeLane):
        """Every boot shifts its arm's tokens per step by a fresh 5% (sd), whatever its recipe."""

        rng = np.random.default_rng(5)

        @contextmanager
        def instance(self, recipe, *, arm, check_keys=None, **kw):  # type: ignore[no-untyped-def]
            self.tps[recipe] = float(1.0 + 0.05 * self.rng.standard_normal())
            with super().instance(recipe, arm=arm, check_keys=check_keys, **kw) as rep:
                yield rep

    shifted = calibrate_lane(card, 6, ops=ShiftingLane(card, {}, noise=0.01).ops(), seed=11, date="2026-01-02")
    (note,) = [n for n in shifted.notes if n.startswith("gate tokens-per-step")]
    assert "6 A/A estimates spread" in note and "a share the test leaves out" in note, shifted.notes
