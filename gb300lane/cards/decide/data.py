"""What scoring reads: each arm's boot facts and window cells, measured or transcribed.

Receipts hold raw files (the lane's boot report, bench's WindowResult); this
module turns them into one normalised shape so the gates never care where a
number came from. Transcribed receipts (the write-up's tables) are written
directly in this shape and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from gb300lane.models import FrozenModel
from gb300lane.spec.lossless_result import LosslessResult


class NoiseFloor(FrozenModel):
    """A written-up card's published noise floor (`noise_floor.json`), used only where rounds were not published."""

    schema_version: Literal[1] = Field(default=1, description="File format version.")
    decode_tok_s: dict[str, float] = Field(description="Concurrency (as text) -> the stated relative noise floor.")
    note: str = Field(default="", description="How the floor is used.")
    quote: str = Field(default="", description="The source's own words.")
    source: str = Field(default="", description="Where it was published.")
    transcribed: bool = Field(default=True, description="Transcribed from a write-up, never measured here.")


class BootFacts(FrozenModel):
    """The boot checks one arm's gates read."""

    hash_hit: bool | None = Field(default=None, description="The boot reused the compile/autotune cache.")
    boot_seconds: float | None = Field(default=None, description="Seconds from start to ready.")
    flags: dict[str, Any] = Field(
        default_factory=dict, description="Dotted recipe key -> value as found in the container's args."
    )
    env: tuple[str, ...] | None = Field(
        default=None, description="Container environment as NAME=VALUE, in the order the runtime returned it."
    )
    env_set_digest: str | None = Field(
        default=None, description="Order-free digest of the environment (stands for the set when the list is absent)."
    )
    kv_pool_tokens: int | None = Field(default=None, description="KV pool the engine reported, in tokens.")
    foreign_clients: int | None = Field(default=None, description="Clients other than the bench seen while dark.")
    fingerprint: str | None = Field(default=None, description="Recipe fingerprint the arm booted.")
    feature_live: bool | None = Field(
        default=None, description="The boot's feature_live check: True pass, False fail, None not run or unknown."
    )
    feature_live_summary: str | None = Field(default=None, description="That check's one line, when it ran.")
    instance: str | None = Field(default=None, description="Instance name of the arm's containers.")
    provenance: dict[str, Any] | None = Field(
        default=None,
        description="What the arm's boot ran, flattened to dotted "
        "fields (`image.id`, `installed.vllm`, ...); None when not recorded.",
    )


class CellData(FrozenModel):
    """One class x concurrency cell (one round, or rounds already merged when round is None)."""

    cls: str = Field(description="Traffic class.")
    concurrency: int = Field(description="Concurrent streams.")
    round: int | None = Field(default=None, description="Round (1-based); None when the source merged rounds.")
    decode_tok_s: float | None = Field(default=None, description="Aggregate decode tokens/s of the cell.")
    tokens_per_step: float | None = Field(default=None, description="Tokens per verify step of the cell.")
    a_p: tuple[float, ...] | None = Field(
        default=None, description="Accepted at position p over all drafts (so tokens/step = 1 + sum a_p), p = 1..k."
    )
    a_p_given: tuple[float, ...] | None = Field(
        default=None,
        description="Accepted at position p over the drafts that had position p (differs under a k schedule).",
    )
    num_drafts: int | None = Field(default=None, description="Verify steps with drafts (weights a_p when merging).")
    per_transcript: dict[str, float] = Field(
        default_factory=dict, description="Transcript id -> per-stream decode tok/s (the paired statistic's input)."
    )
    per_transcript_tps: dict[str, float] = Field(
        default_factory=dict,
        description="Transcript id -> the request's tokens per verify step (from per-request spec-decode counters).",
    )
    outputs: dict[str, str] = Field(
        default_factory=dict, description="Transcript id -> sha256 of the generated text (parity across arms)."
    )
    ttft_s: dict[str, float] = Field(
        default_factory=dict, description="Transcript id -> the request's time to first token, on the cell's clock."
    )
    itl_s: dict[str, tuple[float, ...]] = Field(
        default_factory=dict,
        description="Transcript id -> the gaps between the request's successive chunks (vLLM's ITL), on the cell's clock.",
    )
    # Left out of the dump when empty, so cells without outcomes keep the bytes they had.
    quality: dict[str, bool] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="Transcript id -> whether the request's output passed its task-quality check (windows that "
        "stop at EOS; transcripts that ask for something checkable: bench.quality).",
    )


