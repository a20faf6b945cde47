"""Drift between two vLLM builds, in the lane's words: what changed that a recipe, a check or a gate reads.

`engine drift A B` resolves each side to a `Surface` (`resolve`): a shipped version's golden (`0.33.0`), a
recipe (its interpreter's vLLM, probed from source, and, where an instance of it runs here, a live scrape of
its /metrics and its boot log), or an image (the probe run inside it). `compare` (pure) lines the two up:

- the config schema, section by section: keys added and removed, and keys whose type, choices, default or
  bounds changed, with the shipped recipes that set a key the other side does not know (they would fail
  validation there);
- the metric families the lane reads (`surface.FAMILIES`), present or missing on each side, and how many
  others each serves alone (names compared without the counter's `_total`, so a live scrape and a source's
  declared names line up);
- the boot-log lines the checks read (`surface.LOG_LINES`): printed by a live boot, printable (in the
  source), or missing;
- the environment its compile cache hashes;

and for every family or line one side lacks, which checks and which shipped gates it would blind. A row that
blinds something makes the report `blinds`: the command exits 1, so CI catches a renamed counter before a
gate reads it as an empty field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from gb300lane.errors import LaneError
from gb300lane.lane import surface as sf
from gb300lane.models import FrozenModel

_VERSION = re.compile(r"^(?:vllm-)?(?P<v>\d+\.\d+\.\d+\S*)$")
SECTIONS = ("speculative_config", "engine_args", "compilation_config", "frontend_args")
#: A section's key -> the recipe's dotted key it is set under.
_RECIPE_KEY = {
    "speculative_config": "speculative.{}",
    "engine_args": "engine_args.extra_args.{}",
    "compilation_config": "engine_args.compilation_config.{}",
    "frontend_args": "engine_args.extra_args.{}",
}

Change = Literal["same", "added", "removed", "changed", "missing", "present"]


class DriftRow(FrozenModel):
    """One thing compared."""

    area: Literal["schema", "metrics", "log", "compile_env"] = Field(description="What kind of thing.")
    item: str = Field(description="The key, family or log line.")
    a: str = Field(description="Side A's value, in words.")
    b: str = Field(description="Side B's value, in words.")
    change: str = Field(description="same, added, removed, changed, or (lane reads) missing on one side.")
    blinds: tuple[str, ...] = Field(default=(), description="Checks and shipped gates this change would blind.")


class DriftReport(FrozenModel):
    """`engine drift A B`."""

    schema_version: Literal[1] = Field(default=1, description="Format version.")
    a: str = Field(description="Side A, as resolved.")
    b: str = Field(description="Side B, as resolved.")
    a_version: str | None = Field(description="A's vLLM version.")
    b_version: str | None = Field(description="B's vLLM version.")
    sources: dict[str, str] = Field(description="Where each side's families and log lines were read.")
    rows: tuple[DriftRow, ...] = Field(description="Everything compared that differs, and every lane read.")
    blinds: bool = Field(description="Some change would blind a check or a gate (the command exits 1).")

    def to_text(self) -> str:
        out = [f"engine drift: A = {self.a} (vLLM {self.a_version}), B = {self.b} (vLLM {self.b_version})"]
        out += [f"  {k}: {v}" for k, v in self.sources.items()]
        for area, title in (
            ("schema", "config schema"),
            ("metrics", "metric families the lane reads"),
            ("log", "boot-log lines the checks read"),
            ("compile_env", "compile-cache environment"),
        ):
            rows = [r for r in self.rows if r.area == area]
            if not rows:
                continue
            out.append(f"\n{title}:")
            wa = max(len(r.item) for r in rows)
            for r in rows:
                blind = f"  BLINDS {', '.join(r.blinds)}" if r.blinds else ""
                out.append(f"  {r.item:<{wa}}  A {r.a:<24} B {r.b:<24} {r.change}{blind}")
        out.append(
            "\n"
            + (
                "some change would blind a check or a gate (see BLINDS)"
                if self.blinds
                else "nothing the lane reads is lost between A and B"
            )
        )
        return "\n".join(out)


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _field_text(f: Mapping[str, Any] | None) -> str:
    if f is None:
        return "-"
    text = str(f.get("type", "?"))
    return text if len(text) <= 40 else text[:37] + "..."


def _field_change(ka: Mapping[str, Any], kb: Mapping[str, Any]) -> tuple[str, str, str]:
    """(A, B, change) of a key both sides have, said as what moved: the type, the choices, the default, the bounds."""
    parts = []
    if ka.get("type") != kb.get("type"):
        parts.append("type")
    ca, cb = ka.get("choices"), kb.get("choices")
    if ca != cb and ca is not None and cb is not None:
        added = sorted(set(map(str, cb)) - set(map(str, ca)))
        removed = sorted(set(map(str, ca)) - set(map(str, cb)))
        parts.append("choices " + " ".join([*(f"+{c}" for c in added), *(f"-{c}" for c in removed)]))
    for key in ("default", "bounds"):
        if ka.get(key) != kb.get(key):
            parts.append(f"{key} {ka.get(key)!r} -> {kb.get(key)!r}")
    return _field_text(ka), _field_text(kb), "changed: " + "; ".join(parts)


def _schema_rows(
    a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, recipe_keys: Mapping[str, Mapping[str, object]]
) -> list[DriftRow]:
    if a is None or b is None:
        missing = "A" if a is None else "B"
        return [
            DriftRow(
                area="schema",
                item="(whole schema)",
                a="-" if a is None else "snapshot",
                b="-" if b is None else "snapshot",
                change=f"no schema for {missing}",
            )
        ]
    rows = []
    for section in SECTIONS:
        fa = (a.get(section) or {}).get("fields", {})
        fb = (b.get(section) or {}).get("fields", {})
        for key in sorted(set(fa) | set(fb)):
            ka, kb = fa.get(key), fb.get(key)
            if ka == kb:
                continue
            dotted = _RECIPE_KEY[section].format(key)
            users = recipe_keys.get(dotted, {})
            if ka is None or kb is None:
                change = "added" if ka is None else "removed"
                shown_a, shown_b = _field_text(ka), _field_text(kb)
                blinds = tuple(f"recipe {r} sets {dotted}" for r in sorted(users)) if kb is None else ()
            else:
                shown_a, shown_b, change = _field_change(ka, kb)
                choices = kb.get("choices")
                blinds = tuple(
                    f"recipe {r} sets {dotted} = {v!r}, not a choice of B"
                    for r, v in sorted(users.items())
                    if choices is not None and v not in choices
                )
            rows.append(
                DriftRow(area="schema", item=f"{section}.{key}", a=shown_a, b=shown_b, change=change, blinds=blinds)
            )
    return rows


def _readers_blinded(readers: Sequence[str], gates: Mapping[str, Sequence[tuple[str, str]]]) -> tuple[str, ...]:
    out = [f"check {r}" for r in readers]
    for card, rows in sorted(gates.items()):
        for gate_id, kind in rows:
            if set(sf.GATE_READS.get(kind, ())) & set(readers):
                out.append(f"{card}:{gate_id}")
    return tuple(out)


def compare(
    a: sf.Surface,
    b: sf.Surface,
    *,
    recipe_keys: Mapping[str, Mapping[str, object]] | None = None,
    gates: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> DriftReport:
    """A against B. `recipe_keys`: dotted recipe key -> {shipped recipe that sets it: its value}; `gates`: card -> its
    (gate id, kind) pairs (the caller reads the shipped cards: the lane does not)."""
    gates = gates or {}
    rows = _schema_rows(a.config_schema, b.config_schema, recipe_keys or {})
    fa = {_base(n): t for n, t in a.families.items()}
    fb = {_base(n): t for n, t in b.families.items()}
    for name, readers in sf.FAMILIES.items():
        base = _base(name)
        ina, inb = base in fa, base in fb
        change = "same" if ina == inb else ("missing in B" if ina else "missing in A")
        blinds = _readers_blinded(readers, gates) if ina != inb else ()
        rows.append(
            DriftRow(
                area="metrics",
                item=name,
                a=fa.get(base, "MISSING") if ina else "MISSING",
                b=fb.get(base, "MISSING") if inb else "MISSING",
                change=change,
                blinds=blinds,
            )
        )
    only_a = sorted(set(fa) - set(fb))
    only_b = sorted(set(fb) - set(fa))
    if only_a or only_b:
        rows.append(
            DriftRow(
                area="metrics",
                item="(other families)",
                a=f"{len(only_a)} only in A",
                b=f"{len(only_b)} only in B",
                change="; ".join(
                    x
                    for x in (
                        f"A alone: {', '.join(only_a[:6])}{' ...' if len(only_a) > 6 else ''}" if only_a else "",
                        f"B alone: {', '.join(only_b[:6])}{' ...' if len(only_b) > 6 else ''}" if only_b else "",
                    )
                    if x
                ),
            )
        )
    for line in sf.LOG_LINES:
        va, vb = a.log_lines.get(line.id), b.log_lines.get(line.id)
        shown = {True: "present", False: "MISSING", None: "n/a (not vLLM's)" if not line.vllm_source else "unknown"}
        lost = va is True and vb is False or va is False and vb is True
        change = (
            "same"
            if va == vb
            else (
                "missing in B"
                if va is True and vb is False
                else "missing in A"
                if vb is True and va is False
                else "undecided"
            )
        )
        rows.append(
            DriftRow(
                area="log",
                item=line.id,
                a=shown[va],
                b=shown[vb],
                change=change,
                blinds=_readers_blinded(line.read_by, gates) if lost else (),
            )
        )
    ea, eb = set(a.compile_env), set(b.compile_env)
    if ea and eb and ea != eb:
        added, removed = sorted(eb - ea), sorted(ea - eb)
        rows.append(
            DriftRow(
                area="compile_env",
                item=f"{len(ea)} -> {len(eb)} names",
                a=f"{len(removed)} only in A",
                b=f"{len(added)} only in B",
                change=("B adds " + ", ".join(added[:8]) + (" ..." if len(added) > 8 else "") if added else "")
                + ("; A alone: " + ", ".join(removed[:8]) if removed else ""),
            )
        )
    blinded = any(r.blinds for r in rows)
    return DriftReport(
        a=a.label,
        b=b.label,
        a_version=a.vllm_version,
        b_version=b.vllm_version,
        sources={
            "A families": a.families_from,
            "A log lines": a.log_lines_from,
            "B families": b.families_from,
            "B log lines": b.log_lines_from,
        },
        rows=tuple(rows),
        blinds=blinded,
    )


# ---- resolving a side ----------------------------------------------------------------------------------------


def _running(recipe: str) -> Any | None:
    """A running instance of `recipe` on this host, if any."""
    from gb300lane.lane.manage import list_instances

    for info in list_instances():
        if info.recipe == recipe and info.state == "running" and info.endpoint:
            return info
    return None


def _live(base: sf.Surface, info: Any) -> sf.Surface:
    """A surface's families and log lines as the running instance serves and logged them."""
    from gb300lane.lane import probe
    from gb300lane.lane import records as instances
    from gb300lane.runtime import get_runtime
    from gb300lane.spec.counters import served_families

    text = probe.metrics_text(info.endpoint)
    families = {
        n: t for n, t in served_families(text, source=f"{info.endpoint}/metrics").items() if n.startswith("vllm:")
    }
    rec = instances.load(info.name)
    lines = dict(base.log_lines)
    how = base.log_lines_from
    if rec is not None:
        rt = get_runtime(rec.runtime)
        log = rt.logs(rec.containers[0], since=info.started_at)
        printed = sf.live_log_lines(log)
        # A line this boot had no reason to print (a hit's boot prints no miss line) keeps the source's answer.
        lines = {k: True if printed.get(k) else lines.get(k) for k in set(lines) | set(printed)}
        how = f"the boot log of {info.name}, else {base.log_lines_from}"
    return base.model_copy(
        update={
            "families": families,
            "families_from": f"live scrape of {info.endpoint}",
            "log_lines": lines,
            "log_lines_from": how,
        }
    )


