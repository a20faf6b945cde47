"""Card files: the bracket's shape, gate references and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gb300lane.cards.cardfile import load_card
from gb300lane.cards.schema import gates_hash, parse_card
from gb300lane.errors import CardError

DATA = Path(__file__).parents[1] / "data" / "cards"


def _mini() -> dict:
    return yaml.safe_load((DATA / "mini.yaml").read_text())


def _parse(d: dict):
    return parse_card(yaml.safe_dump(d), "cards/x.yaml")


def test_shipped_cards_load() -> None:
    for name in ("br1-block-verification", "br2-k-ladder-peerbench", "local-br1", "local-br2"):
        card, path = load_card(name)
        assert card.name == name == path.stem
        assert card.arms[0].recipe == card.arms[-1].recipe


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["arms"].insert(0, d["arms"].pop(1)), "open and close with a control"),
        (lambda d: d["arms"][2].update(role="candidate"), "exactly one candidate"),
        (lambda d: d["arms"][2].update(recipe="v27"), "same recipe"),
        (lambda d: d["gates"][1].update(window="nope"), "gate decode-b-over-ctrl: window 'nope'"),
        (lambda d: d["gates"][1].update(bar={"mode": "spread", "value": 0.02}), "needs source"),
        (lambda d: d["gates"].append(dict(d["gates"][0])), "gate ids must be unique"),
        (lambda d: d.update(name="Not A Slug"), "must be a slug"),
        (lambda d: d.update(primary_window="t0"), "primary_window"),
        (lambda d: d["gates"][0].update(surprise=1), "gates.0.tokens_per_step_ratio.surprise"),
    ],
)
def test_invalid_cards_name_file_and_key(mutate, message) -> None:
    d = _mini()
    mutate(d)
    with pytest.raises(CardError) as exc:
        _parse(d)
    assert str(exc.value).startswith("cards/x.yaml: ")
    assert message in str(exc.value)


def test_unknown_card_lists_known_ones() -> None:
    with pytest.raises(CardError, match="known cards: .*local-br1"):
        load_card("no-such-card")


def test_gates_hash_tracks_gates_not_prose() -> None:
    d = _mini()
    h = gates_hash(_parse(d))
    d["title"] = "another title"
    d["description"] = "more words"
    assert gates_hash(_parse(d)) == h
    d["gates"][1]["bar"]["value"] = 0.03
    assert gates_hash(_parse(d)) != h
    d = _mini()
    d["windows"][0]["forced_tokens"] = 65
    assert gates_hash(_parse(d)) != h


def test_card_names_are_looked_up_in_the_working_directory_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gb300lane import paths
    from gb300lane.cards.cardfile import known_cards, resolve_card_path

    monkeypatch.delenv("GB300LANE_CARDS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_card_path("local-br1") == paths.shipped("cards") / "local-br1.yaml"
    # `cards/NAME.yaml` with no such file here is the shipped card of that name
    assert resolve_card_path("cards/local-br1.yaml") == paths.shipped("cards") / "local-br1.yaml"
    with pytest.raises(CardError, match="card file not found"):
        resolve_card_path("cards/no-such-card.yaml")
    (tmp_path / "cards").mkdir()
    mine = tmp_path / "cards" / "local-br1.yaml"
    mine.write_text((paths.shipped("cards") / "local-br1.yaml").read_text())
    assert resolve_card_path("local-br1") == mine
    assert resolve_card_path("cards/local-br1.yaml") == Path("cards/local-br1.yaml")
    assert {p.stem for p in known_cards()} >= {"local-br1", "local-br2", "br1-block-verification"}
    with pytest.raises(
        CardError,
        match="known cards: br1-block-verification, br2-k-ladder-peerbench, cpu-aa, cpu-br1, cpu-br2, local-br1",
    ):
        resolve_card_path("no-such-card")


def test_boot_sd_is_registered_with_the_gate_and_checked() -> None:
    card, _ = load_card(Path(__file__).parents[1] / "data" / "cards" / "tested.yaml")
    gate = card.gate("tokens-per-step")
    with_boot = card.model_copy(
        update={
            "gates": tuple(
                g.model_copy(update={"boot_sd": 0.002, "boot_df": 50}) if g.id == gate.id else g for g in card.gates
            )
        }
    )
    assert gates_hash(with_boot) != gates_hash(card)
    for bad, why in (
        ({"boot_df": 10}, "boot_df is set without boot_sd"),
        ({"boot_sd": 0.002, "interval": "bca"}, "boot_sd needs interval t"),
    ):
        with pytest.raises(ValueError, match=why):
            type(gate).model_validate({**gate.model_dump(), **bad})
