"""The house moves, as one mechanical step: the instrument wing out of `cards/`, the twin module names renamed, and
the flat tests moved to `tests/<package>/test_<module>.py`, with every import, path and reference rewritten.

    python scripts/house_moves.py --dry-run    # print every move and every rewrite; change nothing
    python scripts/house_moves.py              # do them (git mv, then the rewrites), in a clean work tree
    lint-imports && mypy gb300lane && make test   # then check, and commit

What it does, in order:

1. `git mv` each module of `MODULE_MOVES` (the instrument wing: `cards/{plan,timeplan,calibrate,lanecal,simulate}`
   into the new package `gb300lane.instrument`, above `cards` beside `promote`; the twins renamed so each name
   says its job) and writes `gb300lane/instrument/__init__.py`.
2. `git mv` each flat test file of `TEST_MOVES` to its folder, and writes an empty `__init__.py` in each folder
   (pytest's default `prepend` import mode: a test module is `<folder>.test_<name>`, so two folders may hold the
   same basename; `tests/` stays on sys.path, so `from fakes import ...` imports as before).
3. Rewrites, in every tracked text file: the dotted module names (`gb300lane.instrument.plan` ->
   `gb300lane.instrument.plan`), the file paths (`gb300lane/instrument/plan.py`, `tests/instrument/test_plan_checks.py`),
   the lazy packages' name maps (`"hold": "instances"` in `lane/__init__.py`), the names `cards` re-exported from
   the wing (`from gb300lane.cards import calibrate` -> `from gb300lane.instrument import calibrate`), one test
   importing another (`from engine.test_server import engine` -> `from engine.test_server import engine`), and in
   each moved test `Path(__file__)` one level deeper.
4. Rewrites the import contracts in pyproject.toml (the wing's layer; the cards contract without it) and the
   contracts list in docs/architecture.md to match (`tests/house/test_docs_architecture.py` checks them).

Run on main after every branch has merged: a module or test added since this table was written is left where it
is and named in the output, so the table can be extended first.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Library modules: old path -> new path (under gb300lane/).
MODULE_MOVES: dict[str, str] = {
    # The instrument wing: sizing, timing and calibrating a card. Promotion uses none of it.
    "cards/plan.py": "instrument/plan.py",
    "cards/timeplan.py": "instrument/timeplan.py",
    "cards/calibrate.py": "instrument/calibrate.py",
    "cards/lanecal.py": "instrument/lanecal.py",
    "cards/simulate.py": "instrument/simulate.py",
    # Twins: each name says its job.
    "lane/instance.py": "lane/instance_scope.py",  # an instance for a `with` block
    "lane/instances.py": "lane/records.py",  # the instance records under <state>/lane/instances/
    "lane/ledger.py": "lane/hash_ledger.py",  # the hash-seen ledger (promote/ledger.py is the promotion ledger)
    "cards/record/looks.py": "cards/record/look_receipts.py",  # the looks' receipts (decide/looks.py decides)
    "cards/record/custody.py": "cards/record/card_custody.py",  # a card's chain of custody
    "promote/custody.py": "promote/production_custody.py",  # production's chain of custody
    "promote/lane_ops.py": "promote/live_ops.py",  # the live lane as PromotionOps
    "promote/lanetake.py": "promote/take_lane.py",  # a card's bracket on the production lane
    "engine/metrics.py": "engine/served_metrics.py",  # the metrics the engine serves
    "spec/metrics.py": "spec/counters.py",  # vLLM's /metrics text read into counters
    "engine/boot.py": "engine/modelled_boot.py",  # the engine's modelled boot (lane/boot.py boots a lane)
    "testing/ports.py": "testing/free_ports.py",  # free ports for tests (lane/ports.py: a lane's ports)
}

#: The new package's own module.
INSTRUMENT_INIT = '''"""The instrument: sizing, timing and calibrating a card (plan, timeplan, calibrate, lanecal, simulate).

