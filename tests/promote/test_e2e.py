"""Promotion on a real lane: the embedded engine on the process runtime, and (marked) on Docker.

The story the write-up tells, on copies of local-v26 / local-v27 with free
ports and time scale 0: a card with local-v27 as its B arm scores FAIL, so
promotion is refused; the card is re-scored PASS; local-v27 is promoted over
local-v26 (kept as the rollback pair); `rollback` restores it. A candidate
that fails smoke gives production back by itself; a CLI killed mid-promotion
is explained by `gb300lane status` and repaired by one command. After every
step at most one instance serves the production port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.errors import StateError
from gb300lane.lane.facts import listeners
from gb300lane.promote import view
from gb300lane.testing.crash import CRASH_ENV
from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair

pytestmark = pytest.mark.slow

CARD = """\
schema_version: 1
name: tiny-br1
title: "BR1 in miniature: local-v26 -> local-v27"
description: "one small window; the tokens-per-step bar is set too high, then re-scored"
arms:
  - {name: A, recipe: local-v26, role: control}
  - {name: B, recipe: local-v27, role: candidate}
  - {name: A2, recipe: local-v26, role: control}
windows:
  - {name: primary, classes: [prose], transcripts_per_class: 1, rounds: 1, concurrency: [1],
     temperature: 1.0, top_p: 1.0, seed_base: 1000, forced_tokens: 16}
primary_window: primary
gates:
  - {id: tokens-per-step, description: "B over the controls", kind: tokens_per_step_ratio,
     window: primary, scope: aggregate, min_ratio: 10.0}
  - {id: flag-on-b-only, description: "the key reached B only", kind: flag_on_candidate_only,
     key: speculative.rejection_sample_method, value: block}
"""


def _write_recipes(dest: Path, runtime: str) -> int:
    base = quick_local_v26(runtime=runtime, name="pt{port}")
    port = int(base["lane"]["port"])
    write_quick_pair(dest, base)
    bad = {
        "schema_version": 1, "name": "local-v27-bad", "extends": "local-v27",
        "description": "local-v27 with a smoke bound no lane meets",
        "smoke": {"gates": [{"name": "bounds-impossible", "kind": "bounds",
                             "tokens_per_step": {"min": 50.0, "max": 60.0},
                             "window": base["smoke"]["gates"][1]["window"]}]},
    }  # fmt: skip
    (dest / "local-v27-bad.yaml").write_text(yaml.safe_dump(bad, sort_keys=False))
    return port


def _lane_on(runtime: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    recipes, results, cards = tmp_path / "recipes", tmp_path / "results", tmp_path / "cards"
    for d in (recipes, results, cards):
        d.mkdir()
    port = _write_recipes(recipes, runtime)
    (cards / "tiny-br1.yaml").write_text(CARD)
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(recipes))
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(results))
    monkeypatch.setenv("GB300LANE_CARDS_DIR", str(cards))
    monkeypatch.delenv("GB300LANE_LANE_OPS", raising=False)
    monkeypatch.delenv(CRASH_ENV, raising=False)
    try:
        yield port
    finally:
        ours = [i.name for i in lane.list_instances() if i.name.startswith(f"pt{port}-")]
        for name in ours:
            lane.remove_instance(name)


@pytest.fixture
def real_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A lane on the process runtime; its instances are removed afterwards."""
    yield from _lane_on("process", tmp_path, monkeypatch)


