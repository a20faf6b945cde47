"""A card on an imported workload with the user's class names, on the embedded engine in process: its verdict is
per class and names the workload and the part it ran; an edited transcript makes the registration refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane import signing
from gb300lane.cards import load_card, register, render_report, run_card, score
from gb300lane.errors import CardError
from gb300lane.workloads import split_workload
from gb300lane.workloads.importing import import_workload

from clirun import cli
from fakes.golden import InProcessArmOps
from fakes.sshkey import write_key

CARD = """schema_version: 1
name: teams
title: "teams: block verification on the operator's own traffic"
arms:
  - {name: A, recipe: local-v26, role: control}
  - {name: B, recipe: local-v27, role: candidate}
  - {name: A2, recipe: local-v26, role: control}
windows:
  - name: primary
    workload: ops
    HELD
    classes: [support-desk, code-review]
    transcripts_per_class: 2
    rounds: 1
    concurrency: [1]
    temperature: 1.0
    seed_base: 1000
    forced_tokens: 12
primary_window: primary
gates:
  - id: tokens-per-step
    kind: tokens_per_step_ratio
    window: primary
    min_ratio: 0.5
    scope: per_cell
"""

PROMPTS = {
    "Support Desk": [
        "Write a friendly reply to a customer whose parcel arrived late.",
        "Explain to a customer how to reset a forgotten account password.",
        "Write an apology to a customer who was charged twice this month.",
        "Describe the refund policy for opened electronics in plain words.",
    ],
    "Code Review": [
        "Write a function that merges two sorted lists in Python.",
        "Write a function that checks whether a string is a palindrome in Go.",
        "Write a unit test for a function that parses ISO dates in Python.",
        "Write a function that counts words in a file in Rust.",
    ],
}


@pytest.fixture()
def lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for key, value in {
        "GB300LANE_RESULTS_DIR": tmp_path / "results",
        "GB300LANE_STATE_DIR": tmp_path / "state",
        "XDG_CONFIG_HOME": tmp_path / "config",
    }.items():
        monkeypatch.setenv(key, str(value))
    for key in ("GB300LANE_SIGNING_KEY", "GB300LANE_ALLOWED_SIGNERS", "GB300LANE_WORKLOADS_DIR"):
        monkeypatch.delenv(key, raising=False)
    key = write_key(signing.signing_key_path())
    pub = Path(f"{key}.pub").read_text().split()
    signing.allowed_signers_path().write_text(
        f'{signing.PRINCIPAL} namespaces="{signing.NAMESPACE}" {pub[0]} {pub[1]}\n'
    )
    src = tmp_path / "requests.jsonl"
    src.write_text(
        "".join(
            json.dumps({"model": "m", "prompt": p, "max_tokens": 64, "metadata": {"team": team}}) + "\n"
            for team, prompts in PROMPTS.items()
            for p in prompts
        )
    )
    import_workload(src, name="ops", fmt="openai", class_field="metadata.team")
    return tmp_path


def _card(tmp_path: Path, held: bool) -> Path:
    path = tmp_path / "teams.yaml"
    path.write_text(CARD.replace("    HELD\n", "    held_out: true\n" if held else ""))
    return path


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_card_on_user_classes_scores_per_class_and_refuses_an_edited_workload(lane: Path) -> None:
    card, path = load_card(_card(lane, held=False))
    rec = register(card, path.read_text())
    reg = json.loads(rec.registration_file.read_text())
    assert set(reg["workloads"]) == {"ops"} and set(reg["workloads"]["ops"]["files"]) == {
        "support-desk.jsonl",
        "code-review.jsonl",
    }
    run_card(rec, ops=InProcessArmOps(card))  # type: ignore[arg-type]
    verdict = score(rec)
    gate = next(r for r in verdict.results if r.id == "tokens-per-step")
    assert sorted((c.cls, c.concurrency) for c in gate.cells) == [("code-review", 1), ("support-desk", 1)]
    assert all(c.observed is not None and c.observed > 0 for c in gate.cells)
    assert [(w.workload, w.part) for w in verdict.workloads] == [("ops", "all")]

    f = lane / "workloads" / "ops" / "code-review.jsonl"
    f.chmod(0o644)
    f.write_text(f.read_text().replace("palindrome", "anagram"))
    with pytest.raises(CardError, match=r"workloads/ops/code-review.jsonl: sha256 \w+ differs from the manifest"):
        score(rec)
    # re-imported (the manifest agrees with the edit): the registration still names the file that changed
    src = lane / "requests.jsonl"
    src.write_text(src.read_text().replace("palindrome", "anagram"))
    import_workload(src, name="ops", fmt="openai", class_field="metadata.team", replace=True)
    with pytest.raises(
        CardError, match=r"workload ops changed after registration: \S+/workloads/ops/code-review.jsonl"
    ):
        score(rec)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_held_out_card_runs_the_held_out_part_and_says_so(lane: Path) -> None:
    m = split_workload("ops", 0.5, seed=1)
    assert m.split is not None
    card, path = load_card(_card(lane, held=True))
    rec = register(card, path.read_text())
    run_card(rec, ops=InProcessArmOps(card))  # type: ignore[arg-type]
    verdict = score(rec)
    assert [(w.workload, w.part) for w in verdict.workloads] == [("ops", "held_out")]
    ran = cli("card", "score", str(rec.root), "--dry-run")
    assert "window primary ran workload ops, its held-out part (sha256 " in ran.stdout, ran.stderr
    report = render_report(rec)
    md = report.read_text() if report.is_file() else (report / "card.md").read_text()
    assert "| primary | ops | held-out | 4 held out |" in md
    html = next(rec.root.rglob("card.html")).read_text()
    assert 'data-workload="ops" data-part="held_out"' in html
    ran = {line for line in (rec.root / "arms").rglob("primary.json")}
    ids = {r["transcript_id"] for p in ran for r in json.loads(p.read_text())["records"]}
    assert ids == set(m.split.held_out_ids)


def test_a_window_its_workload_cannot_fill_is_refused_at_registration(lane: Path) -> None:
    path = _card(lane, held=True)  # held out, but the workload has no split
    card, _ = load_card(path)
    with pytest.raises(CardError, match=r"window primary: .*workload ops has no held-out part; split it first"):
        register(card, path.read_text())
    path.write_text(CARD.replace("    HELD\n", "").replace("code-review]", "code-reviews]"))
    card, _ = load_card(path)
    with pytest.raises(
        CardError,
        match=r"unknown traffic class 'code-reviews' of workload ops; expected one of "
        r"support-desk, code-review, mixed",
    ):
        register(card, path.read_text())


def test_a_held_out_cards_pilot_runs_the_dev_part(lane: Path) -> None:
    from gb300lane.instrument.plan import pilot_window

    split_workload("ops", 0.5, seed=1)
    card, _ = load_card(_card(lane, held=True))
    assert card.window("primary").held_out and not pilot_window(card).held_out
    assert pilot_window(card).workload == "ops"
