"""Sampling parameters, and the distribution the target samples from, computed in log space.

The target hands the core its temperature-1 probabilities; a request's
sampling parameters turn them into the distribution the verifier tests
drafts against and samples from. Everything happens on log-probabilities
with the maximum subtracted before exponentiating, so no temperature
underflows a row: at temperature 1e-4 the top token keeps weight 1 and a
runner-up 1 nat behind gets exp(-10,000), which is 0, as it should be.

Order, as vLLM's sampler applies it: the grammar mask and the min_tokens
EOS ban (logits processors), temperature, then min_p, top_k and top_p on the
tempered distribution. Limits behave as limits: a temperature below
`GREEDY_TEMPERATURE` (vLLM's 1e-5) is greedy and takes the greedy path
(argmax, no randomness); top_p -> 0 keeps the most likely token (the first by
id among exact ties, as argmax picks); min_p -> 1 keeps the tied maxima.
Non-finite or out-of-range values never get this far: `SamplingParams.check`
refuses them when a request is added (the server answers them with a 400
before that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np

from gb300lane.engine.tokenizer import EOS_ID
from gb300lane.errors import EngineError

#: Below this temperature a request is greedy (vLLM's _SAMPLING_EPS).
GREEDY_TEMPERATURE = 1e-5


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    seed: int | None = None
    top_k: int = -1
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def plain(self) -> bool:
        """True when the target's temperature-1 distribution is the one sampled from (nothing to apply)."""
        return self.temperature == 1.0 and self.top_p >= 1.0 and self.top_k == -1 and self.min_p == 0.0

    def check(self) -> None:
        """Refuse values the sampler cannot honour; the message names the field and the range."""
        for name, value, lo, hi, lo_open in (
            ("temperature", self.temperature, 0.0, math.inf, False),
            ("top_p", self.top_p, 0.0, 1.0, True),
            ("min_p", self.min_p, 0.0, 1.0, False),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise EngineError(f"sampling parameter {name} = {value!r}: must be a finite number")
            if value < lo or value > hi or (lo_open and value == lo):
                bracket = "(" if lo_open else "["
                raise EngineError(f"sampling parameter {name} = {value!r}: must lie in {bracket}{lo}, {hi}]")
        for name, value, lo in (
            ("top_k", self.top_k, -1),
            ("max_tokens", self.max_tokens, 0),
            ("min_tokens", self.min_tokens, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise EngineError(f"sampling parameter {name} = {value!r}: must be an integer >= {lo}")
        if self.top_k == 0:
            raise EngineError("sampling parameter top_k = 0: use -1 (disabled) or a positive integer")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise EngineError(f"sampling parameter seed = {self.seed!r}: must be an integer or absent")


def shape_rows(
    p: np.ndarray, params: SamplingParams, *, ban_eos: int = 0, allowed: np.ndarray | None = None
) -> np.ndarray:
    """The distributions a request samples from, for target rows `p` (n, V) at temperature 1.

    `ban_eos` leading rows may not emit EOS (min_tokens not reached), unless
    EOS is all a row allows; `allowed` (n, V) booleans is a grammar's mask.
    Greedy requests get the masked temperature-1 rows (the verifier takes
    their argmax). Returns float32 rows that sum to 1.

    A grammar's mask alone (temperature 1, or greedy, nothing else to apply)
    is the rows zeroed off the mask and renormalized, without the round trip
    through logits: the same distribution, and a constrained step's largest
    cost at a vocabulary's width.
    """
    if allowed is not None and ban_eos <= 0 and (params.plain or params.greedy):
        # p >= 0, so the product with the mask is np.where(allowed, p, 0.0) in float64.
        kept = np.multiply(p, allowed, dtype=np.float64)
        total = kept.sum(axis=1, keepdims=True)
        if (total > 0.0).all():
            np.divide(kept, total, out=kept)  # the usual case, without the masked loop
        else:
            np.divide(kept, total, out=kept, where=total > 0.0)
        return cast(np.ndarray, kept.astype(np.float32))
    with np.errstate(divide="ignore"):
        logits = np.log(p, dtype=np.float64)
    if allowed is not None:
        logits[~allowed] = -np.inf
    if ban_eos > 0:
        rows = logits[:ban_eos]
        eos = rows[:, EOS_ID].copy()
        rows[:, EOS_ID] = -np.inf
        nothing_left = ~np.isfinite(rows.max(axis=1))
        rows[nothing_left, EOS_ID] = eos[nothing_left]
    if not params.greedy:
        if params.temperature != 1.0:
            logits /= params.temperature
        top = logits.max(axis=1, keepdims=True)
        if params.min_p > 0.0:
            logits[logits < top + math.log(params.min_p)] = -np.inf
        vocab = logits.shape[1]
        if 0 < params.top_k < vocab:
            kth = np.partition(logits, vocab - params.top_k, axis=1)[:, vocab - params.top_k, None]
            logits[logits < kth] = -np.inf
        if params.top_p < 1.0:
            logits = _top_p(logits, top, params.top_p)
    return _softmax(logits)


def _softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=1, keepdims=True)
    top[~np.isfinite(top)] = 0.0  # a row with nothing allowed stays all zero; the caller's fallback applies
    out = np.exp(logits - top)
    total = out.sum(axis=1, keepdims=True)
    np.divide(out, total, out=out, where=total > 0.0)
    return cast(np.ndarray, out.astype(np.float32))


def _top_p(logits: np.ndarray, top: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of tokens whose mass reaches top_p (vLLM's nucleus); the top token always stays."""
    order = np.argsort(-logits, axis=1, kind="stable")
    probs = np.exp(np.take_along_axis(logits, order, axis=1) - top)
    probs /= probs.sum(axis=1, keepdims=True)
    before = np.cumsum(probs, axis=1) - probs  # mass strictly ahead of each token
    keep_sorted = before < top_p
    keep_sorted[:, 0] = True
    keep = np.empty_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=1)
    return np.where(keep, logits, -np.inf)
