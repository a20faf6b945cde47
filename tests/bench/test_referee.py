"""`bench --referee`: a window's outputs scored by a referee's prompt_logprobs, the verdict in the result.

End to end on the embedded engine: an exact engine PASSes, the same engine with its verifier faulted
(`--fault temperature=0.8`: a temperature-1 request is sampled at 0.8) FAILs and names the effective
temperature, the referee being the lane's own prefill pass (it never reaches the verifier, so a faulted
lane still scores exactly). The parser is checked on vLLM's `prompt_logprobs` shape by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gb300lane.bench.referee import parse_prompt_logprobs
from gb300lane.cli.main import app
from gb300lane.errors import BenchError

from engines import running_engine

runner = CliRunner()
WINDOW = Path(__file__).parents[1] / "data" / "bench" / "lossless-window.yaml"
FLAGS = [
    "--model",
    "builtin",
    "--served-model-name",
    "lane",
    "--time-scale",
    "0",
    "--speculative-config",
    json.dumps({"method": "dspark", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"}),
]


def _bench(url: str, out: Path, *extra: str, window: Path = WINDOW) -> tuple[int, str, dict]:
    res = runner.invoke(
        app, ["bench", "--endpoint", url, "--window", str(window), "--referee", "self", "--out", str(out), *extra]
    )
    return res.exit_code, res.output, json.loads(out.read_text())


@pytest.mark.slow
def test_an_exact_engine_passes_and_the_result_carries_the_verdict(tmp_path: Path) -> None:
    with running_engine(FLAGS) as eng:
        code, output, data = _bench(eng.url, tmp_path / "w.json")
    assert code == 0, output
    ll = data["lossless"]
    assert ll["status"] == "PASS", ll["reason"]
    assert ll["tokens_scored"] >= 200 and ll["referee_tokens"] > ll["tokens_scored"]
    assert set(ll["per_class"]) == {"prose", "code"}
    assert "Lossless at temperature 1, top_p 1: PASS" in output


@pytest.mark.slow
def test_a_faulted_engine_fails_and_names_the_effective_temperature(tmp_path: Path) -> None:
    with running_engine([*FLAGS, "--fault", "temperature=0.8"]) as eng:
        code, output, data = _bench(eng.url, tmp_path / "w.json")
    assert code == 1
    ll = data["lossless"]
    assert ll["status"] == "FAIL"
    assert ll["overall"]["t_low"] <= 0.8 <= ll["overall"]["t_high"]
    assert ll["overall"]["t_eff"] < 0.9 and "samples as if at temperature 0." in ll["reason"]
    assert "not lossless" in output


@pytest.mark.slow
def test_a_short_window_is_inconclusive_and_says_what_it_needs(tmp_path: Path) -> None:
    with running_engine([*FLAGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]) as eng:
        res = runner.invoke(
            app,
            [
                "bench",
                "--endpoint",
                eng.url,
                "--window",
                str(WINDOW),
                "--referee",
                "self",
                "--transcripts",
                "1",
                "--tokens",
                "16",
                "--json",
            ],
        )
    assert res.exit_code == 0, res.output
    ll = json.loads(res.output)["lossless"]
    assert ll["status"] == "INCONCLUSIVE"
    assert ">= 200 tokens in >= 2 transcripts" in ll["reason"]


def _entry(*items: tuple[int, float, int]) -> dict:
    return {str(t): {"logprob": lp, "rank": r, "decoded_token": f"t{t}"} for t, lp, r in items}


def test_prompt_logprobs_parse_as_vllm_answers_them() -> None:
    # Positions 0-1 are the prompt; 2 has its token second-ranked, 3 outside the top-2 (its own entry first).
    entries = [
        None,
        _entry((5, -1.0, 1)),
        _entry((7, -1.2, 2), (3, -0.5, 1)),
        _entry((9, -4.0, 6), (3, -0.4, 1), (0, -1.5, 2)),
    ]
    s = parse_prompt_logprobs(entries, [1, 5, 7, 9], 2, top_k=2, klass="prose", label="r")
    assert s.sampled_rank.tolist() == [2, 3]
    assert s.top_logprobs.tolist() == [[-0.5, -1.2], [-0.4, -1.5]]
    # EOS (0) banned: taken out of the top-k, the rows conditional.
    banned = parse_prompt_logprobs(
        entries, [1, 5, 7, 9], 3, top_k=2, klass="prose", label="r", eos_token_id=0, eos_banned=True
    )
    assert banned.top_logprobs[0, 0] == -0.4 and np.isneginf(banned.top_logprobs[0, 1])
    assert banned.conditional is not None and banned.conditional.all()
    with pytest.raises(BenchError, match="does not hold the prompt token 9"):
        parse_prompt_logprobs(entries[:3] + [_entry((3, -0.4, 1))], [1, 5, 7, 9], 2, top_k=2, klass="p", label="r")
    with pytest.raises(BenchError, match="3 entries for 4 prompt tokens"):
        parse_prompt_logprobs(entries[:3], [1, 5, 7, 9], 2, top_k=2, klass="p", label="r")


def _smoke_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    from gb300lane.recipes import load_recipe
    from gb300lane.recipes.schema import SmokeGate, SmokeLossless, WindowSpec

    monkeypatch.setenv("GB300LANE_STATE_DIR", str(tmp_path / "state"))
    base = load_recipe("local-v27")
    window = WindowSpec(
        name="t1",
        classes=("prose", "code"),
        transcripts_per_class=6,
        rounds=1,
        concurrency=(1,),
        temperature=1.0,
        top_p=1.0,
        seed_base=1000,
        forced_tokens=128,
    )
    gate = SmokeGate(name="bounds-t1", kind="bounds", window=window, lossless=SmokeLossless())
    spec = base.speculative.model_copy(update={"schedule": None, "num_speculative_tokens": 3})  # as FLAGS
    return base.model_copy(update={"smoke": base.smoke.model_copy(update={"gates": (gate,)}), "speculative": spec})


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "status"), [(None, "PASS"), ("temperature=0.8", "FAIL")])
def test_the_smoke_bounds_gate_carries_the_check(
    fault: str | None, status: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gb300lane.bench.smoke import run_smoke

    recipe = _smoke_recipe(monkeypatch, tmp_path)
    with running_engine(FLAGS + (["--fault", fault] if fault else [])) as eng:
        report = run_smoke(recipe, eng.url, model="lane", fingerprint="f" * 16)
    gate = report.gates[0]
    assert gate.status == status, gate.reason
    assert f"lossless {status}" in gate.reason
    assert gate.details["lossless"]["referee_tokens"] > 0


def test_every_shipped_recipe_checks_losslessness_in_its_sampled_smoke() -> None:
    """`up`, `promote` and `rollback` run a recipe's smoke: its temperature-1.0 bounds gate carries the check."""
    from gb300lane.recipes import list_recipes, load_recipe

    for summary in list_recipes():
        name = summary.name
        recipe = load_recipe(name)
        sampled = [g for g in recipe.smoke.gates if g.kind == "bounds" and g.window.temperature > 0]
        assert sampled, f"{name} has no sampled bounds gate"
        assert all(g.lossless is not None for g in sampled), f"{name}: {[g.name for g in sampled]}"


