"""`render --format k8s`: golden manifests, loading into the kubernetes client's models, and what they say.

Model loading goes through `ApiClient.deserialize`, the public path the client
itself uses to turn an API server's JSON into models: it maps each camelCase
key to its attribute, recurses into nested models by the OpenAPI types, and
its pydantic models reject a missing required field or a wrong type. It drops
a key no model knows without a word, so every manifest is also serialised
back with `sanitize_for_serialization` and must come back unchanged: a
misspelt or misplaced key fails there.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from kubernetes.client import ApiClient
from typer.testing import CliRunner

from gb300lane.cli.recipes import register
from gb300lane.engine.args import parse_serve_args
from gb300lane.errors import RenderError
from gb300lane.recipes import load_recipe, render, validate_raw
from gb300lane.recipes.k8s import (
    CONFIG_DIR,
    PROBE_PERIOD_S,
    SERVE_CONFIG_KEY,
    manifests,
    render_k8s,
    startup_failures,
    write_k8s,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "k8s"
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
    ("local-v27-dark", "local-v27", {"dark": True}),
]


def to_model(doc: dict[str, Any]) -> Any:
    """The kubernetes client's model of one manifest: `V1<Kind>` for `<group>/v1` and `v1`."""
    version = doc["apiVersion"].rsplit("/", 1)[-1]
    return ApiClient().deserialize(json.dumps(doc), f"{version.capitalize()}{doc['kind']}", "application/json")


def assert_loads(doc: dict[str, Any]) -> Any:
    model = to_model(doc)
    assert type(model).__name__.endswith(doc["kind"])
    back = ApiClient().sanitize_for_serialization(model)
    assert back == doc, f"{doc['kind']} {doc['metadata']['name']}: keys the model does not know or types it changed"
    return model


def by_kind(docs: list[dict[str, Any]], kind: str, role: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (role is None or d["metadata"]["labels"].get("gb300lane.role") == role)
    ]


def one(docs: list[dict[str, Any]], kind: str, role: str | None = None) -> dict[str, Any]:
    found = by_kind(docs, kind, role)
    assert len(found) == 1, f"{len(found)} {kind} (role {role}) in {[d['kind'] for d in docs]}"
    return found[0]


def pod_container(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.slow
@pytest.mark.parametrize("stem,name,kwargs", GOLDEN_CASES, ids=[c[0] for c in GOLDEN_CASES])
def test_manifests_match_golden_and_load_into_client_models(stem: str, name: str, kwargs: dict) -> None:
    text = render_k8s(load_recipe(name), **kwargs)
    path = GOLDEN / f"{stem}.yaml"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} missing; run with GB300LANE_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), (
        f"{stem}: manifests differ from {path}; if the change is intended, rerun with GB300LANE_UPDATE_GOLDEN=1"
    )
    docs = list(yaml.safe_load_all(text))
    assert docs == manifests(load_recipe(name), **kwargs)
    for doc in docs:
        assert_loads(doc)


def test_a_misspelt_key_or_a_missing_field_is_caught_by_the_model_check() -> None:
    """The instrument check: the loading test fails on the mistakes it is there to catch."""
    deployment = one(manifests(load_recipe("v27")), "Deployment", "main")
    typo = json.loads(json.dumps(deployment))
    pod_container(typo)["readinesProbe"] = pod_container(typo).pop("readinessProbe")
    with pytest.raises(AssertionError, match="keys the model does not know"):
        assert_loads(typo)
    nameless = json.loads(json.dumps(deployment))
    del pod_container(nameless)["name"]
    with pytest.raises(Exception, match="name"):
        to_model(nameless)


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """root"""

    register(app)
    return app


