"""Window result files: written once, read back with a clear error.

A window result is evidence: it is never overwritten. `save_result` refuses
an existing path; `smoke_dir` is where smoke runs keep their windows and
reports under the lane state directory.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gb300lane.errors import BenchError, ReceiptExists
from gb300lane.fsio import dumps_json, write_once
from gb300lane.models import format_validation_error
from gb300lane.paths import state_dir

if TYPE_CHECKING:
    from gb300lane.bench.models import WindowResult


def save_result(result: WindowResult, path: Path) -> Path:
    """Write a window result once; an existing file is never replaced."""
    if path.exists():
        raise BenchError(f"{path} already exists; window results are never overwritten: pass another --out path")
    try:
        return write_once(path, dumps_json(result.model_dump(mode="json")))
    except ReceiptExists as exc:
        raise BenchError(
            f"{path} already exists; window results are never overwritten: pass another --out path"
        ) from exc


def load_result(path: Path) -> WindowResult:
    """Read a window result file written by `gb300lane bench --out` or a smoke run."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"{path}: cannot read window result: {exc.strerror}; pass an existing file") from exc
    except json.JSONDecodeError as exc:
        raise BenchError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); pass a window result file") from exc
    from gb300lane.bench.models import WindowResult  # numpy with it: `status` reads smoke_dir alone

    try:
        return WindowResult.model_validate(raw)
    except ValidationError as exc:
        raise BenchError(
            f"{path}: not a window result ({format_validation_error(exc, first_only=True)}); "
            "pass a file written by `gb300lane bench --out`"
        ) from None


def stamp() -> str:
    """A UTC timestamp usable in file names (microseconds, so two runs never share a name)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def smoke_dir(recipe: str, fingerprint: str | None) -> Path:
    """`<state>/smoke/<recipe>-<fingerprint>/`: the windows and reports of one recipe's smoke runs."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", recipe)
    return state_dir() / "smoke" / (f"{safe}-{fingerprint}" if fingerprint else safe)