@pytest.mark.slow
def test_the_referee_scores_the_lanes_own_token_ids_tool_calls_included_one_request_per_seed(tmp_path: Path) -> None:
    """A sampled window asks for return_token_ids: every request is scored by the ids it sampled (a tool chat's
    too), and the second concurrency's copy of a seed is left out as not independent."""
    from gb300lane.bench.models import WindowResult

    window = tmp_path / "w.yaml"
    window.write_text(
        "name: t1\nclasses: [prose, tool_json]\ntranscripts_per_class: 4\nrounds: 1\nconcurrency: [1, 2]\n"
        "temperature: 1.0\ntop_p: 1.0\nseed_base: 1000\nforced_tokens: 48\n"
    )
    with running_engine([*FLAGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]) as eng:
        _, output, _ = _bench(eng.url, tmp_path / "o.json", window=window)
    # (the exit code also reflects the cells' load validity, which a loaded host may miss at C2: not asserted)
    assert "lossless" in output, output
    result = WindowResult.model_validate_json((tmp_path / "o.json").read_text())
    assert all(r.token_ids is not None and len(r.token_ids) == r.output_tokens for r in result.records)
    assert all(r.prompt_token_ids and len(r.prompt_token_ids) == r.prompt_tokens for r in result.records)
    ll = result.lossless
    assert ll is not None and ll.status == "PASS", ll
    assert set(ll.per_class) == {"prose", "tool_json"}
    assert ll.excluded == {"the same transcript and seed as a request already scored (not an independent sample)": 8}
    assert ll.transcripts == 8 and ll.tokens_scored == 8 * 47
    # the engine says which verify-block position emitted each token (k = 3: drafts 1-3, the verifier's own at
    # 1-4): the effect is also reported per position
    assert ll.per_position is not None and set(ll.per_position) <= {"0", "1", "2", "3", "4"}
    assert {"1", "2"} <= set(ll.per_position) and sum(e.tokens for e in ll.per_position.values()) == ll.tokens_scored
    assert "as the engine reported" in ll.per_position_note
