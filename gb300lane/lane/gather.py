"""After readiness: gather what the instance actually runs with, run the boot checks, write the boot report.

Facts come from the runtime and the host, never from the rendered spec: the
log since this start (autotune hash, KV pool), the main container's actual
argv and env, the listening socket and /metrics (dark lanes). The checks
themselves are pure functions in `checks`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from gb300lane.fsio import sha256_bytes
from gb300lane.lane import checks, facts, logparse, probe, provenance
from gb300lane.lane import records as instances
from gb300lane.lane.checkkeys import expected_values, renderings
from gb300lane.lane.foreign import foreign_clients
from gb300lane.lane.report import BootReport, newest_report, write_report
from gb300lane.recipes import ContainerSpec, Recipe
from gb300lane.recipes.containers import process_python
from gb300lane.redact import redact
from gb300lane.runtime import ProcessRuntime, Runtime
from gb300lane.runtime.process import mounted_env, mounted_path


def _compile_env_names(prov: provenance.Provenance, recipe: Recipe) -> list[str] | None:
    """The env names the engine's vLLM version hashes into its compile cache (its surface golden), None where the
    version has no golden (vLLM's `VLLM_*` selection stands in) or the engine is the embedded one."""
    from gb300lane.lane.surface import golden

    if recipe.engine != "vllm":
        return None
    found = golden(prov.engine.version or recipe.image.vllm_version)
    return list(found.compile_env) if found is not None and found.compile_env else None


def _earlier(report: BootReport | None) -> checks.EarlierBoot | None:
    """What an earlier boot's report recorded for the compile-cache and tactic checks."""
    if report is None:
        return None
    cache = report.check(checks.CHECK_COMPILE_CACHE)
    tactics = report.check(checks.CHECK_TACTICS)
    ev = cache.evidence if cache is not None else {}
    return checks.EarlierBoot(
        report=report.path or report.instance,
        compile_hash=report.compile_hash,
        factors=ev.get("factors") if isinstance(ev.get("factors"), dict) else None,
        env_raw=ev.get("env_raw") if isinstance(ev.get("env_raw"), dict) else None,
        tactics=tactics.evidence.get("fingerprint") if tactics is not None else None,
        inputs=ev.get("inputs") if isinstance(ev.get("inputs"), dict) else None,
    )


def _raw_env_factors(rt: Runtime, main: ContainerSpec, facts: logparse.BootLogFacts) -> dict[str, str] | None:
    """The raw env factors vLLM wrote beside the compile (`<local cache dir>/cache_key_factors.json`), secrets as
    keyed digests; None where the file is not visible."""
    import json

    for f in facts.cache_factors:
        if not f.dir:
            continue
        host = rt.host_path(main, f.dir.rstrip("/") + "/cache_key_factors.json")
        try:
            raw = json.loads(host.read_text()) if host is not None else None
        except (OSError, ValueError):
            continue
        env = raw.get("env") if isinstance(raw, dict) else None
        if isinstance(env, dict):
            return {str(k): redact(str(k), str(v)) for k, v in sorted(env.items())}
    return None


def _tactics(
    rt: Runtime, main: ContainerSpec, facts: logparse.BootLogFacts, cache_root: Path | None
) -> tuple[str | None, list[str]]:
    """The autotune tactic set's fingerprint (sha256 over each file's name and content) and its files: the file
    the engine logged, else FlashInfer's cache directory under the compile cache root."""
    files: list[Path] = []
    if facts.tactics_file:
        host = rt.host_path(main, facts.tactics_file)
        if host is not None and host.is_file():
            files = [host]
    elif cache_root is not None:
        base = cache_root / "flashinfer_autotune_cache"
        if base.is_dir():
            files = sorted(p for p in base.rglob("*") if p.is_file())
    if not files:
        return None, []
    parts = []
    for f in files:
        try:
            parts.append(f"{f.name} {sha256_bytes(f.read_bytes())}")
        except OSError:
            continue
    return (sha256_bytes("\n".join(parts)) if parts else None), [str(f) for f in files]


def read_provenance(rt: Runtime, recipe: Recipe, main: ContainerSpec, endpoint: str) -> provenance.Provenance:
    """What the booted main container runs, from the runtime, the engine's /version, the interpreter's
    environment, the checkpoints' files on the host and the host itself."""
    body, reason = probe.engine_version(endpoint)
    dirs: dict[Literal["target", "draft"], Path | None] = {}
    if recipe.engine == "embedded":
        dirs["target"] = None  # the builtin model: the engine reports its identity
    else:
        dirs["target"] = rt.host_path(main, recipe.model.path)
    if recipe.speculative.model:
        dirs["draft"] = rt.host_path(main, recipe.speculative.model)
    python = process_python(recipe, os.environ) if recipe.engine == "vllm" and rt.name == "process" else None
    source = None
    if recipe.engine == "embedded" and rt.name == "process":
        from gb300lane.runtime.image import source_hash

        source = source_hash()
    return provenance.gather(
        rt,
        container=main.name,
        image_ref=main.image,
        engine=recipe.engine,
        version_body=body,
        version_reason=reason,
        python=python,
        checkpoint_dirs=dirs,
        engine_source=source,
    )


def check_booted(
    rt: Runtime,
    rec: instances.InstanceRecord,
    recipe: Recipe,
    specs: Sequence[ContainerSpec],
    prediction: checks.Prediction,
    started: float,
    boot_s: float,
    expected_s: float | None,
    pre: Sequence[checks.CheckResult],
) -> BootReport:
    """Run every boot check on a ready instance and write its boot report."""
    main = specs[0]
    info = rt.inspect(main.name)
    log_facts = logparse.parse(rt.logs(main.name, since=started))
    env_baseline = {**rt.image_env(main.image), **rt.base_env(main.name)}
    spec_env = dict(main.env)
    if isinstance(rt, ProcessRuntime):
        # No mount namespace: the process is handed the host side of a mounted path (VLLM_CACHE_ROOT).
        spec_env = mounted_env(spec_env, main.volumes)
    expected_env = {**env_baseline, **spec_env}
    if rt.devices_in_env and main.device_ids:
        expected_env["CUDA_VISIBLE_DEVICES"] = ",".join(main.device_ids)
    keys = list(rec.check_keys)
    expected_flags = expected_values(recipe, keys, dark=rec.dark, port=rec.port)
    if isinstance(rt, ProcessRuntime):
        # The process was handed the host side of a mounted path (the model): so is the check's expectation.
        expected_flags = {
            k: (mounted_path(main.volumes, v) or v) if isinstance(v, str) else v for k, v in expected_flags.items()
        }
    results = [
        *pre,
        checks.check_autotune(prediction, log_facts, boot_s),
        checks.check_flags(
            info.argv,
            expected_flags,
            renderings(recipe, keys),
            env=info.env,
            baseline=rec.baseline.label() if rec.baseline is not None and rec.baseline.kind != "keys" else "",
        ),
        checks.check_env(
            info.env,
            expected_env,
            baseline_note=rt.env_baseline,
        ),  # fmt: skip
        checks.check_kv_pool(log_facts, recipe.kv_pool_tokens),
        checks.check_features_live(recipe.speculative.rejection_sample_method, log_facts),
        checks.check_schedule_boot(recipe.speculative.schedule, recipe.speculative.schedule_key, log_facts),
    ]
    prov = read_provenance(rt, recipe, main, rec.endpoint)
    install = {k: v for k, v in prov.fields().items() if k.startswith(("installed.", "image.id", "engine."))}
    earlier_recipe = _earlier(newest_report(lambda r: r.recipe == rec.recipe and r.lane == rec.lane))
    results.append(
        checks.check_compile_cache(
            log_facts,
            prediction,
            force_load=info.env.get("VLLM_FORCE_AOT_LOAD") == "1",
            earlier=earlier_recipe,
            env_raw=_raw_env_factors(rt, main, log_facts),
            recipe=rec.recipe,
            inputs=checks.compile_inputs(info.argv, info.env, install, env_names=_compile_env_names(prov, recipe)),
        )
    )
    cache_root = rt.host_path(main, log_facts.cache_root) if log_facts.cache_root else None
    fingerprint, files = _tactics(rt, main, log_facts, cache_root)
    same_hash = (
        _earlier(newest_report(lambda r: r.compile_hash == log_facts.compile_hash)) if log_facts.compile_hash else None
    )
    results.append(checks.check_tactics(log_facts, fingerprint, files, earlier=same_hash))
    results.append(checks.check_provenance(prov))
    if rec.dark:
        ports = [s.port for s in specs]
        pids = [pid for s in specs if (pid := rt.inspect(s.name).pid) is not None]
        results.append(checks.check_bind(facts.lane_listeners(ports, pids), ports))
        results.append(foreign_clients(rec.endpoint))
    report = BootReport(
        instance=rec.name, lane=rec.lane, recipe=rec.recipe, arm=rec.arm, run=rec.run, runtime=rt.name,
        fingerprint=rec.fingerprint, compile_hash=log_facts.compile_hash, endpoint=rec.endpoint,
        served_model=rec.served_model, dark=rec.dark, containers=rec.containers, started_at=started,
        boot_seconds=round(boot_s, 3), expected_boot_seconds=expected_s,
        engine_boot_seconds=log_facts.engine_logged_seconds, checks=tuple(results), provenance=prov,
        baseline=rec.baseline, recipe_json=rec.recipe_json,
    )  # fmt: skip
    return write_report(report)
