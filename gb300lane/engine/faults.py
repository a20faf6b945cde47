"""Deliberate faults in the verifier: an engine that is lossy in a stated way, for testing losslessness checks.

Off by default. `--fault NAME[=VALUE]` (repeatable, or comma-separated; the
environment's `GB300LANE_FAULT` when no flag is given, which is how a recipe
sets it: `env: {GB300LANE_FAULT: "accept_bias=1.2"}`) turns one on. A faulted
engine says so in its boot log (a warning line naming every fault), in
`/version` (`"faults"`) and in every response's `gb300lane` extension
(`"faults"`), so nobody takes it for an exact one. Rows of a faulted engine
all take the reference path (full target rows, `gb300lane.spec.verify`), with
the fault applied there; an engine without faults never reaches this module.

The faults, each a way real speculative decoding goes wrong:

- `accept_bias=X` (X > 0): every accept test reads min(1, X p/q) for the
  token rule, whatever `rejection_sample_method` says: X > 1 lets drafts
  through more often than the target allows, so the output leans toward the
  drafter's distribution; X < 1 leans away from it.
- `position_bias=I:X`: the same at draft position I (1-based) only.
- `temperature=T` (T > 0): the verifier's target side is the request's
  distribution tempered once more, p^(1/T) renormalised: a temperature-1
  request is sampled at T.
- `top_p_ignored_in_verify`: the target side ignores the request's top_p
  (the drafts still honour it), so tokens outside the nucleus come out.
- `draft_temperature_only`: the target side ignores the request's
  temperature (the raw target, temperature 1); only the drafts are tempered.

Log-probabilities (logprobs.py) never read a fault: they are the exact
target's, which is what lets a referee catch a faulted engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gb300lane.engine.sampling import SamplingParams
from gb300lane.errors import EngineError
from gb300lane.spec.verification import VerifyResult, biased_token_verify, verify

#: Fault name -> what it takes and does (the error for an unknown name lists them).
FAULTS: dict[str, str] = {
    "accept_bias": "accept_bias=X: accept tests read X * p/q (token rule)",
    "position_bias": "position_bias=I:X: accept tests at draft position I (1-based) read X * p/q",
    "temperature": "temperature=T: the target side is tempered once more by T",
    "top_p_ignored_in_verify": "top_p_ignored_in_verify: the target side ignores top_p",
    "draft_temperature_only": "draft_temperature_only: the target side ignores the request's temperature",
}
#: The environment variable a recipe sets the faults with (`env:` in the recipe).
FAULT_ENV = "GB300LANE_FAULT"


def _positive(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise EngineError(f"--fault {name}={text}: {text!r} is not a number; pass e.g. {FAULTS[name]}") from None
    if not (math.isfinite(value) and value > 0.0):
        raise EngineError(f"--fault {name}={text}: must be a finite number > 0; pass e.g. {FAULTS[name]}")
    return value


@dataclass(frozen=True)
class Faults:
    """The faults one engine runs with (see the module docstring)."""

    accept_bias: float | None = None
    position_bias: tuple[int, float] | None = None
    temperature: float | None = None
    top_p_ignored_in_verify: bool = False
    draft_temperature_only: bool = False

    def describe(self) -> str:
        """The faults as `--fault` takes them, comma-separated."""
        parts = []
        if self.accept_bias is not None:
            parts.append(f"accept_bias={self.accept_bias:g}")
        if self.position_bias is not None:
            parts.append(f"position_bias={self.position_bias[0]}:{self.position_bias[1]:g}")
        if self.temperature is not None:
            parts.append(f"temperature={self.temperature:g}")
        if self.top_p_ignored_in_verify:
            parts.append("top_p_ignored_in_verify")
        if self.draft_temperature_only:
            parts.append("draft_temperature_only")
        return ",".join(parts)

    def target_params(self, params: SamplingParams) -> SamplingParams:
        """The sampling parameters the verifier's target side applies (the request's, unless a fault drops one)."""
        if self.top_p_ignored_in_verify and params.top_p < 1.0:
            params = replace(params, top_p=1.0)
        if self.draft_temperature_only and not params.greedy and params.temperature != 1.0:
            params = replace(params, temperature=1.0)
        return params

    def temper(self, p: np.ndarray, greedy: np.ndarray) -> np.ndarray:
        """(B, k+1, V) target rows tempered once more by `temperature` (greedy rows left alone)."""
        if self.temperature is None or self.temperature == 1.0:
            return p
        out = p.astype(np.float64)
        rows = ~greedy
        with np.errstate(divide="ignore"):
            logits = np.log(out[rows]) / self.temperature
        logits -= logits.max(axis=-1, keepdims=True)
        w = np.exp(logits)
        out[rows] = w / w.sum(axis=-1, keepdims=True)
        return out.astype(p.dtype)

    def verify(self, method: str, p, q, drafts, rng, *, greedy) -> VerifyResult:
        """The step's verification with the faults applied (the rule `method` names when no accept test is biased)."""
        k = drafts.shape[1]
        bias = np.ones(k)
        biased = False
        if self.accept_bias is not None:
            bias *= self.accept_bias
            biased = True
        if self.position_bias is not None and self.position_bias[0] <= k:
            bias[self.position_bias[0] - 1] *= self.position_bias[1]
            biased = True
        p = self.temper(p, np.asarray(greedy, dtype=bool))
        if biased:
            return biased_token_verify(p, q, drafts, rng, bias=bias, greedy=greedy)
        return verify(method, p, q, drafts, rng, greedy=greedy)


def parse_faults(specs: list[str] | tuple[str, ...] | None) -> Faults | None:
    """`--fault` values (each NAME or NAME=VALUE, or several comma-separated) as Faults; None when none given."""
    items = [part.strip() for spec in specs or () for part in str(spec).split(",") if part.strip()]
    if not items:
        return None
    known = ", ".join(FAULTS.values())
    fields: dict[str, object] = {}
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if name not in FAULTS:
            raise EngineError(f"--fault {item}: unknown fault {name!r}; the faults are: {known}")
        if name in fields:
            raise EngineError(f"--fault {name} given twice; pass each fault once")
        flag = name in ("top_p_ignored_in_verify", "draft_temperature_only")
        if flag:
            if eq:
                raise EngineError(f"--fault {item}: {name} takes no value; pass --fault {name}")
            fields[name] = True
        elif not eq or not value.strip():
            raise EngineError(f"--fault {name}: needs a value; pass {FAULTS[name]}")
        elif name == "position_bias":
            pos_text, colon, x_text = value.partition(":")
            try:
                pos = int(pos_text)
            except ValueError:
                pos = 0
            if not colon or pos < 1:
                raise EngineError(
                    f"--fault {item}: position_bias takes I:X with I a draft position >= 1, e.g. position_bias=3:1.05"
                )
            fields[name] = (pos, _positive(name, x_text))
        else:
            fields[name] = _positive(name, value.strip())
    return Faults(**fields)  # type: ignore[arg-type]