It sits above `cards` and beside `promote`, which uses none of it: what a card *is* (its schema, receipts and
decision) stays in `cards`; how big it must be, how long it takes and whether its error rates hold is here.
"""

from __future__ import annotations

from gb300lane.instrument.calibrate import Calibration, calibrate
from gb300lane.instrument.plan import plan_for

__all__ = ["Calibration", "calibrate", "plan_for"]
'''

#: Names `gb300lane.cards` re-exported from the wing, and the wing's modules imported by name from the package
#: (`from gb300lane.cards import plan as plan_mod`); both come from `gb300lane.instrument` after the move.
WING_NAMES = ("Calibration", "calibrate", "plan_for")
WING_MODULES = ("plan", "timeplan", "lanecal", "simulate")

#: Flat test files -> their folder and name (under tests/). `house/` holds the house rules (docs, declared
#: imports, Any, contracts, fuzzing), `core/` the modules at the package's top, `e2e/` the real lane's pass.
TEST_MOVES: dict[str, str] = {
    "test_any_signatures.py": "house/test_any_signatures.py",
    "test_bench_cli.py": "cli/test_bench.py",
    "test_bench_client.py": "bench/test_client.py",
    "test_bench_crosscheck.py": "bench/test_crosscheck.py",
    "test_bench_delivered.py": "bench/test_delivered.py",
    "test_bench_engine.py": "bench/test_window_on_engine.py",
    "test_bench_export.py": "bench/test_export.py",
    "test_bench_smoke.py": "bench/test_smoke.py",
    "test_bench_window.py": "bench/test_window.py",
    "test_card_ports.py": "cards/test_reproduce_ports.py",
    "test_card_take_lane.py": "promote/test_take_lane.py",
    "test_cards_boot_checks.py": "cards/test_boots.py",
    "test_cards_calibrate.py": "instrument/test_calibrate.py",
    "test_cards_cli.py": "cli/test_card.py",
    "test_cards_cuped.py": "cards/test_cuped.py",
    "test_cards_custody.py": "cards/test_card_custody.py",
    "test_cards_decide.py": "cards/test_decide.py",
    "test_cards_engine.py": "cards/test_run_on_engine.py",
    "test_cards_extend.py": "cards/test_extend.py",
    "test_cards_golden.py": "cards/test_golden.py",
    "test_cards_html.py": "cards/test_report_html.py",
    "test_cards_lanecal.py": "instrument/test_lanecal.py",
    "test_cards_noise.py": "cards/test_noise.py",
    "test_cards_plan_checks.py": "instrument/test_plan_checks.py",
    "test_cards_plan_extension.py": "instrument/test_plan_extension.py",
    "test_cards_register_again.py": "cards/test_register_again.py",
    "test_cards_run.py": "cards/test_run.py",
    "test_cards_schema.py": "cards/test_schema.py",
    "test_cards_signatures.py": "cards/test_signatures.py",
    "test_cards_stats.py": "cards/test_stats.py",
    "test_cards_tails.py": "cards/test_tails.py",
    "test_cards_tested.py": "cards/test_look_receipts.py",
    "test_cards_timeplan.py": "instrument/test_timeplan.py",
    "test_cards_writeup.py": "cards/test_writeup.py",
    "test_cards_yaml.py": "cards/test_cardfile.py",
    "test_cli_errors.py": "cli/test_errors.py",
    "test_cli_help.py": "cli/test_help.py",
    "test_cli_hints.py": "cli/test_hints.py",
    "test_cli_markup.py": "cli/test_markup.py",
    "test_cli_output.py": "cli/test_output.py",
    "test_cli_params.py": "cli/test_params.py",
    "test_cli_startup.py": "cli/test_startup.py",
    "test_cli_storage.py": "cli/test_storage.py",
    "test_dashboard_prometheus.py": "promote/test_exposition_prometheus.py",
    "test_declared_imports.py": "house/test_declared_imports.py",
    "test_docs_architecture.py": "house/test_docs_architecture.py",
    "test_docs_signatures.py": "house/test_docs_signatures.py",
    "test_engine_api_limits.py": "engine/test_api_limits.py",
    "test_engine_args_config.py": "engine/test_args.py",
    "test_engine_build.py": "lane/test_enginebuild.py",
    "test_engine_calibration.py": "engine/test_calibration.py",
    "test_engine_faults.py": "engine/test_faults.py",
    "test_engine_logprobs.py": "engine/test_logprobs.py",
    "test_engine_config.py": "engine/test_config.py",
    "test_engine_core.py": "engine/test_core.py",
    "test_engine_hardening.py": "engine/test_server_hardening.py",
    "test_engine_model.py": "engine/test_model.py",
    "test_engine_sampling.py": "engine/test_sampling.py",
    "test_engine_served_tokens.py": "engine/test_served_tokens.py",
    "test_engine_server.py": "engine/test_server.py",
    "test_engine_streams.py": "engine/test_streams.py",
    "test_engine_tools.py": "engine/test_tools.py",
    "test_fleet_inventory.py": "lane/test_inventory.py",
    "test_fleet_remote.py": "runtime/test_remote.py",
    "test_fleet_rollout.py": "promote/test_rollout.py",
    "test_fleet_rollout_sim.py": "promote/test_rollout_sim.py",
    "test_fleet_ssh.py": "runtime/test_ssh.py",
    "test_fuzz_loaders.py": "house/test_fuzz_loaders.py",
    "test_fuzz_state_files.py": "house/test_fuzz_state_files.py",
    "test_k8s_podman.py": "recipes/test_k8s_podman.py",
    "test_lane_api.py": "lane/test_api.py",
    "test_lane_checks.py": "lane/test_checks.py",
    "test_lane_dark.py": "lane/test_dark.py",
    "test_lane_feature_live.py": "lane/test_feature_live.py",
    "test_lane_instance.py": "lane/test_instance_scope.py",
    "test_lane_kept.py": "lane/test_kept.py",
    "test_lane_names.py": "lane/test_names.py",
    "test_lane_naming.py": "lane/test_naming.py",
    "test_lane_parsers.py": "lane/test_parsers.py",
    "test_lane_ports.py": "lane/test_ports.py",
    "test_lane_preconditions.py": "lane/test_preconditions.py",
    "test_lane_process.py": "lane/test_process.py",
    "test_lane_records.py": "lane/test_records.py",
    "test_promote_cli.py": "cli/test_promote.py",
    "test_promote_crash.py": "promote/test_crash.py",
    "test_promote_e2e.py": "promote/test_e2e.py",
    "test_promote_fail_closed.py": "promote/test_fail_closed.py",
    "test_promote_forced_down.py": "promote/test_forced_down.py",
    "test_promote_from_card.py": "promote/test_from_card.py",
    "test_promote_lock.py": "promote/test_lock.py",
    "test_promote_ops.py": "promote/test_live_ops.py",
    "test_promote_transitions.py": "promote/test_transitions.py",
    "test_promote_witnesses.py": "promote/test_witness.py",
    "test_readme_fresh_venv.py": "house/test_readme_fresh_venv.py",
    "test_readme_walkthrough.py": "house/test_tutorial_walkthrough.py",
    "test_real_vllm.py": "e2e/test_real_vllm.py",
    "test_recipes_cli.py": "cli/test_recipes.py",
    "test_recipes_diff.py": "recipes/test_diff.py",
    "test_recipes_fail_closed.py": "recipes/test_fail_closed.py",
    "test_recipes_k8s.py": "recipes/test_k8s.py",
    "test_recipes_limits.py": "recipes/test_limits.py",
    "test_recipes_lint.py": "recipes/test_rules.py",
    "test_recipes_load.py": "recipes/test_loader.py",
    "test_recipes_render.py": "recipes/test_formats.py",
    "test_recipes_secrets.py": "recipes/test_secrets.py",
    "test_recipes_snapshot.py": "recipes/test_engine_schema.py",
    "test_runtime_docker.py": "runtime/test_docker.py",
    "test_runtime_dockerhost.py": "runtime/test_dockerhost.py",
    "test_runtime_image.py": "runtime/test_image.py",
    "test_runtime_process.py": "runtime/test_process.py",
    "test_secrets_by_value.py": "core/test_redact.py",
    "test_spec_acceptance.py": "spec/test_acceptance.py",
    "test_spec_advisor.py": "spec/test_advisor.py",
    "test_spec_expectation.py": "spec/test_expectation.py",
    "test_spec_kernels.py": "spec/test_kernels.py",
    "test_spec_kernels_aarch64.py": "spec/test_kernels_aarch64.py",
    "test_spec_lossless.py": "spec/test_lossless.py",
    "test_spec_metrics.py": "spec/test_counters.py",
    "test_spec_verify.py": "spec/test_verification.py",
    "test_templates.py": "core/test_templating.py",
    "test_yaml_one_reader.py": "house/test_yaml_one_reader.py",
}

#: The import contracts after the moves (pyproject.toml): the wing beside promote, above cards.
TOP_LAYERS_OLD = """    "gb300lane.promote",
    "gb300lane.cards","""
TOP_LAYERS_NEW = """    "gb300lane.promote | gb300lane.instrument",
    "gb300lane.cards","""
CARDS_LAYERS_OLD = """layers = [
    "reproduce : lanecal",
    "plan : timeplan",
    "calibrate : extend",
    "run",
    "present",
    "simulate",
    "record","""
CARDS_LAYERS_NEW = """layers = [
    "reproduce : extend",
    "run",
    "present",
    "record","""
INSTRUMENT_CONTRACT = """
# The instrument flows down too: the lane's calibration over the plans, the plans over the engine calibration,
# everything over the in-process lane.
[[tool.importlinter.contracts]]
name = "The instrument flows down: lanecal -> plan -> calibrate -> simulate"
type = "layers"
containers = ["gb300lane.instrument"]
layers = ["lanecal", "plan : timeplan", "calibrate", "simulate"]
"""

TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".sh", ".txt", ".json", ".in"}
TEXT_NAMES = {"Makefile", "run", "wheel"}


def _dotted(path: str) -> str:
    return "gb300lane." + path.removesuffix(".py").replace("/", ".")


def _git(*args: str, dry: bool) -> None:
    print("git " + " ".join(args))
    if not dry:
        subprocess.run(["git", "-C", str(ROOT), *args], check=True)


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True, check=True).stdout
    return [ROOT / f for f in out.split("\0") if f]


#: Never rewritten: recorded receipts and golden files stay byte-identical, data is not code.
FROZEN = (
    "results/",
    "benchmarks/results/",
    "tests/data/",
    "tests/golden/",
    "gb300lane/data/",
    "gb300lane/engine/corpora/",
)


def _is_text(p: Path) -> bool:
    rel = p.relative_to(ROOT).as_posix()
    return (p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES) and not rel.startswith(FROZEN)


#: Modules named without `gb300lane.` in docs and docstrings (`cards.record.card_custody.verify_receipts`). Not
#: `lane.instance`/`lane.instances`: those are also names of the lane's functions and of a SimLane's method.
SHORT_NAMES: dict[str, str] = {
    "cards.record.card_custody": "cards.record.card_custody",
    "cards.record.look_receipts": "cards.record.look_receipts",
    "promote.production_custody": "promote.production_custody",
    "promote.live_ops": "promote.live_ops",
    "promote.take_lane": "promote.take_lane",
    "lane.hash_ledger": "lane.hash_ledger",
    "engine.served_metrics": "engine.served_metrics",
    "engine.modelled_boot": "engine.modelled_boot",
    "spec.counters": "spec.counters",
    "testing.free_ports": "testing.free_ports",
    "instrument.plan": "instrument.plan",
    "instrument.timeplan": "instrument.timeplan",
    "instrument.lanecal": "instrument.lanecal",
    "instrument.simulate": "instrument.simulate",
    "instrument.calibrate": "instrument.calibrate",
}


def rewrites() -> list[tuple[re.Pattern[str], str]]:
    """Every textual rewrite: module names, module paths and test paths, longest first."""
    pairs: list[tuple[str, str]] = []
    for old, new in MODULE_MOVES.items():
        pairs.append((_dotted(old), _dotted(new)))
        pairs.append(("gb300lane/" + old, "gb300lane/" + new))
    for old, new in TEST_MOVES.items():
        pairs.append(("tests/" + old, "tests/" + new))
        # One test importing another: `from engine.test_server import engine` -> `from engine.test_server import`.
        pairs.append(
            (f"from {old.removesuffix('.py')} import", f"from {new.removesuffix('.py').replace('/', '.')} import")
        )
    pairs.sort(key=lambda p: -len(p[0]))
    rules = [(re.compile(re.escape(a) + r"(?![\w])"), b) for a, b in pairs]
    # The short names last, and only where no longer name (or a path) holds them.
    rules += [(re.compile(r"(?<![\w./])" + re.escape(a) + r"(?![\w])"), b)
              for a, b in sorted(SHORT_NAMES.items(), key=lambda p: -len(p[0]))]  # fmt: skip
    return rules


def _lazy_maps(text: str, package: str) -> str:
    """A lazy package's `"name": "module"` map: each moved module of this package by its new name."""
    for old, new in MODULE_MOVES.items():
        o, n = old.removesuffix(".py").split("/"), new.removesuffix(".py").split("/")
        if o[0] == package and n[0] == package and len(o) == len(n) == 2:
            text = re.sub(rf'(:\s*)"{re.escape(o[1])}"', rf'\1"{n[1]}"', text)
    return text


def _wing_names(text: str) -> str:
    """`from gb300lane.cards import a, calibrate, b` -> the wing's names from gb300lane.instrument."""

    def split(m: re.Match[str]) -> str:
        names = [
            n.strip() for n in m.group(2).replace("(", "").replace(")", "").replace("\n", " ").split(",") if n.strip()
        ]
        wing = [n for n in names if n.split(" as ")[0].strip() in WING_NAMES + WING_MODULES]
        if not wing:
            return m.group(0)
        rest = [n for n in names if n not in wing]
        lines = [f"{m.group(1)}from gb300lane.cards import {', '.join(rest)}"] if rest else []
        lines.append(f"{m.group(1)}from gb300lane.instrument import {', '.join(wing)}")
        return "\n".join(lines)

    return re.sub(r"^([ \t]*)from gb300lane\.cards import (\([^)]*\)|[^\n]*)", split, text, flags=re.M)


def _lazy_names(package: str) -> set[str]:
    """The public names a lazy package maps to its modules (`"instance": "instance"` in lane/__init__.py)."""
    init = ROOT / "gb300lane" / package / "__init__.py"
    return (
        set(re.findall(r'^\s*"(\w+)":\s*"\w+",?$', init.read_text(encoding="utf-8"), flags=re.M))
        if init.is_file()
        else set()
    )


def _submodule_names(text: str) -> str:
    """`from gb300lane.lane import instances` (a renamed module imported by name from its package) ->
    `from gb300lane.lane import records as instances`: the code that uses the name reads as before."""
    for old, new in MODULE_MOVES.items():
        o, n = old.removesuffix(".py").split("/"), new.removesuffix(".py").split("/")
        if o[:-1] != n[:-1]:
            continue  # the wing: its modules are imported by their full dotted names
        if len(o) == 2 and o[-1] in _lazy_names(o[0]):
            continue  # `from gb300lane.lane import instance` is the function the lazy package names, not the module
        parent = "gb300lane." + ".".join(o[:-1])

        def rename(m: re.Match[str], old_stem: str = o[-1], new_stem: str = n[-1]) -> str:
            names = [x.strip() for x in m.group(2).split(",")]
            out = []
            for name in names:
                base, _, alias = name.partition(" as ")
                if base.strip() == old_stem:
                    name = f"{new_stem} as {alias.strip() or old_stem}"
                out.append(name)
            return f"{m.group(1)}from {parent} import {', '.join(out)}"

        text = re.sub(rf"^([ \t]*)from {re.escape(parent)} import ([^\n(]+)$", rename, text, flags=re.M)
    return text


def _cards_init(text: str) -> str:
    """`gb300lane.cards` no longer re-exports the wing (the package below cannot import the one above it)."""
    text = re.sub(r"^from gb300lane\.(?:cards|instrument)\.(?:calibrate|plan) import [^\n]*\n", "", text, flags=re.M)
    text = re.sub(r'^    "(' + "|".join(WING_NAMES) + r')",\n', "", text, flags=re.M)
    return text.replace(
        "(`GateResult.tests`); `plan_for` gives power and size before a card runs and\n`calibrate` measures a card's "
        "error rates on the embedded engine.",
        "(`GateResult.tests`). Sizing, timing and calibrating a card are `gb300lane.instrument`'s.",
    )


def _deeper(text: str) -> str:
    """A test moved one folder down: its `Path(__file__)` references reach one level further up."""
    text = text.replace("Path(__file__).resolve().parents[1]", "Path(__file__).resolve().parents[2]")
    text = text.replace("Path(__file__).resolve().parent.parent", "Path(__file__).resolve().parents[2]")
    text = re.sub(r"Path\(__file__\)\.resolve\(\)\.parent(?![\w.\[])", "Path(__file__).resolve().parents[1]", text)
    text = re.sub(r"Path\(__file__\)\.resolve\(\)\.parent(?=\.(?!parent))", "Path(__file__).resolve().parents[1]", text)
    text = re.sub(r"Path\(__file__\)\.parent(?!\.parent|s)", "Path(__file__).parents[1]", text)
    return text


def _strip(module: str, container: str | None) -> str:
    return module.removeprefix(f"{container}.") if container else module.removeprefix("gb300lane.")


def _contract_line(c: dict[str, Any]) -> str:
    """One contract as docs/architecture.md lists it (tests/house/test_docs_architecture.py's own format)."""
    kind = c["type"]
    if kind == "layers":
        containers = c.get("containers") or [None]
        where = f" (in {_strip(containers[0], None)})" if containers[0] else ""
        layers = " -> ".join(" : ".join(_strip(m.strip(), containers[0]) for m in layer.split(":"))
                             if ":" in layer else layer.replace("gb300lane.", "") for layer in c["layers"])  # fmt: skip
        return f"- {c['name']}: layers{where} {layers}"
    if kind == "forbidden":
        return f"- {c['name']}: forbidden {', '.join(c['source_modules'])} -> {', '.join(c['forbidden_modules'])}"
    if kind == "acyclic_siblings":
        return f"- {c['name']}: acyclic_siblings {', '.join(c['ancestors'])}"
    raise SystemExit(f"house_moves: no line for a {kind} contract in docs/architecture.md; write it by hand")


#: docs/architecture.md's prose about the moved modules: (what it says now, what it says after the moves).
ARCHITECTURE_PROSE: tuple[tuple[str, str], ...] = (
    (
        """                 HTML page, the write-up), and the workflows run, extend (`card extend`), plan, timeplan,
                 calibrate + simulate, reproduce, lanecal (`card calibrate --lane`: replicates as real cards through a lane); record/noise is the
                 lanes' noise ledger (every scored card's A against A2, pooled per lane)
""",
        """                 HTML page, the write-up), and the workflows run, extend (`card extend`) and reproduce; record/noise
                 is the lanes' noise ledger (every scored card's A against A2, pooled per lane)
  instrument/    sizing, timing and calibrating a card, above cards (promotion uses none of it): plan (power and size,
                 boot studies), timeplan (each design's wall-clock), calibrate + simulate (A/A and as written on the
                 engine in process), lanecal (`card calibrate --lane`: replicates as real cards through a lane)
""",
    ),
    ("take_lane (lanetake)", "take_lane (take_lane)"),
    ("\nlanetake.take_lane(", "\ntake_lane.take_lane("),
    (
        """Inside cards a card flows down: `reproduce | lanecal -> plan | timeplan -> calibrate | extend -> run -> present -> simulate -> record ->
embedded -> decide -> cardfile -> schema`.""",
        """Inside cards a card flows down: `reproduce | extend -> run -> present -> record -> embedded -> decide -> cardfile ->
schema`; the instrument above it flows down `lanecal -> plan | timeplan -> calibrate -> simulate`.""",
    ),
)


def architecture_blocks(doc: str, pyproject: str) -> str:
    """docs/architecture.md's contracts block from pyproject.toml, and its engine importers sorted again."""
    contracts = tomllib.loads(pyproject)["tool"]["importlinter"]["contracts"]
    lines = "\n".join(_contract_line(c) for c in contracts)
    doc = re.sub(r"(<!-- contracts -->\n).*?(<!-- /contracts -->)", lambda m: f"{m.group(1)}{lines}\n{m.group(2)}",
                 doc, flags=re.S)  # fmt: skip

    def resort(m: re.Match[str]) -> str:
        rows = sorted(line for line in m.group(2).splitlines() if line.strip())
        return m.group(1) + "\n".join(rows) + "\n" + m.group(3)

    return re.sub(r"(<!-- engine-importers -->\n)(.*?)(<!-- /engine-importers -->)", resort, doc, flags=re.S)


def rewrite_only(*, dry: bool) -> int:
    """The name rewrites alone, in every tracked file (each rule is idempotent): for code written against the old
    names after the moves (a branch merged since). Flat tests it leaves are named, to move by hand."""
    rules = rewrites()
    changed = 0
    for path in _tracked():
        rel = path.relative_to(ROOT).as_posix()
        if not _is_text(path) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        new_text = text
        for pattern, repl in rules:
            new_text = pattern.sub(repl, new_text)
        if rel.endswith(".py") and rel != "gb300lane/cards/__init__.py":
            new_text = _wing_names(new_text)
        if rel.endswith(".py"):
            new_text = _submodule_names(new_text)
        if new_text != text:
            changed += 1
            print(f"rewrite {rel}")
            if not dry:
                path.write_text(new_text, encoding="utf-8", errors="surrogateescape")
    left = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    if left:
        print(f"house_moves: flat tests left: {left}")
    print(f"{changed} files rewritten" + (" (dry run: nothing changed)" if dry else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    parser.add_argument(
        "--rewrite-only",
        action="store_true",
        help="after the moves: rewrite the old names in what was written since (a merged branch)",
    )
    args = parser.parse_args(argv)
    dry = args.dry_run
    if args.rewrite_only:
        return rewrite_only(dry=dry)
    if (
        not dry
        and subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True, check=True
        ).stdout.strip()
    ):
        print("house_moves: the work tree has changes; commit or stash them first", file=sys.stderr)
        return 1
    missing = [p for p in MODULE_MOVES if not (ROOT / "gb300lane" / p).is_file()]
    missing += [p for p in TEST_MOVES if not (ROOT / "tests" / p).is_file()]
    if missing:
        print(
            f"house_moves: not found (moved already, or renamed since the table was written): {missing}",
            file=sys.stderr,
        )
        return 1
    left = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if p.name not in TEST_MOVES)
    if left:
        print(f"house_moves: flat tests not in TEST_MOVES stay where they are; add them first: {left}")

    # 1. The modules.
    for old, new in MODULE_MOVES.items():
        if not dry:
            (ROOT / "gb300lane" / new).parent.mkdir(parents=True, exist_ok=True)
        _git("mv", f"gb300lane/{old}", f"gb300lane/{new}", dry=dry)
    print("write gb300lane/instrument/__init__.py")
    if not dry:
        (ROOT / "gb300lane" / "instrument" / "__init__.py").write_text(INSTRUMENT_INIT, encoding="utf-8")
        _git("add", "gb300lane/instrument/__init__.py", dry=dry)

    # 2. The tests.
    folders = sorted({Path(new).parent.as_posix() for new in TEST_MOVES.values()})
    for folder in folders:
        init = ROOT / "tests" / folder / "__init__.py"
        print(f"write tests/{folder}/__init__.py" + (" (exists)" if init.exists() else ""))
        if not dry and not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text("", encoding="utf-8")
            _git("add", f"tests/{folder}/__init__.py", dry=dry)
    for old, new in TEST_MOVES.items():
        _git("mv", f"tests/{old}", f"tests/{new}", dry=dry)

    # 3. The rewrites, file by file (after the moves, the files are at their new paths).
    rules = rewrites()
    moved_tests = {"tests/" + new for new in TEST_MOVES.values()}
    renamed = {("tests/" + o): ("tests/" + n) for o, n in TEST_MOVES.items()}
    renamed |= {("gb300lane/" + o): ("gb300lane/" + n) for o, n in MODULE_MOVES.items()}
    changed = 0
    for path in _tracked():
        rel = path.relative_to(ROOT).as_posix()
        if dry:
            rel = renamed.get(rel, rel)
        source = ROOT / (rel if not dry else path.relative_to(ROOT).as_posix())
        if not _is_text(source) or not source.is_file():
            continue
        text = source.read_text(encoding="utf-8", errors="surrogateescape")
        new_text = text
        for pattern, repl in rules:
            new_text = pattern.sub(repl, new_text)
        if rel == "gb300lane/cards/__init__.py":
            new_text = _cards_init(new_text)
        elif rel.endswith(".py"):
            new_text = _wing_names(new_text)
        if rel.endswith(".py"):
            new_text = _submodule_names(new_text)
        if rel.startswith("gb300lane/") and rel.endswith("/__init__.py"):
            new_text = _lazy_maps(new_text, rel.split("/")[1])
        if rel in moved_tests:
            new_text = _deeper(new_text)
        if rel == "pyproject.toml":
            new_text = new_text.replace(TOP_LAYERS_OLD, TOP_LAYERS_NEW).replace(CARDS_LAYERS_OLD, CARDS_LAYERS_NEW)
            if "The instrument flows down" not in new_text:
                anchor = '[[tool.importlinter.contracts]]\nname = "The decision is pure'
                new_text = new_text.replace(anchor, INSTRUMENT_CONTRACT.lstrip("\n") + "\n" + anchor)
        if new_text != text:
            changed += 1
            print(f"rewrite {rel}")
            if not dry:
                source.write_text(new_text, encoding="utf-8", errors="surrogateescape")
    # 4. docs/architecture.md's contracts (from pyproject.toml as it now is) and engine importers.
    doc = ROOT / "docs" / "architecture.md"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if dry:  # the rewrite above was not written: apply it here to what the doc will be made from
        for pattern, repl in rules:
            pyproject = pattern.sub(repl, pyproject)
        pyproject = pyproject.replace(TOP_LAYERS_OLD, TOP_LAYERS_NEW).replace(CARDS_LAYERS_OLD, CARDS_LAYERS_NEW)
        anchor = '[[tool.importlinter.contracts]]\nname = "The decision is pure'
        pyproject = pyproject.replace(anchor, INSTRUMENT_CONTRACT.lstrip("\n") + "\n" + anchor)
    text = doc.read_text(encoding="utf-8")
    blocks = architecture_blocks(text, pyproject)
    for old, new in ARCHITECTURE_PROSE:
        if old not in blocks:
            print(f"house_moves: docs/architecture.md no longer says {old.strip()[:60]!r}...: edit it by hand")
        blocks = blocks.replace(old, new)
    print("rewrite docs/architecture.md: its contracts and engine-importers blocks")
    if not dry and blocks != text:
        doc.write_text(blocks, encoding="utf-8")
    print(
        f"{len(MODULE_MOVES)} modules and {len(TEST_MOVES)} test files moved, {changed} files rewritten"
        + (" (dry run: nothing changed)" if dry else "")
    )
    if not dry:
        print("next: lint-imports, mypy gb300lane, make test; then commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
