"""One YAML reader for every file the tool reads: recipes, cards, inventories and window files alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gb300lane.bench.catalog import load_window_file
from gb300lane.errors import BenchError

PACKAGE = Path(__file__).resolve().parents[2] / "gb300lane"

#: The embedded engine is a separate program that reads `vllm serve --config` as vLLM does (PyYAML's own rules).
ENGINE_CONFIG = "engine/args.py"


def test_no_module_but_the_reader_loads_yaml_itself() -> None:
    loads = re.compile(r"\byaml\.(safe_load|load|full_load|unsafe_load|load_all|safe_load_all)\(")
    found = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if loads.search(p.read_text()))
    assert found == [ENGINE_CONFIG]


def test_a_window_file_goes_through_the_strict_reader(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("name: w\nname: again\n")
    with pytest.raises(BenchError, match="duplicate"):
        load_window_file(f)
    f.write_text("a: &x [1]\n" + "".join(f"k{i}: *x\n" for i in range(100)))
    with pytest.raises(BenchError, match="alias"):
        load_window_file(f)
