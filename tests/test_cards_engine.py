"""A real card run: three arms booted dark on the embedded engine through the lane, scored and reported."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gb300lane.cards import load_card, register, render_report, run_card, score
from gb300lane.cards.run import LiveArmOps

DATA = Path(__file__).parent / "data" / "cards"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_micro_card_on_the_embedded_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    card, path = load_card(DATA / "micro.yaml")
    rec = register(card, path.read_text())
    ops = LiveArmOps(port=_free_port())
    try:
        lines = run_card(rec, ops=ops)
    finally:
        from gb300lane import lane

        for arm in card.arms:
            try:
                lane.remove_instance(f"local-{arm.name}")
            except Exception:  # noqa: BLE001 - cleanup of what the test created
                pass
    assert lines == ["A: finished (attempt 1)", "B: finished (attempt 1)", "A2: finished (attempt 1)"]
    boot = json.loads((rec.attempt_dir("B", 1) / "boot.json").read_text())
    assert boot["dark"] is True and boot["arm"] == "B"
    window = json.loads((rec.attempt_dir("B", 1) / "windows" / "primary.json").read_text())
    assert {c["clock"] for c in window["cells"]} == {"modelled"}
    v = score(rec)
    res = {r.id: r.status for r in v.results}
    assert res == {"tokens-per-step": "PASS", "hash-hit": "PASS", "flag-on-b-only": "PASS", "env-equal": "PASS",
                   "kv-pool": "PASS", "foreign-clients": "PASS"}, [r.model_dump() for r in v.results]
    md = render_report(rec)
    assert (md.parent / "fig4-accepted-at-position.png").is_file()
    assert rec.verify_manifest("manifest-report-1.json") == []
