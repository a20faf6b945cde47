"""What differs in what ran: between a card's arms, between a card's receipts and a later run of it, and between
the receipts and this host now. Lines for `card reproduce`, `verify` and `card score`; the comparison itself is
`cards.decide.more.provenance_differences` (between arms) and `run_differences` here (between runs)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.more import provenance_differences


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 72 else text[:69] + "..."


def _diff(
    a: Mapping[str, object], b: Mapping[str, object], only: Sequence[str] | None = None
) -> list[tuple[str, object, object]]:
    keys = sorted(set(a) | set(b))
    if only is not None:
        keys = [k for k in keys if any(k == p or k.startswith(p + ".") for p in only)]
    return [
        (k, a.get(k), b.get(k))
        for k in keys
        if json.dumps(a.get(k), sort_keys=True, default=str) != json.dumps(b.get(k), sort_keys=True, default=str)
    ]


def arm_lines(arms: Sequence[ArmData]) -> list[str]:
    """The provenance fields the card's arms differ in, one line each (none when they ran the same thing)."""
    diffs = provenance_differences(arms)
    recorded = [a.arm for a in arms if a.boot is not None and a.boot.provenance is not None]
    if len(recorded) < 2:
        return [
            f"provenance: recorded for {len(recorded)} arm(s) ({', '.join(recorded) or 'none'}); nothing to compare"
        ]
    if not diffs:
        return [f"provenance: arms {', '.join(recorded)} ran the same image, engine, install, checkpoints and host"]
    out = [f"provenance: the arms differ in {len(diffs)} field(s):"]
    for d in diffs:
        out.append(f"  {d.field}: " + ", ".join(f"{arm} {_shown(v)}" for arm, v in d.values.items()))
    return out


def run_differences(original: Sequence[ArmData], now: Sequence[ArmData]) -> list[str]:
    """Arm by arm, what a later run of a card ran differently from the original receipts."""
    before = {a.arm: a for a in original}
    out = []
    for arm in now:
        old = before.get(arm.arm)
        new_rec = arm.boot.provenance if arm.boot is not None else None
        old_rec = old.boot.provenance if old is not None and old.boot is not None else None
        if old is None:
            out.append(f"  {arm.arm}: not in the original receipts")
        elif old_rec is None:
            source = (
                "transcribed from a write-up"
                if old.source == "transcribed"
                else "written before provenance was recorded"
            )
            out.append(
                f"  {arm.arm}: the original receipts record no provenance ({source}); this run: "
                + (summary(new_rec) if new_rec else "none either")
            )
        elif new_rec is None:
            out.append(f"  {arm.arm}: this run recorded no provenance")
        else:
            changed = _diff(old_rec, new_rec)
            out.append(f"  {arm.arm}: " + ("the same" if not changed else f"{len(changed)} field(s) differ"))
            out.extend(f"    {k}: original {_shown(a)}, now {_shown(b)}" for k, a, b in changed)
    return ["provenance against the original receipts:", *out] if out else []


#: What `verify` compares with this host: the fields a later run here would read again.
NOW_FIELDS = ("host", "installed", "runtime")


def receipts_against_now(arms: Sequence[ArmData], now: Mapping[str, Mapping[str, object]]) -> list[str]:
    """Each arm's recorded host and install against what this host has now (`now`: arm -> flattened fields a
    boot here would record: host.*, and installed.* for an interpreter the arm's recipe names)."""
    out = []
    for arm in arms:
        rec = arm.boot.provenance if arm.boot is not None else None
        here = now.get(arm.arm)
        if rec is None or here is None:
            continue
        changed = _diff(rec, here, only=[f for f in NOW_FIELDS if any(k.startswith(f) for k in here)])
        if changed:
            out.append(
                f"  {arm.arm}: " + "; ".join(f"{k}: receipts {_shown(a)}, here now {_shown(b)}" for k, a, b in changed)
            )
    return (
        ["provenance against this host now:", *out]
        if out
        else ["provenance against this host now: no difference" if any(now.values()) else ""]
    )


def summary(fields: Mapping[str, object]) -> str:
    """A provenance record in one line: image or install, engine version, the host."""
    parts = []
    if fields.get("image.id"):
        parts.append(f"image {str(fields['image.id'])[:19]}")
    if fields.get("installed.vllm"):
        parts.append(str(fields["installed.vllm"]))
    parts.append(f"engine {fields.get('engine.version') or '?'}")
    parts.append(f"host {fields.get('host.cpu_model') or '?'} x{fields.get('host.cpu_count') or '?'}")
    gpus = fields.get("host.gpus")
    parts.append(", ".join(str(g) for g in gpus) if isinstance(gpus, list) and gpus else "no GPU")
    return "; ".join(parts)


def verify_lines(card: str) -> list[str]:
    """`verify --card`'s provenance lines: what the arms differ in, and the receipts against this host now (the
    host, and the install of each arm's interpreter where its recipe runs vLLM from one)."""
    import os

    from gb300lane.cards.record.receipts import receipts_for
    from gb300lane.errors import LaneError
    from gb300lane.lane.provenance import fields_now
    from gb300lane.recipes import load_recipe
    from gb300lane.recipes.containers import process_python

    try:
        rec = receipts_for(card)
        arms = rec.load_arms(rec.card())
    except LaneError as exc:  # the chain above names the damage; here only that nothing can be compared
        return [f"provenance: not compared ({str(exc).splitlines()[0]})"]
    now: dict[str, dict[str, object]] = {}
    for arm in arms:
        python = None
        try:
            recipe = load_recipe(arm.recipe)
            if recipe.engine == "vllm" and recipe.runtime == "process":
                python = process_python(recipe, os.environ)
        except LaneError:
            pass  # a recipe gone since: the host is still compared
        now[arm.arm] = dict(fields_now(python))
    return [line for line in arm_lines(arms) + receipts_against_now(arms, now) if line]


__all__ = ["arm_lines", "receipts_against_now", "run_differences", "summary", "verify_lines"]
