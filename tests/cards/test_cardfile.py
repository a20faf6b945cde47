"""Card files go through the recipes' strict YAML reader: duplicate keys, encodings, syntax and size, each one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane.cards.cardfile import load_card
from gb300lane.cards.schema import parse_card
from gb300lane.errors import CardError
from gb300lane.recipes.yamlio import MAX_FILE_BYTES

MINI = (Path(__file__).parents[1] / "data" / "cards" / "mini.yaml").read_text(encoding="utf-8")


def _error(text: str | bytes, tmp_path: Path) -> str:
    path = tmp_path / "x.yaml"
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    with pytest.raises(CardError) as info:
        load_card(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_the_mini_card_loads(tmp_path: Path) -> None:
    assert parse_card(MINI, "x.yaml").name


def test_a_duplicate_key_names_both_lines(tmp_path: Path) -> None:
    text = MINI.replace("title:", "title: first\ntitle:", 1)
    line = text.splitlines().index("title: first") + 1
    assert f"x.yaml:{line + 1}: duplicate key 'title' (first at line {line})" in _error(text, tmp_path)


def test_non_utf8_is_one_line(tmp_path: Path) -> None:
    assert "not UTF-8" in _error(MINI.encode("utf-8") + "# caf\xe9\n".encode("latin-1"), tmp_path)


def test_a_yaml_error_is_one_line_with_its_line(tmp_path: Path) -> None:
    message = _error(MINI + "gates: [unclosed\n", tmp_path)
    assert "invalid YAML" in message and "fix the syntax at that line" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("- a\n- b\n", "the document is a list, not a mapping"),
        ("a: &r [*r]\n", "recursive YAML anchor"),
        ("x: " + "y" * (MAX_FILE_BYTES + 1), "larger than"),
    ],
)
def test_shapes_and_limits(tmp_path: Path, text: str, message: str) -> None:
    assert message in _error(text, tmp_path)


def test_a_non_finite_bar_is_refused(tmp_path: Path) -> None:
    assert ".inf' is not a finite number" in _error(MINI.replace("min_ratio: ", "min_ratio: .inf #", 1), tmp_path)
