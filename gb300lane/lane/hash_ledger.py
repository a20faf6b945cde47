"""The hash-seen ledger: which compile hash each fingerprint booted with, and how long boots took.

Kept in `<state>/lane/hash-ledger.json` (atomic writes). It predicts a boot's
autotune outcome (a fingerprint that booted with hash H before, and whose
`torch_compile_cache/H` directory still exists, should be a hit) and the
expected boot time the progress bar shows (the median of earlier boots of the
same fingerprint with the same outcome).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from gb300lane import paths
from gb300lane.errors import StateError
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.lane.checks import Prediction
from gb300lane.models import FrozenModel

_KEEP_BOOTS = 20


class BootTime(FrozenModel):
    """One recorded boot."""

    seconds: float = Field(description="Up (containers started) to ready.")
    outcome: Literal["hit", "miss", "reload", "unknown"] = Field(
        description="Autotune outcome read from the log (reload: the hash was found, failed to load, compiled again)."
    )
    compile_hash: str | None = Field(default=None, description="Observed compile hash.")
    time_scale: float | None = Field(
        default=None, description="Embedded engine pacing (None for vLLM): boots only compare at equal pace."
    )
    at: float = Field(description="Unix time the boot finished.")


class FingerprintEntry(FrozenModel):
    """What one fingerprint has booted with on this host."""

    hashes: tuple[str, ...] = Field(default=(), description="Compile hashes observed, oldest first.")
    boots: tuple[BootTime, ...] = Field(default=(), description="The most recent boots.")


class HashLedger(FrozenModel):
    """The ledger file."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    fingerprints: dict[str, FingerprintEntry] = Field(default_factory=dict, description="By recipe fingerprint.")


def ledger_path() -> Path:
    return paths.state_dir() / "lane" / "hash-ledger.json"


def load() -> HashLedger:
    path = ledger_path()
    try:
        return HashLedger.model_validate_json(path.read_text())
    except FileNotFoundError:
        return HashLedger()
    except (ValidationError, ValueError) as exc:
        raise StateError(
            f"{path}: unreadable hash ledger ({exc.__class__.__name__}); delete it to start afresh"
        ) from exc


def predict(fingerprint: str, cache_root: Path | None) -> Prediction:
    """Hit when this fingerprint booted before and its hash's cache directory still exists."""
    entry = load().fingerprints.get(fingerprint)
    if entry is None or not entry.hashes:
        return Prediction(outcome="miss", reason=f"fingerprint {fingerprint} has not booted on this host")
    known = entry.hashes[-1]
    if cache_root is None:
        return Prediction(
            outcome="unknown", known_hash=known,
            reason="the compile cache is not visible from the host (no mount covers VLLM_CACHE_ROOT)",
        )  # fmt: skip
    # The compile cache keeps a hash at torch_compile_cache/<hash>, an AOT compile (the CPU build) under torch_aot_compile/.
    exists = any((cache_root / "torch_compile_cache" / sub / known).is_dir() for sub in ("", "torch_aot_compile"))
    if exists:
        return Prediction(outcome="hit", known_hash=known, cache_dir_exists=True, reason=f"hash {known} is cached")
    return Prediction(
        outcome="miss", known_hash=known, cache_dir_exists=False,
        reason=f"hash {known} was seen but {cache_root}/torch_compile_cache/{known} is gone",
    )  # fmt: skip


def record_boot(
    fingerprint: str, compile_hash: str | None, outcome: str, seconds: float, *, time_scale: float | None = None
) -> None:
    ledger = load()
    entry = ledger.fingerprints.get(fingerprint, FingerprintEntry())
    hashes = entry.hashes
    if compile_hash and (not hashes or hashes[-1] != compile_hash):
        hashes = (*tuple(h for h in hashes if h != compile_hash), compile_hash)
    boot = BootTime(seconds=seconds, outcome=outcome, compile_hash=compile_hash, time_scale=time_scale, at=time.time())
    entry = FingerprintEntry(hashes=hashes, boots=(*entry.boots, boot)[-_KEEP_BOOTS:])
    updated = HashLedger(fingerprints={**ledger.fingerprints, fingerprint: entry})
    atomic_write(ledger_path(), dumps_json(updated.model_dump(mode="json")))


def expected_boot_seconds(fingerprint: str, outcome: str, *, time_scale: float | None = None) -> float | None:
    """Median of earlier boots at this pace with this outcome (any outcome if none match); None if none."""
    entry = load().fingerprints.get(fingerprint)
    paced = [b for b in (entry.boots if entry else ()) if b.time_scale == time_scale]
    if not paced:
        return None
    same = [b.seconds for b in paced if b.outcome == outcome] or [b.seconds for b in paced]
    return statistics.median(same)
