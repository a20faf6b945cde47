"""Lint rules from the write-up and from vLLM's own validation, each with an id, a severity and a fix.

Errors are configurations that cannot measure or serve what they claim
(block rejection with greedy drafts, a block-verification recipe whose gates
never leave temperature 0). Warnings are legal but costly choices; the one
that must be acknowledged to boot is a k outside the trained DSpark block.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gb300lane.models import FrozenModel
from gb300lane.recipes.schema import Recipe

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
ACK_FLAG = "--allow-outside-trained-block"


class LintFinding(FrozenModel):
    """One rule that fired on one recipe."""

    rule_id: str = Field(description="Stable rule id, e.g. k-outside-trained-block.")
    severity: Literal["error", "warning"] = Field(description="error blocks a boot; warning advises.")
    key: str = Field(description="Dotted recipe key the finding is about.")
    message: str = Field(description="What was found and what was expected.")
    fix: str = Field(description="What to do about it.")


def effective_k(recipe: Recipe) -> int | None:
    """num_speculative_tokens, or for dspark the checkpoint's trained block (vLLM's default)."""
    spec = recipe.speculative
    if spec.num_speculative_tokens is not None:
        return spec.num_speculative_tokens
    if spec.method == "dspark":
        return recipe.model.checkpoint.dspark_block_size
    return None


def _schedule(recipe: Recipe) -> list[LintFinding]:
    """vLLM 0.33's rules for the k schedule, under either name (num_speculative_tokens_per_batch_size, or its new
    name speculative_token_schedule)."""
    rows = recipe.speculative.schedule
    key = recipe.speculative.schedule_key
    if rows is None:
        return []
    out: list[LintFinding] = []

    def err(rule: str, message: str, fix: str) -> None:
        out.append(LintFinding(rule_id=rule, severity="error", key=key, message=message, fix=fix))

    if not rows:
        err("schedule-empty", "the k schedule has no rows", "remove the key or add [1, N, k] rows")
        return out
    for i, (start, end, k) in enumerate(rows):
        if start < 1:
            err(
                "schedule-start-not-positive", f"row {i} [{start}, {end}, {k}] starts below 1", "batch sizes start at 1"
            )
        if start > end:
            err(
                "schedule-range-reversed",
                f"row {i} [{start}, {end}, {k}] has start > end",
                "write ranges as [start, end, k] with start <= end",
            )
        if k < 0:
            err(
                "schedule-negative-k",
                f"row {i} [{start}, {end}, {k}] has k < 0",
                "use k >= 0 (0 turns speculation off for that range)",
            )
        if i > 0 and start <= rows[i - 1][1]:
            err(
                "schedule-overlap-or-unsorted",
                f"row {i} [{start}, {end}, {k}] starts at or before the previous row's end ({rows[i - 1][1]})",
                "sort the rows by start and make the inclusive ranges disjoint",
            )
    if rows[0][0] != 1:
        err(
            "schedule-first-not-1",
            f"the first row starts at {rows[0][0]}, not 1",
            "start the first range at batch size 1",
        )
    limit = effective_k(recipe)
    if limit is not None:
        clamped = [r for r in rows if r[2] > limit]
        if clamped:
            out.append(
                LintFinding(
                    rule_id="schedule-k-clamped",
                    severity="warning",
                    key=key,
                    message=f"rows {[list(r) for r in clamped]} ask for more than num_speculative_tokens = {limit}; vLLM clamps them to {limit}",
                    fix=f"lower those rows to at most {limit}, or raise speculative.num_speculative_tokens",
                )
            )
    return out


def requires_acknowledgement(recipe: Recipe) -> list[LintFinding]:
    """Findings that `gb300lane up` refuses without --allow-outside-trained-block."""
    spec = recipe.speculative
    block = recipe.model.checkpoint.dspark_block_size
    k = effective_k(recipe)
    if spec.method != "dspark" or k is None:
        return []
    # Warn on k itself even when the schedule drafts fewer: the drafter's query
    # shape follows k (BR2's K9 lost at C8 where both arms drafted three).
    if k <= block:
        return []
    key, shown = "speculative.num_speculative_tokens", k
    return [
        LintFinding(
            rule_id="k-outside-trained-block",
            severity="warning",
            key=key,
            message=(
                f"{key} = {shown} exceeds the trained block (model.checkpoint.dspark_block_size = {block}); "
                "acceptance falls off past the trained width (BR2: k=9 lost 8-19%)"
            ),
            fix=f"keep k <= {block}, or pass {ACK_FLAG} to `gb300lane up` to boot it anyway",
        )
    ]


def lint(recipe: Recipe, *, parent: Recipe | None = None) -> list[LintFinding]:
    """Every rule that fires on the recipe, errors first. `parent` enables the capture-size rule."""
    spec = recipe.speculative
    out: list[LintFinding] = []
    out.extend(requires_acknowledgement(recipe))
    out.extend(_schedule(recipe))
    block = spec.rejection_sample_method == "block"
    if block and spec.draft_sample_method in (None, "greedy"):
        shown = spec.draft_sample_method or "greedy (vLLM's default)"
        out.append(
            LintFinding(
                rule_id="block-needs-probabilistic-drafts",
                severity="error",
                key="speculative.draft_sample_method",
                message=f"rejection_sample_method = block with draft_sample_method = {shown}; the joint test needs draft probabilities",
                fix="set speculative.draft_sample_method: probabilistic",
            )
        )
    if block and not any(g.window.temperature > 0 for g in recipe.smoke.gates):
        out.append(
            LintFinding(
                rule_id="block-needs-random-window",
                severity="error",
                key="smoke.gates",
                message="block verification only runs on the random path, and every smoke window is at temperature 0",
                fix="add a bounds gate whose window has temperature: 1.0 and a seed_base",
            )
        )
    for i, gate in enumerate(recipe.smoke.gates):
        if gate.window.temperature > 0 and gate.window.seed_base is None:
            out.append(
                LintFinding(
                    rule_id="random-window-unseeded",
                    severity="warning",
                    key=f"smoke.gates.{i}.window.seed_base",
                    message=f"window {gate.window.name} samples at temperature {gate.window.temperature} without seeds; arms cannot be compared request by request",
                    fix="set window.seed_base so every request carries a seed",
                )
            )
    if spec.dspark_draft_topk is not None and spec.method != "dspark":
        out.append(
            LintFinding(
                rule_id="dspark-topk-without-dspark",
                severity="error",
                key="speculative.dspark_draft_topk",
                message=f"dspark_draft_topk is set but speculative.method = {spec.method}; vLLM accepts it only with dspark",
                fix="remove speculative.dspark_draft_topk or set speculative.method: dspark",
            )
        )
    if spec.dspark_draft_topk is not None and spec.draft_sample_method in (None, "greedy"):
        out.append(
            LintFinding(
                rule_id="dspark-topk-needs-probabilistic",
                severity="warning",
                key="speculative.dspark_draft_topk",
                message="the reduced draft vocabulary is only meaningful on the probabilistic path",
                fix="set speculative.draft_sample_method: probabilistic",
            )
        )
    if recipe.lane.dark and recipe.lane.bind not in LOOPBACK:
        out.append(
            LintFinding(
                rule_id="dark-lane-not-loopback",
                severity="error",
                key="lane.bind",
                message=f"a dark lane binds to {recipe.lane.bind}; foreign clients could reach it and pollute the arm",
                fix="set lane.bind: 127.0.0.1",
            )
        )
    if "cudagraph_capture_sizes" not in recipe.engine_args.compilation_config:
        k = effective_k(recipe)
        parent_k = effective_k(parent) if parent is not None else None
        if parent is None or parent_k != k:
            out.append(
                LintFinding(
                    rule_id="capture-sizes-not-pinned",
                    severity="warning",
                    key="engine_args.compilation_config.cudagraph_capture_sizes",
                    message=(
                        "cudagraph_capture_sizes is not pinned; vLLM's default list depends on 1 + k, so changing k "
                        + (f"({parent_k} -> {k}) " if parent is not None else "")
                        + "changes the compile hash"
                    ),
                    fix="pin engine_args.compilation_config.cudagraph_capture_sizes to the parent's list",
                )
            )
    return sorted(out, key=lambda f: (f.severity != "error", f.rule_id, f.key))
