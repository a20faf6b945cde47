"""A real card run: three arms booted dark on the embedded engine through the lane, scored and reported."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from gb300lane.cards import load_card, register, render_report, run_card, score
from gb300lane.cards.run import LiveArmOps
from gb300lane.testing.free_ports import free_port

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_micro_card_on_the_embedded_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    card, path = load_card(DATA / "micro.yaml")
    rec = register(card, path.read_text())
    ops = LiveArmOps(port=free_port())
    try:
        lines = run_card(rec, ops=ops)
    finally:
        from gb300lane import lane

        for arm in card.arms:
            try:
                lane.remove_instance(f"{arm.recipe}-{arm.name}")
            except Exception:  # noqa: BLE001 - cleanup of what the test created
                pass
    assert lines[0].startswith("client self-test at C1/C2") and "selftest-1.json" in lines[0]
    assert lines[1:] == ["A: finished (attempt 1)", "B: finished (attempt 1)", "A2: finished (attempt 1)"]
    selftest = json.loads((rec.root / "selftest-1.json").read_text())
    assert selftest["concurrency"] == [1, 2]
    assert [lv["concurrency"] for lv in selftest["attempts"][-1]["levels"]] == [1, 2]
    boot = json.loads((rec.attempt_dir("B", 1) / "boot.json").read_text())
    assert boot["dark"] is True and boot["arm"] == "B"
    window = json.loads((rec.attempt_dir("B", 1) / "windows" / "primary.json").read_text())
    assert {c["clock"] for c in window["cells"]} == {"modelled"}
    v = score(rec)
    res = {r.id: r.status for r in v.results}
    tail = next(r for r in v.results if r.id == "itl-p99")
    assert res == {
        "tokens-per-step": "PASS",
        "tokens-per-step-tested": "PASS",
        "hash-hit": "PASS",
        "flag-on-b-only": "PASS",
        "env-equal": "PASS",
        "kv-pool": "PASS",
        "foreign-clients": "PASS",
        "itl-p99": tail.status,
    }, [r.model_dump() for r in v.results]
    # the tail diagnostic reads the served streams' chunk gaps by transcript: 6 are fewer than the 16 a tail needs,
    # and a few hundred gaps fewer than the 1,000 a p99 needs
    assert not tail.decides and tail.status == "INCONCLUSIVE" and "6 transcripts" in tail.observed, tail
    assert [r.split(":")[0] for r in tail.reasons] == ["too few values for a p99", "too few transcripts for a p99"]
    assert "over at least 16 transcripts" in tail.bar, tail
    # each request's own spec-decode counters reached the receipts
    tested = next(r for r in v.results if r.id == "tokens-per-step-tested").tests[0]
    # 6 transcripts, their C1 and C2 requests averaged: every request of B's valid cells (a cell still invalid
    # after its retries, as a loaded host can leave one, is left out and named in the verdict's notes)
    valid = [c for c in window["cells"] if c["valid"]]
    assert tested.n == 6 and tested.requests_per_arm == sum(c["requests"] for c in valid)
    assert len(valid) == 4 or any(f"arm B, window primary: {4 - len(valid)} cell(s) left out" in n for n in v.notes), (
        v.notes
    )
    assert all(r["spec_decode"]["num_drafts"] > 0 for r in window["records"])
    md = render_report(rec)
    assert (md.parent / "fig4-accepted-at-position.png").is_file()
    page = (md.parent / "card.html").read_text()  # the HTML card of a real local run
    assert f'id="verdict" data-verdict="{v.verdict}" data-number="1"' in page
    assert f'data-field="estimate" data-value="{tested.estimate!r}"' in page
    assert rec.verify_manifest("manifest-report-1.json") == []


#: Each arm's own pinned boot seed: the arms' numerics differ as separate boots' do, the same on every run.
AA_BOOT_SEEDS = {"A": 7, "B": 8, "A2": 9}


class _PinnedBootOps(LiveArmOps):
    """The real lane, each arm booted with its own pinned boot seed (GB300LANE_BOOT_SEED reaches the engine)."""

    def __init__(self, *args: object, env: pytest.MonkeyPatch, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.env = env

    def instance(self, recipe: str, *, arm: str, **kwargs: object):  # type: ignore[override]
        self.env.setenv("GB300LANE_BOOT_SEED", str(AA_BOOT_SEEDS[arm]))
        return super().instance(recipe, arm=arm, **kwargs)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_aa_card_never_claims_b_better(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """B = local-v26: register, run and score through the CLI on the real lane, three seed bases.

    No arm is better than another, so no verdict may be PASS and no
    superiority gate may pass. The outcome is the same on every run: each
    arm's boot seed is pinned (its own, so the arms' numerics differ as
    separate boots' do), every request's seed comes from the card, and the
    card's concurrencies all get the same k from the recipe's batch-size
    schedule, so when the server batches a request (HTTP timing, CPU load)
    cannot change its tokens. Decode tok/s at C4 does depend on the batching;
    the only gate it feeds here is a non-inferiority gate, which cannot make
    a verdict claim B better on its own.
    """
    from typer.testing import CliRunner

    from gb300lane.cli.main import app
    from gb300lane.engine.args import parse_serve_args
    from gb300lane.recipes import load_recipe
    from gb300lane.recipes.containers import main_argv
    from gb300lane.runtime import process

    template = (DATA / "aa.yaml").read_text()
    (tmp_path / "aa.yaml").write_text(template.replace("seed_base: SEED", "seed_base: 1"))
    card, _ = load_card(tmp_path / "aa.yaml")
    recipe = load_recipe("local-v26")
    argv = list(main_argv(recipe, host="127.0.0.1", port=recipe.lane.port))
    spec = parse_serve_args(argv[argv.index("serve") + 1 :]).spec  # what the engine will serve
    ks = {spec.k_for_batch(b) for w in card.windows for c in w.concurrency for b in range(1, c + 1)}
    assert len(ks) == 1, f"the A/A card's concurrencies span k {sorted(ks)}: batching would change tokens"
    superiority = {g.id for g in card.gates if getattr(g, "test", None) == "superiority"}
    assert superiority, "the A/A card must carry a superiority gate"

    runner = CliRunner()
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setattr(process, "BASE_ENV_NAMES", (*process.BASE_ENV_NAMES, "GB300LANE_BOOT_SEED"))
    port = free_port()
    pinned = partial(_PinnedBootOps, port=port, env=monkeypatch)
    for where in ("gb300lane.cards.run.LiveArmOps", "gb300lane.cards.LiveArmOps"):  # wherever `card run` finds it
        monkeypatch.setattr(where, pinned)
    verdicts = []
    try:
        for seed in (1000, 2000, 3000):
            path = tmp_path / f"aa-{seed}.yaml"
            path.write_text(template.replace("seed_base: SEED", f"seed_base: {seed}"))
            res = runner.invoke(
                app,
                [
                    "card",
                    "register",
                    str(path),
                    "--fresh",
                    "--json",
                    "--new-question",
                    f"the A/A check at seed base {seed}",
                ],
            )
            assert res.exit_code == 0, res.output
            receipts = json.loads(res.stdout)["receipts"]
            res = runner.invoke(app, ["card", "run", receipts, "--json"])
            assert res.exit_code == 0, res.output
            from gb300lane import lane

            for arm, boot_seed in AA_BOOT_SEEDS.items():  # each arm's engine booted with its own pinned seed
                assert f"boot seed {boot_seed}," in lane.logs("local-v26", arm=arm), arm
            res = runner.invoke(app, ["card", "score", receipts, "--json"])
            v = json.loads(res.stdout)
            assert res.exit_code == {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[v["verdict"]], res.output
            claims = {r["id"]: r["status"] for r in v["results"] if r["id"] in superiority}
            assert claims.keys() == superiority, v["results"]
            verdicts.append((seed, v["verdict"], claims))
    finally:
        from gb300lane import lane

        lane.down(all=True)
    assert all(v != "PASS" and "PASS" not in claims.values() for _, v, claims in verdicts), verdicts
