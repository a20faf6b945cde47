"""Rendering: recipe -> container spec goldens, compose acceptance, docker-run quoting."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from gb300lane.errors import RecipeError, RenderError
from gb300lane.paths import shipped
from gb300lane.recipes import (
    compact_json,
    fingerprint,
    load_recipe,
    render,
    render_compose,
    render_docker_run,
    render_json,
    validate_raw,
)
from gb300lane.recipes.formats import RESTART_POLICY, compose_dict, healthcheck_test, render_format, write_rendered

ROOT = Path(__file__).resolve().parents[2]
RECIPES = shipped("recipes")
GOLDEN = ROOT / "tests" / "golden" / "recipes"
GOLDEN_COMPOSE = ROOT / "tests" / "golden" / "compose"
UPDATE = os.environ.get("GB300LANE_UPDATE_GOLDEN") == "1"

# (golden file stem, recipe, render kwargs)
GOLDEN_CASES = [
    ("v26", "v26", {}),
    ("v27", "v27", {}),
    ("k9", "k9", {}),
    ("local-v26", "local-v26", {}),
    ("local-v27", "local-v27", {}),
    ("local-k9", "local-k9", {}),
    ("v27-dark-port30016", "v27", {"dark": True, "port": 30016}),
]


@pytest.mark.parametrize("stem,name,kwargs", GOLDEN_CASES, ids=[c[0] for c in GOLDEN_CASES])
def test_rendered_spec_matches_golden(stem: str, name: str, kwargs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    # The local recipes' cache volume expands ${VLLM_CACHE_ROOT} at render time; pin it.
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/var/cache/vllm")
    actual = render_json(render(load_recipe(name, RECIPES), **kwargs))
    path = GOLDEN / f"{stem}.json"
    if UPDATE:
        path.write_text(actual, encoding="utf-8")
    assert path.is_file(), f"{path} missing; run with GB300LANE_UPDATE_GOLDEN=1 to create it"
    assert json.loads(actual) == json.loads(path.read_text(encoding="utf-8")), (
        f"{stem}: rendered spec differs from {path}; if the change is intended, rerun with GB300LANE_UPDATE_GOLDEN=1"
    )


def _flag(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_speculative_config_carries_only_the_recipe_keys_sorted() -> None:
    v27 = render(load_recipe("v27", RECIPES)).container("main")
    spec = _flag(v27.argv, "--speculative-config")
    assert spec == compact_json(json.loads(spec))
    assert list(json.loads(spec)) == sorted(json.loads(spec))
    assert json.loads(spec) == {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 3], [9, 32, 3]],
        "draft_sample_method": "probabilistic",
        "rejection_sample_method": "block",
        "dspark_draft_topk": 64,
    }
    v26 = render(load_recipe("v26", RECIPES)).container("main")
    assert json.loads(_flag(v26.argv, "--speculative-config"))["rejection_sample_method"] == "standard"


def test_real_and_embedded_main_argv_shapes() -> None:
    real = render(load_recipe("v27", RECIPES))
    main = real.container("main")
    assert main.argv[:3] == ("vllm", "serve", "/models/DeepSeek-V4.1-Flash-1017")
    assert (main.ipc_mode, main.network_mode, main.device_ids) == ("host", "host", ("0",))
    assert real.container("sidecar").device_ids == ("1",)
    assert "--kv-pool-tokens" not in main.argv and "--time-scale" not in main.argv

    local = render(load_recipe("local-v27", RECIPES))
    lmain, lside = local.containers
    assert lmain.argv[:6] == ("python3", "-m", "gb300lane.engine", "serve", "--model", "builtin")
    assert _flag(lmain.argv, "--time-scale") == "0.01"
    assert _flag(lmain.argv, "--kv-pool-tokens") == "4400013"
    assert _flag(lmain.argv, "--host") == "127.0.0.1" and _flag(lmain.argv, "--port") == "30106"
    assert lside.argv == ("python3", "-m", "gb300lane.engine", "sidecar", "--host", "127.0.0.1", "--port", "30107")
    assert lmain.env["EXPERT_SIDECAR_URL"] == "http://127.0.0.1:30107"
    assert lmain.device_ids == () and lmain.ipc_mode is None
    assert local.endpoint == "http://127.0.0.1:30106"


def test_labels_on_every_container() -> None:
    lane = render(load_recipe("v27", RECIPES))
    for c in lane.containers:
        assert c.labels["gb300lane.recipe"] == "v27"
        assert c.labels["gb300lane.role"] == c.role
        assert c.labels["gb300lane.fingerprint"] == lane.fingerprint == fingerprint(load_recipe("v27", RECIPES))
        assert c.labels["gb300lane.lane"] == "gb300" and c.labels["gb300lane.tool-version"]


def test_dark_binds_loopback_and_port_moves_the_whole_lane() -> None:
    lane = render(load_recipe("v27", RECIPES), dark=True, port=30016)
    main = lane.container("main")
    assert _flag(main.argv, "--host") == "127.0.0.1" and _flag(main.argv, "--port") == "30016"
    assert lane.endpoint == "http://127.0.0.1:30016" and main.health_url == "http://127.0.0.1:30016/health"
    assert lane.container("sidecar").port == 30017  # 30006/30007 in the recipe: the sidecar moves as far as main


def test_extra_args_render_as_flags() -> None:
    main = render(load_recipe("v26", RECIPES)).container("main")
    assert "--trust-remote-code" in main.argv and "--enable-prefix-caching" in main.argv


def test_docker_run_script_quotes_every_value(tmp_path: Path) -> None:
    """Run the script with `docker` as a shell function that prints its argv: every value must round-trip."""
    lane = render(load_recipe("v27", RECIPES))
    script = tmp_path / "run.sh"
    script.write_text(render_docker_run(lane), encoding="utf-8")
    out = subprocess.run(
        ["bash", "-c", 'docker() { printf "%s\\0" "$@"; printf "\\n\\0"; }; source "$1"', "_", str(script)],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    calls = [c.strip("\0").split("\0") for c in out.split("\n\0") if c.strip("\0")]
    assert len(calls) == 2
    by_name = {call[call.index("--name") + 1]: call for call in calls}
    for c in lane.containers:
        call = by_name[c.name]
        # entrypoint, image, then the rest of argv exactly
        assert call[call.index("--entrypoint") + 1] == c.argv[0]
        image_at = call.index(c.image)
        assert tuple(call[image_at + 1 :]) == c.argv[1:]
        for k, v in c.env.items():
            assert f"{k}={v}" in call
    assert calls[0][calls[0].index("--name") + 1].endswith("-sidecar")


def test_docker_run_quotes_hostile_values(tmp_path: Path) -> None:
    raw = load_recipe("local-v27", RECIPES).model_dump(mode="json")
    raw["env"] = {"WEIRD": "a b'c\"$(touch pwned)`x`;"}
    lane = render(validate_raw(raw, "hostile"))
    script = tmp_path / "run.sh"
    script.write_text(render_docker_run(lane), encoding="utf-8")
    out = subprocess.run(
        ["bash", "-c", 'cd "$2"; docker() { printf "%s\\0" "$@"; }; source "$1"', "_", str(script), str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert "WEIRD=a b'c\"$(touch pwned)`x`;" in out.split("\0")
    assert not (tmp_path / "pwned").exists()


def _compose_cli() -> list[str]:
    """`docker compose` (the v2 plugin) where present, else Debian's `docker-compose`; the `compose` marker checked one exists."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return ["docker-compose"]


