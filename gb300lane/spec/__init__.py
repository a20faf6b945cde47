"""Speculative decoding mathematics: verification, acceptance arithmetic, metrics, the k advisor.

Owns token and block verification (the embedded engine's accept rule), exact
expected acceptance for small vocabularies, the counters-to-rates arithmetic
in both conventions, parsing of vLLM's `/metrics` text and `SpecDecoding
metrics:` log line, and the k advisor.

The numpy-backed names (the advisor, the verification kernels in
`spec.verification`) are loaded on first use (PEP 562): `lane` imports this
package for the metrics parser, and neither `gb300lane status` nor `--help`
should pay for numpy to start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gb300lane.spec.acceptance import (
    AcceptanceStats,
    SpecCounters,
    a_p_from_marginals,
    acceptance,
    marginals,
    ratio_to_control_mean,
    tokens_per_second,
    tokens_per_step_from_a_p,
)
from gb300lane.spec.expectation import expected_accepted
from gb300lane.spec.metrics import MetricsScrape, SpecLogLine, delta, parse_metrics_text, parse_spec_log_line

if TYPE_CHECKING:
    from gb300lane.spec.advisor import (
        AcceptanceCurve,
        Advice,
        AdvisorInput,
        KPrediction,
        StepTimeModel,
        StepTimePoint,
        advise,
        fit_step_time,
        load_advisor_input,
    )
    from gb300lane.spec.verification import VERIFY_METHODS, VerifyResult, block_verify, token_verify, verify

#: Names loaded on first use -> the submodule that defines them.
_LAZY = {
    **dict.fromkeys(
        ("AcceptanceCurve", "Advice", "AdvisorInput", "KPrediction", "StepTimeModel", "StepTimePoint", "advise",
         "fit_step_time", "load_advisor_input"),
        "advisor",
    ),
    **dict.fromkeys(("VERIFY_METHODS", "VerifyResult", "block_verify", "token_verify", "verify"), "verification"),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "AcceptanceCurve",
    "AcceptanceStats",
    "Advice",
    "AdvisorInput",
    "KPrediction",
    "MetricsScrape",
    "SpecCounters",
    "SpecLogLine",
    "StepTimeModel",
    "StepTimePoint",
    "VERIFY_METHODS",
    "VerifyResult",
    "a_p_from_marginals",
    "acceptance",
    "advise",
    "block_verify",
    "delta",
    "expected_accepted",
    "fit_step_time",
    "load_advisor_input",
    "marginals",
    "parse_metrics_text",
    "parse_spec_log_line",
    "ratio_to_control_mean",
    "token_verify",
    "tokens_per_second",
    "tokens_per_step_from_a_p",
    "verify",
]
