"""The engine against the write-up's published curves: what benchmarks/fidelity.py and the fit measure.

The write-up's numbers (C1, temperature 1.0, its BR1 and BR2 cards) are
transcribed here as the targets; the engine's side is measured by really
running the engine core on the shipped transcripts, 256 forced tokens each.

A one-user window at a fixed k is run as one batch: a request's draws are
addressed by (request, position, use, slot) and nothing in a step depends on
what shares it at the same k, so each request's tokens and counters are
exactly those of running it alone (tests/engine/test_core.py checks the
invariance); the served k-schedule at C8 runs at C8.

`mixed` transcripts are conversations across the five classes: the i-th
mixed transcript is the i-th transcript of every class, one message each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from gb300lane.bench.transcripts import BASE_CLASSES, Transcript, load_transcripts
from gb300lane.engine.config import SpecConfig, parse_spec_config
from gb300lane.engine.core import EngineCore, Sequence
from gb300lane.engine.model import BuiltinModel
from gb300lane.engine.sampling import SamplingParams

FIDELITY_CLASSES: tuple[str, ...] = (*BASE_CLASSES, "mixed")

#: The write-up's BR2 table: tokens/step at C1 (k=5: production, token verification;
#: k=9: nine drafts with block verification).
WRITEUP_TPS_K5 = {"prose": 2.85, "structured": 3.03, "code": 3.83, "shell_ops": 3.98, "tool_json": 3.63, "mixed": 2.08}
WRITEUP_TPS_K9 = {"prose": 2.60, "structured": 2.94, "code": 3.66, "shell_ops": 4.04, "tool_json": 3.45, "mixed": 1.82}
#: Figure 5's data: prose accepted-at-position over drafts, C1.
WRITEUP_PROSE_K5 = (0.717, 0.476, 0.310, 0.205, 0.145)
WRITEUP_PROSE_K9 = (0.612, 0.379, 0.235, 0.147, 0.097, 0.063, 0.036, 0.020, 0.011)
#: Figure 4: all five classes, served k-schedule, token-by-token (A) against block (B).
WRITEUP_FIG4_TOKEN = (0.793, 0.604, 0.463, 0.191, 0.153)
WRITEUP_FIG4_BLOCK = (0.795, 0.617, 0.484, 0.202, 0.163)
WRITEUP_FIG4_TPS = (3.204, 3.262)
#: The lane's production schedule (k=5 at 1-4 streams, k=3 above).
SERVED_SCHEDULE = [[1, 4, 5], [5, 8, 3], [9, 32, 3]]


def _text(t: Transcript) -> str:
    if t.kind == "completion":
        return t.prompt or ""
    # As the engine's chat route joins messages (the builtin model has no chat template).
    return "\n\n".join(str(m.get("content") or "") for m in t.messages or []) + "\n"


def class_prompts(model: BuiltinModel, cls: str, count: int) -> list[list[int]]:
    """Token ids of the first `count` transcripts of a class (`mixed`: see the module docstring)."""
    if cls == "mixed":
        per = [load_transcripts(c) for c in BASE_CLASSES]
        texts = ["\n\n".join(_text(items[i % len(items)]).strip() for items in per) + "\n" for i in range(count)]
    else:
        texts = [_text(t) for t in load_transcripts(cls)[:count]]
    return [model.tokenizer.encode(t) for t in texts]


@dataclass
class WindowResult:
    """Pooled counters of one window."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    tokens: int = 0
    per_request: list[float] = field(default_factory=list)  # each request's own tokens/step

    def add(self, core: EngineCore, seqs: list[Sequence]) -> None:
        self.per_request += [1.0 + s.num_accepted / s.num_drafts for s in seqs if s.num_drafts]
        c = core.counters
        self.num_drafts += c.num_drafts
        self.num_draft_tokens += c.num_draft_tokens
        self.num_accepted += c.num_accepted
        self.tokens += c.generation_tokens
        if len(self.accepted_per_pos) < len(c.accepted_per_pos):
            self.accepted_per_pos += [0] * (len(c.accepted_per_pos) - len(self.accepted_per_pos))
        for i, v in enumerate(c.accepted_per_pos):
            self.accepted_per_pos[i] += v

    @property
    def tokens_per_step(self) -> float:
        return 1.0 + self.num_accepted / self.num_drafts if self.num_drafts else float("nan")

    def num_draft_tokens_per_step(self) -> float:
        return self.num_draft_tokens / self.num_drafts if self.num_drafts else float("nan")

    @property
    def standard_error(self) -> float:
        """Standard error of the mean of per-request tokens/step (requests are the independent units)."""
        n = len(self.per_request)
        return float(np.std(self.per_request, ddof=1) / np.sqrt(n)) if n > 1 else float("nan")

    def a_p(self, k: int | None = None) -> list[float]:
        """Accepted at each position over drafts (the write-up's a_p)."""
        n = k if k is not None else len(self.accepted_per_pos)
        acc = self.accepted_per_pos + [0] * max(0, n - len(self.accepted_per_pos))
        return [acc[i] / self.num_drafts if self.num_drafts else float("nan") for i in range(n)]


