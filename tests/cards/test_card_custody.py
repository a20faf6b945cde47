"""Chain of custody: a receipt, a verdict or a manifest edited by hand is found, named, and never counts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.cards import load_card, register, render_report, rescore, run_card, score
from gb300lane.cards.record.card_custody import require_intact, verify_receipts
from gb300lane.cli.main import app
from gb300lane.errors import CardError, StateError
from gb300lane.promote import promote
from gb300lane.promote.live import LiveOps

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"

runner = CliRunner()


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("COLUMNS", "400")
    return tmp_path / "results"


def _scored():
    """mini: the controls' rounds wobble past the fixed agree bar, so verdict 1 is FAIL."""
    card, p = load_card(DATA / "mini.yaml")
    rec = register(card, p.read_text())
    lane = fakes.FakeLane(
        card, {"A": 1.0, "B": 1.03, "A2": 1.025}, jitter={"A": {1: 0.0, 2: 0.03}, "A2": {1: 0.03, 2: 0.0}}
    )
    run_card(rec, ops=lane.ops())
    assert score(rec).verdict == "FAIL"
    return card, rec


def _edit(path: Path, old: str, new: str) -> None:
    os.chmod(path, 0o644)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_an_intact_chain_verifies_link_by_link() -> None:
    _, rec = _scored()
    chain = verify_receipts(rec)
    assert chain.ok, chain.to_text()
    kinds = {link.kind for link in chain.links if link.status == "ok"}
    assert {"registration", "manifest", "file", "boot", "verdict"} <= kinds
    manifest = json.loads((rec.root / "manifest-verdict-1.json").read_text())
    assert manifest["seal"]["ssh_signature"].startswith("-----BEGIN SSH SIGNATURE-----") and manifest["seal"]["key"]


@pytest.mark.slow
def test_a_verdict_edited_from_fail_to_pass_cannot_promote_and_verify_names_it() -> None:
    card, rec = _scored()
    verdict = rec.verdict_file(1)
    _edit(verdict, '"verdict": "FAIL"', '"verdict": "PASS"')
    info = LiveOps().verdict(card.candidate.recipe)
    # the evidence log entered it as a FAIL: that is the verdict promotion reads, and the edit is a break
    assert info is not None and info.verdict == "FAIL" and not info.passed
    assert str(verdict) in (info.custody or "")
    assert any(str(verdict) in e and "is not the" in e for e in info.evidence)
    with pytest.raises(StateError) as refused:
        promote(card.candidate.recipe, ops=LiveOps())
    assert str(verdict) in str(refused.value) and "does not verify" in str(refused.value)
    # the same through the CLI, on the live lane (refused before anything boots)
    cli = runner.invoke(app, ["promote", card.candidate.recipe])
    assert cli.exit_code == 1 and "verdicts/verdict-1.json" in cli.output and "does not verify" in cli.output
    checked = runner.invoke(app, ["verify", "--card", str(rec.root)])
    assert checked.exit_code == 1
    assert "BROKEN" in checked.output and "chain breaks at verdicts/verdict-1.json" in checked.output
    as_json = json.loads(runner.invoke(app, ["verify", "--card", str(rec.root), "--json"]).stdout)
    assert as_json[0]["ok"] is False and as_json[0]["breaks_at"]["file"] == "verdicts/verdict-1.json"
    # a re-score would hash the tampered file into a new manifest: it refuses instead, naming it
    with pytest.raises(CardError, match="verdict-1.json"):
        rescore(rec, "r", ["controls-agree.bar={mode: spread, source: rounds, value: 0.02}"])
    with pytest.raises(CardError, match="verdict-1.json"):
        render_report(rec)


