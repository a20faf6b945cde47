"""The engine's fitted parameters: the few numbers per traffic class that shape target and drafter.

Mechanisms (the write-up's), and the parameter each one has:

- Target predictability, per class (`predictability`, rho > 0): in the
  class's n-gram layers every Witten-Bell weight lambda becomes lambda ** rho
  and the seen continuations ML become ML ** (1 / rho), renormalised. rho < 1
  trusts and sharpens what the class's text does next (more formulaic,
  easier to draft), rho > 1 backs off (less predictable). Each row stays a
  distribution.
- How much of a class the drafter knows, per class (`miss`, mu): the drafter
  scores its candidates with the target's log-probabilities at the drafted
  prefix times `drafter.sharpness`, plus a fixed error per (class, context,
  candidate, slot): N(0, sigma^2) (`drafter.noise`) on a context it knows,
  N(0, `drafter.miss_noise`^2) on one it misses (a confident wrong guess).
  Which contexts it misses is fixed for the checkpoint (a hash), a share mu
  of them. Neither grows through the trained block, so acceptance stays flat
  across it.
- A wider query block, per class (`wide_block`, omega): when k exceeds the
  trained block every slot loses a known context with chance omega, slot 1
  included (the write-up's "the query shape changed").
- The cliff past the block (`drafter.cliff`, kappa): each position past the
  trained block loses a known context with chance kappa more.

The values are fitted by scripts/fit_engine.py against the write-up's curves
and shipped as `calibration.json`; nothing here names an acceptance rate.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from pydantic import Field, ValidationError

from gb300lane.errors import EngineError
from gb300lane.models import FrozenModel, format_validation_error

#: Class order of the per-class arrays: the five corpora, then `mixed` (the all-corpora layer).
CALIBRATED_CLASSES: tuple[str, ...] = ("prose", "structured", "code", "shell_ops", "tool_json", "mixed")
CALIBRATION_FILE = resources.files("gb300lane.engine") / "calibration.json"


class ClassParams(FrozenModel):
    predictability: float = Field(gt=0.0, le=10.0, description="rho: lambda -> lambda ** rho, ML -> ML ** (1 / rho).")
    miss: float = Field(ge=0.0, lt=1.0, description="mu: chance the drafter misses one of the class's contexts.")
    wide_block: float = Field(ge=0.0, lt=1.0, description="omega: chance a known context is lost when k > block size.")


class DrafterParams(FrozenModel):
    noise: float = Field(ge=0.0, le=20.0, description="sigma: s.d. of the logit error on a context the drafter knows.")
    miss_noise: float = Field(ge=0.0, le=50.0, description="s.d. of the logit error on a context it misses.")
    sharpness: float = Field(gt=0.0, le=10.0, description="tau: weight of the target's log-probabilities.")
    cliff: float = Field(
        ge=0.0, lt=1.0, description="kappa: per slot past the block, the chance a known context is lost."
    )


class Calibration(FrozenModel):
    fitted_by: str = Field(default="", description="The command that wrote the file.")
    classes: dict[str, ClassParams]
    drafter: DrafterParams

    def for_class(self, index: int) -> ClassParams:
        return self.classes[CALIBRATED_CLASSES[index]]

    def check(self, where: str) -> Calibration:
        missing = [c for c in CALIBRATED_CLASSES if c not in self.classes]
        extra = [c for c in self.classes if c not in CALIBRATED_CLASSES]
        if missing or extra:
            raise EngineError(
                f"{where}: classes must be exactly {', '.join(CALIBRATED_CLASSES)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(extra)}" if extra else "")
                + "; re-run scripts/fit_engine.py"
            )
        return self


#: Parameters that leave the target's n-grams as built and give a perfect drafter (for tests).
NEUTRAL = Calibration(
    classes={c: ClassParams(predictability=1.0, miss=0.0, wide_block=0.0) for c in CALIBRATED_CLASSES},
    drafter=DrafterParams(noise=0.0, miss_noise=0.0, sharpness=1.0, cliff=0.0),
)


def parse_calibration(text: str, where: str) -> Calibration:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EngineError(f"{where}: not JSON ({exc.msg}); re-run scripts/fit_engine.py") from None
    try:
        return Calibration.model_validate(raw).check(where)
    except ValidationError as exc:
        raise EngineError(f"{where}: {format_validation_error(exc)}; re-run scripts/fit_engine.py") from None


@cache
def shipped_calibration() -> Calibration:
    """The fitted parameters shipped with the package."""
    return parse_calibration(CALIBRATION_FILE.read_text(encoding="utf-8"), str(CALIBRATION_FILE))
