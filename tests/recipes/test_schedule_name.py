"""The k schedule's new name (`speculative_token_schedule`, vLLM's open rename of
`num_speculative_tokens_per_batch_size`): accepted by the schema, linted, rendered under the engine's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane.errors import RecipeError
from gb300lane.recipes import lint, load_recipe, render
from gb300lane.recipes.engine_schema import schedule_name

RENAMED = """schema_version: 1
name: local-renamed
extends: local-v26
description: "local-v26, its schedule under the new name"
speculative:
  num_speculative_tokens_per_batch_size: null
  speculative_token_schedule: [[2, 4, 5], [5, 32, 3]]
"""


def _with_parent(folder: Path) -> Path:
    from gb300lane import paths

    (folder / "local-v26.yaml").write_text((paths.shipped("recipes") / "local-v26.yaml").read_text())
    return folder


def test_the_new_name_loads_lints_and_renders_under_the_name_vllm_knows(tmp_path: Path) -> None:
    _with_parent(tmp_path)
    (tmp_path / "local-renamed.yaml").write_text(RENAMED)
    recipe = load_recipe("local-renamed", tmp_path)
    assert recipe.speculative.schedule == ((2, 4, 5), (5, 32, 3))
    assert recipe.speculative.schedule_key == "speculative.speculative_token_schedule"
    found = {f.rule_id: f for f in lint(recipe)}
    assert found["schedule-first-not-1"].key == "speculative.speculative_token_schedule"
    assert schedule_name("0.33.0") == "num_speculative_tokens_per_batch_size"
    argv = " ".join(render(recipe).containers[0].argv)
    assert '"num_speculative_tokens_per_batch_size":[[2,4,5],[5,32,3]]' in argv
    assert "speculative_token_schedule" not in argv


def test_the_schedule_given_under_both_names_is_refused(tmp_path: Path) -> None:
    _with_parent(tmp_path)
    (tmp_path / "local-both.yaml").write_text(
        RENAMED.replace("local-renamed", "local-both").replace(
            "  num_speculative_tokens_per_batch_size: null\n", "  num_speculative_tokens_per_batch_size: [[1, 32, 5]]\n"
        )
    )
    with pytest.raises(RecipeError, match="give the schedule once, under one name"):
        load_recipe("local-both", tmp_path)


def test_the_embedded_engine_takes_either_name() -> None:
    from gb300lane.engine.config import parse_spec_config
    from gb300lane.errors import EngineError

    spec, _ = parse_spec_config(
        '{"method": "dspark", "num_speculative_tokens": 5, "speculative_token_schedule": [[1, 4, 5], [5, 32, 3]]}'
    )
    assert spec is not None and spec.k_for_batch(8) == 3
    with pytest.raises(EngineError, match="give it once"):
        parse_spec_config(
            '{"method": "dspark", "speculative_token_schedule": [[1, 32, 5]], '
            '"num_speculative_tokens_per_batch_size": [[1, 32, 5]]}'
        )
