"""Secrets by name and by value: `render` and `recipes show` print `<secret>` unless --show-secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.cli.main import app
from gb300lane.paths import shipped
from gb300lane.redact import secret_shape

runner = CliRunner()

VALUE = "sk-live-" + "Q7x2M9p4R1t8W3z6K5n0"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "local-v27.yaml").write_text((shipped("recipes") / "local-v27.yaml").read_text())
    (tmp_path / "local-v26.yaml").write_text((shipped("recipes") / "local-v26.yaml").read_text())
    (tmp_path / "s.yaml").write_text(
        "schema_version: 1\nname: s\nextends: local-v27\ndescription: secrets\n"
        f"env: {{GOOD: {VALUE}, HF_TOKEN: plain, OTHER: {JWT}, CACHE: /cache/x}}\n"
        f"sidecar: {{env: {{DB: 'postgres://u:pw@db/x'}}}}\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ["recipes", "show", "s"],
        ["recipes", "show", "s", "--json"],
        ["render", "s", "-f", "compose"],
        ["render", "s", "-f", "docker-run"],
        ["render", "s", "-f", "json"],
    ],
)
def test_secrets_are_masked_unless_asked_for(folder: Path, args: list[str]) -> None:
    shown = runner.invoke(app, [*args, "--recipes-dir", str(folder)])
    assert shown.exit_code == 0, shown.output
    for secret in (VALUE, JWT, "plain", "u:pw@"):
        assert secret not in shown.stdout
    assert "<secret>" in shown.stdout and "/cache/x" in shown.stdout
    revealed = runner.invoke(app, [*args, "--recipes-dir", str(folder), "--show-secrets"])
    assert revealed.exit_code == 0 and VALUE in revealed.stdout and JWT in revealed.stdout


def test_render_out_masks_too(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert runner.invoke(app, ["render", "s", "--out", str(out), "--recipes-dir", str(folder)]).exit_code == 0
    assert VALUE not in (out / "compose.yaml").read_text()


@pytest.mark.parametrize(
    "value",
    [
        VALUE,
        JWT,
        "ghp_" + "a" * 36,
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-1234567890-abcdefghij",
        "hf_" + "b" * 34,
        "AIza" + "c" * 35,
        "sk_live_" + "d" * 24,
        "-----BEGIN RSA PRIVATE KEY-----",
        "https://user:p4ss@host/x",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ],
)
def test_token_shapes_and_entropy_are_secrets(value: str) -> None:
    assert secret_shape(value) is not None


@pytest.mark.parametrize(
    "value",
    [
        "/cache/vllm",
        "expandable_segments:True",
        "gb300lane-engine:local",
        "http://127.0.0.1:30107",
        "0,1",
        "Hello world, this is a sentence with 123",
        "/usr/local/lib/python3.11/site-packages",
        "block",
        "9.0a",
    ],
)
def test_ordinary_values_are_not(value: str) -> None:
    assert secret_shape(value) is None