def test_render_v27_k8s_out_dir_writes_manifests_the_client_loads(app: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["render", "v27", "--format", "k8s", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    path = Path(result.output.strip())
    assert path == tmp_path / "k8s.yaml"
    docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    kinds = sorted(type(assert_loads(d)).__name__ for d in docs)
    assert kinds == ["V1ConfigMap", "V1Deployment", "V1Deployment", "V1PersistentVolumeClaim", "V1Service", "V1Service"]


def test_speculative_config_lives_in_the_configmap_and_boots_the_same_engine(tmp_path: Path) -> None:
    """The embedded engine, given the pod's args and the ConfigMap's file, resolves what docker's argv gives it."""
    recipe = load_recipe("local-v27")
    docs = manifests(recipe)
    main = pod_container(one(docs, "Deployment", "main"))
    assert "--speculative-config" not in main["args"]
    assert main["args"][-2:] == ["--config", f"{CONFIG_DIR}/{SERVE_CONFIG_KEY}"]
    serve_file = tmp_path / SERVE_CONFIG_KEY
    serve_file.write_text(one(docs, "ConfigMap")["data"][SERVE_CONFIG_KEY], encoding="utf-8")
    pod_args = [a if a != f"{CONFIG_DIR}/{SERVE_CONFIG_KEY}" else str(serve_file) for a in main["args"]]
    assert pod_args[:3] == ["-m", "gb300lane.engine", "serve"]
    in_pod = parse_serve_args(pod_args[3:])
    docker_argv = render(recipe).container("main").argv
    on_docker = parse_serve_args(list(docker_argv[4:]))
    assert in_pod.spec == on_docker.spec and in_pod.spec is not None
    assert in_pod.spec.rejection_sample_method == "block"
    assert in_pod.model_dump(exclude={"host", "non_default", "spec_text"}) == on_docker.model_dump(
        exclude={"host", "non_default", "spec_text"}
    )
    assert in_pod.host == "0.0.0.0" and on_docker.host == "127.0.0.1"


def test_every_env_var_comes_from_the_configmap_and_main_finds_the_sidecar_service() -> None:
    docs = manifests(load_recipe("v26"))
    config = one(docs, "ConfigMap")
    for role in ("main", "sidecar"):
        for var in pod_container(one(docs, "Deployment", role))["env"]:
            ref = var["valueFrom"]["configMapKeyRef"]
            assert ref["name"] == config["metadata"]["name"] and ref["key"] == f"{role}.{var['name']}"
            assert ref["key"] in config["data"]
    sidecar_service = one(docs, "Service", "sidecar")
    url = config["data"]["main.EXPERT_SIDECAR_URL"]
    assert url == f"http://{sidecar_service['metadata']['name']}:{sidecar_service['spec']['ports'][0]['port']}"
    assert config["data"]["sidecar.EXPERT_SIDECAR_DEVICE"] == "cuda:0"
    assert not by_kind(docs, "Secret")


def test_secret_looking_env_goes_to_a_secret_and_never_into_the_configmap(tmp_path: Path) -> None:
    raw = load_recipe("local-v27").model_dump(mode="json")
    raw["env"] = {**raw["env"], "HF_TOKEN": "hf_s3cr3t-value", "LOG_LEVEL": "info"}
    recipe = validate_raw(raw, "with-token")
    docs = manifests(recipe)
    secret = one(docs, "Secret")
    assert base64.b64decode(secret["data"]["main.HF_TOKEN"]).decode() == "hf_s3cr3t-value"
    config = one(docs, "ConfigMap")
    assert "main.HF_TOKEN" not in config["data"] and config["data"]["main.LOG_LEVEL"] == "info"
    assert "hf_s3cr3t-value" not in yaml.safe_dump(config)
    env = {v["name"]: v["valueFrom"] for v in pod_container(one(docs, "Deployment", "main"))["env"]}
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "main.HF_TOKEN"}}
    for doc in docs:
        assert_loads(doc)
    path = write_k8s(recipe, tmp_path)
    assert path.stat().st_mode & 0o077 == 0


def test_gpus_are_requested_on_the_node_with_the_recipes_gpu_product() -> None:
    docs = manifests(load_recipe("v27"))
    expected = {"main": "NVIDIA-GB300", "sidecar": "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition"}
    for role, product in expected.items():
        pod = one(docs, "Deployment", role)["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": product}
        resources = pod["containers"][0]["resources"]
        assert resources["limits"] == resources["requests"] == {"nvidia.com/gpu": "1"}
    local = manifests(load_recipe("local-v27"))
    for role in ("main", "sidecar"):
        pod = one(local, "Deployment", role)["spec"]["template"]["spec"]
        assert "nodeSelector" not in pod and "resources" not in pod["containers"][0]
        assert pod["containers"][0]["imagePullPolicy"] == "Never"


def test_gpu_devices_without_a_product_are_refused_with_the_fix() -> None:
    raw = load_recipe("v27").model_dump(mode="json")
    raw["gpus"] = {
        "main": ["0"],
        "sidecar": ["1"],
        "sidecar_product": "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
    }
    with pytest.raises(RenderError, match=r"gpus.main_product is not set; .*nvidia.com/gpu.product"):
        manifests(validate_raw(raw, "no-product"))


