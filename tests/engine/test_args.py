"""`serve --config FILE`, as `vllm serve --config`: the file's flags, the command line winning, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane.engine.args import expand_config_file, parse_serve_args
from gb300lane.errors import EngineError

SPEC = '{"method":"dspark","num_speculative_tokens":5,"rejection_sample_method":"block"}'


def write(tmp_path: Path, text: str, name: str = "serve.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_files_flags_are_read_and_the_command_line_wins(tmp_path: Path) -> None:
    path = write(tmp_path, f"speculative-config: '{SPEC}'\nmax-num-seqs: 8\nmax-model-len: 4096\n")
    args = parse_serve_args(["--model", "builtin", "--config", path, "--max-num-seqs", "16"])
    assert args.spec is not None and args.spec.rejection_sample_method == "block"
    assert args.spec.num_speculative_tokens == 5
    assert args.max_num_seqs == 16 and args.max_model_len == 4096
    assert args.ignored == ()
    assert parse_serve_args(["--model", "builtin", f"--config={path}"]).max_num_seqs == 8


def test_a_positional_model_wins_over_the_files_model(tmp_path: Path) -> None:
    path = write(tmp_path, "model: elsewhere\nseed: 7\n")
    assert expand_config_file(["builtin", "--config", path]) == ["builtin", "--seed", "7"]
    assert parse_serve_args(["builtin", "--config", path]).seed == 7


def test_values_become_flags_the_way_vllm_reads_them(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "enable-prefix-caching: true\nenforce-eager: false\nserved-model-name: [a, b]\n"
        "compilation-config: {cudagraph_capture_sizes: [1, 2]}\nkv-transfer-config: null\n",
    )
    assert expand_config_file(["--config", path]) == [
        "--enable-prefix-caching",
        "--no-enforce-eager",
        "--served-model-name",
        "a",
        "b",
        "--compilation-config",
        '{"cudagraph_capture_sizes":[1,2]}',
    ]


def test_no_config_flag_leaves_the_command_line_alone() -> None:
    argv = ["--model", "builtin", "--port", "30106"]
    assert expand_config_file(argv) == argv


@pytest.mark.parametrize(
    "setup,match",
    [
        (lambda d: ["--config", write(d, "- a list\n")], "holds a list, not a mapping"),
        (lambda d: ["--config", write(d, "a: [unclosed\n")], "not valid YAML"),
        (lambda d: ["--config", write(d, "seed: 1\n", "serve.json")], r"not a \.yaml or \.yml file"),
        (lambda d: ["--config", str(d / "absent.yaml")], "cannot be read"),
        (lambda d: ["--config"], "needs a file"),
        (lambda d: ["--config", write(d, ""), "--config", write(d, "")], "more than once"),
    ],
    ids=["not-a-mapping", "bad-yaml", "suffix", "missing", "no-path", "twice"],
)
def test_a_bad_config_file_is_an_error_that_names_it(tmp_path: Path, setup, match: str) -> None:
    with pytest.raises(EngineError, match=match):
        parse_serve_args(setup(tmp_path))


def test_an_empty_config_file_adds_nothing(tmp_path: Path) -> None:
    assert expand_config_file(["builtin", "--config", write(tmp_path, "")]) == ["builtin"]
