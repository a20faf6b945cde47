"""Run the golden cards (tests/fakes/golden.py) into a fresh directory and print the sha256 of every receipt.

    python scripts/card_golden.py /tmp/golden [hashes.txt | --pin]

The same seeds give the same receipts, byte for byte: compare the output with this environment's file under
tests/data/golden-card/ (`--pin` rewrites it).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.golden import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
