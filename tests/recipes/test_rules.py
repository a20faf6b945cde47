"""Lint rules, driven by the cases in tests/golden/recipes/lint-cases.yaml."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import gb300lane.recipes.rules as rules_module
from gb300lane.paths import shipped
from gb300lane.recipes import Recipe, lint, load_recipe, requires_acknowledgement, validate_raw

TESTS = Path(__file__).resolve().parents[1]
RECIPES = shipped("recipes")
CASES = yaml.safe_load((TESTS / "golden" / "recipes" / "lint-cases.yaml").read_text(encoding="utf-8"))


def with_keys(base: str, values: dict[str, Any]) -> Recipe:
    """The shipped recipe with dotted keys set (None removes the key, so its default applies)."""
    raw = copy.deepcopy(load_recipe(base, RECIPES).model_dump(mode="json"))
    for dotted, value in values.items():
        *parents, last = dotted.split(".")
        node: Any = raw
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return validate_raw(raw, f"{base}+case")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_lint_case(case: dict[str, Any]) -> None:
    recipe = with_keys(case["base"], case["set"])
    findings = lint(recipe)
    assert sorted(f.rule_id for f in findings) == sorted(case["expect"])
    for f in findings:
        assert f.fix and f.message and f.key
        assert f.severity in ("error", "warning")


def test_cases_cover_every_rule() -> None:
    source = Path(rules_module.__file__).read_text(encoding="utf-8")
    rules = set(re.findall(r'rule_id="([a-z0-9-]+)"', source)) | set(re.findall(r'err\(\s*"([a-z0-9-]+)"', source))
    covered = {r for c in CASES for r in c["expect"]}
    assert rules - covered == set(), f"rules without a lint case: {sorted(rules - covered)}"


def test_k_outside_block_needs_acknowledgement_with_the_up_flag() -> None:
    k9 = load_recipe("k9", RECIPES)
    acks = requires_acknowledgement(k9)
    assert [f.rule_id for f in acks] == ["k-outside-trained-block"]
    assert acks[0].severity == "warning"
    assert "--allow-outside-trained-block" in acks[0].fix and "gb300lane up" in acks[0].fix
    assert "= 9 exceeds the trained block (model.checkpoint.dspark_block_size = 5)" in acks[0].message
    assert requires_acknowledgement(load_recipe("v27", RECIPES)) == []


def test_errors_sort_before_warnings() -> None:
    recipe = with_keys("k9", {"lane.dark": True})
    severities = [f.severity for f in lint(recipe)]
    assert severities == sorted(severities, key=lambda s: s != "error") and "error" in severities


def test_unpinned_capture_sizes_warn_only_when_k_moves_from_the_parent() -> None:
    parent = with_keys("local-v27", {"engine_args.compilation_config": {}})
    same_k = with_keys("local-v27", {"engine_args.compilation_config": {}})
    other_k = with_keys("local-k9", {"engine_args.compilation_config": {}})
    assert "capture-sizes-not-pinned" not in {f.rule_id for f in lint(same_k, parent=parent)}
    moved = [f for f in lint(other_k, parent=parent) if f.rule_id == "capture-sizes-not-pinned"]
    assert len(moved) == 1 and "(5 -> 9)" in moved[0].message
