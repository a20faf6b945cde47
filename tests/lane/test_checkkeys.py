"""The flag check reads each key where the engine it boots renders it, against a baseline the report names.

The walkthrough's production is local-v26 (the embedded engine, lane `local`); `up cpu-v26 --dark` (real vLLM,
lane `cpu`) used to compare cpu-v26 with it and read `kv_pool_tokens` as a flag vLLM never takes:
`FAIL flags args differ from the recipe: kv_pool_tokens: recipe 524288, args None`, on every boot.
"""

from __future__ import annotations

import time

from gb300lane.lane import checks
from gb300lane.lane.checkkeys import choose_baseline, expected_values, renderings
from gb300lane.lane.report import Baseline, BootReport, write_report
from gb300lane.recipes import diff_recipes, load_recipe, render
from gb300lane.runtime.process import mounted_argv


def _argv(name: str) -> tuple[str, ...]:
    recipe = load_recipe(name)
    main = render(recipe, dark=True).containers[0]
    return tuple(mounted_argv(main.argv, main.volumes))


def test_the_walkthroughs_production_on_another_lane_no_longer_fails_a_cpu_boot() -> None:
    cpu, local = load_recipe("cpu-v26"), load_recipe("local-v26")
    keys = [c.key for c in diff_recipes(local, cpu).changes]
    assert "kv_pool_tokens" in keys  # what the check used to read as a flag
    # Handed those keys anyway, the check reads each where vLLM renders it: kv_pool_tokens is no vLLM flag.
    result = checks.check_flags(_argv("cpu-v26"), expected_values(cpu, keys, dark=True), renderings(cpu, keys))
    rows = {r["key"]: r for r in result.evidence["keys"]}
    assert rows["kv_pool_tokens"]["rendered_as"] == "none" and rows["kv_pool_tokens"]["ok"] is None
    assert "kv_pool_tokens" not in [r["key"] for r in rows.values() if r["ok"] is False]
    # And production on lane `local` is not the baseline of a boot on lane `cpu` at all.
    base, chosen = choose_baseline(cpu, "local-v26", role="production")
    assert base.kind == "none" and chosen == []
    assert base.skipped is not None and "serves lane local" in base.skipped


def test_production_on_the_same_lane_is_the_baseline_and_named() -> None:
    base, keys = choose_baseline(load_recipe("local-v27"), "local-v26", role="production")
    assert base == Baseline(kind="given", recipe="local-v26", role="production")
    assert keys == ["speculative.rejection_sample_method"]
    assert base.label() == "production local-v26"
    v27 = load_recipe("local-v27")
    result = checks.check_flags(
        _argv("local-v27"), expected_values(v27, keys, dark=True), renderings(v27, keys), baseline=base.label()
    )
    assert result.status == "pass" and "production local-v26" in result.summary


def test_without_production_the_lanes_last_boot_of_the_recipe_is_the_baseline() -> None:
    cpu = load_recipe("cpu-v26")
    assert choose_baseline(cpu, None)[0].kind == "none"
    before = cpu.model_copy(update={"engine_args": cpu.engine_args.model_copy(update={"max_num_seqs": 16})})
    report = BootReport(
        instance="cpu-v26",
        lane="cpu",
        recipe="cpu-v26",
        run="r1",
        runtime="process",
        fingerprint="f",
        endpoint="http://127.0.0.1:1",
        served_model="m",
        dark=True,
        containers=("cpu-v26-main",),
        started_at=time.time(),
        boot_seconds=1.0,
        checks=(),
        recipe_json=before.model_dump(mode="json"),
    )
    stored = write_report(report)
    base, keys = choose_baseline(cpu, None)
    assert base.kind == "last_boot" and base.report == stored.path and keys == ["engine_args.max_num_seqs"]
    assert base.label() == "the lane's last boot of cpu-v26"
    # The parent is the baseline only where the lane never booted the recipe.
    base, keys = choose_baseline(load_recipe("cpu-v27"), None)
    assert base.kind == "parent" and keys == ["speculative.rejection_sample_method"]


def test_env_keys_are_read_from_the_environment_and_a_wrong_one_fails() -> None:
    cpu = load_recipe("cpu-v26")
    key = "env.VLLM_CPU_KVCACHE_SPACE"
    ren = renderings(cpu, [key])
    assert ren[key].rendered_as == "env"
    ok = checks.check_flags(_argv("cpu-v26"), {key: "1"}, ren, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    bad = checks.check_flags(_argv("cpu-v26"), {key: "1"}, ren, env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert ok.status == "pass" and bad.status == "fail" and "env '2'" in bad.summary


def test_the_schedules_new_name_is_read_where_the_engine_renders_the_schedule() -> None:
    cpu = load_recipe("cpu-v26")
    spec = cpu.speculative
    renamed = cpu.model_copy(
        update={
            "speculative": spec.model_copy(
                update={"num_speculative_tokens_per_batch_size": None, "speculative_token_schedule": spec.schedule}
            )
        }
    )
    main = render(renamed, dark=True).containers[0]
    assert '"num_speculative_tokens_per_batch_size":[[1,4,5]' in " ".join(main.argv)  # vLLM 0.32 knows the old name
    key = "speculative.speculative_token_schedule"
    result = checks.check_flags(main.argv, expected_values(renamed, [key]), renderings(renamed, [key]))
    assert result.status == "pass" and result.evidence["keys"][0]["present"] == 1
