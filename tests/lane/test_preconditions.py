"""Preconditions report everything that is wrong at once, each with the fix that applies to it.

A real-box recipe on a host without its image and without GPUs hears about
both: the GPUs it needs (with their products) and `docker pull REF` or
`--pull`, never `engine-image build` (which builds a different image). The
embedded engine's image is the one that is built here.
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.cli.main import app
from gb300lane.errors import BootError
from gb300lane.lane import NOTHING, facts
from gb300lane.lane.preconditions import check_preconditions
from gb300lane.paths import shipped
from gb300lane.recipes import load_recipe, render
from gb300lane.runtime import ContainerInfo, ProcessRuntime, image_fix


class NoImages(ProcessRuntime):
    """A docker-named runtime with no containers and no images (nothing is created: preconditions refuse first)."""

    name = "docker"

    def list(self, labels: object = None) -> list[ContainerInfo]:
        return []

    def inspect(self, name: str) -> ContainerInfo:
        return ContainerInfo(name=name, runtime="docker", state="missing")

    def image_present(self, image: str) -> bool | None:
        return False


@pytest.fixture
def no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "discover_gpus", lambda: None)


def test_image_missing_and_no_gpu_are_both_reported_with_their_fixes(no_gpus: None) -> None:
    recipe = load_recipe("v27")
    rendered = render(recipe)
    products = {"main": recipe.gpus.main_product, "sidecar": recipe.gpus.sidecar_product}
    with pytest.raises(BootError) as err:
        check_preconditions(NoImages(), rendered, "gb300-v27", recipe.lane.port, NOTHING, products)
    text = str(err.value)
    assert "\n" not in text and "problems" in text
    for spec in rendered.containers:
        assert f"`docker pull {spec.image}`" in text
    assert "--pull" in text and "engine-image build" not in text
    assert "no NVIDIA GPU" in text and f"main GPU {', '.join(recipe.gpus.main)}" in text
    assert str(recipe.gpus.main_product) in text


def test_missing_gpu_ids_name_what_was_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "discover_gpus", lambda: {"0", "GPU-abc"})
    recipe = load_recipe("v27")
    rendered = render(recipe)

    class Present(NoImages):
        def image_present(self, image: str) -> bool | None:
            return True

    with pytest.raises(BootError, match=r"GPU\(s\) 1 do not exist here \(found \['0', 'GPU-abc'\]\); fix gpus"):
        check_preconditions(Present(), rendered, "gb300-v27", recipe.lane.port, NOTHING, {})


def test_the_embedded_engine_image_is_built_not_pulled() -> None:
    assert "engine-image build" in image_fix("gb300lane-engine:local")
    assert image_fix("vllm/vllm-openai:v0.33.0") == (
        "pull it with `docker pull vllm/vllm-openai:v0.33.0`, or pass --pull to have `gb300lane up` pull it"
    )


@pytest.fixture
def busy_ports() -> Iterator[tuple[int, int]]:
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        socks.append(s)
    yield socks[0].getsockname()[1], socks[1].getsockname()[1]
    for s in socks:
        s.close()


def test_up_cli_reports_every_problem_at_once(
    no_gpus: None, monkeypatch: pytest.MonkeyPatch, busy_ports: tuple[int, int], tmp_path: Path
) -> None:
    boot_mod = importlib.import_module("gb300lane.lane.boot")  # the module: the package exports the function `boot`
    monkeypatch.setattr(boot_mod, "get_runtime", lambda name, pull=False: NoImages())
    main, sidecar = busy_ports
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for parent in ("v26", "v27"):
        (recipes / f"{parent}.yaml").write_text((shipped("recipes") / f"{parent}.yaml").read_text())
    (recipes / "busy.yaml").write_text(
        "schema_version: 1\nname: busy\nextends: v27\ndescription: v27 on two busy ports\n"
        f"lane: {{port: {main}}}\nsidecar: {{port: {sidecar}, args: [expert-sidecar, serve]}}\n"
    )
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(recipes))
    res = CliRunner().invoke(app, ["up", "busy"])
    assert res.exit_code == 1
    err = " ".join(res.stderr.split())
    assert "5 problems" in err, err  # two ports, two images, the GPUs
    assert f"port {main} (main) is in use" in err and f"port {sidecar} (sidecar) is in use" in err
    assert "docker pull" in err and "no NVIDIA GPU" in err and "engine-image build" not in err
