"""The golden card run: the receipts two seeded cards write on the embedded engine, byte for byte.

`tests/data/golden-card/` holds, per environment, the sha256 of every receipt of the golden run (`fakes.golden`):
numpy's float kernels (and the libraries under scipy) round differently on an AVX-512 host than on an AVX2 one,
so each file is made on the environment its first line names and named for its SIMD levels. The test compares
with the file made on this environment and is skipped where there is none. Regenerate this environment's with
`python scripts/card_golden.py DIR --pin` only for a change that means to change the receipts, and say so in its
commit (a file for another environment that the change makes stale is removed with it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes.golden import PINS, environment, pin_for, run_golden


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_golden_cards_write_the_same_receipts(tmp_path: Path) -> None:
    pin = pin_for()
    if not pin.exists():
        made = sorted(p.read_text().splitlines()[0][2:] for p in PINS.glob("*.sha256"))
        pytest.skip(f"no golden hashes made on {environment()} (made on: {'; '.join(made) or 'none'})")
    lines = pin.read_text().splitlines()
    if lines[0] != f"# {environment()}":
        pytest.skip(f"the golden hashes in {pin.name} were made on {lines[0][2:]}; this is {environment()}")
    pinned = dict(reversed(line.split("  ", 1)) for line in lines[1:])
    got = run_golden(tmp_path / "results")
    assert sorted(got) == sorted(pinned)
    assert [p for p in sorted(got) if got[p] != pinned[p]] == []
