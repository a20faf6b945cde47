"""Secrets by value: a 40-hex token under an unremarkable key, a base64 credential, a `Bearer` value are secrets;
`recipes show` masks them, Kubernetes gets them from the Secret (not the ConfigMap), and nothing the process
runtime writes to disk holds one in clear."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gb300lane.cli.main import app
from gb300lane.paths import shipped
from gb300lane.redact import secret_shape

HEX = "3f9a1c0b7d2e4f6a8b0c1d2e3f4a5b6c7d8e9f01"  # 40 lowercase hex digits
BEARER = "Bearer 9c1d2e3f4a5b6c7d8e9f0123"
B64 = base64.b64encode(bytes(range(7, 7 + 30))).decode()  # 40 characters of base64
runner = CliRunner()


@pytest.mark.parametrize(
    "value", [HEX, HEX.upper(), BEARER, "bearer abcdefghijklmnop", B64, "Authorization: Bearer abc.def.ghi-jklmnop"]
)
def test_credential_shaped_values_are_secrets(value: str) -> None:
    assert secret_shape(value) is not None, value


@pytest.mark.parametrize(
    "value",
    [
        "/models/DeepSeek-V4.1-Flash-1017",
        "gb300lane-engine:local",
        "expandable_segments:True",
        "0,1",
        "cuda:0",
        "a" * 40,
        "sha256:" + "0" * 64,
        "1234567890",
    ],
)
def test_ordinary_values_are_not_secrets(value: str) -> None:
    assert secret_shape(value) is None, value


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in ("local-v26", "local-v27"):
        (tmp_path / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    (tmp_path / "s.yaml").write_text(
        "schema_version: 1\nname: s\nextends: local-v27\ndescription: secrets by value\n"
        f"env: {{UPSTREAM: {HEX}, AUTH_HEADER_VALUE: '{BEARER}', BLOB: '{B64}'}}\n"
    )
    return tmp_path


def test_show_and_every_render_mask_them(folder: Path, tmp_path: Path) -> None:
    for args in (["recipes", "show", "s"], ["render", "s", "-f", "compose"], ["render", "s", "-f", "json"]):
        shown = runner.invoke(app, [*args, "--recipes-dir", str(folder)])
        assert shown.exit_code == 0, shown.output
        for secret in (HEX, BEARER, B64):
            assert secret not in shown.stdout, (args, secret)


def test_kubernetes_takes_them_from_the_secret_not_the_configmap(folder: Path) -> None:
    from gb300lane.recipes import k8s, load_recipe

    objs = k8s.manifests(load_recipe("s", folder))
    config = [o for o in objs if o["kind"] == "ConfigMap"]
    secret = [o for o in objs if o["kind"] == "Secret"]
    assert secret, [o["kind"] for o in objs]
    text = yaml.safe_dump(config)
    for value in (HEX, BEARER, B64):
        assert value not in text
    stored = {base64.b64decode(v).decode() for o in secret for v in o["data"].values()}
    assert {HEX, BEARER, B64} <= stored


@pytest.mark.slow
def test_the_process_runtime_record_keeps_no_secret_in_clear(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gb300lane import lane, paths
    from gb300lane.testing.free_ports import free_port

    base = yaml.safe_load((folder / "local-v26.yaml").read_text())
    base["lane"]["port"], base["sidecar"]["port"] = free_port(), free_port()
    base["engine_args"]["time_scale"] = 0.0
    base["env"] = {**base.get("env", {}), "UPSTREAM": HEX, "HF_TOKEN": "hf_" + "Z" * 34}
    (folder / "local-v26.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(folder))
    try:
        report = lane.up("local-v26", dark=True)
        assert report.ok, report.to_text()
        name = report.instance
        lane.stop_instance(name)
        from gb300lane.runtime import process

        process._CREATED_ENV.clear()  # as a later invocation finds it: the values come from the recipe again
        restarted = lane.start_instance(name)  # a restart still hands the process its secrets
        assert restarted.check("env") is not None and restarted.check("env").status == "pass", restarted.to_text()
        for p in paths.state_root().rglob("*"):
            if p.is_file() and not p.name.endswith(".log"):
                data = p.read_bytes()
                assert HEX.encode() not in data and b"hf_" + b"Z" * 34 not in data, p
    finally:
        lane.down(all=True, yes=True)


@pytest.mark.slow
def test_a_new_state_key_never_lets_rollback_stop_production_it_cannot_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gb300lane import keyed, lane
    from gb300lane import promote as pm

    from production import write_recipes

    folder = tmp_path / "lane-recipes"
    write_recipes(folder)
    v26 = yaml.safe_load((folder / "local-v26.yaml").read_text())
    v26["env"] = {**v26.get("env", {}), "HF_TOKEN": "hf_" + "Q" * 34}
    (folder / "local-v26.yaml").write_text(yaml.safe_dump(v26, sort_keys=False))
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(folder))
    monkeypatch.delenv("GB300LANE_LANE_OPS", raising=False)
    try:
        assert pm.promote("local-v26", force=True, reason="first").ok
        assert pm.promote("local-v27", force=True, reason="second").ok
        before = {i.name: i.state for i in lane.list_instances()}
        keyed.key_path().rename(keyed.key_path().with_name("state.key.old"))  # the key's own advice: move it aside
        from gb300lane.runtime import process

        process._CREATED_ENV.clear()  # a later invocation
        got = runner.invoke(app, ["rollback"], env={"COLUMNS": "400"})
        out = " ".join(got.output.split())
        assert got.exit_code == 1 and "HF_TOKEN" in out and "nothing was stopped" in out, out
        assert {i.name: i.state for i in lane.list_instances()} == before
    finally:
        lane.down(all=True, yes=True)


def test_an_absolute_path_with_a_random_folder_is_not_a_secret() -> None:
    # mktemp's random part made `.ci/wheel`'s VLLM_CACHE_ROOT read as a high-entropy secret (digested, then
    # compared against the recipe's unmapped value at start); a base64 token that starts with "/" still is one.
    from gb300lane.redact import is_secret

    assert not is_secret("VLLM_CACHE_ROOT", "/tmp/gb300lane-wheel.bu3oVr/vllm-cache")
    assert is_secret("VLLM_CACHE_ROOT", "/aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3")
    assert is_secret("X", "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3")
