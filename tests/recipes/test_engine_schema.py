"""The vLLM schema snapshot: the generator script, the committed data, and the public API."""

from __future__ import annotations

import importlib.util
import json
import os
import zipfile
from pathlib import Path

import pytest

import gb300lane.recipes as recipes_pkg
from gb300lane.errors import RecipeError
from gb300lane.paths import shipped
from gb300lane.recipes.engine_schema import load_snapshot

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = shipped("vllm-0.33.0-schema.json")


def _script():
    spec = importlib.util.spec_from_file_location("snapshot_vllm_schema", ROOT / "scripts" / "snapshot_vllm_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPECULATIVE_SRC = '''
from typing import Literal
A = Literal["x", "y"]
B = Literal["z", A]
Mode = Literal["fast", "slow"]

class SpeculativeConfig:
    """doc"""
    method: B | None = None
    num_speculative_tokens: int = Field(default=None, gt=0)
    mode: Mode = "fast"
    topk: int | None = Field(default=None, ge=1)
    schedule: list[tuple[int, int, int]] | None = None
    target_model_config: SkipValidation[ModelConfig] = None
    _private: int = 0
'''
ARGS_SRC = """
from typing import Literal
class EngineArgs:
    model: str = ModelConfig.model
    per_request: Literal["none", "summary"] = "none"
"""
COMPILATION_SRC = """
class CompilationConfig:
    cudagraph_capture_sizes: list[int] = None
"""
FRONTEND_SRC = """
from typing import Literal
class BaseFrontendArgs:
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
class FrontendArgs(BaseFrontendArgs):
    host: str | None = None
    uvicorn_log_level: Literal["debug", "info"] = "info"
"""


def test_script_extracts_fields_choices_and_bounds(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/config/speculative.py", SPECULATIVE_SRC)
        zf.writestr("vllm/engine/arg_utils.py", ARGS_SRC)
        zf.writestr("vllm/config/compilation.py", COMPILATION_SRC)
        zf.writestr("vllm/entrypoints/common/cli_args.py", FRONTEND_SRC)
    out = tmp_path / "schema.json"
    assert _script().main([str(wheel), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["vllm_version"] == "9.9.9"
    fields = data["speculative_config"]["fields"]
    assert set(fields) == {"method", "num_speculative_tokens", "mode", "topk", "schedule"}
    assert fields["method"]["choices"] == ["x", "y", "z"]
    assert fields["mode"] == {"type": "Mode", "default": "fast", "choices": ["fast", "slow"]}
    assert fields["num_speculative_tokens"]["bounds"] == {"gt": 0}
    assert fields["topk"]["bounds"] == {"ge": 1} and fields["topk"]["default"] is None
    assert data["engine_args"]["fields"]["per_request"]["choices"] == ["none", "summary"]
    assert data["engine_args"]["fields"]["model"] == {"type": "str"}
    assert list(data["compilation_config"]["fields"]) == ["cudagraph_capture_sizes"]
    server = data["frontend_args"]["fields"]
    assert set(server) == {"enable_auto_tool_choice", "tool_call_parser", "host", "uvicorn_log_level"}
    assert server["uvicorn_log_level"]["choices"] == ["debug", "info"]


def test_committed_snapshot_is_vllm_0_33_0_and_knows_the_lane_keys() -> None:
    data = json.loads(SNAPSHOT.read_text())
    assert data["vllm_version"] == "0.33.0" and data["source"]["wheel"].startswith("vllm-0.33.0-")
    spec = data["speculative_config"]["fields"]
    assert "dspark" in spec["method"]["choices"] and "mtp" in spec["method"]["choices"]
    assert spec["rejection_sample_method"]["choices"] == ["block", "fly", "standard", "synthetic"]
    assert spec["draft_sample_method"]["choices"] == ["greedy", "probabilistic"]
    assert spec["dspark_draft_topk"]["bounds"] == {"ge": 1}
    for key in ("num_speculative_tokens_per_batch_size", "enable_adaptive_verification"):
        assert key in spec
    for key in ("max_num_seqs", "max_model_len", "gpu_memory_utilization", "per_request_spec_decode_metrics"):
        assert key in data["engine_args"]["fields"]
    assert "cudagraph_capture_sizes" in data["compilation_config"]["fields"]
    for key in ("enable_auto_tool_choice", "tool_call_parser", "chat_template"):
        assert key in data["frontend_args"]["fields"]


@pytest.mark.skipif(
    not os.environ.get("GB300LANE_VLLM_WHEEL"), reason="set GB300LANE_VLLM_WHEEL to a vllm 0.33.0 wheel"
)
def test_committed_snapshot_regenerates_identically(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    _script().main([os.environ["GB300LANE_VLLM_WHEEL"], "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(SNAPSHOT.read_text())


def test_unknown_vllm_version_names_the_script() -> None:
    with pytest.raises(RecipeError, match="snapshot_vllm_schema.py"):
        load_snapshot("0.0.1")


def test_public_api_is_sorted_and_pinned() -> None:
    assert recipes_pkg.__all__ == sorted(recipes_pkg.__all__)
    assert set(recipes_pkg.__all__) == {
        "ContainerSpec",
        "KeyChange",
        "LintFinding",
        "Recipe",
        "RecipeDiff",
        "RecipeSummary",
        "RenderedLane",
        "SmokeGate",
        "WindowSpec",
        "compact_json",
        "content_hash",
        "content_values",
        "diff_recipes",
        "diff_values",
        "effective_k",
        "fingerprint",
        "get_key",
        "hash_values",
        "lane_base_name",
        "lint",
        "list_recipes",
        "load_recipe",
        "render",
        "render_compose",
        "render_docker_run",
        "render_json",
        "requires_acknowledgement",
        "validate_raw",
        "write_rendered",
    }
    for name in recipes_pkg.__all__:
        assert getattr(recipes_pkg, name) is not None
