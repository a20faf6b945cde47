"""Who may sign is configuration: the allowed-signers lines that carry namespaces="gb300lane" (narrowed by
GB300LANE_PRINCIPALS), never the signer a seal writes about itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane import signing
from gb300lane.errors import StateError

from fakes.sshkey import write_key


def _pub(key: Path) -> str:
    return " ".join(Path(f"{key}.pub").read_text().split()[:2])


def _signed_by(key: Path, monkeypatch: pytest.MonkeyPatch, claim: str) -> dict[str, str]:
    monkeypatch.setenv("GB300LANE_SIGNING_KEY", str(key))
    seal = signing.sign("card manifest", b"PASS")
    monkeypatch.delenv("GB300LANE_SIGNING_KEY")
    return {**seal, "signer": claim}


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A team allowed-signers file: the operator for gb300lane, bob for git commit signing (no namespaces)."""
    ops = write_key(tmp_path / "ops" / "key", "the operator")
    bob = write_key(tmp_path / "bob" / "key", "bob")
    signers = tmp_path / "team_signers"
    signers.write_text(f'ops namespaces="gb300lane" {_pub(ops)}\nbob {_pub(bob)}\n# a comment\n\n')
    monkeypatch.setenv("GB300LANE_ALLOWED_SIGNERS", str(signers))
    return {"ops": ops, "bob": bob, "signers": signers}


def test_the_parser_reads_principals_options_and_keys() -> None:
    lines = signing.parse_allowed_signers(
        'a@x,b@x namespaces="git,gb300lane",valid-after="20200101" ssh-ed25519 AAAA c\n'
        "# no\nbad line\nc ssh-ed25519 BBBB\n"
    )
    assert [(x.principals, x.namespaces, x.key) for x in lines] == [
        (("a@x", "b@x"), ("git", "gb300lane"), "ssh-ed25519 AAAA"),
        (("c",), None, "ssh-ed25519 BBBB"),
    ]


def test_the_operators_own_signature_verifies_for_the_principal_the_file_maps_its_key_to(
    team: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    seal = _signed_by(team["ops"], monkeypatch, "anyone at all")
    status, text = signing.verify("card manifest", b"PASS", seal)
    assert status == "ok" and text.startswith("signed by ops "), text


def test_a_team_member_outside_the_namespace_cannot_sign_a_pass_as_themselves(
    team: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for claim in ("bob", "ops", signing.PRINCIPAL):
        seal = _signed_by(team["bob"], monkeypatch, claim)
        status, text = signing.verify("card manifest", b"PASS", seal)
        assert status == "not_allowed", (claim, text)
        assert 'line 2 (bob): no namespaces="gb300lane"' not in text  # what was left out is not printed per seal
        assert "principals ops" in text


def test_gb300lane_principals_narrows_the_namespace_lines(
    team: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    team["signers"].write_text(
        f'ops namespaces="gb300lane" {_pub(team["ops"])}\nbob namespaces="gb300lane" {_pub(team["bob"])}\n'
    )
    bob = _signed_by(team["bob"], monkeypatch, "bob")
    assert signing.verify("card manifest", b"PASS", bob)[0] == "ok"  # the file chose bob for this namespace
    monkeypatch.setenv(signing.PRINCIPALS_ENV, "ops")
    assert signing.verify("card manifest", b"PASS", bob)[0] == "not_allowed"
    assert signing.verify("card manifest", b"PASS", _signed_by(team["ops"], monkeypatch, "x"))[0] == "ok"


def test_check_key_refuses_a_garbage_a_zeroed_and_a_foreign_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert signing.check_key().startswith("signed by gb300lane")
    key = signing.signing_key_path()
    good = key.read_bytes()
    key.write_bytes(b"not a key\n")
    with pytest.raises(StateError, match="could not sign"):
        signing.check_key()
    key.write_bytes(b"\0" * len(good))
    with pytest.raises(StateError, match="could not sign"):
        signing.check_key()
    other = write_key(tmp_path / "other", "another key")
    key.write_bytes(other.read_bytes())  # a private key whose .pub is the allowed signer's
    with pytest.raises(StateError, match="doesn't match private"):
        signing.check_key()
    pub = Path(f"{key}.pub")
    good_pub = pub.read_text()
    pub.write_text(Path(f"{other}.pub").read_text())  # ... and with its own .pub: it signs, as nobody chosen
    with pytest.raises(StateError, match="does not verify .*not an allowed signer"):
        signing.check_key()
    key.write_bytes(good)
    pub.write_text(good_pub)
    assert signing.check_key()
