"""`card plan` refuses a card whose arm recipe is missing before it boots anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import lane
from gb300lane.cards import load_card
from gb300lane.cli.main import app
from gb300lane.errors import CardError
from gb300lane.instrument.plan import plan_for

DATA = Path(__file__).parents[1] / "data" / "cards"


class _NoBoots:
    """Arm ops that fail the test if anything is booted."""

    def __getattr__(self, name: str):
        raise AssertionError(f"card plan asked the lane for {name} before it checked the card's recipes")


def test_a_card_with_a_missing_arm_recipe_is_refused_before_any_pilot_boot(tmp_path: Path) -> None:
    card_file = tmp_path / "gone.yaml"
    card_file.write_text((DATA / "mini.yaml").read_text().replace("recipe: local-v27", "recipe: local-v99"))
    card, _ = load_card(card_file)
    with pytest.raises(CardError) as exc:
        plan_for(card, pilot=True, ops=_NoBoots())
    assert "local-v99" in str(exc.value) and "arm B" in str(exc.value)
    out = CliRunner().invoke(app, ["card", "plan", str(card_file), "--pilot"], env={"COLUMNS": "400"})
    assert out.exit_code == 1 and "local-v99" in out.output, out.output
    assert lane.list_instances() == []
