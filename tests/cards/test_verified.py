"""The noise ledger and the plans read only receipts whose chain verifies and that the evidence log entered, and
say how many they skipped and why: four hand-made copies of a card with A2 made equal to A no longer shrink
the lane's boot sd, nor the size `card plan` and `card register` (which signs it) give."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.cards import load_card, register, run_card, score
from gb300lane.cards.record.noise import ALL_CELLS, ledger
from gb300lane.cards.record.verified import planning_receipts
from gb300lane.cli.main import app
from gb300lane.instrument.plan import registration_plan

from fakes import cards as fakes

DATA = Path(__file__).resolve().parents[1] / "data" / "cards"
runner = CliRunner()


def _cards(tmp_path: Path, shifts: list[tuple[float, float]]) -> list[Path]:
    text = (DATA / "tested.yaml").read_text().replace("    mde: 0.02\n", "    mde: 0.02\n    scope: aggregate\n")
    roots = []
    for i, (a, a2) in enumerate(shifts):
        p = tmp_path / f"tested-{i}.yaml"
        p.write_text(
            text.replace("name: tested\n", f"name: tested-{i}\n").replace(
                "seed_base: 1000", f"seed_base: {1000 + 7919 * (i + 1)}"
            )
        )
        card, _ = load_card(p)
        rec = register(card, p.read_text())
        run_card(rec, ops=fakes.FakeLane(card, {}, tps={"A": 1 + a, "A2": 1 + a2, "B": 1.0}, noise=0.02).ops())
        score(rec)
        roots.append(rec.root)
    return roots


def _copies(roots: list[Path], n: int) -> list[Path]:
    """`n` copies of the scored cards in turn with their A2 windows made equal to A's (the chain no longer holds)."""
    out = []
    for k in range(n):
        root = roots[k % len(roots)]
        copy = root.with_name(f"{root.name}-copy{k}")
        shutil.copytree(root, copy)
        for p in [copy, *copy.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        for window in (copy / "arms" / "A" / "attempt-1" / "windows").glob("*.json"):
            shutil.copy(window, copy / "arms" / "A2" / "attempt-1" / "windows" / window.name)
        out.append(copy)
    return out


def _sd() -> float:
    got = [e for k, e in ledger().items() if k.metric == "tokens_per_step" and k.unit == ALL_CELLS]
    assert len(got) == 1
    return got[0].sd


@pytest.mark.slow
def test_four_copies_with_a2_equal_to_a_are_skipped_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    roots = _cards(tmp_path, [(0.006, -0.004), (-0.005, 0.003), (0.002, -0.006)])
    card, _ = load_card(tmp_path / "tested-0.yaml")

    def signed() -> float:  # the boot sd `card register` writes into the registration it signs
        return next(g.boot_sd for g in registration_plan(card).gates if g.gate == "tokens-per-step")

    sd, boot_sd = _sd(), signed()
    assert boot_sd == pytest.approx(sd) and sd > 0.004
    assert planning_receipts().skipped == ()
    copies = _copies(roots, 4)
    planning = planning_receipts()
    assert {s.receipts for s in planning.skipped} == {str(c) for c in copies}
    assert all("chain breaks at arms/A2/attempt-1/windows/primary.json" in s.why for s in planning.skipped)
    assert _sd() == sd and signed() == boot_sd
    # had the copies been read, the lane's boot sd would have fallen (what the plan read before)
    from gb300lane.cards.record import noise
    from gb300lane.cards.record.receipts import lane_receipts

    key = next(k for k in ledger() if k.metric == "tokens_per_step" and k.unit == ALL_CELLS)
    read_all = noise.estimate(key, noise._distinct(s for r in lane_receipts() if (s := noise.card_samples(r).get(key))))
    # every copy replays its original's control seeds, window and transcripts: each is counted once with it
    assert read_all.cards == 3 and read_all.sd < 0.75 * sd
    out = runner.invoke(app, ["card", "noise"])
    text = " ".join(out.output.split())
    assert out.exit_code == 0 and "4 receipts directories left out of the lane's noise and plans" in text, text


def test_an_exact_copy_verifies_but_the_log_never_entered_it(tmp_path: Path) -> None:
    roots = _cards(tmp_path, [(0.01, -0.01)])
    copy = roots[0].with_name(roots[0].name + "-copy")
    shutil.copytree(roots[0], copy)
    (skipped,) = planning_receipts().skipped
    assert skipped.receipts == str(copy) and "the evidence log never entered it" in skipped.why


def test_card_register_does_not_warn_about_the_directory_it_has_just_made(tmp_path: Path) -> None:
    _cards(tmp_path, [(0.01, -0.01)])
    p = tmp_path / "fresh.yaml"
    p.write_text((DATA / "tested.yaml").read_text().replace("name: tested\n", "name: fresh\n"))
    out = runner.invoke(app, ["card", "register", str(p)])
    assert out.exit_code == 0, out.output
    assert "left out of the lane's noise" not in " ".join(out.output.split()), out.output
    (made,) = [s.receipts for s in planning_receipts().skipped]  # it is left out (no manifest yet), not named
    assert made.endswith("-fresh")
