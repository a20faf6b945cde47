"""Loading recipes: the shipped set, extends, and every kind of bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gb300lane import paths
from gb300lane.errors import RecipeError
from gb300lane.paths import shipped
from gb300lane.recipes import Recipe, get_key, list_recipes, load_recipe
from gb300lane.recipes.loader import deep_merge

SHIPPED = ["cpu-k9", "cpu-k9s", "cpu-v26", "cpu-v27", "k9", "local-k9", "local-v26", "local-v27", "v26", "v27"]

BASE = (shipped("recipes") / "local-v26.yaml").read_text(encoding="utf-8")


def write(d: Path, name: str, text: str) -> Path:
    path = d / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_recipes_load_and_list() -> None:
    names = [s.name for s in list_recipes(shipped("recipes"))]
    assert names == SHIPPED
    for name in SHIPPED:
        assert isinstance(load_recipe(name, shipped("recipes")), Recipe)


def test_v27_adds_exactly_block_verification_to_v26() -> None:
    v26, v27 = load_recipe("v26", shipped("recipes")), load_recipe("v27", shipped("recipes"))
    assert v27.extends == "v26"
    assert v26.speculative.rejection_sample_method == "standard"
    assert v27.speculative.rejection_sample_method == "block"
    assert v27.speculative.num_speculative_tokens_per_batch_size == ((1, 4, 5), (5, 8, 3), (9, 32, 3))
    assert v27.model_dump(exclude={"name", "description", "extends", "speculative"}) == v26.model_dump(
        exclude={"name", "description", "extends", "speculative"}
    )


def test_write_up_facts_on_the_real_lane() -> None:
    v26 = load_recipe("v26", shipped("recipes"))
    assert v26.lane.port == 30006
    assert v26.kv_pool_tokens == 4_400_013
    assert v26.image.ref.endswith("nightly-af7f9488")
    assert v26.model.checkpoint.dspark_block_size == 5 and v26.model.checkpoint.mtp_stages == 3
    for key in ("speculative.num_speculative_tokens", "speculative.rejection_sample_method"):
        assert key not in v26.image.hash_inputs
    local = load_recipe("local-v26", shipped("recipes"))
    assert (local.engine, local.runtime, local.lane.port, local.sidecar.port) == ("embedded", "process", 30106, 30107)
    assert local.engine_args.time_scale == 0.01 and local.gpus.main == ()


def test_get_key_dotted() -> None:
    v27 = load_recipe("v27", shipped("recipes"))
    assert get_key(v27, "speculative.rejection_sample_method") == "block"
    assert get_key(v27, "model.checkpoint.dspark_block_size") == 5
    with pytest.raises(RecipeError, match="no key 'speculative.nope'"):
        get_key(v27, "speculative.nope")


def test_deep_merge_merges_mappings_and_replaces_lists() -> None:
    merged = deep_merge({"a": {"x": 1, "l": [1, 2]}, "b": 1}, {"a": {"y": 2, "l": [3]}})
    assert merged == {"a": {"x": 1, "y": 2, "l": [3]}, "b": 1}


def test_extends_chain_resolves(tmp_path: Path) -> None:
    write(tmp_path, "base", BASE.replace("name: local-v26", "name: base"))
    write(
        tmp_path,
        "mid",
        "schema_version: 1\nname: mid\nextends: base\ndescription: m\nspeculative:\n  rejection_sample_method: block\n",
    )
    write(
        tmp_path,
        "top",
        "schema_version: 1\nname: top\nextends: mid\ndescription: t\nspeculative:\n  num_speculative_tokens: 4\n",
    )
    top = load_recipe("top", tmp_path)
    assert top.speculative.rejection_sample_method == "block"
    assert top.speculative.num_speculative_tokens == 4
    assert top.description == "t" and top.extends == "mid"


BAD_CASES = {
    "unknown-key": (
        BASE.replace("kv_pool_tokens: 4400013", "kv_pool_tokenz: 4400013"),
        [r"bad\.yaml:\d+", "kv_pool_tokenz", "did you mean 'kv_pool_tokens'"],
    ),
    "unknown-nested-key": (
        BASE.replace("  dark: false", "  drak: false"),
        [r"bad\.yaml:\d+", "lane.drak", "unknown key"],
    ),
    "unknown-speculative-key": (
        BASE.replace("  dspark_draft_topk: 64", "  dspark_draft_top_k: 64"),
        [r"bad\.yaml:\d+", "speculative.dspark_draft_top_k", "did you mean 'dspark_draft_topk'"],
    ),
    "bad-speculative-choice": (
        BASE.replace("rejection_sample_method: standard", "rejection_sample_method: blok"),
        ["speculative.rejection_sample_method", "did you mean 'block'"],
    ),
    "unknown-extra-arg": (
        BASE.replace("  extra_args:\n", "  extra_args:\n    enable_prefix_cachng: true\n", 1),
        ["engine_args.extra_args.enable_prefix_cachng", "did you mean 'enable_prefix_caching'"],
    ),
    "unknown-server-arg": (
        BASE.replace("  extra_args:\n", "  extra_args:\n    tool_call_parsr: deepseek_v41\n", 1),
        ["engine_args.extra_args.tool_call_parsr", "did you mean 'tool_call_parser'"],
    ),
    "unknown-compilation-key": (
        BASE.replace("    cudagraph_capture_sizes:", "    cudagraph_capture_size:"),
        ["engine_args.compilation_config.cudagraph_capture_size", "did you mean 'cudagraph_capture_sizes'"],
    ),
    "wrong-type": (
        BASE.replace("  port: 30106", "  port: lots"),
        [r"bad\.yaml:\d+", "lane.port", "integer"],
    ),
    "missing-key": (
        BASE.replace("  served_name: deepseek-v4.1-flash\n", ""),
        ["model.served_name", "missing"],
    ),
    "duplicate-key": (
        BASE.replace("  port: 30106", "  port: 30106\n  port: 30108"),
        [r"bad\.yaml:\d+", "duplicate key 'port'", "first at line"],
    ),
    "not-a-mapping": ("- just\n- a list\n", ["not a mapping"]),
    "scalar-document": ("hello\n", ["not a mapping"]),
    "empty": ("", ["empty"]),
    "comments-only": ("# nothing here\n", ["empty"]),
    "alias-bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)),
        ["alias"],
    ),
    "time-scale-on-vllm": (BASE.replace("engine: embedded", "engine: vllm"), ["time_scale", "embedded engine only"]),
    "name-mismatch": (BASE, ["name = 'local-v26'", "set name: bad"]),
    "extends-path": (
        "schema_version: 1\nname: bad\nextends: ../etc/passwd\ndescription: x\n",
        ["extends", "not a recipe name"],
    ),
    "invalid-yaml": ("a: [1, 2\n", ["invalid YAML"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_is_one_clear_error(tmp_path: Path, case: str) -> None:
    text, patterns = BAD_CASES[case]
    if case != "name-mismatch":
        text = text.replace("name: local-v26", "name: bad")
    write(tmp_path, "bad", text)
    with pytest.raises(RecipeError) as info:
        load_recipe("bad", tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert "bad.yaml" in message
    for pattern in patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


def test_extends_cycle(tmp_path: Path) -> None:
    write(tmp_path, "a", "schema_version: 1\nname: a\nextends: b\ndescription: x\n")
    write(tmp_path, "b", "schema_version: 1\nname: b\nextends: a\ndescription: x\n")
    with pytest.raises(RecipeError, match=r"extends cycle a -> b -> a"):
        load_recipe("a", tmp_path)


def test_self_extends_is_a_cycle(tmp_path: Path) -> None:
    write(tmp_path, "a", "schema_version: 1\nname: a\nextends: a\ndescription: x\n")
    with pytest.raises(RecipeError, match=r"extends cycle a -> a"):
        load_recipe("a", tmp_path)


def test_missing_parent_is_named(tmp_path: Path) -> None:
    write(tmp_path, "child", "schema_version: 1\nname: child\nextends: ghost\ndescription: x\n")
    with pytest.raises(RecipeError) as info:
        load_recipe("child", tmp_path)
    assert "child.yaml:3: extends = 'ghost'" in str(info.value)
    assert "ghost.yaml does not exist" in str(info.value)


def test_missing_recipe_lists_available(tmp_path: Path) -> None:
    write(tmp_path, "only", BASE.replace("name: local-v26", "name: only"))
    with pytest.raises(RecipeError, match=r"no recipe named 'nope' \(available: only\)"):
        load_recipe("nope", tmp_path)


@pytest.mark.parametrize("name", ["../x", "a/b", "/etc/passwd", ".hidden", "", "v27.yaml/.."])
def test_recipe_name_carrying_a_path_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(RecipeError, match="not a recipe name"):
        load_recipe(name, tmp_path)


def test_duplicate_key_in_nested_mapping_reports_both_lines(tmp_path: Path) -> None:
    text = BASE.replace("name: local-v26", "name: bad").replace(
        "  rejection_sample_method: standard", "  rejection_sample_method: standard\n  rejection_sample_method: block"
    )
    write(tmp_path, "bad", text)
    lines = text.splitlines()
    first = lines.index("  rejection_sample_method: standard") + 1
    with pytest.raises(RecipeError) as info:
        load_recipe("bad", tmp_path)
    assert f"bad.yaml:{first + 1}: duplicate key 'rejection_sample_method' (first at line {first})" in str(info.value)


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    text = (
        BASE.replace("name: local-v26", "name: ok")
        .replace(
            "        classes: [prose, code, tool_json]\n        transcripts_per_class: 4\n        rounds: 1\n        concurrency: [1, 8]\n        temperature: 0.0",
            "        classes: &cls [prose, code, tool_json]\n        transcripts_per_class: 4\n        rounds: 1\n        concurrency: [1, 8]\n        temperature: 0.0",
        )
        .replace("        classes: [prose, code, tool_json]\n", "        classes: *cls\n")
    )
    assert "*cls" in text and "&cls" in text
    write(tmp_path, "ok", text)
    recipe = load_recipe("ok", tmp_path)
    assert recipe.smoke.gates[1].window.classes == ("prose", "code", "tool_json")


def test_error_in_a_parent_key_names_the_parent_file_and_line(tmp_path: Path) -> None:
    text = BASE.replace("name: local-v26", "name: base").replace("  max_num_seqs: 32", "  max_num_seqs: many")
    write(tmp_path, "base", text)
    write(tmp_path, "child", "schema_version: 1\nname: child\nextends: base\ndescription: c\n")
    line = text.splitlines().index("  max_num_seqs: many") + 1
    with pytest.raises(RecipeError) as info:
        load_recipe("child", tmp_path)
    assert f"base.yaml:{line}: engine_args.max_num_seqs" in str(info.value)


def test_unknown_vllm_version_points_at_the_key(tmp_path: Path) -> None:
    text = BASE.replace("name: local-v26", "name: bad").replace('vllm_version: "0.33.0"', 'vllm_version: "0.1.0"')
    write(tmp_path, "bad", text)
    line = text.splitlines().index('  vllm_version: "0.1.0"') + 1
    with pytest.raises(
        RecipeError, match=rf"bad\.yaml:{line}: image\.vllm_version = '0\.1\.0': no engine schema snapshot"
    ):
        load_recipe("bad", tmp_path)


def test_working_directory_recipes_come_first_and_may_extend_the_shipped_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GB300LANE_RECIPES_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.recipe_dirs() == (paths.shipped("recipes"),)  # no ./recipes: the shipped ones only
    (tmp_path / "recipes").mkdir()
    write(tmp_path / "recipes", "mine", "schema_version: 1\nname: mine\nextends: v27\ndescription: my lane\n")
    shadow = BASE.replace('description: "v26 on the embedded engine', 'description: "my own local-v26')
    write(tmp_path / "recipes", "local-v26", shadow)
    assert paths.recipe_dirs() == (tmp_path / "recipes", paths.shipped("recipes"))
    assert load_recipe("mine").speculative.rejection_sample_method == "block"  # v27 from the package
    assert load_recipe("local-v26").description.startswith("my own")
    assert load_recipe("local-v27").description.startswith("v27 on the embedded engine")  # extends ./local-v26
    listed = {s.name: s.path for s in list_recipes()}
    assert listed["mine"] == "recipes/mine.yaml" and listed["local-v26"] == "recipes/local-v26.yaml"
    assert listed["v27"] == str(paths.shipped("recipes") / "v27.yaml")


def test_results_go_to_the_working_directory_and_shipped_data_is_package_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GB300LANE_RESULTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.results_dir() == tmp_path / "results"
    import gb300lane

    package = Path(gb300lane.__file__).parent
    for what in ("cards", "vllm-0.33.0-schema.json"):
        assert paths.shipped(what).exists() and package in paths.shipped(what).parents
    # In a checkout, what the repository keeps at its top level is read there (a wheel carries a copy in the package).
    root = package.parent
    assert paths.shipped("recipes") == root / "recipes" and paths.shipped("templates") == root / "templates"
    assert paths.writeup_receipts_dirs() == tuple(root / "results" / run for run in paths.WRITEUP_RUNS)
    assert all((d / "manifest.json").is_file() for d in paths.writeup_receipts_dirs())


def test_the_checkout_keeps_recipes_templates_and_receipts_at_its_top_only() -> None:
    # A copy under gb300lane/data/ would be read instead of the top-level folder (a wheel's place for it): a recipe
    # added there (say, by a branch made before the move) would shadow the top-level one without a word.
    import gb300lane

    data = Path(gb300lane.__file__).parent / "data"
    stray = [str(data / name) for name in paths.TOP_LEVEL if (data / name).exists()]
    assert not stray, f"move {', '.join(stray)} to the repository's top level ({', '.join(paths.TOP_LEVEL.values())}/)"
