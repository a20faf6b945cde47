"""Speculative decoding mathematics: verification, acceptance arithmetic, metrics, the k advisor.

Owns token and block verification (the embedded engine's accept rule), exact
expected acceptance for small vocabularies, the counters-to-rates arithmetic
in both conventions, parsing of vLLM's `/metrics` text and `SpecDecoding
metrics:` log line, and the k advisor.

Each name loads its submodule when first used (`gb300lane.lazy`): `lane` imports
the metrics parser, and neither `gb300lane status` nor `--help` loads numpy
(the advisor, the verification kernels in `spec.verification`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gb300lane.lazy import attach

if TYPE_CHECKING:
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
    from gb300lane.spec.counters import MetricsScrape, SpecLogLine, delta, parse_metrics_text, parse_spec_log_line
    from gb300lane.spec.expectation import expected_accepted
    from gb300lane.spec.verification import (
        VERIFY_METHODS,
        VerifyResult,
        block_verify,
        token_verify,
        verify,
        verify_support,
    )

__getattr__, __dir__ = attach(
    __name__,
    {
        "AcceptanceStats": "acceptance",
        "SpecCounters": "acceptance",
        "a_p_from_marginals": "acceptance",
        "acceptance": "acceptance",
        "marginals": "acceptance",
        "ratio_to_control_mean": "acceptance",
        "tokens_per_second": "acceptance",
        "tokens_per_step_from_a_p": "acceptance",
        "AcceptanceCurve": "advisor",
        "Advice": "advisor",
        "AdvisorInput": "advisor",
        "KPrediction": "advisor",
        "StepTimeModel": "advisor",
        "StepTimePoint": "advisor",
        "advise": "advisor",
        "fit_step_time": "advisor",
        "load_advisor_input": "advisor",
        "expected_accepted": "expectation",
        "MetricsScrape": "counters",
        "SpecLogLine": "counters",
        "delta": "counters",
        "parse_metrics_text": "counters",
        "parse_spec_log_line": "counters",
        "VERIFY_METHODS": "verification",
        "VerifyResult": "verification",
        "block_verify": "verification",
        "token_verify": "verification",
        "verify": "verification",
        "verify_support": "verification",
    },
)

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
    "verify_support",
]
