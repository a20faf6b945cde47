"""The live lane adapter: boot reports, verdict references and instance facts as promotion reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gb300lane.cards.record.verdicts import VerdictRef
from gb300lane.cli import seams
from gb300lane.errors import BootError, StateError
from gb300lane.lane import BootReport, CheckResult
from gb300lane.promote.live import LiveOps, boot_info, port_of
from gb300lane.promote.live_ops import default_ops
from gb300lane.testing.simlane import SimLane


def _report(*checks: CheckResult) -> BootReport:
    return BootReport(
        instance="local-local-v27", lane="local", recipe="local-v27", run="r1", runtime="process",
        fingerprint="96ab7b6cb57449a8", endpoint="http://127.0.0.1:30106", served_model="deepseek-v4.1-flash",
        dark=False, containers=("local-local-v27-main",), started_at=0.0, boot_seconds=5.6,
        engine_boot_seconds=256.1, checks=checks, path="/state/lane/boots/x.json",
    )  # fmt: skip


def test_a_boot_report_becomesboot_info() -> None:
    info = boot_info(_report(CheckResult(name="flags", status="pass", summary="ok")))
    assert (info.instance, info.endpoint, info.fingerprint) == (
        "local-local-v27",
        "http://127.0.0.1:30106",
        "96ab7b6cb57449a8",
    )
    assert info.boot_seconds == 5.6 and info.engine_seconds == 256.1


def test_a_failed_boot_check_fails_the_boot_but_an_autotune_surprise_does_not() -> None:
    miss = CheckResult(name="autotune", status="fail", summary="expected a hit, compiled")
    assert boot_info(_report(miss)).instance == "local-local-v27"
    flags = CheckResult(name="flags", status="fail", summary="args differ from the recipe: rejection_sample_method")
    with pytest.raises(BootError, match=r"booted but its checks failed \(flags: args differ.*report /state"):
        boot_info(_report(miss, flags))


def test_a_verdict_reference_names_card_number_file_and_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = VerdictRef(card="local-br1", receipts="/r", number=2, verdict="PASS", written_at="2026-10-26T09:08:00Z",
                     file="/r/verdicts/verdict-2.json", sha256="ab" * 32, candidate_recipe="local-v27",
                     control_recipe="local-v26")  # fmt: skip
    import gb300lane.promote.live as live_mod
    from gb300lane.cards.record.verdicts import CandidateEvidence

    monkeypatch.setattr(
        live_mod,
        "evidence_for",
        lambda name: CandidateEvidence(
            recipe=name, ref=ref if name == "local-v27" else None, breaks=(), registered=None, question=None
        ),
    )
    live = LiveOps()
    got = live.verdict("local-v27")
    assert got.rescored
    assert got.reference == f"card local-br1 verdict 2: PASS (/r/verdicts/verdict-2.json, sha256 {'ab' * 8})"
    # Its receipts are not there to verify: a PASS that cannot be verified does not pass.
    assert not got.passed and got.custody and got.custody.startswith("/r/registration.json")
    assert got.binding and "does not show it measured local-v27 as it is now" in got.binding
    assert live.verdict("local-v26") is None


def test_ports_are_read_from_endpoints() -> None:
    assert port_of("http://127.0.0.1:30106") == 30106
    assert port_of("http://127.0.0.1:30106/") == 30106
    assert port_of(None) is None and port_of("unix:/sock") is None


def test_the_library_drives_the_live_lane_and_only_the_cli_reads_the_double_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(seams.OPS_ENV, raising=False)
    assert isinstance(default_ops(), LiveOps) and seams.promotion_ops() is None
    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}})
    monkeypatch.setenv(seams.OPS_ENV, f"sim:{sim.path}")
    assert isinstance(seams.promotion_ops(), SimLane)
    assert isinstance(default_ops(), LiveOps)  # the library never reads the seam
    monkeypatch.setenv(seams.OPS_ENV, f"sim:{tmp_path / 'missing.json'}")
    with pytest.raises(StateError, match="no simulated lane file"):
        seams.promotion_ops()
