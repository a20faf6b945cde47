"""The strict YAML reader's limits and the values a recipe may hold: every bad input is one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.cli.main import app
from gb300lane.errors import RecipeError
from gb300lane.paths import shipped
from gb300lane.recipes import list_recipes, load_recipe
from gb300lane.recipes.yamlio import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, parse_mapping

BASE = (shipped("recipes") / "local-v26.yaml").read_text(encoding="utf-8").replace("name: local-v26", "name: r")


def _write(d: Path, name: str, text: str | bytes) -> Path:
    path = d / f"{name}.yaml"
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def _child(extra: str, name: str = "r") -> str:
    return f"schema_version: 1\nname: {name}\nextends: base\ndescription: child\n{extra}"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    _write(tmp_path, "base", BASE.replace("name: r", "name: base"))
    return tmp_path


def _error(folder: Path, extra: str) -> str:
    _write(folder, "r", _child(extra))
    with pytest.raises(RecipeError) as info:
        load_recipe("r", folder)
    text = str(info.value)
    assert "\n" not in text and "r.yaml" in text
    return text


def test_a_recursive_anchor_is_one_line_and_the_other_recipes_still_list(folder: Path) -> None:
    _write(folder, "r", _child("smoke: &r {gates: [*r]}\n"))
    with pytest.raises(RecipeError, match=r"r\.yaml:5: the alias \*r refers to its own anchor"):
        load_recipe("r", folder)
    rows = {row.name: row for row in list_recipes(folder)}
    assert rows["base"].error is None and "recursive YAML anchor" in (rows["r"].error or "")
    result = CliRunner().invoke(app, ["recipes", "lint", "--recipes-dir", str(folder)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "recursive YAML anchor" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("a: &a [1, 2]\nb: *a\nb: 1\n", "duplicate key 'b' (first at line 6)"),
        ("speculative: {num_speculative_tokens: .inf}\n", "'.inf' is not a finite number"),
        ("engine_args: {time_scale: .nan}\n", "'.nan' is not a finite number"),
        ("engine_args: {time_scale: 1.0e+999}\n", "'1.0e+999' is not a finite number"),
        ("engine_args: {max_num_seqs: !!int abc}\n", "invalid YAML value"),
        ("x: [unclosed\n", "invalid YAML"),
        ("x: !!python/object:os.system {}\n", "invalid YAML"),
    ],
)
def test_yaml_the_loader_refuses(folder: Path, extra: str, message: str) -> None:
    assert message in _error(folder, extra)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('image: {ref: "--privileged"}\n', "image.ref: '--privileged' is not a Docker image reference"),
        ('image: {ref: "vllm/vllm-openai:v1 --privileged"}\n', "is not a Docker image reference"),
        ('sidecar: {image: "-v/:/host"}\n', "sidecar.image: '-v/:/host' is not a Docker image reference"),
        ('env: {"K=$(id)": x}\n', "env key 'K=$(id)' is not a POSIX variable name"),
        ('env: {"A\\nB": x}\n', "is not a POSIX variable name"),
        ('env: {"1A": x}\n', "is not a POSIX variable name"),
        ('sidecar: {env: {"a b": x}}\n', "env key 'a b' is not a POSIX variable name"),
        ("speculative: {num_speculative_tokens: 1000000000000}\n", "num_speculative_tokens = 1000000000000"),
        ("speculative: {num_speculative_tokens_per_batch_size: [[1, 8, 64]]}\n", "k = 64 in [1, 8, 64] exceeds 32"),
        ("engine_args: {time_scale: 1000}\n", "engine_args.time_scale = 1000"),
        ("engine_args: {time_scale: '1e999'}\n", "time_scale = '1e999': Input should be a finite number"),
        ("kv_pool_tokens: 1000000000000000\n", "kv_pool_tokens = 1000000000000000"),
        ("lane: {name: ../x}\n", "'../x' is not a lane name"),
    ],
)
def test_values_outside_their_grammar_or_bounds_are_refused(folder: Path, extra: str, message: str) -> None:
    assert message in _error(folder, extra)


def test_a_file_past_the_size_limit_is_refused_without_parsing(folder: Path) -> None:
    _write(folder, "r", _child("description2: " + "x" * MAX_FILE_BYTES + "\n"))
    with pytest.raises(RecipeError, match=rf"larger than {MAX_FILE_BYTES // 1024} KiB"):
        load_recipe("r", folder)


@pytest.mark.slow
def test_a_million_keys_stop_at_the_node_limit(folder: Path) -> None:
    # 1,000,000 keys would be 12 MB; under the size limit the node count still bounds the work.
    keys = "".join(f"k{i}: {i}\n" for i in range(MAX_NODES))
    assert len(keys) < MAX_FILE_BYTES
    with pytest.raises(RecipeError, match=f"more than {MAX_NODES} YAML nodes"):
        parse_mapping(keys, "big.yaml")
    million = "".join(f"k{i}: 1\n" for i in range(1_000_000))
    _write(folder, "r", million)
    with pytest.raises(RecipeError, match="larger than"):
        load_recipe("r", folder)


def test_nesting_past_the_depth_limit_is_refused() -> None:
    deep = "a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    with pytest.raises(RecipeError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_mapping(deep, "deep.yaml")
    very_deep = "a: " + "[" * 100_000 + "]" * 100_000 + "\n"
    with pytest.raises(RecipeError, match="deep.yaml"):
        parse_mapping(very_deep, "deep.yaml")


def test_non_utf8_is_a_clean_error(folder: Path) -> None:
    _write(folder, "r", _child("description: caf\xe9\n").encode("latin-1"))
    with pytest.raises(RecipeError, match=r"r\.yaml: not UTF-8 \(byte \d+: b'\\xe9'\); save the recipe as UTF-8"):
        load_recipe("r", folder)


def test_markup_in_a_description_prints_as_text(folder: Path) -> None:
    _write(folder, "r", _child('description: "a [/] b [bold]c"\n').replace("description: child\n", ""))
    result = CliRunner().invoke(app, ["recipes", "list", "--recipes-dir", str(folder)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "a [/] b [bold]c" in result.output
