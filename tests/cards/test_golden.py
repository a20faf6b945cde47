"""The golden card run: the receipts two seeded cards write on the embedded engine, byte for byte.

`tests/data/golden-card.sha256` holds the sha256 of every receipt of the golden run (`fakes.golden`), made on
the environment its first line names; regenerate it with `python scripts/card_golden.py DIR
tests/data/golden-card.sha256` only for a change that means to change the receipts, and say so in its commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes.golden import environment, run_golden

PINNED = Path(__file__).parents[1] / "data" / "golden-card.sha256"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_golden_cards_write_the_same_receipts(tmp_path: Path) -> None:
    lines = PINNED.read_text().splitlines()
    if lines[0] != f"# {environment()}":
        pytest.skip(f"the golden hashes were made on {lines[0][2:]}; this is {environment()}")
    pinned = dict(reversed(line.split("  ", 1)) for line in lines[1:])
    got = run_golden(tmp_path / "results")
    assert sorted(got) == sorted(pinned)
    assert [p for p in sorted(got) if got[p] != pinned[p]] == []