def test_a_consistent_rewrite_of_verdict_and_manifest_without_the_key_still_breaks() -> None:
    card, rec = _scored()
    verdict, manifest = rec.verdict_file(1), rec.root / "manifest-verdict-1.json"
    _edit(verdict, '"verdict": "FAIL"', '"verdict": "PASS"')
    from gb300lane.fsio import sha256_file

    body = json.loads(manifest.read_text())
    body["files"]["verdicts/verdict-1.json"] = sha256_file(verdict)
    os.chmod(manifest, 0o644)
    manifest.write_text(json.dumps(body))
    broken = verify_receipts(rec).first_break
    assert (
        broken is not None and broken.file == "manifest-verdict-1.json" and "signature does not match" in broken.detail
    )
    # and one who holds the key and reseals: the verdict no longer follows from its receipts
    from gb300lane.cards.record.receipts import MANIFEST_SEAL
    from gb300lane.keyed import seal

    body.pop("seal")
    body["seal"] = seal(MANIFEST_SEAL, body)
    manifest.write_text(json.dumps(body))
    broken = verify_receipts(rec).first_break
    assert broken is not None and broken.file == "verdicts/verdict-1.json"
    assert "says PASS, its receipts score FAIL" in broken.detail


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("arms/B/attempt-1/windows/primary.json", "edited after it was sealed"),
        ("arms/B/attempt-1/foreign.json", "edited after it was sealed"),
        ("card.yaml", "not the registered"),
    ],
)
def test_an_edited_receipt_is_refused_by_score_and_named(target: str, message: str) -> None:
    card, p = load_card(DATA / "mini.yaml")
    rec = register(card, p.read_text())
    run_card(rec, ops=fakes.FakeLane(card, {"B": 1.03}).ops())
    path = rec.root / target
    os.chmod(path, 0o644)
    path.write_text(path.read_text().replace("1", "2", 1) + " ")
    with pytest.raises(CardError) as info:
        score(rec)
    assert str(path) in str(info.value) and message in str(info.value)


def test_a_file_added_outside_the_chain_is_not_sealed() -> None:
    _, rec = _scored()
    (rec.root / "verdicts" / "verdict-2.json").write_text(rec.verdict_file(1).read_text())
    with pytest.raises(CardError, match=r"verdict-2.json: not sealed by any manifest"):
        require_intact(rec, "promote")


class _CardsLane:
    """A simulated lane whose verdicts and fingerprints are the real ones (cards, recipes)."""

    def __init__(self, sim) -> None:
        self.sim, self.live = sim, LiveOps()

    def __getattr__(self, name: str):
        return getattr(self.sim, name)

    def describe(self, recipe: str):
        return self.live.describe(recipe)

    def verdict(self, recipe: str):
        return self.live.verdict(recipe)


def _promoted(tmp_path: Path):
    from gb300lane.testing.simlane import SimLane

    card, rec = _scored()
    rescore(
        rec,
        "the agree bar was tighter than the rounds' own spread",
        ["controls-agree.bar={mode: spread, source: rounds, value: 0.02}"],
    )
    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}, "local-v27": {}})
    ops = _CardsLane(sim)
    sim.describe = ops.describe  # the simulated boots report the real fingerprint
    assert promote("local-v26", force=True, reason="first", ops=ops).ok
    report = promote("local-v27", ops=ops)
    assert report.ok, report.message
    return rec


@pytest.mark.slow
def test_production_chain_verifies_and_breaks_where_the_verdict_or_the_ledger_was_edited(tmp_path: Path) -> None:
    import sqlite3

    from gb300lane.promote.ledger import ledger_path
    from gb300lane.promote.production_custody import verify_production

    rec = _promoted(tmp_path)
    chain = verify_production()
    assert chain.ok, chain.to_text()
    assert {"ledger", "promotion", "verdict", "recipe"} <= {link.kind for link in chain.links if link.status == "ok"}
    ok = runner.invoke(app, ["verify", "--production"])
    assert ok.exit_code == 0, ok.output
    # The ledger recorded the verdict's sha256 at promotion: an edit afterwards shows, with the file named.
    _edit(rec.verdict_file(2), '"reason": "the agree', '"reason": "The agree')
    broken = verify_production().first_break
    assert broken is not None and broken.file == str(rec.verdict_file(2)) and "recorded at promotion" in broken.detail
    out = runner.invoke(app, ["verify", "--production", "--json"])
    assert out.exit_code == 1 and json.loads(out.stdout)[0]["breaks_at"]["file"] == str(rec.verdict_file(2))
    # A history line edited in the SQLite file no longer matches its keyed custody row.
    with sqlite3.connect(ledger_path()) as db:
        db.execute("UPDATE events SET forced=1, reason='edited' WHERE kind='promote' AND recipe='local-v27'")
    kinds = [(link.kind, link.detail) for link in verify_production().links if link.status == "broken"]
    assert any(kind == "ledger" and "the event was edited" in detail for kind, detail in kinds)