def test_dark_lane_admits_only_the_tool_and_is_not_scraped() -> None:
    docs = manifests(load_recipe("v27"), dark=True)
    policy = one(docs, "NetworkPolicy")
    main = one(docs, "Deployment", "main")
    assert policy["spec"]["podSelector"]["matchLabels"] == main["spec"]["selector"]["matchLabels"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"gb300lane.lane": "gb300", "gb300lane.role": "tool"}}}]
    assert rule["ports"] == [{"port": 30006, "protocol": "TCP"}]
    assert one(docs, "Service", "main")["spec"]["type"] == "ClusterIP"
    assert "prometheus.io/scrape" not in main["spec"]["template"]["metadata"]["annotations"]
    sidecar = one(docs, "Deployment", "sidecar")
    assert sidecar["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    bright = manifests(load_recipe("v27"))
    assert not by_kind(bright, "NetworkPolicy")
    annotations = one(bright, "Deployment", "main")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "30006" and annotations["prometheus.io/path"] == "/metrics"


@pytest.mark.parametrize("name", ["v26", "v27", "k9", "local-v26", "local-v27", "local-k9"])
def test_probes_cover_the_longest_boot_the_recipe_predicts_and_ready_on_health(name: str) -> None:
    from gb300lane.lane.boot import default_timeout_s
    from gb300lane.recipes.boottime import miss_seconds

    recipe = load_recipe(name)
    for role in ("main", "sidecar"):
        c = pod_container(one(manifests(recipe), "Deployment", role))
        startup, ready = c["startupProbe"], c["readinessProbe"]
        assert startup["httpGet"] == ready["httpGet"] == {"path": "/health", "port": "http"}
        allowed = startup["periodSeconds"] * startup["failureThreshold"]
        # A compile miss (about 1,910 s on the box) fits, and the pod waits as long as `up` would.
        assert allowed >= miss_seconds(recipe) and allowed >= default_timeout_s(recipe, None), (allowed, name)
        assert startup["failureThreshold"] == startup_failures(recipe)
    if recipe.engine == "vllm":
        assert miss_seconds(recipe) > 1800 and PROBE_PERIOD_S * startup_failures(recipe) == 3600


def test_one_compile_cache_claim_per_lane_at_the_cache_root() -> None:
    """v26, v27 and k9 share a hash, so they must share the claim (the BR1 boot was a hash hit)."""
    claims = {name: one(manifests(load_recipe(name)), "PersistentVolumeClaim") for name in ("v26", "v27", "k9")}
    assert {c["metadata"]["name"] for c in claims.values()} == {"gb300-compile-cache"}
    docs = manifests(load_recipe("v27"))
    main = one(docs, "Deployment", "main")["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in main["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in main["volumes"]}
    assert mounts["compile-cache"]["mountPath"] == "/cache/vllm"
    assert volumes["compile-cache"]["persistentVolumeClaim"]["claimName"] == "gb300-compile-cache"
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    sidecar = one(docs, "Deployment", "sidecar")["spec"]["template"]["spec"]
    assert "compile-cache" not in {v["name"] for v in sidecar["volumes"]}
    assert {v["hostPath"]["path"] for v in sidecar["volumes"]} == {"/data/models/DeepSeek-V4.1-Flash-1017"}


def test_labels_as_the_other_formats_carry_them() -> None:
    recipe = load_recipe("k9")
    lane = render(recipe)
    docs = manifests(recipe)
    for role in ("main", "sidecar"):
        labels = lane.container(role).labels
        for kind in ("Deployment", "Service"):
            doc = one(docs, kind, role)
            assert doc["metadata"]["labels"] == labels
        assert one(docs, "Deployment", role)["spec"]["template"]["metadata"]["labels"] == labels
    for doc in docs:
        assert doc["metadata"]["labels"]["gb300lane.lane"] == "gb300"
        assert doc["metadata"]["labels"]["gb300lane.tool-version"]


def test_names_are_made_dns_safe_or_refused() -> None:
    raw = load_recipe("local-v27").model_dump(mode="json")
    raw["name"] = "Local_V27.1"
    docs = manifests(validate_raw(raw, "odd-name"))
    assert one(docs, "Deployment", "main")["metadata"]["name"] == "local-local-v27-1-main"
    assert one(docs, "Deployment", "main")["metadata"]["labels"]["gb300lane.recipe"] == "Local_V27.1"
    raw["name"] = "v" * 60
    with pytest.raises(RenderError, match="shorten lane.name or the recipe name"):
        manifests(validate_raw(raw, "long-name"))


def test_dollar_in_args_is_escaped_from_kubernetes_expansion() -> None:
    raw = load_recipe("local-v27").model_dump(mode="json")
    raw["engine_args"]["extra_args"] = {"chat_template": "$(HOME)/t.jinja"}
    main = pod_container(one(manifests(validate_raw(raw, "dollar")), "Deployment", "main"))
    assert main["args"][main["args"].index("--chat-template") + 1] == "$$(HOME)/t.jinja"


def test_write_k8s_writes_nothing_when_rendering_fails(tmp_path: Path) -> None:
    raw = load_recipe("v27").model_dump(mode="json")
    raw["gpus"] = {"main": ["0"]}
    out = tmp_path / "out"
    with pytest.raises(RenderError):
        write_k8s(validate_raw(raw, "no-product"), out)
    assert not out.exists() or not any(out.iterdir())