@pytest.fixture
def docker_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The same lane on the Docker runtime (image gb300lane-engine:local)."""
    yield from _lane_on("docker", tmp_path, monkeypatch)


def _serving(port: int) -> list[str]:
    """Lane instances holding the port; asserts no second one and no second listener."""
    held = [
        i.name
        for i in lane.list_instances()
        if i.state in ("running", "partial") and i.endpoint and i.endpoint.endswith(f":{port}")
    ]
    assert len(held) <= 1, f"two instances on the production port: {held}"
    assert len({(x.address, x.port) for x in listeners(port) or []}) <= 2  # v4 and v6 of one server at most
    return held


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "400", **(env or {})},
    )


def _card_fail_then_rescored_pass() -> None:
    assert _cli("card", "register", "tiny-br1").returncode == 0
    ran = _cli("card", "run", "tiny-br1")
    assert ran.returncode == 0, ran.stderr[-2000:]
    scored = _cli("card", "score", "tiny-br1")
    assert "FAIL" in scored.stdout, scored.stdout + scored.stderr


def test_promote_after_a_pass_card_then_rollback(real_lane: int) -> None:
    port = real_lane
    _card_fail_then_rescored_pass()
    with pytest.raises(StateError, match=r"local-v27: its newest verdict is FAIL \(card tiny-br1 verdict 1"):
        pm.promote("local-v27")
    rescored = _cli(
        "card", "rescore", "tiny-br1", "--reason", "the bar was mistyped", "--set", "tokens-per-step.min_ratio=0.5"
    )
    assert rescored.returncode == 0, rescored.stderr[-2000:]

    first = pm.promote("local-v26", force=True, reason="production before block verification")
    assert first.ok, first.message
    assert _serving(port) == [f"pt{port}-local-v26"]

    report = pm.promote("local-v27")
    assert report.ok, report.message
    assert _serving(port) == [f"pt{port}-local-v27"]
    state = pm.current_production()
    assert state.recipe == "local-v27" and state.rollback_pair.recipe == "local-v26"
    states = {i.name: i.state for i in lane.list_instances()}
    assert states[f"pt{port}-local-v26"] == "stopped"  # kept, not removed
    # `down` leaves the ledger's instances alone: naming one is refused, --all passes them over.
    protected = view.protected_instances()
    with pytest.raises(StateError, match=r"it is the lane's rollback pair in the promotion ledger"):
        lane.down(f"pt{port}-local-v26", protected=protected)
    lane.down(all=True, protected=protected)
    assert {i.name for i in lane.list_instances()} >= {f"pt{port}-local-v26", f"pt{port}-local-v27"}
    assert _serving(port) == [f"pt{port}-local-v27"]
    event = pm.history()[-1]
    assert event.kind == "promote" and not event.forced
    assert event.verdict.startswith("card tiny-br1 verdict 2: PASS")

    back = _cli("rollback")
    assert back.returncode == 0, back.stderr
    assert "rolled back to local-v26" in back.stdout and "tool:" in back.stdout
    assert _serving(port) == [f"pt{port}-local-v26"]
    last = pm.history()[-1]
    assert last.kind == "rollback" and last.restore_seconds > 0 and 0 <= last.tool_seconds <= last.restore_seconds


def test_a_candidate_failing_smoke_gives_production_back(real_lane: int) -> None:
    port = real_lane
    assert pm.promote("local-v26", force=True, reason="first production").ok
    report = pm.promote("local-v27-bad", force=True, reason="trying a candidate whose smoke cannot pass")
    assert not report.ok
    assert "local-v27-bad failed smoke" in report.message and "restored local-v26" in report.message
    assert _serving(port) == [f"pt{port}-local-v26"]
    states = {i.name: i.state for i in lane.list_instances()}
    assert states[f"pt{port}-local-v27-bad"] in ("stopped", "failed")  # kept for inspection
    assert pm.current_production().recipe == "local-v26"
    assert pm.history()[-1].kind == "promote_failed"


@pytest.mark.parametrize(("point", "repair"), [
    ("promote.boot_candidate:after", ("rollback",)),
    ("promote.stop_production:after", ("promote", "local-v27", "--resume")),
])  # fmt: skip
def test_a_killed_promotion_is_explained_by_status_and_repaired(
    real_lane: int, point: str, repair: tuple[str, ...]
) -> None:
    port = real_lane
    assert pm.promote("local-v26", force=True, reason="first production").ok
    killed = _cli("promote", "local-v27", "--force", "--reason", "crash test", env={CRASH_ENV: point})
    assert killed.returncode == 137
    _serving(port)
    status = _cli("status", "--json")
    assert status.returncode == 0, status.stderr
    flight = json.loads(status.stdout)["production"]["in_flight"]
    assert flight["crashed"] and flight["explanation"].startswith("promotion of local-v27 interrupted")
    assert "gb300lane rollback" in flight["explanation"]
    fixed = _cli(*repair)
    assert fixed.returncode == 0, fixed.stderr
    want = "local-v26" if repair == ("rollback",) else "local-v27"
    assert _serving(port) == [pm.current_production().instance]
    assert pm.current_production().recipe == want and pm.current_production().in_flight is None


def test_a_second_promotion_while_one_runs_is_refused(real_lane: int) -> None:
    assert pm.promote("local-v26", force=True, reason="first production").ok
    with pm.TransitionLock("promote local-v27"):
        refused = _cli("promote", "local-v27", "--force", "--reason", "racing")
    assert refused.returncode == 1 and "locked by pid" in refused.stderr
    assert pm.current_production().recipe == "local-v26"


@pytest.mark.docker
def test_the_whole_story_on_docker(docker_lane: int) -> None:
    """Every promotion path on Docker, in one lane so each container boots once or twice, not per test."""
    port = docker_lane
    _card_fail_then_rescored_pass()
    with pytest.raises(StateError, match=r"its newest verdict is FAIL \(card tiny-br1 verdict 1"):
        pm.promote("local-v27")
    assert (
        _cli(
            "card", "rescore", "tiny-br1", "--reason", "the bar was mistyped", "--set", "tokens-per-step.min_ratio=0.5"
        ).returncode
        == 0
    )
    assert pm.promote("local-v26", force=True, reason="production before block verification").ok
    assert _serving(port) == [f"pt{port}-local-v26"]

    with pm.TransitionLock("promote local-v27"):
        refused = _cli("promote", "local-v27")
    assert refused.returncode == 1 and "locked by pid" in refused.stderr

    promoted = _cli("promote", "local-v27")
    assert promoted.returncode == 0, promoted.stderr
    assert _serving(port) == [f"pt{port}-local-v27"]
    assert pm.history()[-1].verdict.startswith("card tiny-br1 verdict 2: PASS")

    bad = pm.promote("local-v27-bad", force=True, reason="a candidate whose smoke cannot pass")
    assert not bad.ok and "restored local-v27" in bad.message
    assert _serving(port) == [f"pt{port}-local-v27"]

    killed = _cli("rollback", env={CRASH_ENV: "rollback.start_pair:after"})
    assert killed.returncode == 137
    _serving(port)
    flight = json.loads(_cli("status", "--json").stdout)["production"]["in_flight"]
    assert flight["explanation"].startswith("rollback to local-v26 interrupted")
    fixed = _cli("rollback")
    assert fixed.returncode == 0 and "rolled back to local-v26" in fixed.stdout, fixed.stderr
    assert _serving(port) == [f"pt{port}-local-v26"]
    states = {i.name: i.state for i in lane.list_instances()}
    assert states[f"pt{port}-local-v27"] == "stopped"  # the pair is kept for the next rollback