@pytest.mark.compose
@pytest.mark.parametrize("name", ["v27", "k9", "local-v27"])
def test_compose_file_passes_compose_config(tmp_path: Path, name: str) -> None:
    path = write_rendered(render(load_recipe(name, RECIPES)), "compose", tmp_path)
    result = subprocess.run([*_compose_cli(), "-f", str(path), "config"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    lane = render(load_recipe(name, RECIPES))
    for c in lane.containers:
        svc = config["services"][c.role]
        assert [*svc["entrypoint"], *svc["command"]] == list(c.argv)
        assert svc["network_mode"] == "host"
        assert svc["restart"] == RESTART_POLICY
        assert svc["healthcheck"]["test"] == healthcheck_test(c.health_url)
    assert config["services"]["main"]["depends_on"] == {"sidecar": {"condition": "service_healthy"}}


@pytest.mark.compose
def test_compose_escapes_dollar_interpolation(tmp_path: Path) -> None:
    raw = load_recipe("local-v27", RECIPES).model_dump(mode="json")
    raw["env"] = {"PRICE": "$HOME and ${X}"}
    lane = render(validate_raw(raw, "dollar"))
    assert compose_dict(lane)["services"]["main"]["environment"]["PRICE"] == "$$HOME and $${X}"
    path = write_rendered(lane, "compose", tmp_path)
    result = subprocess.run(
        [*_compose_cli(), "-f", str(path), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": "/nowhere", "X": "interpolated"},
    )
    assert result.returncode == 0, result.stderr
    # compose prints the escaped form back; what matters is that nothing was interpolated
    env = yaml.safe_load(result.stdout)["services"]["main"]["environment"]
    assert env["PRICE"] in ("$HOME and ${X}", "$$HOME and $${X}")


def test_compose_is_built_as_data_with_health_dependency_and_restart() -> None:
    lane = render(load_recipe("v27", RECIPES))
    text = render_compose(lane)
    assert text.startswith("# Rendered by gb300lane from recipe v27 (fingerprint ")
    doc = yaml.safe_load(text)
    assert doc == compose_dict(lane)
    main, side = doc["services"]["main"], doc["services"]["sidecar"]
    assert main["depends_on"] == {"sidecar": {"condition": "service_healthy"}} and "depends_on" not in side
    for svc, c in ((main, lane.container("main")), (side, lane.container("sidecar"))):
        assert svc["restart"] == "unless-stopped"
        assert svc["healthcheck"]["test"][:2] == ["CMD", "python3"] and c.health_url in svc["healthcheck"]["test"][3]
        assert svc["labels"] == c.labels and svc["container_name"] == c.name
    assert main["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0"]
    # no sidecar: nothing to depend on
    raw = load_recipe("local-v27", RECIPES).model_dump(mode="json")
    raw["sidecar"] = None
    raw["env"] = {}
    alone = compose_dict(render(validate_raw(raw, "alone")))
    assert list(alone["services"]) == ["main"] and "depends_on" not in alone["services"]["main"]


@pytest.mark.parametrize("stem", ["v27", "local-v27"])
def test_compose_matches_golden(stem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/var/cache/vllm")
    actual = render_compose(render(load_recipe(stem, RECIPES)))
    path = GOLDEN_COMPOSE / f"{stem}.yaml"
    if UPDATE:
        path.write_text(actual, encoding="utf-8")
    assert path.is_file(), f"{path} missing; run with GB300LANE_UPDATE_GOLDEN=1 to create it"
    assert actual == path.read_text(encoding="utf-8"), (
        f"{stem}: rendered compose differs from {path}; if the change is intended, rerun with GB300LANE_UPDATE_GOLDEN=1"
    )


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/health" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_healthcheck_probe_passes_on_200_and_fails_otherwise() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        for url, code in ((f"{base}/health", 0), (f"{base}/not-ready", 1)):
            test = healthcheck_test(url)
            assert test[:2] == ["CMD", "python3"]
            probe = subprocess.run([sys.executable, *test[2:]], capture_output=True, timeout=30)
            assert (probe.returncode == 0) == (code == 0), probe.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_write_rendered_writes_nothing_for_an_unknown_format(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RenderError, match="not one of compose, docker-run, json"):
        render_format(render(load_recipe("v27", RECIPES)), "helm")
    with pytest.raises(RenderError):
        write_rendered(render(load_recipe("v27", RECIPES)), "helm", out)
    assert not out.exists()


def test_render_of_a_bad_recipe_raises_before_writing(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("- not a mapping\n", encoding="utf-8")
    with pytest.raises(RecipeError):
        write_rendered(render(load_recipe("bad", tmp_path)), "json", tmp_path / "out")
    assert not (tmp_path / "out").exists()