def resolve(side: str) -> sf.Surface:
    """A side of `engine drift`: a shipped version (`0.33.0`), a recipe, or an image reference."""
    import os

    from gb300lane.errors import RecipeError
    from gb300lane.recipes import load_recipe
    from gb300lane.recipes.containers import process_python

    m = _VERSION.match(side)
    if m:
        got = sf.golden(m["v"])
        if got is None:
            raise LaneError(
                f"no shipped golden for vLLM {m['v']} (have {', '.join(sf.golden_versions()) or 'none'}); "
                "make one with scripts/snapshot_vllm_surface.py"
            )
        return got
    try:
        recipe = load_recipe(side)
    except RecipeError:
        recipe = None
    if recipe is not None:
        if recipe.engine == "embedded":
            base = sf.golden(recipe.image.vllm_version)
            if base is None:
                raise LaneError(
                    f"recipe {side}: the embedded engine speaks vLLM {recipe.image.vllm_version}, which "
                    "has no shipped golden"
                )
            base = base.model_copy(
                update={"label": f"recipe {side} (the embedded engine, speaking vLLM {recipe.image.vllm_version})"}
            )
        elif recipe.process is not None:
            python = process_python(recipe, os.environ)
            assert python is not None
            base = sf.from_probe(f"recipe {side} ({python})", sf.probe_python(python))
        else:
            base = image_surface(recipe.image.ref)
        info = _running(side)
        return _live(base, info) if info is not None else base
    if "/" in side or ":" in side or "@" in side:
        return image_surface(side)
    raise LaneError(
        f"{side!r} is neither a vLLM version with a shipped golden ({', '.join(sf.golden_versions())}), "
        "a recipe (`gb300lane recipes list`), nor an image reference"
    )


def image_surface(ref: str) -> sf.Surface:
    """The probe run inside an image (its own python3, the vLLM it imports), through the Docker runtime."""
    from gb300lane.runtime.docker import DockerRuntime

    rt = DockerRuntime()
    code, out = rt.run_script(ref, sf.probe_script(), ["auto", json.dumps(sf.probe_literals())])
    if code != 0:
        raise LaneError(
            f"image {ref}: the vLLM probe exited {code} ({out.strip()[-400:]}); does the image carry "
            "vLLM and a python3?"
        )
    return sf.from_probe(f"image {ref}", sf.parse_probe(out, f"image {ref}"))


__all__ = ["DriftReport", "DriftRow", "compare", "image_surface", "resolve"]
