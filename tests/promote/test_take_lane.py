"""`card run --take-lane` on a box that serves production: the bracket takes the lane and gives it back.

With local-v26 in production (process runtime, embedded engine, time scale 0,
free ports), `card register` + `card run CARD --take-lane` stops production
(kept), runs A -> B -> A2 dark on the production port, and restarts
production: afterwards `status --json` shows local-v26 serving production on
its port, and `history` records the take. Ctrl-C (SIGINT) during arm B stops
the arm and restores production too. A process killed mid-bracket leaves the
transition open: `status` explains it and `rollback` restores production.
After the card's PASS, `promote local-v27 --from-card CARD` starts the B arm
the card kept as production (no fresh boot), and `rollback` gives local-v26 back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.cards import find_receipts
from gb300lane.lane import records as instances
from gb300lane.testing.crash import CRASH_ENV

from interrupt import interruptible
from production import in_production

pytestmark = pytest.mark.slow

CARD = """\
schema_version: 1
name: {name}
title: "a small bracket beside production: local-v26 -> local-v27"
arms:
  - {{name: A, recipe: local-v26, role: control}}
  - {{name: B, recipe: local-v27, role: candidate}}
  - {{name: A2, recipe: local-v26, role: control}}
windows:
  - {{name: primary, classes: [prose], transcripts_per_class: {transcripts}, rounds: 1, concurrency: [1],
     temperature: 1.0, top_p: 1.0, seed_base: 1000, forced_tokens: {tokens}}}
primary_window: primary
gates:
  - {{id: tokens-per-step, kind: tokens_per_step_ratio, window: primary, min_ratio: 0.5}}
  - {{id: flag-on-b-only, kind: flag_on_candidate_only, key: speculative.rejection_sample_method, value: block}}
"""


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "400"},
    )


@pytest.fixture
def production(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """local-v26 promoted to production on a free port (the recipes' own port); yields the port."""
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "small.yaml").write_text(CARD.format(name="small", transcripts=2, tokens=16))
    (cards / "long.yaml").write_text(CARD.format(name="long", transcripts=40, tokens=1024))  # B outlasts a status call
    monkeypatch.setenv("GB300LANE_CARDS_DIR", str(cards))
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    with in_production(tmp_path / "recipes", monkeypatch, ["local-v26"], reason="production before the card") as port:
        yield port


def _production_serves(port: int) -> dict:
    st = _cli("status", "--json")
    assert st.returncode == 0, st.stderr
    view = json.loads(st.stdout)
    prod = view["production"]
    assert prod["recipe"] == "local-v26" and prod["port"] == port and prod["in_flight"] is None, prod
    row = next(r for r in view["instances"] if r["info"]["name"] == prod["instance"])
    assert row["role"] == "production" and row["info"]["state"] == "running" and row["health"] == "healthy", row
    assert row["info"]["endpoint"] == f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
        assert json.loads(r.read())["data"][0]["id"] == "deepseek-v4.1-flash"
    # Nothing else holds the production port: the arms were stopped and kept.
    others = [
        r["info"]["name"]
        for r in view["instances"]
        if r["info"]["state"] == "running" and r["info"]["name"] != prod["instance"]
    ]
    assert others == [], others
    return view


def test_card_run_take_lane_end_to_end_gives_production_back(production: int) -> None:
    port = production
    assert _cli("card", "register", "small").returncode == 0
    ran = _cli("card", "run", "small", "--take-lane")
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    out = " ".join(ran.stdout.split())
    assert "took the lane: production local-v26" in out
    assert "A: finished (attempt 1)" in out and "B: finished (attempt 1)" in out and "A2: finished (attempt 1)" in out
    assert "production local-v26" in out and "restored on http://127.0.0.1:" in out
    view = _production_serves(port)
    # The arms ran on the production port, each its own instance, stopped and kept.
    arms = {r["info"]["name"]: r["info"]["state"] for r in view["instances"] if r["role"] == "candidate"}
    assert arms == {"local-v26-A": "stopped", "local-v27-B": "stopped", "local-v26-A2": "stopped"}, arms
    [take] = [e for e in pm.history() if e.kind == "take_lane"]
    assert take.recipe == "local-v26" and "card small" in (take.reason or "") and take.restore_seconds is not None
    hist = _cli("history")
    assert "take_lane" in hist.stdout and "card small" in hist.stdout
    scored = _cli("card", "score", "small")
    assert scored.returncode == 0, scored.stdout + scored.stderr
    again = _cli("card", "register", "small")  # the receipts are found scored, with what to do next
    text = " ".join(again.stdout.split())
    assert again.returncode == 0 and "scored (verdict 1 PASS)" in text and "card rescore" in text and "--fresh" in text