class WindowData(FrozenModel):
    """One arm's cells of one window."""

    window: str = Field(description="Window name from the card.")
    clock: str | None = Field(default=None, description="Clock the decode rates use (modelled or wall).")
    unit: Literal["tok/s", "ratio_to_controls_mean"] = Field(
        default="tok/s",
        description="tok/s, or ratio_to_controls_mean where the source published only ratios (controls are 1.0).",
    )
    cells: tuple[CellData, ...] = Field(default=(), description="Cells of the window.")
    tokens_per_step: float | None = Field(default=None, description="Window-wide tokens per verify step.")
    a_p: tuple[float, ...] | None = Field(default=None, description="Window-wide accepted-at-position over drafts.")
    invalid_cells: tuple[str, ...] = Field(
        default=(), description="Cells left out because every try of them was invalid: 'class Cn rN: reasons'."
    )
    # Left out of the dump when absent, so windows without a referee keep the bytes they had.
    lossless: LosslessResult | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The losslessness check of the window's outputs by the arm's referee; None: not checked.",
    )


class ArmData(FrozenModel):
    """Everything scoring knows about one arm."""

    arm: str = Field(description="Arm name.")
    recipe: str = Field(description="Recipe the arm booted.")
    role: Literal["control", "candidate"] = Field(description="control or candidate.")
    source: Literal["measured", "transcribed"] = Field(description="Where the numbers came from.")
    boot: BootFacts | None = Field(default=None, description="Boot facts; None when not recorded.")
    windows: dict[str, WindowData] = Field(default_factory=dict, description="Window name -> data.")


class TranscribedArm(FrozenModel):
    """An arm of a written-up card, transcribed from the write-up's tables and text."""

    schema_version: Literal[1] = Field(description="File format version.")
    transcribed: Literal[True] = Field(description="Always true: these numbers were copied, not measured here.")
    source: str = Field(description="The document the numbers were copied from.")
    quotes: tuple[str, ...] = Field(default=(), description="The sentences and table rows each value comes from.")
    reconstructed: tuple[str, ...] = Field(
        default=(), description="Values not printed in the source, rebuilt from what its text states, and how."
    )
    arm: str = Field(description="Arm name.")
    boot: BootFacts = Field(description="Boot facts as the source states them.")
    windows: dict[str, WindowData] = Field(default_factory=dict, description="Window name -> transcribed cells.")


# ---------------------------------------------------------------- merged views


@dataclass
class CellAgg:
    """A class x concurrency cell with its rounds merged; `rounds` keeps each round's rate."""

    cls: str
    concurrency: int
    decode_tok_s: float | None
    rounds: list[float] = field(default_factory=list)
    tokens_per_step: float | None = None
    a_p: tuple[float, ...] | None = None
    a_p_given: tuple[float, ...] | None = None
    per_transcript: dict[str, float] = field(default_factory=dict)
    per_transcript_tps: dict[str, float] = field(default_factory=dict)


def _mean_vectors(vs: list[tuple[float, ...]]) -> tuple[float, ...] | None:
    """Mean per position of the rounds' vectors (a round without a position counts as 0 there)."""
    if not vs:
        return None
    width = max(len(v) for v in vs)
    return tuple(sum(v[i] if i < len(v) else 0.0 for v in vs) / len(vs) for i in range(width))


