"""Smoke gates: the checks a freshly booted lane must pass before it takes traffic.

Each of the recipe's `smoke.gates` runs its window and gives PASS, FAIL or
INCONCLUSIVE with the reason:

parity   greedy outputs, compared per (class, transcript, concurrency, round)
         with a control's recorded window result (`reference`). A flip is one
         output that differs. The bar is `max_flips`, raised to the A-vs-A2
         floor when two control results are given (the flips between the two
         controls themselves). With no reference the lane is compared with
         itself: the window runs twice and the two runs must agree within
         `max_flips` (greedy determinism); the outputs are recorded so they can
         be passed as the reference next time.
bounds   every cell valid (no errors, exact forced counts, no foreign
         traffic), tokens per verify step over the whole window inside
         `tokens_per_step`, and every cell's aggregate decode tok/s at least
         `decode_tok_s_min`. A bound that needs spec-decode counters the lane
         does not export is INCONCLUSIVE, not PASS.

Every window a gate ran is written once under the recipe's smoke directory,
and so is the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from gb300lane import __version__
from gb300lane.bench.cells import aggregate_spec
from gb300lane.bench.models import WindowResult
from gb300lane.bench.schedule import check_schedule
from gb300lane.bench.store import load_result, save_result, smoke_dir, stamp
from gb300lane.bench.window import WindowProgress, run_window
from gb300lane.fsio import dumps_json, write_once
from gb300lane.models import FrozenModel
from gb300lane.recipes.rules import effective_k
from gb300lane.recipes.schema import Recipe, SmokeGate, WindowSpec

GateStatus = Literal["PASS", "FAIL", "INCONCLUSIVE"]
#: Window keys that must agree before two windows' outputs are comparable.
_COMPARABLE = (
    "classes",
    "transcripts_per_class",
    "rounds",
    "concurrency",
    "temperature",
    "top_p",
    "seed_base",
    "forced_tokens",
    "max_tokens",
    "tool_choice",
    "workload",
    "held_out",  # the last two absent from a builtin window's dump: None
)

ProgressFactory = Callable[[], AbstractContextManager[WindowProgress | None]]


class GateResult(FrozenModel):
    """One smoke gate's outcome."""

    name: str = Field(description="Gate name from the recipe.")
    kind: Literal["parity", "bounds"] = Field(description="Gate kind.")
    status: GateStatus = Field(description="PASS, FAIL or INCONCLUSIVE.")
    reason: str = Field(description="Why, in one line.")
    details: dict[str, Any] = Field(description="The numbers the status was decided on.")
    results: list[str] = Field(description="Window result files this gate wrote.")


class SmokeReport(FrozenModel):
    """All smoke gates of one recipe against one running lane."""

    schema_version: Literal[1] = Field(default=1, description="Report format version.")
    tool_version: str = Field(description="gb300lane version.")
    created_at: str = Field(description="UTC time the smoke run started.")
    recipe: str = Field(description="Recipe name.")
    fingerprint: str | None = Field(description="Recipe fingerprint.")
    endpoint: str = Field(description="The lane's base URL.")
    gates: list[GateResult] = Field(description="Gate outcomes in recipe order.")
    passed: bool = Field(description="True only when every gate passed (and there was at least one).")
    report_path: str | None = Field(default=None, description="Where this report was written.")


def count_flips(run: dict[str, str], control: dict[str, str]) -> tuple[int, int, list[str]]:
    """(flips, outputs compared, first differing keys) over the keys both sides have."""
    common = sorted(set(run) & set(control))
    differing = [k for k in common if run[k] != control[k]]
    return len(differing), len(common), differing[:5]


def _window_mismatch(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in _COMPARABLE if a.get(k) != b.get(k)]


def _invalid_summary(result: WindowResult) -> str:
    bad = [c for c in result.cells if not c.valid]
    first = bad[0]
    return (
        f"{len(bad)} of {len(result.cells)} cells invalid; first: {first.cls} C{first.concurrency} "
        f"r{first.round}: {'; '.join(first.invalid_reasons)}"
    )


