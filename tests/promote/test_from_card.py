"""`promote RECIPE --from-card CARD`: the candidate a card's run kept on the lane becomes production, not a fresh boot.

On a simulated lane (in-process CLI): local-v26 is production; the card's run
(as `card run --take-lane` leaves it) kept its B arm `lane-B` of local-v27,
stopped, on the production port. With the card's PASS, the promotion starts
`lane-B` (no boot), smoke-tests it, keeps local-v26 as the rollback pair and
records where it came from. Every reason not to (no verdict yet, FAIL, another
card's newest verdict, the instance gone, another recipe, port or fingerprint)
is one line naming the card, what is wrong and the fix, and changes nothing. A
crash at any step is repaired like any promotion's. The live lane's end to end
run is in tests/promote/test_take_lane.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gb300lane import promote as pm
from gb300lane.cli.main import app
from gb300lane.errors import StateError
from gb300lane.testing.simlane import SimLane

PORT = 30106
runner = CliRunner()


class Killed(BaseException):
    """Raised by the crash hook; a BaseException so no handler in the library catches it."""


@pytest.fixture
def lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimLane:
    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}, "local-v27": {}})
    monkeypatch.setenv("GB300LANE_LANE_OPS", f"sim:{sim.path}")
    monkeypatch.setenv("COLUMNS", "400")
    assert pm.promote("local-v26", force=True, reason="production before the card", ops=sim).ok
    # What `card run small --take-lane` leaves: production stopped, B booted and measured on its port, B stopped
    # (kept), production started again.
    sim.stop_keep("lane-local-v26")
    sim.boot("local-v27", port=PORT, tag="B")
    sim.stop_keep("lane-B")
    sim.start_kept("lane-local-v26")
    receipts = str(tmp_path / "results" / "small-1")
    fingerprint, _ = sim.describe("local-v27")
    sim.set_card(
        "small",
        receipts=receipts,
        arm="B",
        recipe="local-v27",
        verdict="PASS",
        instance="lane-B",
        port=PORT,
        fingerprint=fingerprint,
    )
    sim.set_verdict("local-v27", "PASS", "card small verdict 1: PASS", receipts=receipts)
    return sim


def _run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _text(result: Any) -> str:
    return " ".join(result.output.split())


def test_the_kept_candidate_becomes_production_without_a_boot(lane: SimLane) -> None:
    before = len(lane.operations())
    plan = _run("promote", "local-v27", "--from-card", "small", "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert "start lane-B, the candidate card small kept, on port 30106 (no fresh boot)" in _text(plan)
    assert len(lane.operations()) == before  # a dry run touches nothing
    done = _run("promote", "local-v27", "--from-card", "small", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["ok"] and report["production"] == "local-v27" and report["rollback_pair"] == "local-v26"
    assert "started lane-B, the candidate card small kept (no fresh boot)" in report["message"]
    ops = lane.operations()[before:]
    assert ops == [["stop", "lane-local-v26"], ["start", "lane-B"], ["smoke", "local-v27"]]
    state = pm.current_production()
    assert state.recipe == "local-v27" and state.instance == "lane-B" and state.in_flight is None
    assert state.rollback_pair is not None and state.rollback_pair.instance == "lane-local-v26"
    assert lane.running_on(PORT) == ["lane-B"]
    line = _run("history").output.strip().splitlines()[-1]
    assert (
        "promote local-v26 -> local-v27: card small verdict 1: PASS; started lane-B, the candidate card small kept"
        in line
    )
    # It is production like any other: rollback restores the pair.
    back = _run("rollback")
    assert back.exit_code == 0 and "rolled back to local-v26" in back.output
    assert lane.running_on(PORT) == ["lane-local-v26"]


def _card(lane: SimLane, **changes: Any) -> None:
    fingerprint, _ = lane.describe("local-v27")
    fields = {
        "receipts": "/r/small-1",
        "arm": "B",
        "recipe": "local-v27",
        "verdict": "PASS",
        "instance": "lane-B",
        "port": PORT,
        "fingerprint": fingerprint,
    }
    lane.set_card("small", **{**fields, **changes})
    lane.set_verdict("local-v27", "PASS", "card small verdict 1: PASS", receipts="/r/small-1")


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unscored", "the card has no verdict yet (/r/small-1); run `gb300lane card score small`"),
        ("fail", "its verdict is FAIL (/r/small-1), and promoting its kept candidate needs a PASS; a further run "
                 "of the card's question spends its next share of alpha where the card registered more runs "
                 "(design.runs): `gb300lane card register small --fresh`, `gb300lane card run small --take-lane`, "
                 "then `gb300lane card score small`"),
        ("another card", "the card's PASS (/r/small-1) is not local-v27's newest verdict (card big verdict 2: FAIL); "
                         "promotion rests on the newest"),
        ("gone", "its kept candidate lane-B is no longer on the lane (removed since)"),
        ("never finished", "its arm B has no finished boot in /r/small-1; run `gb300lane card run small --take-lane`"),
        ("other port", "its kept candidate lane-B serves on port 31000 and production on 30106 (the card ran beside "
                       "production, not with --take-lane)"),
        ("recipe changed", "was booted with fingerprint 0123456789abcdef, and local-v27's is now"),
        ("other recipe", "its candidate arm B runs local-v26, not local-v27; run `gb300lane promote local-v26 "
                         "--from-card small`"),
    ],
)  # fmt: skip
def test_a_refusal_names_the_card_what_is_wrong_and_the_fix(lane: SimLane, case: str, expected: str) -> None:
    _card(lane)
    if case == "unscored":
        _card(lane, verdict=None)
    elif case == "fail":
        _card(lane, verdict="FAIL")
    elif case == "another card":
        lane.set_verdict("local-v27", "FAIL", "card big verdict 2: FAIL", receipts="/r/big-1")
    elif case == "gone":
        lane.remove("lane-B")
    elif case == "never finished":
        _card(lane, instance=None, port=None, fingerprint=None)
    elif case == "other port":
        _card(lane, port=31000)
    elif case == "recipe changed":
        _card(lane, fingerprint="0123456789abcdef")
    elif case == "other recipe":
        _card(lane, recipe="local-v26")
    before = lane.operations()
    result = _run("promote", "local-v27", "--from-card", "small")
    assert result.exit_code == 1, result.output
    text = _text(result)
    assert text.startswith("error: refusing to promote local-v27 from card small: "), text
    assert expected in text, text
    assert lane.operations() == before
    state = pm.current_production()
    assert state.recipe == "local-v26" and state.in_flight is None


@pytest.mark.parametrize("extra", [["--force", "--reason", "x"], ["--resume"], ["--fleet"]], ids=" ".join)
def test_from_card_goes_with_neither_force_resume_nor_a_fleet(lane: SimLane, extra: list[str]) -> None:
    result = _run("promote", "local-v27", "--from-card", "small", *extra)
    assert result.exit_code == 2 and "--from-card" in result.output


def test_from_card_with_force_is_refused_by_the_library_too() -> None:
    with pytest.raises(StateError, match="--from-card promotes on card small's own PASS"):
        pm.promote("local-v27", force=True, reason="x", from_card="small")


def test_a_card_without_receipts_is_one_line(lane: SimLane) -> None:
    result = _run("promote", "local-v27", "--from-card", "nosuch")
    assert result.exit_code == 1 and _text(result).startswith("error: card nosuch: no registered receipts")


@pytest.mark.parametrize("recovery", ["rollback", "resume"])
@pytest.mark.parametrize("point", pm.crash_points()["promote_from_card"])
def test_a_crash_is_repaired_like_any_promotion(lane: SimLane, point: str, recovery: str) -> None:
    def hook(name: str) -> None:
        if name == point:
            raise Killed(name)

    before = len(lane.operations())
    with pytest.raises(Killed):
        pm.promote("local-v27", from_card="small", ops=lane, crash_hook=hook)
    assert len(lane.running_on(PORT)) <= 1
    flight = pm.current_production().in_flight
    assert flight is not None and flight.crashed and flight.recipe == "local-v27"
    if recovery == "resume":
        report = pm.promote("local-v27", resume=True, ops=lane)
        assert report.ok, report.message
        expected, instance = "local-v27", "lane-B"
    else:
        report = pm.rollback(ops=lane)
        assert report.ok, report.message
        expected, instance = "local-v26", "lane-local-v26"
    state = pm.current_production()
    assert state.in_flight is None and state.recipe == expected and state.instance == instance
    assert lane.running_on(PORT) == [instance]
    assert not any(op == "boot" for op, _ in lane.operations()[before:])  # lane-B was started, never booted again