def spec_for(k: int, method: str, schedule: list[list[int]] | None = None) -> SpecConfig:
    cfg: dict[str, object] = {
        "method": "dspark",
        "num_speculative_tokens": k,
        "draft_sample_method": "probabilistic",
        "rejection_sample_method": method,
    }
    if schedule:
        cfg["num_speculative_tokens_per_batch_size"] = schedule
    spec = parse_spec_config(json.dumps(cfg))[0]
    assert spec is not None
    return spec


def run_window(
    model: BuiltinModel,
    prompts: list[list[int]],
    *,
    k: int,
    method: str,
    concurrency: int = 1,
    tokens: int = 256,
    schedule: list[list[int]] | None = None,
    boot_seed: int = 1,
    seed_base: int = 0,
    out: WindowResult | None = None,
) -> WindowResult:
    """Run `prompts` once at temperature 1.0; C1 at a fixed k runs as one batch (module docstring)."""
    out = out or WindowResult()
    if not prompts:
        return out
    batch = len(prompts) if concurrency == 1 and not schedule else concurrency
    core = EngineCore(model, spec_for(k, method, schedule), max_num_seqs=batch, seed=0, boot_seed=boot_seed)
    seqs = [
        Sequence(f"f{i}", ids, SamplingParams(temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=seed_base + i))
        for i, ids in enumerate(prompts)
    ]
    for seq in seqs:
        core.add(seq)
    while core.has_work:
        core.step()
    out.add(core, seqs)
    return out


def class_window(
    model: BuiltinModel, cls: str, *, k: int, method: str, transcripts: int = 40, tokens: int = 256, boot_seed: int = 1
) -> WindowResult:
    return run_window(
        model, class_prompts(model, cls, transcripts), k=k, method=method, tokens=tokens, boot_seed=boot_seed
    )


def figure4_window(
    model: BuiltinModel, method: str, *, transcripts: int = 40, tokens: int = 256, boot_seed: int = 1
) -> WindowResult:
    """All five classes at C1 and C8 under the served schedule (the BR1 primary window, one round)."""
    out = WindowResult()
    for cls in BASE_CLASSES:
        prompts = class_prompts(model, cls, transcripts)
        run_window(model, prompts, k=5, method=method, tokens=tokens, boot_seed=boot_seed, out=out)
        run_window(
            model,
            prompts,
            k=5,
            method=method,
            concurrency=8,
            schedule=SERVED_SCHEDULE,
            tokens=tokens,
            boot_seed=boot_seed,
            seed_base=10_000,
            out=out,
        )
    return out


def max_abs(a: list[float] | tuple[float, ...], b: list[float] | tuple[float, ...]) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
