"""Signatures, not a key beside the files: a verdict forged by anyone without the signing key never verifies.

The receipts' manifests and the ledger's custody rows are signed with an
OpenSSH key in the user's config directory (`ssh-keygen -Y sign`), checked
against the allowed-signers file there. Three forgeries of a FAIL verdict into
a PASS: a changed version string (once a note, now a break), a fresh
`state.key` and the old keyed seal under it, and a signature by a key that is
not an allowed signer. `verify --card` and `promote` refuse each one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import keyed, paths
from gb300lane.cards import load_card, register, run_card, score
from gb300lane.cards.record.card_custody import verify_receipts
from gb300lane.cards.record.receipts import MANIFEST_SEAL
from gb300lane.cli.main import app
from gb300lane.errors import StateError
from gb300lane.fsio import sha256_file
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


def _failed():
    card, p = load_card(DATA / "mini.yaml")
    rec = register(card, p.read_text())
    lane = fakes.FakeLane(
        card, {"A": 1.0, "B": 1.03, "A2": 1.025}, jitter={"A": {1: 0.0, 2: 0.03}, "A2": {1: 0.03, 2: 0.0}}
    )
    run_card(rec, ops=lane.ops())
    assert score(rec).verdict == "FAIL"
    return card, rec


def _forge(rec, *, version: str | None = None) -> tuple[Path, dict]:
    """verdict-1 turned into a PASS (and its version string changed), every manifest's file list made to match."""
    verdict = rec.verdict_file(1)
    os.chmod(verdict, 0o644)
    data = json.loads(verdict.read_text())
    data["verdict"] = "PASS"
    for r in data["results"]:
        r["status"] = "PASS"
    if version is not None:
        data["tool_version"] = version
    verdict.write_text(json.dumps(data))
    manifest = rec.root / "manifest-verdict-1.json"
    body = json.loads(manifest.read_text())
    body.pop("seal")
    body["files"]["verdicts/verdict-1.json"] = sha256_file(verdict)
    os.chmod(manifest, 0o644)
    return manifest, body


def _refused(card, rec) -> None:
    checked = runner.invoke(app, ["verify", "--card", str(rec.root)])
    assert checked.exit_code == 1 and "chain intact" not in checked.output, checked.output
    with pytest.raises(StateError):
        promote(card.candidate.recipe, ops=LiveOps())
    cli = runner.invoke(app, ["promote", card.candidate.recipe])
    assert cli.exit_code == 1 and "does not verify" in cli.output, cli.output


def test_a_fail_turned_pass_with_another_version_string_is_a_break_not_a_note() -> None:
    card, rec = _failed()
    manifest, body = _forge(rec, version="0.0.1")
    body["seal"] = keyed.seal(MANIFEST_SEAL, body)  # even resealed by the tool's own signer
    manifest.write_text(json.dumps(body))
    broken = verify_receipts(rec).first_break
    assert broken is not None and broken.file == "verdicts/verdict-1.json", verify_receipts(rec).to_text()
    assert "says PASS, its receipts score FAIL" in broken.detail
    _refused(card, rec)


def test_a_fresh_state_key_and_a_keyed_seal_under_it_do_not_verify() -> None:
    card, rec = _failed()
    manifest, body = _forge(rec)
    key = secrets.token_bytes(32)
    keyed.key_path().parent.mkdir(parents=True, exist_ok=True)
    keyed.key_path().write_text(key.hex() + "\n")
    mac = hmac.new(key, MANIFEST_SEAL.encode() + b"\0" + keyed.canonical(body).encode(), hashlib.sha256).hexdigest()
    body["seal"] = {"key_id": keyed.key_id(key), "hmac_sha256": mac}
    manifest.write_text(json.dumps(body))
    chain = verify_receipts(rec)
    assert not chain.ok and chain.first_break is not None and chain.first_break.file == "manifest-verdict-1.json"
    _refused(card, rec)


def test_a_signature_by_a_key_that_is_not_an_allowed_signer_does_not_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gb300lane import signing

    card, rec = _failed()
    assert signing.allowed_signers_path().is_file() and not signing.allowed_signers_path().is_relative_to(
        paths.state_root()
    )
    manifest, body = _forge(rec)
    own = os.environ["XDG_CONFIG_HOME"]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "forger"))
    body["seal"] = keyed.seal(MANIFEST_SEAL, body)  # the forger's own key, on first use
    monkeypatch.setenv("XDG_CONFIG_HOME", own)
    manifest.write_text(json.dumps(body))
    broken = verify_receipts(rec).first_break
    assert broken is not None and broken.file == "manifest-verdict-1.json" and "allowed signer" in broken.detail
    _refused(card, rec)
