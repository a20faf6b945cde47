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

from gb300lane.canonical import sha256_bytes
from gb300lane.models import FrozenModel


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
        default=None, description="Accepted at position p over the drafts that had position p (differs under a k schedule)."
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


# ---------------------------------------------------------------- adapters


def window_data_from_result(result: dict[str, Any], window_name: str) -> WindowData:
    """bench's WindowResult (as data) -> WindowData, keeping per-transcript rates."""
    per: dict[tuple[str, int, int], dict[str, float]] = {}
    tps: dict[tuple[str, int, int], dict[str, float]] = {}
    outs: dict[tuple[str, int, int], dict[str, str]] = {}
    for rec in result.get("records", []):
        key = (rec["cls"], int(rec["concurrency"]), int(rec["round"]))
        # A concurrency above the transcript count sends each transcript once per pass, each pass its own sample.
        sample = str(rec["transcript_id"]) + (f"#{rec['repeat']}" if rec.get("repeat") else "")
        if rec.get("ok") and rec.get("decode_tok_s") is not None:
            per.setdefault(key, {})[sample] = float(rec["decode_tok_s"])
        sd = rec.get("spec_decode") if rec.get("ok") else None
        if isinstance(sd, dict) and sd.get("num_drafts"):
            tps.setdefault(key, {})[sample] = 1.0 + sd["num_accepted_tokens"] / sd["num_drafts"]
        if rec.get("ok"):
            outs.setdefault(key, {})[sample] = sha256_bytes(rec.get("text") or "")
    cells = []
    clocks = set()
    accepted = drafts = 0
    ap_weighted: list[float] = []
    ap_weight: list[float] = []
    for cell in result.get("cells", []):
        if not cell.get("valid", True):
            continue
        clocks.add(cell.get("clock"))
        spec = cell.get("spec") or None
        key = (cell["cls"], int(cell["concurrency"]), int(cell["round"]))
        # over all drafts (vLLM's convention) is what sums to tokens/step and merges
        # exactly by weighting with the drafts; the per-length view feeds the marginals
        a_p = tuple(spec.get("vllm_per_position") or spec["a_p"]) if spec else None
        a_p_given = tuple(spec["a_p"]) if spec else None
        n = int(spec["num_drafts"]) if spec else None
        if spec and n:
            drafts += n
            accepted += int(spec["num_accepted_tokens"])
            for i, v in enumerate(a_p or ()):
                while len(ap_weighted) <= i:
                    ap_weighted.append(0.0)
                    ap_weight.append(0.0)
                ap_weighted[i] += v * n
                ap_weight[i] += n
        cells.append(
            CellData(
                cls=cell["cls"],
                concurrency=int(cell["concurrency"]),
                round=int(cell["round"]),
                decode_tok_s=cell.get("decode_tok_s"),
                tokens_per_step=spec["tokens_per_step"] if spec else None,
                a_p=a_p,
                a_p_given=a_p_given,
                num_drafts=n,
                per_transcript=per.get(key, {}),
                per_transcript_tps=tps.get(key, {}),
                outputs=outs.get(key, {}),
            )
        )
    clock = clocks.pop() if len(clocks) == 1 else ("mixed" if clocks else None)
    return WindowData(
        window=window_name,
        clock=clock,
        cells=tuple(cells),
        tokens_per_step=(1.0 + accepted / drafts) if drafts else None,
        a_p=tuple(w / n for w, n in zip(ap_weighted, ap_weight) if n) or None,
    )


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for c in report.get("checks", []) or []:
        if isinstance(c, dict) and c.get("name"):
            out[str(c["name"])] = c
    return out


def boot_facts_from_report(report: dict[str, Any], foreign_clients: int | None) -> BootFacts:
    """The lane's BootReport (as data) -> BootFacts.

    The report carries named checks (autotune, flags, env, kv_pool, dark) with
    their evidence; the gates compare that evidence across arms. The runtime's
    env order is kept when the report has the raw list, else the order-free
    digest stands for the set.
    """
    checks = _checks(report)
    ev = {name: (c.get("evidence") or {}) for name, c in checks.items()}
    observed = ev.get("autotune", {}).get("observed")
    # A reload found the hash and compiled again: it paid a compile, so it is no hit.
    hash_hit = {"hit": True, "miss": False, "reload": False}.get(observed) if isinstance(observed, str) else None
    live = checks.get("feature_live")
    flags: dict[str, Any] = {}
    for row in ev.get("flags", {}).get("keys", []) or []:
        if row.get("present"):
            flags[str(row["key"])] = row.get("actual")
    env = report.get("env_list") or ev.get("env", {}).get("env_list")
    kv = ev.get("kv_pool", {}).get("observed")
    if foreign_clients is None:
        fr = ev.get("foreign_clients", {}).get("foreign_requests")
        foreign_clients = int(fr) if isinstance(fr, (int, float)) else None
    return BootFacts(
        hash_hit=hash_hit,
        boot_seconds=report.get("boot_seconds"),
        flags=flags,
        env=tuple(str(e) for e in env) if isinstance(env, (list, tuple)) else None,
        env_set_digest=ev.get("env", {}).get("set_digest"),
        kv_pool_tokens=int(kv) if isinstance(kv, (int, float)) else None,
        foreign_clients=foreign_clients,
        fingerprint=report.get("fingerprint"),
        feature_live={"pass": True, "fail": False}.get(str(live.get("status"))) if live else None,
        feature_live_summary=str(live.get("summary")) if live else None,
        instance=report.get("instance"),
    )


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
    return WindowData(window=parts[0].window, clock=clocks.pop() if len(clocks) == 1 else "mixed",
                      unit=parts[0].unit, cells=tuple(cells),
                      tokens_per_step=(1.0 + accepted / drafts) if drafts else parts[0].tokens_per_step, a_p=a_p)


def merge_boots(boots: list[BootFacts]) -> BootFacts:
    """One arm's boot facts over its stages: a hit only if every boot hit, the most foreign clients seen."""
    if len(boots) == 1:
        return boots[0]
    first = boots[0]
    hits = [b.hash_hit for b in boots]
    foreign = [b.foreign_clients for b in boots]
    kv = {b.kv_pool_tokens for b in boots}
    digests = {b.env_set_digest for b in boots}
    return first.model_copy(update={
        "hash_hit": None if None in hits else all(h for h in hits),
        "foreign_clients": None if None in foreign else max(f for f in foreign if f is not None),
        "kv_pool_tokens": first.kv_pool_tokens if len(kv) == 1 else None,
        "env_set_digest": first.env_set_digest if len(digests) == 1 else "differs between stages",
        "flags": {k: v for k, v in first.flags.items() if all(b.flags.get(k) == v for b in boots)},
    })
