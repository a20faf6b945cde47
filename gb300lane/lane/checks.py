"""The boot checks, as pure functions over gathered facts: each returns pass, fail or unknown with evidence.

- autotune: the hash predicted from the ledger against the hash and hit/miss the log shows
- flags: each checked recipe key against the container's actual args ("flag present" 0/1 per arm)
- env: the container's environment against the expected one, as a set
- kv_pool: the logged KV cache size against `kv_pool_tokens`
- dark: bound to loopback only, and no requests the tool did not send
- feature_live: a feature the recipe asks for runs in the code path the engine logged it took (block
  verification needs Model Runner V2: a flag that is present and does nothing is a fail, not a pass)

Secrets (by name or by value, `gb300lane.redact`) are compared by a digest keyed
with the state directory's key; their values never reach the evidence, the
report or the screen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, JsonValue

from gb300lane import keyed
from gb300lane.lane.facts import Listener
from gb300lane.lane.flags import flag_value, parse_argv, same_value
from gb300lane.lane.logparse import BootLogFacts
from gb300lane.lane.provenance import Provenance
from gb300lane.models import FrozenModel
from gb300lane.recipes.containers import KeyRendering
from gb300lane.redact import DIGEST_PREFIX, MASK, digest, is_secret, redact, redact_argv
from gb300lane.spec.counters import RequestCounts

CheckStatus = Literal["pass", "fail", "unknown"]

# The checks' names: a card reads a boot report's evidence by them (`cards.record.arms`), so each is spelled once.
CHECK_AUTOTUNE = "autotune"
CHECK_FLAGS = "flags"
CHECK_ENV = "env"
CHECK_KV_POOL = "kv_pool"
CHECK_FEATURE_LIVE = "feature_live"
CHECK_FOREIGN_CLIENTS = "foreign_clients"
CHECK_PROVENANCE = "provenance"


class CheckResult(FrozenModel):
    """One boot check and its evidence."""

    name: str = Field(description="autotune, flags, env, kv_pool, dark, or sidecar.")
    status: CheckStatus = Field(description="pass, fail, or unknown (the evidence is missing).")
    summary: str = Field(description="One line a person reads.")
    evidence: dict[str, Any] = Field(default_factory=dict, description="The facts the status was decided on.")


class Prediction(FrozenModel):
    """The autotune outcome the ledger predicts for a fingerprint."""

    outcome: Literal["hit", "miss", "unknown"] = Field(description="Predicted cache outcome.")
    known_hash: str | None = Field(default=None, description="Compile hash this fingerprint booted with before.")
    cache_dir_exists: bool | None = Field(
        default=None, description="Whether that hash's cache dir exists (None: not visible)."
    )
    reason: str = Field(description="Why this prediction.")


def check_autotune(prediction: Prediction, facts: BootLogFacts, boot_seconds: float | None) -> CheckResult:
    observed = facts.autotune
    evidence: dict[str, Any] = {
        "predicted": prediction.outcome,
        "predicted_hash": prediction.known_hash,
        "predicted_reason": prediction.reason,
        "cache_dir_existed": prediction.cache_dir_exists,
        "observed": observed,
        "observed_hash": facts.compile_hash,
        "cache_dir": facts.cache_dir,
        "hit_lines": facts.cache_hits,
        "miss_lines": facts.cache_misses,
        "reload_lines": facts.cache_reloads,
        "compile_units": [u.model_dump() for u in facts.compile_units],
        "compile_seconds": facts.compile_seconds,
        "boot_seconds": None if boot_seconds is None else round(boot_seconds, 3),
    }
    if observed == "unknown":
        return CheckResult(
            name=CHECK_AUTOTUNE, status="unknown", evidence=evidence,
            summary="the log shows neither a cache load nor a compile (no `Directly load` / `Compiling a graph` / "
                    "`saved AOT compiled function` lines)",
        )  # fmt: skip
    if observed == "reload":
        failed = [u for u in facts.compile_units if u.outcome == "reload"]
        names = ", ".join(f"[{u.tag}] {u.compile_hash} ({u.reason or 'no reason logged'})" for u in failed)
        # The hash was found, so the fingerprint's hash inputs agree with the engine's; the artifact did not load.
        return CheckResult(
            name=CHECK_AUTOTUNE, status="fail" if prediction.outcome == "hit" else "pass", evidence=evidence,
            summary=f"hash reload: found in the cache but failed to load, compiled again: {names}",
        )  # fmt: skip
    if prediction.known_hash and facts.compile_hash and prediction.known_hash != facts.compile_hash:
        return CheckResult(
            name=CHECK_AUTOTUNE, status="fail", evidence=evidence,
            summary=(
                f"hash {facts.compile_hash} differs from {prediction.known_hash}, which this fingerprint booted "
                "with before: image.hash_inputs misses a key the engine hashes"
            ),
        )  # fmt: skip
    if prediction.outcome == "hit" and observed == "miss":
        return CheckResult(
            name=CHECK_AUTOTUNE, status="fail", evidence=evidence,
            summary=f"predicted a hash hit, the log shows a miss (hash {facts.compile_hash}): the boot recompiled",
        )  # fmt: skip
    if prediction.outcome == "miss" and observed == "hit":
        # Not a fault: another fingerprint (or another host sharing the cache) compiled this hash.
        return CheckResult(
            name=CHECK_AUTOTUNE, status="pass", evidence=evidence,
            summary=f"hash hit ({facts.compile_hash}) where a miss was predicted: the cache already held this hash",
        )  # fmt: skip
    return CheckResult(
        name=CHECK_AUTOTUNE, status="pass", evidence=evidence,
        summary=f"hash {observed} ({facts.compile_hash}), predicted {prediction.outcome}"
        + (f", booted in {boot_seconds:.1f} s" if boot_seconds is not None else ""),
    )  # fmt: skip


def check_flags(
    argv: tuple[str, ...] | list[str],
    expected: Mapping[str, JsonValue],
    renderings: Mapping[str, KeyRendering],
    *,
    env: Mapping[str, str] | None = None,
    baseline: str = "",
) -> CheckResult:
    """Each key's value where the engine renders it (a flag, the program, env) must equal the recipe's (None: absent).

    `renderings` say where each key lands (`recipes.containers.key_rendering`, the engine's own table); a key the
    engine is not handed (`kv_pool_tokens` on vLLM, `smoke.*`) is listed as such, never read as an absent flag.
    `baseline` names what the keys were chosen against (evidence and summary say it).
    """
    parsed = parse_argv(argv)
    argv0 = argv[0] if argv else None
    rows = []
    failed, not_rendered = [], []
    for key, want in sorted(expected.items()):
        rendering = renderings.get(key)
        if rendering is None:
            raise ValueError(f"check_flags: no rendering given for {key}")
        reading = flag_value(parsed, rendering, argv0=argv0, env=env)
        if not reading.readable:
            not_rendered.append(key)
            rows.append(
                {
                    "key": key,
                    "expected": _masked_value(key, want),
                    "present": None,
                    "actual": None,
                    "ok": None,
                    "rendered_as": rendering.rendered_as,
                }
            )
            continue
        ok = (not reading.present) if want is None else (reading.present and _same_flag(want, reading.value))
        rows.append(
            {
                "key": key,
                "expected": _masked_value(key, want),
                "present": int(reading.present),
                "actual": _masked_value(key, reading.value),
                "ok": ok,
                "rendered_as": rendering.rendered_as,
            }
        )
        if not ok:
            failed.append(key)
    evidence = {"keys": rows, "argv": redact_argv(argv), "baseline": baseline}
    against = f" (keys that differ from {baseline})" if baseline else ""
    present = ", ".join(f"{r['key']}={r['present']}" for r in rows if r["present"] is not None)
    if failed:
        detail = "; ".join(
            f"{r['key']}: recipe {r['expected']!r}, {'env' if r['rendered_as'] == 'env' else 'args'} {r['actual']!r}"
            for r in rows
            if r["key"] in failed
        )
        return CheckResult(
            name=CHECK_FLAGS,
            status="fail",
            evidence=evidence,
            summary=f"args differ from the recipe{against}: {detail}",
        )
    if not rows:
        why = (
            f"none differ from {baseline}"
            if baseline and baseline != "no baseline"
            else "no baseline: the lane never booted this recipe and it extends none"
        )
        return CheckResult(name=CHECK_FLAGS, status="pass", evidence=evidence, summary=f"no keys to check ({why})")
    skipped = f"; not handed to the engine: {', '.join(not_rendered)}" if not_rendered else ""
    if not_rendered and len(not_rendered) == len(rows):
        return CheckResult(
            name=CHECK_FLAGS, status="pass", evidence=evidence,
            summary=f"{', '.join(not_rendered)}{against} are not handed to the {_engine(renderings)} engine as flags "
                    "or env (the tool or another check reads them); nothing to read in the args",
        )  # fmt: skip
    return CheckResult(
        name=CHECK_FLAGS, status="pass", evidence=evidence,
        summary=f"args carry the recipe's values{against} (present: {present}){skipped}",
    )  # fmt: skip


def _engine(renderings: Mapping[str, KeyRendering]) -> str:
    engines = sorted({r.engine for r in renderings.values()})
    return "/".join(engines) or "the"


def _same_flag(want: JsonValue, actual: JsonValue) -> bool:
    """A recipe value against the argv's; a secret the record keeps as its keyed digest compares by digest."""
    if isinstance(want, str) and want.startswith(DIGEST_PREFIX) and isinstance(actual, str):
        return digest(actual) == want
    return same_value(want, actual)


def _masked_value(key: str, value: Any) -> Any:
    """A flag value as evidence may hold it: `<secret>` when the key or the value says it is a secret."""
    if isinstance(value, str) and is_secret(key.rsplit(".", 1)[-1], value):
        return MASK
    return value


def _shown(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    return "<secret: compared by keyed digest>" if is_secret(name, value) else value


def _same_env_value(name: str, expected: str, actual: str) -> bool:
    if is_secret(name, expected) or is_secret(name, actual):
        return keyed.same(redact("KEY", expected), redact("KEY", actual))
    return expected == actual


def env_set_digest(env: dict[str, str]) -> str:
    """Order-free digest of an environment, comparable across arms of one state directory without showing values.

    Keyed with the state key: an unkeyed hash of a set that holds a secret could be checked against guesses.
    """
    key = keyed.state_key()
    assert key is not None  # created when absent
    return keyed.mac(key, "env set", "\n".join(f"{k}={v}" for k, v in sorted(env.items())))[:16]


def check_env(actual: dict[str, str], expected: dict[str, str], *, baseline_note: str = "") -> CheckResult:
    """The environment as a set: extra, missing and different names (never order)."""
    extra = sorted(set(actual) - set(expected))
    missing = sorted(set(expected) - set(actual))
    different = sorted(k for k in set(actual) & set(expected) if not _same_env_value(k, expected[k], actual[k]))
    evidence = {
        "extra": extra,
        "missing": missing,
        "different": [
            {"name": k, "expected": _shown(k, expected[k]), "actual": _shown(k, actual[k])} for k in different
        ],
        "count": len(actual),
        "expected_count": len(expected),
        "secret_names": sorted(
            k for k in set(actual) | set(expected) if is_secret(k, actual.get(k)) or is_secret(k, expected.get(k))
        ),
        "set_digest": env_set_digest(actual),
        "baseline": baseline_note,
    }
    if extra or missing or different:
        parts = []
        if extra:
            parts.append(f"extra {', '.join(extra)}")
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if different:
            parts.append(f"different {', '.join(different)}")
        return CheckResult(
            name=CHECK_ENV, status="fail", evidence=evidence, summary="env differs as a set: " + "; ".join(parts)
        )
    return CheckResult(
        name=CHECK_ENV, status="pass", evidence=evidence, summary=f"{len(actual)} variables, equal as a set"
    )


def check_kv_pool(facts: BootLogFacts, expected_tokens: int | None) -> CheckResult:
    evidence = {
        "expected": expected_tokens,
        "observed": facts.kv_cache_tokens,
        "max_concurrency": facts.max_concurrency,
    }
    if expected_tokens is None:
        return CheckResult(
            name=CHECK_KV_POOL, status="unknown", evidence=evidence, summary="the recipe sets no kv_pool_tokens"
        )
    if facts.kv_cache_tokens is None:
        return CheckResult(
            name=CHECK_KV_POOL,
            status="unknown",
            evidence=evidence,
            summary="no `GPU KV cache size:` / `CPU KV cache size:` line in the boot log",
        )
    if facts.kv_cache_tokens != expected_tokens:
        return CheckResult(
            name=CHECK_KV_POOL, status="fail", evidence=evidence,
            summary=f"KV pool {facts.kv_cache_tokens:,} tokens, recipe says {expected_tokens:,}",
        )  # fmt: skip
    return CheckResult(
        name=CHECK_KV_POOL,
        status="pass",
        evidence=evidence,
        summary=f"KV pool {expected_tokens:,} tokens ({facts.kv_cache_device or 'GPU'} KV cache)",
    )


#: Features that exist in one model runner only, by recipe key and value: vLLM implements block verification in
#: Model Runner V2's rejection sampler (`vllm/v1/worker/gpu/spec_decode/rejection_sampler.py`); the V1 runner's
#: (`vllm/v1/sample/rejection_sampler.py`) knows standard and synthetic only, so there the key is accepted and
#: ignored (and, with probabilistic drafts, the draft probabilities are no longer kept for the ratio test).
RUNNER_V2_FEATURES = {("speculative.rejection_sample_method", "block"): "block verification"}


def check_features_live(rejection_sample_method: str | None, facts: BootLogFacts) -> CheckResult:
    """Whether the feature the recipe asks for runs in the model runner the engine logged."""
    key = "speculative.rejection_sample_method"
    feature = RUNNER_V2_FEATURES.get((key, rejection_sample_method or ""))
    evidence = {
        "key": key,
        "value": rejection_sample_method,
        "needs": "v2" if feature else None,
        "model_runner": facts.model_runner,
        "log_line": facts.model_runner_line,
    }
    if feature is None:
        # Decided from the recipe, not from a missing line: standard rejection runs in either runner.
        return CheckResult(
            name=CHECK_FEATURE_LIVE, status="pass", evidence=evidence,
            summary=f"{key} = {rejection_sample_method or 'standard'} runs in either model runner"
                    + (f" (the engine logged {facts.model_runner.upper()})" if facts.model_runner else ""),
        )  # fmt: skip
    if facts.model_runner == "v1":
        return CheckResult(
            name=CHECK_FEATURE_LIVE, status="fail", evidence=evidence,
            summary=(f"{key} = {rejection_sample_method} asks for {feature}, which only Model Runner V2 runs; the "
                     f"engine logged that it uses the V1 runner ({facts.model_runner_line!r}), so the flag is present "
                     "and does nothing"),
        )  # fmt: skip
    if facts.model_runner == "v2":
        return CheckResult(
            name=CHECK_FEATURE_LIVE, status="pass", evidence=evidence,
            summary=f"{feature} ({key} = {rejection_sample_method}) runs: the engine logged Model Runner V2",
        )  # fmt: skip
    return CheckResult(
        name=CHECK_FEATURE_LIVE, status="unknown", evidence=evidence,
        summary=f"{key} = {rejection_sample_method} needs Model Runner V2; the log does not say which runner runs",
    )  # fmt: skip


def check_bind(found: list[Listener] | None, ports: int | Sequence[int]) -> CheckResult:
    """Dark lanes listen on loopback only: every port of the lane (main, sidecar, and any other socket its
    processes opened, which `found` holds) must be bound to loopback, and each of `ports` must listen."""
    want = [ports] if isinstance(ports, int) else sorted(set(ports))
    shown = ", ".join(f":{p}" for p in want)
    evidence: dict[str, Any] = {
        "ports": want,
        "listeners": None if found is None else sorted({f"{l.address}:{l.port}" for l in found}),
    }
    if found is None:
        return CheckResult(
            name="dark_bind",
            status="unknown",
            evidence=evidence,
            summary="this user may not list listening sockets here",
        )
    silent = [p for p in want if not any(l.port == p for l in found)]
    if silent:
        return CheckResult(
            name="dark_bind",
            status="fail",
            evidence=evidence,
            summary="nothing listens on " + ", ".join(f":{p}" for p in silent),
        )
    open_to = sorted({f"{l.address}:{l.port}" for l in found if not l.loopback_only})
    if open_to:
        return CheckResult(
            name="dark_bind", status="fail", evidence=evidence,
            summary=f"{', '.join(open_to)}: reachable beyond loopback while dark",
        )  # fmt: skip
    others = sorted({l.port for l in found} - set(want))
    extra = f" (and {', '.join(f':{p}' for p in others)}, opened by its processes)" if others else ""
    return CheckResult(
        name="dark_bind", status="pass", evidence=evidence, summary=f"{shown}{extra} bound to loopback only"
    )


def check_foreign(counts: RequestCounts, sent_by_tool: float = 0) -> CheckResult:
    """Requests the engine counted since boot beyond those the tool sent."""
    seen = counts.requests_seen
    evidence = {**counts.model_dump(), "requests_seen": seen, "sent_by_tool": sent_by_tool}
    if seen is None:
        return CheckResult(
            name=CHECK_FOREIGN_CLIENTS, status="unknown", evidence=evidence,
            summary="/metrics has no vllm:request_success_total; foreign clients cannot be counted",
        )  # fmt: skip
    foreign = seen - sent_by_tool
    evidence["foreign_requests"] = foreign
    if foreign > 0:
        return CheckResult(
            name=CHECK_FOREIGN_CLIENTS, status="fail", evidence=evidence,
            summary=f"{foreign:g} request(s) since boot that gb300lane did not send",
        )  # fmt: skip
    return CheckResult(
        name=CHECK_FOREIGN_CLIENTS, status="pass", evidence=evidence, summary="zero foreign clients since boot"
    )


def check_provenance(prov: Provenance) -> CheckResult:
    """What ran, recorded; a fail only where it contradicts the recipe: an `image@sha256:` pin the running image
    does not carry, or a fix the install recorded whose file changed since. Fields not read are named."""
    image = prov.image
    evidence: dict[str, Any] = {
        "pinned": image.pinned if image else None,
        "pin_ok": image.pin_ok if image else None,
        "missing": prov.missing,
    }
    if image is not None and image.pinned is not None and not image.pin_ok:
        return CheckResult(
            name=CHECK_PROVENANCE, status="fail", evidence=evidence,
            summary=(f"image.ref pins {image.pinned}, but the container runs image {image.id} whose repo digests are "
                     f"{', '.join(image.repo_digests) or 'none'}; pull the pinned image (`docker pull {image.ref}`) "
                     "or pin the digest that runs"),
        )  # fmt: skip
    changed = [p.patch for p in (prov.installed.patches if prov.installed else ()) if not p.as_recorded]
    if changed:
        return CheckResult(
            name=CHECK_PROVENANCE, status="fail", evidence=evidence,
            summary=f"the installed vLLM's patched files changed since the install recorded them ({', '.join(changed)}); "
                    "run `make real-lane` again",
        )  # fmt: skip
    parts = []
    if image is not None:
        parts.append(
            f"image {image.id[:19]}"
            + (f" pinned {image.pinned[:19]}" if image.pinned else "")
            + (f" ({image.repo_digests[0]})" if image.repo_digests else "")
        )
    parts.append(f"engine {prov.engine.version or '?'}")
    if prov.installed is not None and prov.installed.vllm:
        parts.append(prov.installed.vllm + (f", torch {prov.installed.torch}" if prov.installed.torch else ""))
    parts.append(f"{len(prov.checkpoints)} checkpoint(s)")
    gaps = f"; not read: {', '.join(sorted(prov.missing))}" if prov.missing else ""
    return CheckResult(
        name=CHECK_PROVENANCE, status="pass", evidence=evidence, summary="recorded " + ", ".join(parts) + gaps
    )


CHECK_COMPILE_CACHE = "compile_cache"
CHECK_TACTICS = "autotune_tactics"
_FACTOR_NAMES = ("env", "cfg", "comp", "code")
_FACTOR_WORDS = {
    "env": "the compile-relevant environment",
    "cfg": "the engine config",
    "comp": "the compiler",
    "code": "the traced source code",
}


class EarlierBoot(FrozenModel):
    """What an earlier boot recorded that a check of this one compares with."""

    report: str = Field(description="The earlier boot report.")
    compile_hash: str | None = Field(default=None, description="The compile hash it booted with.")
    factors: dict[str, str] | None = Field(
        default=None, description="Its compile cache factors (env, cfg, comp, code)."
    )
    env_raw: dict[str, str] | None = Field(default=None, description="Its raw env factors (cache_key_factors.json).")
    tactics: str | None = Field(default=None, description="Its autotune tactic set's fingerprint.")
    inputs: dict[str, Any] | None = Field(
        default=None,
        description="What its process ran with that a compile hash "
        "covers: the compile env, the args, the install (`compile_inputs`).",
    )


#: Args that move where a lane listens or what it is called, not what it compiles.
_NOT_COMPILED_FLAGS = frozenset({"port", "host", "served-model-name"})


def compile_inputs(
    argv: Sequence[str],
    env: Mapping[str, str],
    install: Mapping[str, JsonValue],
    env_names: Sequence[str] | None = None,
) -> dict[str, dict[str, JsonValue]]:
    """What a process ran with that vLLM's compile hash covers, as the lane can see it: the compile env (the names
    the engine's version hashes, `env_names` from its surface golden, else vLLM's selection of `VLLM_*`; secrets as
    keyed digests), the args (but where it listens), and the install (image id, vLLM/torch, patches, engine
    source). Compared between boots where vLLM logs no cache factors."""
    from gb300lane.lane.flags import parse_argv
    from gb300lane.spec.vllmenv import compile_env

    args = {k: v for k, v in parse_argv(list(argv)).items() if k not in _NOT_COMPILED_FLAGS}
    chosen = compile_env(env) if env_names is None else {k: env[k] for k in sorted(env_names) if k in env}
    env_out: dict[str, JsonValue] = {k: redact(k, v) for k, v in chosen.items()}
    args_out: dict[str, JsonValue] = {k: _masked_value(k, v) for k, v in sorted(args.items())}
    return {"env": env_out, "args": args_out, "install": dict(install)}


#: Which of vLLM's factors each part of `compile_inputs` feeds.
_INPUT_FACTOR = {"env": "env", "args": "cfg", "install": "code/comp"}


def _env_changes(before: dict[str, str] | None, now: dict[str, str] | None) -> list[str]:
    if before is None or now is None:
        return []
    return [
        f"{k} {before.get(k)!r} -> {now.get(k)!r}"
        for k in sorted(set(before) | set(now))
        if before.get(k) != now.get(k)
    ]


def check_compile_cache(
    facts: BootLogFacts,
    prediction: Prediction,
    *,
    force_load: bool,
    earlier: EarlierBoot | None,
    env_raw: dict[str, str] | None,
    recipe: str,
    inputs: Mapping[str, Mapping[str, JsonValue]] | None = None,
) -> CheckResult:
    """Why the compile cache hit or missed: the factor (env, cfg, comp, code) that changed since the lane's last boot
    of this recipe, read from vLLM's `torch.compile cache factors` debug line; and with `VLLM_FORCE_AOT_LOAD=1`
    which happened (a load it forced, or a compile it should have refused).

    A miss where a hit was predicted fails, naming the changed factor (or, with every factor unchanged, the lost
    artifact); a forced load that compiled anyway fails; a miss without the debug line is unknown with the fix.
    """
    factors = facts.cache_factors[0].as_dict() if facts.cache_factors else None
    outcome = facts.autotune
    evidence: dict[str, Any] = {
        "outcome": outcome,
        "predicted": prediction.outcome,
        "factors": factors,
        "env_raw": env_raw,
        "force_load": force_load,
        "forced_load_failure": facts.forced_load_failure,
        "earlier": earlier.model_dump(exclude={"inputs"}) if earlier is not None else None,
        "changed": [],
        "inputs": inputs,
    }
    if force_load:
        if facts.forced_load_failure is not None:
            return CheckResult(
                name=CHECK_COMPILE_CACHE,
                status="fail",
                evidence=evidence,
                summary=f"VLLM_FORCE_AOT_LOAD=1: the cache did not load ({facts.forced_load_failure}), "
                "so the boot failed instead of compiling",
            )
        if outcome == "hit":
            return CheckResult(
                name=CHECK_COMPILE_CACHE,
                status="pass",
                evidence=evidence,
                summary="VLLM_FORCE_AOT_LOAD=1 and every compiled module loaded from the cache: a hit "
                "(a failed load would have failed the boot, not compiled again)",
            )
        if outcome in ("miss", "reload"):
            return CheckResult(
                name=CHECK_COMPILE_CACHE,
                status="fail",
                evidence=evidence,
                summary=f"VLLM_FORCE_AOT_LOAD=1 is set, yet the boot compiled ({outcome}): this engine "
                "does not honour it, so a failed load recompiles silently",
            )
    if outcome == "hit":
        return CheckResult(
            name=CHECK_COMPILE_CACHE,
            status="pass",
            evidence=evidence,
            summary=f"hit ({facts.compile_hash})"
            + (
                ""
                if factors is None
                else f"; factors env={factors['env'][:8]} cfg={factors['cfg'][:8]} "
                f"comp={factors['comp'][:8]} code={factors['code'][:8]}"
            ),
        )
    if outcome == "unknown":
        return CheckResult(
            name=CHECK_COMPILE_CACHE,
            status="unknown",
            evidence=evidence,
            summary="the log shows neither a cache load nor a compile",
        )
    status: CheckStatus = "fail" if prediction.outcome == "hit" else "pass"
    if factors is None:
        if inputs is not None and earlier is not None and earlier.inputs is not None:
            return _from_inputs(outcome, status, evidence, inputs, earlier, recipe)
        if inputs is not None and earlier is None:
            return CheckResult(
                name=CHECK_COMPILE_CACHE,
                status=status,
                evidence=evidence,
                summary=f"a {outcome} on the lane's first boot of {recipe}: nothing earlier to compare "
                "with (vLLM logged no cache factors; the env, args and install it ran with are "
                "recorded for the next boot)",
            )
        return CheckResult(
            name=CHECK_COMPILE_CACHE,
            status="unknown",
            evidence=evidence,
            summary=f"a {outcome}, and the log has no `torch.compile cache factors` line to say why: "
            "set VLLM_LOGGING_LEVEL=DEBUG in the recipe's env to log vLLM's cache factors"
            + ("" if earlier is None else f" (and the last boot of {recipe} recorded no inputs to compare with)"),
        )
    if earlier is None or earlier.factors is None:
        return CheckResult(
            name=CHECK_COMPILE_CACHE,
            status=status,
            evidence=evidence,
            summary=f"a {outcome} on the lane's first boot of {recipe} that logged its cache factors: "
            "nothing earlier to compare with",
        )
    changed = [k for k in _FACTOR_NAMES if factors.get(k) != earlier.factors.get(k)]
    evidence["changed"] = changed
    if not changed:
        return CheckResult(
            name=CHECK_COMPILE_CACHE,
            status=status,
            evidence=evidence,
            summary=f"a {outcome} with every factor as at the last boot of {recipe} (hash "
            f"{earlier.compile_hash}): the cache lost the compiled artifact (deleted, or another "
            "cache root), not a change of the lane",
        )
    parts = []
    for k in changed:
        part = f"{k} ({_FACTOR_WORDS[k]}) {earlier.factors.get(k, '?')[:12]} -> {factors[k][:12]}"
        if k == "env":
            moved = _env_changes(earlier.env_raw, env_raw)
            if moved:
                part += ": " + ", ".join(moved)
        parts.append(part)
    return CheckResult(
        name=CHECK_COMPILE_CACHE,
        status=status,
        evidence=evidence,
        summary=f"a {outcome} because {'; '.join(parts)} changed since the last boot of {recipe} ({earlier.report})",
    )


def _from_inputs(
    outcome: str,
    status: CheckStatus,
    evidence: dict[str, Any],
    inputs: Mapping[str, Mapping[str, JsonValue]],
    earlier: EarlierBoot,
    recipe: str,
) -> CheckResult:
    """A miss explained from what the process ran with, where vLLM logged no cache factors (its CPU build's AOT
    path): the compile env, the args and the install against the last boot of the recipe."""
    assert earlier.inputs is not None
    parts = []
    for section in ("env", "args", "install"):
        now, before = inputs.get(section) or {}, earlier.inputs.get(section) or {}
        moved = [
            f"{k} {_short(before.get(k))} -> {_short(now.get(k))}"
            for k in sorted(set(now) | set(before))
            if now.get(k) != before.get(k)
        ]
        if moved:
            evidence["changed"].append(_INPUT_FACTOR[section])
            parts.append(f"{_INPUT_FACTOR[section]} ({section}: {', '.join(moved)})")
    lead = f"a {outcome}; vLLM logged no cache factors, so from what the process ran with: "
    if not parts:
        return CheckResult(
            name=CHECK_COMPILE_CACHE,
            status=status,
            evidence=evidence,
            summary=lead + f"nothing changed since the last boot of {recipe} (env, args, install): "
            "the cache lost the compiled artifact, or a factor the lane cannot see moved",
        )
    return CheckResult(
        name=CHECK_COMPILE_CACHE,
        status=status,
        evidence=evidence,
        summary=lead + "; ".join(parts) + f" changed since the last boot of {recipe} ({earlier.report})",
    )


def _short(value: Any) -> str:
    if value is None:
        return "unset"
    text = value if isinstance(value, str) else repr(value)
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


def check_tactics(
    facts: BootLogFacts, fingerprint: str | None, files: list[str], *, earlier: EarlierBoot | None
) -> CheckResult:
    """The kernel autotune tactic set this boot runs with, fingerprinted; a compile-cache hit that loads another
    tactic set than the last boot of the same hash fails (a "hit" on different kernels is no hit)."""
    evidence: dict[str, Any] = {
        "fingerprint": fingerprint,
        "files": files,
        "logged_file": facts.tactics_file,
        "loaded": facts.tactics_loaded,
        "earlier": earlier.model_dump() if earlier else None,
    }
    if fingerprint is None:
        return CheckResult(
            name=CHECK_TACTICS,
            status="unknown",
            evidence=evidence,
            summary="the engine wrote no autotune tactic file (none logged, none under the cache "
            "root's flashinfer_autotune_cache/): nothing to fingerprint",
        )
    how = (
        "loaded from the cache"
        if facts.tactics_loaded
        else "autotuned this boot"
        if facts.tactics_loaded is False
        else "found"
    )
    if (
        facts.autotune == "hit"
        and earlier is not None
        and earlier.tactics is not None
        and earlier.tactics != fingerprint
    ):
        return CheckResult(
            name=CHECK_TACTICS,
            status="fail",
            evidence=evidence,
            summary=f"a compile-cache hit on another autotune tactic set: {fingerprint[:16]} ({how}), "
            f"where the last boot of hash {earlier.compile_hash} ran {earlier.tactics[:16]} "
            f"({earlier.report}); the kernels differ, so this hit is not the boot it repeats",
        )
    same = (
        ""
        if earlier is None or earlier.tactics is None
        else (
            "; the same set as the last boot of this hash"
            if earlier.tactics == fingerprint
            else f"; the last boot of this hash ran {earlier.tactics[:16]} (this one compiled)"
        )
    )
    return CheckResult(
        name=CHECK_TACTICS,
        status="pass",
        evidence=evidence,
        summary=f"tactic set {fingerprint[:16]} ({how}, {len(files)} file(s)){same}",
    )


CHECK_SCHEDULE = "schedule"


def check_schedule_boot(schedule: Sequence[Sequence[int]] | None, key: str, facts: BootLogFacts) -> CheckResult:
    """What the boot log says of the recipe's k schedule: vLLM drops it with a warning (data parallel size > 1);
    whether the engine runs it is measured on traffic (`bench.schedule`, in bench and the smoke bounds gate)."""
    evidence: dict[str, Any] = {
        "key": key,
        "schedule": [list(r) for r in schedule] if schedule else None,
        "dropped": facts.schedule_dropped,
    }
    if not schedule:
        return CheckResult(
            name=CHECK_SCHEDULE, status="pass", evidence=evidence, summary="the recipe sets no k schedule"
        )
    if facts.schedule_dropped:
        return CheckResult(
            name=CHECK_SCHEDULE,
            status="fail",
            evidence=evidence,
            summary=f"{key} is set, and the engine logged that it disabled it (data parallel size > 1) "
            "and drafts a static k: the schedule is not live",
        )
    return CheckResult(
        name=CHECK_SCHEDULE,
        status="pass",
        evidence=evidence,
        summary=f"{key} set and not dropped at boot; bench and smoke measure whether each cell drafts the K it gives",
    )
