"""Diff and fingerprint: the boots the write-up saw are the boots the diff predicts."""

from __future__ import annotations

import copy

import pytest

from gb300lane.paths import shipped
from gb300lane.recipes import diff_recipes, fingerprint, hash_values, load_recipe, validate_raw

RECIPES = shipped("recipes")


def recipe(name: str):
    return load_recipe(name, RECIPES)


def variant(name: str, **sections):
    raw = copy.deepcopy(recipe(name).model_dump(mode="json"))
    for section, values in sections.items():
        raw[section] = {**raw[section], **values}
    raw["name"] = f"{name}-variant"
    return validate_raw(raw, f"{name}-variant")


def test_v26_to_v27_is_one_key_and_a_hash_hit() -> None:
    d = diff_recipes(recipe("v26"), recipe("v27"))
    assert [(c.key, c.old, c.new, c.hash_input) for c in d.changes] == [
        ("speculative.rejection_sample_method", "standard", "block", False)
    ]
    assert not d.hash_changed
    assert d.prediction == "hash unchanged: expect a hash-hit boot"


def test_v27_to_k9_changes_k_and_is_still_a_hash_hit() -> None:
    d = diff_recipes(recipe("v27"), recipe("k9"))
    assert [c.key for c in d.changes] == [
        "speculative.num_speculative_tokens",
        "speculative.num_speculative_tokens_per_batch_size",
    ]
    assert not any(c.hash_input for c in d.changes)
    assert d.prediction == "hash unchanged: expect a hash-hit boot"


def test_fingerprint_equal_for_v26_v27_k9_and_16_hex() -> None:
    fps = {fingerprint(recipe(n)) for n in ("v26", "v27", "k9")}
    assert len(fps) == 1
    (fp,) = fps
    assert len(fp) == 16 and int(fp, 16) >= 0
    local = {fingerprint(recipe(n)) for n in ("local-v26", "local-v27", "local-k9")}
    assert len(local) == 1 and local != fps


@pytest.mark.parametrize(
    "section,values,key",
    [
        ("engine_args", {"max_num_seqs": 64}, "engine_args.max_num_seqs"),
        ("speculative", {"enable_adaptive_verification": True}, "speculative.enable_adaptive_verification"),
        (
            "engine_args",
            {"compilation_config": {"cudagraph_capture_sizes": [1, 2, 4]}},
            "engine_args.compilation_config.cudagraph_capture_sizes",
        ),
        ("image", {"ref": "vllm/vllm-openai:nightly-0000000"}, "image.ref"),
    ],
)
def test_changing_a_hash_input_predicts_a_tuning_boot(section: str, values: dict, key: str) -> None:
    base, changed = recipe("v27"), variant("v27", **{section: values})
    assert fingerprint(base) != fingerprint(changed)
    d = diff_recipes(base, changed)
    assert [c.key for c in d.changes] == [key]
    assert d.changes[0].hash_input and d.hash_changed
    assert d.prediction == f"hash changed ({key}): expect a tuning boot"


def test_non_hash_change_keeps_fingerprint() -> None:
    changed = variant("v27", engine_args={"gpu_memory_utilization": 0.9}, lane={"port": 30016})
    assert fingerprint(changed) == fingerprint(recipe("v27"))
    d = diff_recipes(recipe("v27"), changed)
    assert {c.key for c in d.changes} == {"engine_args.gpu_memory_utilization", "lane.port"}
    assert not d.hash_changed


def test_identical_recipes_have_no_changes() -> None:
    d = diff_recipes(recipe("v27"), recipe("v27"))
    assert d.changes == () and not d.hash_changed


def test_hash_values_are_the_image_inputs_in_order() -> None:
    v27 = recipe("v27")
    values = hash_values(v27)
    assert tuple(values) == v27.image.hash_inputs
    assert values["model.checkpoint"] == {"mtp_stages": 3, "dspark_block_size": 5, "draft_topk": 64}
