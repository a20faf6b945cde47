"""`--port` moves the whole lane: main and sidecar, so two lanes of one host run side by side.

Rendering moves the sidecar (its port, its args, main's connect env) by as much
as main moved; end to end, `up local-v27 --dark --port P` boots beside a
production lane on the recipes' own ports and both answer.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gb300lane import lane
from gb300lane.cli.main import app
from gb300lane.errors import RenderError
from gb300lane.paths import shipped
from gb300lane.recipes import load_recipe, render
from gb300lane.testing.free_ports import free_port


def test_port_moves_main_and_sidecar_together() -> None:
    recipe = load_recipe("local-v27")
    moved = render(recipe, dark=True, port=30206)
    main, sidecar = moved.containers
    assert (main.port, sidecar.port) == (30206, 30207)
    assert main.env["EXPERT_SIDECAR_URL"] == "http://127.0.0.1:30207"
    assert sidecar.argv[sidecar.argv.index("--port") + 1] == "30207"
    assert sidecar.health_url == "http://127.0.0.1:30207/health" and moved.endpoint == "http://127.0.0.1:30206"
    # Without --port nothing moves.
    assert [c.port for c in render(recipe).containers] == [30106, 30107]


def test_port_moves_a_real_sidecar_named_in_its_args() -> None:
    recipe = load_recipe("v27")
    assert recipe.sidecar is not None
    offset = 100
    moved = render(recipe, port=recipe.lane.port + offset).containers[1]
    assert moved.port == recipe.sidecar.port + offset
    assert moved.argv[moved.argv.index("--port") + 1] == str(recipe.sidecar.port + offset)


def test_port_that_pushes_the_sidecar_out_of_range_is_one_line() -> None:
    with pytest.raises(RenderError, match="--port 65535 puts the sidecar container on port 65536"):
        render(load_recipe("local-v27"), port=65535)


def _recipes(dest: Path) -> tuple[int, int]:
    """local-v26 / local-v27 on free ports (their 'default' ports here), time scale 0, small smoke windows."""
    port = free_port()
    sidecar = port + 1  # as in the shipped recipes: the sidecar beside main
    for name in ("local-v26", "local-v27"):
        body = yaml.safe_load((shipped("recipes") / f"{name}.yaml").read_text())
        if name == "local-v26":
            body["lane"]["port"] = port
            body["sidecar"]["port"] = sidecar
            body["engine_args"]["time_scale"] = 0.0
        (dest / f"{name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return port, sidecar


def _models(endpoint: str) -> list[str]:
    with urllib.request.urlopen(f"{endpoint}/v1/models", timeout=10) as r:
        return [m["id"] for m in json.loads(r.read())["data"]]


def _health(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as r:
        return int(r.status)


@pytest.mark.slow
def test_up_dark_with_port_boots_beside_production(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    port, sidecar = _recipes(folder)
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(folder))
    try:
        prod = lane.up("local-v26", runtime="process")
        assert prod.ok and prod.endpoint == f"http://127.0.0.1:{port}"
        moved = free_port()  # the sidecar follows to moved + 1
        # local-v27 extends local-v26: same ports as production; --port moves both of its containers away.
        res = CliRunner().invoke(app, ["up", "local-v27", "--dark", "--port", str(moved), "--json"])
        assert res.exit_code == 0, res.output
        report = json.loads(res.stdout)
        assert report["endpoint"] == f"http://127.0.0.1:{moved}"
        assert _models(prod.endpoint) == _models(report["endpoint"]) == ["deepseek-v4.1-flash"]
        assert _health(f"http://127.0.0.1:{sidecar}/health") == 200
        assert _health(f"http://127.0.0.1:{moved + (sidecar - port)}/health") == 200
        st = {i.info.name: i for i in lane.status().instances}
        assert {n: i.health for n, i in st.items()} == {prod.instance: "healthy", report["instance"]: "healthy"}
    finally:
        lane.down(all=True)
