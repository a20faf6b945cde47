"""A full state disk is named as a full disk: `status` on a ledger SQLite cannot open for want of space says so
and how to free it, never "check the permissions".

The state directory is a small tmpfs in a private mount namespace (`unshare -m`) holding a ledger, then filled to
the last byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
set -u
mount -t tmpfs -o size=8m tmpfs "$STATE"
"$PY" -c "from gb300lane.promote.ledger import Ledger; Ledger().close()" || exit 3
dd if=/dev/zero of="$STATE/fill" bs=64k >/dev/null 2>&1
"$PY" -m gb300lane status
"""


@pytest.mark.mounts
@pytest.mark.slow
def test_status_on_a_full_state_disk_names_the_full_disk(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    env = {**os.environ, "STATE": str(tmp_path / "state"), "PY": sys.executable,
           "GB300LANE_STATE_DIR": str(tmp_path / "state"), "GB300LANE_RESULTS_DIR": str(tmp_path / "results"),
           "COLUMNS": "400"}  # fmt: skip
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = " ".join((done.stdout + done.stderr).split())
    assert "Traceback" not in said, said
    assert "permissions" not in said, said
    assert "is full" in said and "df -h" in said, said
