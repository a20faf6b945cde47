"""Recipe fields that reach argv, mounts or the lane's address are validated: a value that would override the
lane's host or port, inject an option or escape a mount is an error naming the field (and `recipes lint` says so)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gb300lane.cli.main import app
from gb300lane.errors import RecipeError
from gb300lane.recipes import load_recipe, render


def _recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parent: str, changes: str) -> str:
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(tmp_path))
    from gb300lane.paths import shipped

    for name in ("local-v26", "v26"):
        (tmp_path / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    body = {
        "schema_version": 1,
        "name": "bad",
        "description": "a bad change",
        "extends": parent,
        **yaml.safe_load(changes),
    }
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return "bad"


CASES = [
    # dark lanes: the host or port of any part of the lane comes from lane.* and sidecar.port only
    ("local-v26", "sidecar: {args: [--host, 0.0.0.0]}", "sidecar.args"),
    ("local-v26", "sidecar: {args: ['--port=9']}", "sidecar.args"),
    ("local-v26", "engine_args: {extra_args: {host: 0.0.0.0}}", "engine_args.extra_args.host"),
    ("local-v26", "engine_args: {extra_args: {port: 9}}", "engine_args.extra_args.port"),
    ("local-v26", "engine_args: {extra_args: {config: /tmp/x.yaml}}", "engine_args.extra_args.config"),
    ("v26", "sidecar: {args: [expert-sidecar, serve, --host, 0.0.0.0, --port, '30007']}", "sidecar.args"),
    ("local-v26", "env: {VLLM_HOST_IP: 0.0.0.0}", "env.VLLM_HOST_IP"),
    # option injection: no leading `-` where a value is expected
    ("v26", "model: {path: --trust-remote-code}", "model.path"),
    ("local-v26", "model: {served_name: --trust-remote-code}", "model.served_name"),
    ("local-v26", "engine_args: {dtype: --trust-remote-code}", "engine_args.dtype"),
    ("v26", "gpus: {main: [--privileged]}", "gpus.main"),
    ("v26", "gpus: {main: ['0,1']}", "gpus.main"),
    ("v26", "engine_args: {extra_args: {tokenizer: --trust-remote-code}}", "engine_args.extra_args.tokenizer"),
    # mounts: no `:` in either part, no relative escape
    ("v26", "volumes: [{source: '/models:/etc', target: /models}]", "volumes.0.source"),
    ("v26", "volumes: [{source: /models, target: '/models:rw'}]", "volumes.0.target"),
    ("v26", "volumes: [{source: ../../../../etc, target: /models}]", "volumes.0.source"),
    ("v26", "volumes: [{source: /models, target: /models/../../etc}]", "volumes.0.target"),
    # strict ints
    ("local-v26", "lane: {port: true}", "lane.port"),
    ("local-v26", "sidecar: {port: true}", "sidecar.port"),
]


@pytest.mark.parametrize(("parent", "changes", "field"), CASES)
def test_a_dangerous_field_is_a_validation_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parent: str, changes: str, field: str
) -> None:
    name = _recipe(tmp_path, monkeypatch, parent, changes)
    with pytest.raises(RecipeError) as exc:
        render(load_recipe(name))
    assert field in str(exc.value), str(exc.value)
    out = CliRunner().invoke(app, ["recipes", "lint", name], env={"COLUMNS": "400"})
    assert out.exit_code != 0 and field in " ".join(out.output.split()), out.output


def test_the_shipped_recipes_still_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gb300lane.paths import shipped

    for f in shipped("recipes").glob("*.yaml"):
        render(load_recipe(f.stem, shipped("recipes")))