class _Runner:
    """Runs windows for the gates and records each result once."""

    def __init__(
        self, recipe: Recipe, endpoint: str, model: str, fingerprint: str | None, progress: ProgressFactory | None
    ) -> None:
        self.recipe, self.endpoint, self.model, self.fp = recipe, endpoint, model, fingerprint
        self.progress = progress
        self.dir = smoke_dir(recipe.name, fingerprint)
        self.stamp = stamp()

    def run(self, gate: SmokeGate, window: WindowSpec, tag: str) -> tuple[WindowResult, str]:
        ctx = self.progress() if self.progress else nullcontext(None)
        with ctx as bar:
            result = run_window(
                self.endpoint, window, model=self.model, progress=bar, recipe=self.recipe.name, fingerprint=self.fp
            )
        if gate.lossless is not None and window.temperature > 0:
            from gb300lane.bench.referee import referee_window

            result = result.model_copy(
                update={
                    "lossless": referee_window(
                        result,
                        self.endpoint,
                        model=self.model,
                        alpha=gate.lossless.alpha,
                        margin=gate.lossless.margin,
                        min_tokens=gate.lossless.min_tokens,
                        fail_when=gate.lossless.fail_when,
                    )
                }
            )
        path = save_result(result, self.dir / f"{self.stamp}-{gate.name}-{tag}.json")
        return result, str(path)


def _parity(gate: SmokeGate, runner: _Runner, references: list[Path]) -> GateResult:
    max_flips = gate.max_flips or 0
    run, path = runner.run(gate, gate.window, "run")
    files = [path]
    details: dict[str, Any] = {"max_flips": max_flips, "temperature": gate.window.temperature}

    def result(status: GateStatus, reason: str) -> GateResult:
        return GateResult(name=gate.name, kind="parity", status=status, reason=reason, details=details, results=files)

    if not run.valid:
        return result("FAIL", f"parity window invalid: {_invalid_summary(run)}")
    outputs = run.outputs()
    if not references:
        again, path2 = runner.run(gate, gate.window, "repeat")
        files.append(path2)
        if not again.valid:
            return result("FAIL", f"repeat of the parity window invalid: {_invalid_summary(again)}")
        flips, compared, first = count_flips(outputs, again.outputs())
        details.update(flips=flips, compared=compared, first_flips=first, control="this lane (repeat run)")
        note = (
            f"no control reference: compared two runs of this lane; outputs recorded in {path} (pass it as --reference)"
        )
        if flips > max_flips:
            return result(
                "FAIL",
                f"greedy outputs not deterministic: {flips} of {compared} flipped between two runs "
                f"(max_flips {max_flips}); first: {first[0]}",
            )
        return result("PASS", f"{flips} of {compared} outputs flipped <= max_flips {max_flips}; {note}")

    controls = [load_result(p) for p in references]
    for p, ctrl in zip(references, controls):
        diff = _window_mismatch(run.window, ctrl.window)
        if diff:
            return result(
                "INCONCLUSIVE",
                f"reference {p} ran a different window ({', '.join(diff)} differ); record the control with the gate's window",
            )
    flips, compared, first = count_flips(outputs, controls[0].outputs())
    details.update(flips=flips, compared=compared, first_flips=first, control=str(references[0]))
    if compared == 0:
        return result("INCONCLUSIVE", f"no outputs in common with {references[0]}")
    bar = max_flips
    if len(controls) > 1:
        floor, floor_compared, _ = count_flips(controls[0].outputs(), controls[1].outputs())
        details.update(floor=floor, floor_compared=floor_compared, floor_control=str(references[1]))
        bar = max(max_flips, floor)
    details["bar"] = bar
    floor_txt = f" (A-vs-A2 floor {details['floor']})" if "floor" in details else " (no A-vs-A2 floor known)"
    said = f"{flips} of {compared} greedy outputs differ from the control"
    if flips > bar:
        return result("FAIL", f"{said}, above the bar {bar}{floor_txt}; first: {first[0]}")
    return result("PASS", f"{said}, within the bar {bar}{floor_txt}")