def test_after_a_pass_the_kept_candidate_is_promoted_without_a_fresh_boot(production: int) -> None:
    port = production
    assert _cli("card", "register", "small").returncode == 0
    ran = _cli("card", "run", "small", "--take-lane")
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "`gb300lane promote local-v27 --from-card small` starts the kept B arm" in " ".join(ran.stdout.split())
    early = _cli("promote", "local-v27", "--from-card", "small")  # before the verdict
    assert early.returncode == 1 and "the card has no verdict yet" in " ".join(early.stderr.split()), early.stderr
    assert _cli("card", "score", "small").returncode == 0
    rec = find_receipts("small")
    measured = rec.read_json(rec.attempt_dir("B", 1) / "boot.json")
    done = _cli("promote", "local-v27", "--from-card", "small")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "started local-v27-B, the candidate card small kept (no fresh boot)" in " ".join(done.stdout.split())
    view = json.loads(_cli("status", "--json").stdout)
    prod = view["production"]
    assert prod["recipe"] == "local-v27" and prod["instance"] == "local-v27-B" and prod["port"] == port, prod
    assert prod["rollback_pair"]["recipe"] == "local-v26"
    row = next(r for r in view["instances"] if r["info"]["name"] == "local-v27-B")
    assert row["role"] == "production" and row["info"]["state"] == "running" and row["health"] == "healthy", row
    # The very instance the card measured: the same boot (run), started again, not booted afresh.
    kept = instances.load("local-v27-B")
    assert kept is not None and kept.run == measured["run"] and kept.fingerprint == measured["fingerprint"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
        assert json.loads(r.read())["data"][0]["id"] == "deepseek-v4.1-flash"
    back = _cli("rollback")
    assert back.returncode == 0, back.stdout + back.stderr
    _production_serves(port)


def test_ctrl_c_during_arm_b_leaves_production_serving(production: int, tmp_path: Path) -> None:
    port = production
    assert _cli("card", "register", "long").returncode == 0
    results = Path(os.environ["GB300LANE_RESULTS_DIR"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "gb300lane", "card", "run", "long", "--take-lane"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
        preexec_fn=interruptible,
    )
    try:
        deadline = time.monotonic() + 240

        def wait_for(arm: str) -> None:
            while not list(results.glob(f"*-long/arms/{arm}/attempt-1/boot.json")):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, f"arm {arm} never booted"
                time.sleep(0.05)

        wait_for("A")
        # While the bracket runs, status shows the card holding the lane (asked during arm A, so that the
        # interrupt below follows B's boot at once). In process: a second interpreter's start-up is slow when loaded.
        from typer.testing import CliRunner

        from gb300lane.cli.main import app

        st = json.loads(CliRunner().invoke(app, ["status", "--json"]).stdout)
        flight = st["production"]["in_flight"]
        assert (
            flight["kind"] == "take_lane"
            and not flight["crashed"]
            and "card long holds the lane" in flight["explanation"]
        )
        wait_for("B")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "production local-v26" in out + err and "restored" in out + err, out[-2000:] + err[-2000:]
    [b_done] = [p for p in results.glob("*-long/arms/B/done.json")] or [None]
    assert b_done is None  # interrupted during B: the arm did not finish
    _production_serves(port)
    assert [e.kind for e in pm.history()][-1] == "take_lane"


def test_a_killed_bracket_is_explained_and_rollback_restores_production(production: int) -> None:
    port = production
    assert _cli("card", "register", "small").returncode == 0
    # Killed (as kill -9) after the arms ran, with production's restart journalled and not yet done.
    died = subprocess.run(
        [sys.executable, "-m", "gb300lane", "card", "run", "small", "--take-lane"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, CRASH_ENV: "take_lane.restore_production"},
    )
    assert died.returncode != 0, died.stdout[-1000:]
    assert not any(i.state == "running" for i in lane.list_instances())  # nothing serves production now
    st = _cli("status")
    assert "card small took the lane from production local-v26 and was interrupted" in " ".join(st.stdout.split())
    assert "gb300lane rollback" in st.stdout
    fixed = _cli("rollback")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "restored" in fixed.stdout
    _production_serves(port)
