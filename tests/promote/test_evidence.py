"""Promotion binds to evidence that cannot be hidden: the whole recipe the card measured, and the evidence log.

A card mini passes for local-v27, then a card mini-again (the same bracket under another name, so both are
local-v27's) fails. Five ways to hide the newer FAIL with write access to results/ alone, each of which
promoted the older PASS before the log existed: the FAIL's directory deleted; its verdict and head manifest
deleted; its registration overwritten; its written_at moved earlier; the PASS run's verdict and manifests
copied over it. Each is now a break the log names, and promotion refuses it. A recipe edited after its PASS
(k, an env var) is refused naming the keys and the card, and `verify --production` breaks where a promoted
recipe is edited afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gb300lane.cards import Receipts, parse_card, register, run_card, score
from gb300lane.cli.main import app
from gb300lane.errors import StateError
from gb300lane.promote import promote
from gb300lane.promote.live import LiveOps
from gb300lane.testing.simlane import SimLane

from fakes import cards as fakes

DATA = Path(__file__).resolve().parents[1] / "data" / "cards"
runner = CliRunner()


class CardsLane:
    """A simulated lane whose verdicts, fingerprints and recipe contents are the real ones (cards, recipes)."""

    def __init__(self, sim: SimLane) -> None:
        self.sim, self.live = sim, LiveOps()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sim, name)

    def describe(self, recipe: str) -> tuple[str, int]:
        return self.live.describe(recipe)

    def verdict(self, recipe: str) -> Any:
        return self.live.verdict(recipe)

    def recipe_content(self, recipe: str) -> Any:
        return self.live.recipe_content(recipe)


@pytest.fixture
def lane(tmp_path: Path, recipes: Path, monkeypatch: pytest.MonkeyPatch) -> CardsLane:
    monkeypatch.setenv("COLUMNS", "400")
    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}, "local-v27": {}})
    ops = CardsLane(sim)
    sim.describe = ops.describe  # type: ignore[method-assign]  # the simulated boots report the real fingerprint
    monkeypatch.setenv("GB300LANE_LANE_OPS", f"sim:{sim.path}")
    assert promote("local-v26", force=True, reason="production before the cards", ops=ops).ok
    return ops


def _card(name: str) -> tuple[Any, str]:
    text = (DATA / "mini.yaml").read_text().replace("name: mini\n", f"name: {name}\n")
    return parse_card(text, name), text


def _run(name: str, verdict: str, *, date: str) -> Receipts:
    card, text = _card(name)
    rec = register(card, text, date=date)
    factors = {"A": 1.0, "B": 1.05, "A2": 1.0} if verdict == "PASS" else {"A": 1.0, "B": 0.9, "A2": 1.0}
    run_card(rec, ops=fakes.FakeLane(card, factors).ops())
    assert score(rec).verdict == verdict
    return rec


def _writable(path: Path) -> None:
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


def _hide(attack: str, passed: Receipts, failed: Receipts) -> None:
    _writable(failed.root)
    if attack == "directory deleted":
        shutil.rmtree(failed.root)
    elif attack == "verdict and head manifest deleted":
        failed.verdict_file(1).unlink()
        (failed.root / "manifest-verdict-1.json").unlink()
    elif attack == "registration overwritten":
        failed.registration_file.write_text('{"not": "a registration"}\n')
    elif attack == "written_at moved earlier":
        data = json.loads(failed.verdict_file(1).read_text())
        data["written_at"] = "2000-01-01T00:00:00Z"
        failed.verdict_file(1).write_text(json.dumps(data))
    elif attack == "the pass copied over it":
        for p in [passed.verdict_file(1), *passed.root.glob("manifest*.json")]:
            shutil.copy(p, failed.root / p.relative_to(passed.root))
    else:
        raise AssertionError(attack)


ATTACKS = (
    "directory deleted",
    "verdict and head manifest deleted",
    "registration overwritten",
    "written_at moved earlier",
    "the pass copied over it",
)


@pytest.mark.slow
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_newer_fail_hidden_in_results_is_a_break_and_the_older_pass_does_not_promote(
    lane: CardsLane, attack: str
) -> None:
    passed = _run("mini", "PASS", date="2026-11-01")
    failed = _run("mini-again", "FAIL", date="2026-11-02")
    _hide(attack, passed, failed)
    info = lane.verdict("local-v27")
    assert info is not None and not info.passed
    with pytest.raises(StateError) as refused:
        promote("local-v27", ops=lane)
    said = str(refused.value)
    assert said.startswith("refusing to promote local-v27") and "nothing was stopped" in said, said
    assert str(failed.root) in said, said  # names what is missing
    assert ["stop", "lane-local-v26"] not in lane.sim.operations()
    # the dry run lists the refusal and changes nothing
    planned = promote("local-v27", dry_run=True, ops=lane)
    assert not planned.ok and any(str(failed.root) in r for r in planned.refusals), planned.refusals
    # verify names the same break
    checked = runner.invoke(app, ["verify", "--evidence"])
    assert checked.exit_code == 1 and str(failed.root) in checked.output, checked.output


def test_the_newest_verdict_is_the_logs_newest_not_the_newest_written_at(lane: CardsLane) -> None:
    _run("mini", "PASS", date="2026-11-01")
    failed = _run("mini-again", "FAIL", date="2026-11-02")
    info = lane.verdict("local-v27")
    assert info is not None and info.verdict == "FAIL" and info.card == "mini-again" and not info.evidence
    assert info.receipts == str(failed.root.resolve())


@pytest.mark.slow
def test_a_verdict_the_log_never_saw_is_a_break_until_adopted(lane: CardsLane, tmp_path: Path) -> None:
    passed = _run("mini", "PASS", date="2026-11-01")
    assert lane.verdict("local-v27").passed
    copy = passed.root.parent / "2026-11-03-mini"
    shutil.copytree(passed.root, copy)
    info = lane.verdict("local-v27")
    assert not info.passed and any(str(copy) in e and "never entered" in e for e in info.evidence), info.evidence
    # a copy whose chain holds can be adopted (the reason is kept), and is then a run like any other
    adopted = runner.invoke(app, ["evidence", "adopt", str(copy), "--reason", "restored from the lab's backup"])
    assert adopted.exit_code == 0, adopted.output
    assert lane.verdict("local-v27").passed
    shown = runner.invoke(app, ["evidence", "show", "--card", "mini"])
    assert "adopted: restored from the lab's backup" in shown.output and shown.exit_code == 0


def _edit_recipe(recipes: Path, extra: str) -> None:
    path = recipes / "local-v27.yaml"
    path.write_text(path.read_text() + extra)


EDIT = '  num_speculative_tokens: 3\nenv:\n  GB300LANE_EXTRA: "1"\n'


def test_a_recipe_edited_after_its_pass_is_refused_naming_the_keys_and_the_card(lane: CardsLane, recipes: Path) -> None:
    _run("mini", "PASS", date="2026-11-01")
    before = lane.sim.operations()
    _edit_recipe(recipes, EDIT)
    with pytest.raises(StateError) as refused:
        promote("local-v27", ops=lane)
    said = str(refused.value)
    assert "local-v27 differs from the candidate card mini measured (2 keys" in said, said
    assert 'env.GB300LANE_EXTRA: absent -> "1"' in said and "speculative.num_speculative_tokens: 5 -> 3" in said
    assert "gb300lane card register mini --fresh" in said
    assert lane.sim.operations() == before  # production was never stopped
    # and a forced promotion records the recipe as it is (the card's PASS is not its evidence)
    done = promote("local-v27", force=True, reason="measured by hand", ops=lane)
    assert done.ok


def test_verify_production_breaks_where_a_promoted_recipe_is_edited(lane: CardsLane, recipes: Path) -> None:
    _run("mini", "PASS", date="2026-11-01")
    assert promote("local-v27", ops=lane).ok
    ok = runner.invoke(app, ["verify", "--production"])
    assert ok.exit_code == 0 and "chain intact" in ok.output, ok.output
    assert "production is the candidate its card measured, key for key" in ok.output
    path = recipes / "local-v27.yaml"  # a key that is not a hash input: the fingerprint stays
    path.write_text(path.read_text().replace("rejection_sample_method: block", "rejection_sample_method: standard"))
    broken = runner.invoke(app, ["verify", "--production"])
    assert broken.exit_code == 1 and "chain intact" not in broken.output, broken.output
    assert "speculative.rejection_sample_method: 'block' -> 'standard'" in broken.output


def test_the_log_names_every_break_an_edit_in_the_state_directory_makes(lane: CardsLane) -> None:
    from gb300lane import evidencelog

    _run("mini", "PASS", date="2026-11-01")
    path = evidencelog.log_path()
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # the verdict's entry cut from the end
    info = lane.verdict("local-v27")
    assert not info.passed and any("entries were removed from the end" in e for e in info.evidence)
    with pytest.raises(StateError, match="entries were removed from the end"):
        promote("local-v27", ops=lane)
    card, text = _card("mini")
    with pytest.raises(StateError, match="refusing to register card mini"):
        register(card, text, fresh=True)  # nothing is entered on top of a log cut short