def merged_cells(w: WindowData | None) -> dict[tuple[str, int], CellAgg]:
    """Merge rounds: decode tok/s is the mean of the rounds, per transcript likewise."""
    if w is None:
        return {}
    groups: dict[tuple[str, int], list[CellData]] = {}
    for c in w.cells:
        groups.setdefault((c.cls, c.concurrency), []).append(c)
    out: dict[tuple[str, int], CellAgg] = {}
    for key, cells in groups.items():
        rates = [c.decode_tok_s for c in cells if c.decode_tok_s is not None]
        tps = [c.tokens_per_step for c in cells if c.tokens_per_step is not None]
        per: dict[str, list[float]] = {}
        per_tps: dict[str, list[float]] = {}
        for c in cells:
            for t, v in c.per_transcript.items():
                per.setdefault(t, []).append(v)
            for t, v in c.per_transcript_tps.items():
                per_tps.setdefault(t, []).append(v)
        a_p = _mean_vectors([c.a_p for c in cells if c.a_p])
        a_p_given = _mean_vectors([c.a_p_given for c in cells if c.a_p_given])
        out[key] = CellAgg(
            cls=key[0],
            concurrency=key[1],
            decode_tok_s=sum(rates) / len(rates) if rates else None,
            rounds=rates if all(c.round is not None for c in cells) and len(rates) > 1 else [],
            tokens_per_step=sum(tps) / len(tps) if tps else None,
            a_p=a_p,
            a_p_given=a_p_given,
            per_transcript={t: sum(v) / len(v) for t, v in per.items()},
            per_transcript_tps={t: sum(v) / len(v) for t, v in per_tps.items()},
        )
    return out


def tokens_per_step_from_a_p(a_p: tuple[float, ...] | list[float]) -> float:
    """The write-up's identity: tokens/step = 1 + sum over p of a_p."""
    return 1.0 + float(sum(a_p))


def marginal(a_p: tuple[float, ...] | list[float]) -> list[float | None]:
    """a_p / a_(p-1); position 1's marginal is a_1 itself."""
    out: list[float | None] = []
    prev = 1.0
    for v in a_p:
        out.append(v / prev if prev > 0 else None)
        prev = v
    return out


def merge_stages(parts: list[WindowData]) -> WindowData:
    """One window out of its stages: each stage's rounds are numbered after the previous stage's."""
    if len(parts) == 1:
        return parts[0]
    cells = []
    offset = 0
    drafts = accepted = 0.0
    for w in parts:
        top = max((c.round or 0 for c in w.cells), default=0)
        cells += [c.model_copy(update={"round": (c.round or 0) + offset}) for c in w.cells]
        offset += top
        for c in w.cells:
            if c.num_drafts and c.tokens_per_step is not None:
                drafts += c.num_drafts
                accepted += (c.tokens_per_step - 1.0) * c.num_drafts
    clocks = {w.clock for w in parts}
    a_ps = [w.a_p for w in parts if w.a_p]
    width = max((len(a) for a in a_ps), default=0)
    a_p = tuple(sum(a[i] if i < len(a) else 0.0 for a in a_ps) / len(a_ps) for i in range(width)) if a_ps else None
    return WindowData(
        window=parts[0].window,
        clock=clocks.pop() if len(clocks) == 1 else "mixed",
        unit=parts[0].unit,
        cells=tuple(cells),
        tokens_per_step=(1.0 + accepted / drafts) if drafts else parts[0].tokens_per_step,
        a_p=a_p,
        invalid_cells=tuple(f"stage {i}: {c}" for i, w in enumerate(parts, 1) for c in w.invalid_cells),
    )


def merge_boots(boots: list[BootFacts]) -> BootFacts:
    """One arm's boot facts over its stages: a hit only if every boot hit, the most foreign clients seen."""
    if len(boots) == 1:
        return boots[0]
    first = boots[0]
    hits = [b.hash_hit for b in boots]
    foreign = [b.foreign_clients for b in boots]
    kv = {b.kv_pool_tokens for b in boots}
    digests = {b.env_set_digest for b in boots}
    return first.model_copy(
        update={
            "hash_hit": None if None in hits else all(h for h in hits),
            "foreign_clients": None if None in foreign else max(f for f in foreign if f is not None),
            "kv_pool_tokens": first.kv_pool_tokens if len(kv) == 1 else None,
            "env_set_digest": first.env_set_digest if len(digests) == 1 else "differs between stages",
            "flags": {k: v for k, v in first.flags.items() if all(b.flags.get(k) == v for b in boots)},
            "provenance": _merged_provenance([b.provenance for b in boots]),
        }
    )


def _merged_provenance(records: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One arm's provenance over its stages: a field its boots disagree on reads as each stage's value in turn."""
    if any(r is None for r in records):
        return records[0]
    keys = sorted({k for r in records if r for k in r})
    out: dict[str, Any] = {}
    for key in keys:
        values = [r.get(key) if r else None for r in records]
        out[key] = values[0] if all(v == values[0] for v in values) else {"stages": values}
    return out
