"""The evidence log: entries chain and verify; an edit, a cut end, a deleted log or a foreign key is a break."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane import evidencelog as el
from gb300lane.errors import StateError


def _entry(n: int) -> el.Entry:
    return el.Entry(
        kind="verdict",
        at=el.utcnow(),
        card="mini",
        receipts=f"/r/{n}",
        verdict="FAIL",
        number=n,
        files={"verdicts/verdict-1.json": f"{n:064x}"},
    )


def _three() -> Path:
    for n in (1, 2, 3):
        el.append(_entry(n))
    return el.log_path()


def test_entries_chain_and_verify_every_signature() -> None:
    assert el.read_log().ok and el.read_log().records == ()
    path = _three()
    log = el.read_log(signatures="all")
    assert log.ok, log.breaks
    assert [r.seq for r in log.records] == [1, 2, 3]
    assert [r.entry.number for r in log.records] == [1, 2, 3]
    assert log.records[1].prev == log.hashes[0]
    head = json.loads(el.head_path().read_text())
    assert head["seq"] == 3 and head["sha256"] == log.hashes[-1]
    assert not el.head_path().is_relative_to(path.parent)  # the head lives beside the key, not the log


def test_an_edited_line_is_a_break_and_nothing_is_appended_on_top() -> None:
    path = _three()
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"FAIL"', '"PASS"')
    path.write_text("\n".join(lines) + "\n")
    log = el.read_log()
    assert not log.ok and "line 3 does not follow the line before it" in log.breaks[0]
    with pytest.raises(StateError, match="refusing to enter verdict in the evidence log"):
        el.append(_entry(4))


def test_a_consistent_rewrite_without_the_key_breaks_at_the_signature() -> None:
    path = _three()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[2]["entry"]["verdict"] = "PASS"  # the newest line rewritten, its prev still right
    path.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records))
    log = el.read_log()
    assert not log.ok and "line 3" in log.breaks[0]
    assert "signature does not match" in log.breaks[0]


def test_lines_cut_from_the_end_or_the_log_deleted_fall_short_of_the_head() -> None:
    path = _three()
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]))
    log = el.read_log()
    assert not log.ok and "2 entries, and" in log.breaks[0] and "remembers 3" in log.breaks[0]
    path.unlink()
    log = el.read_log()
    assert not log.ok and "the evidence log is gone" in log.breaks[0]


def test_a_torn_last_line_is_named() -> None:
    path = _three()
    with open(path, "a") as fh:
        fh.write('{"schema_version":1,"seq":4')
    log = el.read_log()
    assert not log.ok and "line 4 is cut short" in log.breaks[0]


def test_reset_keeps_the_old_log_and_says_why() -> None:
    path = _three()
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    assert not el.read_log().ok
    rec = el.reset("the log was restored from an old backup")
    log = el.read_log()
    assert log.ok and [r.entry.kind for r in log.records] == ["reset"]
    assert "the log was restored from an old backup; replaced head 3" in (rec.entry.detail or "")
    assert list(path.parent.glob("evidence.log.reset-*"))
    el.append(_entry(9))
    assert el.read_log().ok


def test_a_line_signed_by_a_key_outside_the_configuration_is_a_break(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fakes.sshkey import write_key

    _three()
    monkeypatch.setenv("GB300LANE_SIGNING_KEY", str(write_key(tmp_path / "forger" / "key", "a forger")))
    with pytest.raises(StateError, match="not an allowed signer.*nothing was entered"):
        el.append(_entry(4))  # a key outside the configuration writes nothing
    assert len(el.read_log().records) == 3
    # a line a forger writes with their own key, chained correctly, breaks the log at that line
    from gb300lane import keyed, signing

    path = el.log_path()
    prev = el.read_log().hashes[-1]
    entry = {"kind": "verdict", "at": el.utcnow(), "card": "mini", "verdict": "PASS", "number": 5}
    seal = signing.sign(el.ENTRY_SEAL, keyed.canonical({"seq": 4, "prev": prev, "entry": entry}).encode())
    with open(path, "a") as fh:
        fh.write(keyed.canonical({"schema_version": 1, "seq": 4, "prev": prev, "entry": entry, "seal": seal}) + "\n")
    monkeypatch.delenv("GB300LANE_SIGNING_KEY")
    log = el.read_log()
    assert not log.ok and "line 4" in log.breaks[0] and "not an allowed signer" in log.breaks[0]