def _bounds(gate: SmokeGate, runner: _Runner) -> GateResult:
    run, path = runner.run(gate, gate.window, "run")
    details: dict[str, Any] = {}

    def result(status: GateStatus, reason: str) -> GateResult:
        return GateResult(name=gate.name, kind="bounds", status=status, reason=reason, details=details, results=[path])

    requests = len(run.records)
    details["requests"] = requests
    if not run.valid:
        return result("FAIL", _invalid_summary(run))
    failures: list[str] = []
    inconclusive: list[str] = []
    passes = [
        f"{requests} requests, no errors, "
        + (
            f"every output exactly {gate.window.forced_tokens} tokens"
            if gate.window.forced_tokens is not None
            else f"every output at most {gate.window.token_cap} tokens"
        )
    ]
    tps = gate.tokens_per_step
    if tps is not None and (tps.min is not None or tps.max is not None):
        agg = aggregate_spec(run.cells)
        if agg is None:
            reasons = sorted({c.spec_absent_reason or "" for c in run.cells})
            inconclusive.append(f"tokens/step bound not checkable: {'; '.join(reasons)}")
        else:
            details["tokens_per_step"] = agg.tokens_per_step
            details["a_p"] = agg.a_p
            lo = -float("inf") if tps.min is None else tps.min
            hi = float("inf") if tps.max is None else tps.max
            text = f"tokens/step {agg.tokens_per_step:.3f} (bounds {tps.min} .. {tps.max})"
            (passes if lo <= agg.tokens_per_step <= hi else failures).append(text)
    if gate.decode_tok_s_min is not None:
        rated = [c for c in run.cells if c.decode_tok_s is not None]
        if not rated:
            inconclusive.append("no cell has a decode rate")
        else:
            low = min(rated, key=lambda c: c.decode_tok_s or 0.0)
            details["decode_tok_s_min_seen"] = low.decode_tok_s
            text = (
                f"lowest decode {low.decode_tok_s:,.1f} tok/s ({low.cls} C{low.concurrency} r{low.round}, "
                f"{low.clock} clock; min {gate.decode_tok_s_min:,.1f})"
            )
            (passes if (low.decode_tok_s or 0.0) >= gate.decode_tok_s_min else failures).append(text)
    if gate.lossless is not None:
        ll = run.lossless
        if ll is None:
            inconclusive.append(f"lossless not checkable: window {gate.window.name} is greedy")
        else:
            details["lossless"] = ll.model_dump(mode="json")
            text = f"lossless {ll.status}: {ll.reason} (referee {ll.referee_tokens} tokens, {ll.referee_s:.1f} s)"
            {"PASS": passes, "FAIL": failures, "INCONCLUSIVE": inconclusive}[ll.status].append(text)
    schedule = check_schedule(run, runner.recipe.speculative.schedule, effective_k(runner.recipe))
    if schedule is not None:
        details["schedule"] = schedule.model_dump(mode="json")
        if schedule.status == "fail":
            failures.append(schedule.summary)
        elif schedule.status == "pass":
            passes.append(schedule.summary)
    if failures:
        return result("FAIL", "; ".join(failures))
    if inconclusive:
        return result("INCONCLUSIVE", "; ".join(inconclusive))
    return result("PASS", "; ".join(passes))


def run_smoke(
    recipe: Recipe,
    endpoint: str,
    *,
    reference: Path | Sequence[Path] | None = None,
    model: str | None = None,
    fingerprint: str | None = None,
    progress: ProgressFactory | None = None,
) -> SmokeReport:
    """Run the recipe's smoke gates against a running lane and write the report once.

    `reference` is the control's recorded parity window (or two: A and A2,
    whose own flips give the floor). `model` defaults to the recipe's served
    name, `fingerprint` to the recipe's.
    """
    if fingerprint is None:
        from gb300lane.recipes import fingerprint as recipe_fingerprint

        fingerprint = recipe_fingerprint(recipe)
    refs = [] if reference is None else [reference] if isinstance(reference, Path) else list(reference)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    runner = _Runner(recipe, endpoint.rstrip("/"), model or recipe.model.served_name, fingerprint, progress)
    gates: list[GateResult] = []
    for gate in recipe.smoke.gates:
        gates.append(_parity(gate, runner, refs) if gate.kind == "parity" else _bounds(gate, runner))
    report = SmokeReport(
        tool_version=__version__,
        created_at=created,
        recipe=recipe.name,
        fingerprint=fingerprint,
        endpoint=runner.endpoint,
        gates=gates,
        passed=bool(gates) and all(g.status == "PASS" for g in gates),
    )
    path = runner.dir / f"{runner.stamp}-report.json"
    report = report.model_copy(update={"report_path": str(path)})
    write_once(path, dumps_json(report.model_dump(mode="json")))
    return report
