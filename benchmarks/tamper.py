"""The tamper suite: attacks on results/, the state directory and the keys, each counted refused, repaired or lost.

Each case builds a lane of its own in a temporary directory (state, results, config and recipes), on a
simulated lane whose verdicts, fingerprints and recipe contents are the real ones: production local-v26, then
cards on local-v27 registered, run (the fake arms of tests/fakes) and scored, every file written through the
tool. Then it attacks with write access to results/ and the state directory (never the config directory,
which holds the signing key), or with a broken key, and asks `promote local-v27` (and `rollback` where the key
is the attack). A case is

- refused when the tool refuses, names what was tampered with, and production's engine was never stopped;
- repaired when, after the repair the refusal names (restore the file, the key, the log from a backup, or
  take the copied directory away), the tool gives the honest answer: the newest verdict the log entered, and
  a promotion only on a PASS it measured;
- lost when the tool acted on the tampered evidence: it promoted, stopped production, or planned from a
  hand-made receipt. The suite exits 1 when any case is lost.

Prints the table and writes benchmarks/results/tamper.json.

    python benchmarks/tamper.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gb300lane import evidencelog, keyed, paths, signing  # noqa: E402
from gb300lane.cards import Receipts, parse_card, register, run_card, score  # noqa: E402
from gb300lane.cards.record.receipts import MANIFEST_SEAL  # noqa: E402
from gb300lane.errors import LaneError  # noqa: E402
from gb300lane.fsio import sha256_file  # noqa: E402
from gb300lane.promote import current_production, promote, rollback  # noqa: E402
from gb300lane.promote.live import LiveOps  # noqa: E402
from gb300lane.testing.simlane import SimLane  # noqa: E402

from fakes import cards as fakes  # noqa: E402
from fakes.sshkey import write_key  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CARD = Path(__file__).resolve().parents[1] / "tests" / "data" / "cards" / "mini.yaml"


class CardsLane:
    """The simulated lane with the live lane's verdicts, fingerprints and recipe contents."""

    def __init__(self, sim: SimLane) -> None:
        self.sim, self.live = sim, LiveOps()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sim, name)

    def describe(self, recipe: str) -> tuple[str, int]:
        return self.live.describe(recipe)

    def verdict(self, recipe: str) -> Any:
        return self.live.verdict(recipe)

    def recipe_content(self, recipe: str) -> Any:
        return self.live.recipe_content(recipe)


@dataclass
class World:
    root: Path
    ops: CardsLane
    cards: dict[str, Receipts] = field(default_factory=dict)

    def backup(self) -> Path:
        """results/, the state directory and the recipes as they are (the operator's backup)."""
        dest = self.root / "backup"
        if dest.exists():
            shutil.rmtree(dest)
        for name in ("results", "state", "recipes"):
            shutil.copytree(self.root / name, dest / name, symlinks=True)
        return dest

    def restore(self, *names: str) -> None:
        for name in names:
            _writable(self.root / name)
            shutil.rmtree(self.root / name)
            shutil.copytree(self.root / "backup" / name, self.root / name, symlinks=True)

    def stopped(self) -> bool:
        return any(op == ["stop", "lane-local-v26"] for op in self.ops.sim.operations())


def _writable(path: Path) -> None:
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


@contextmanager
def world() -> Iterator[World]:
    root = Path(tempfile.mkdtemp(prefix="gb300lane-tamper-"))
    env = {
        "GB300LANE_STATE_DIR": str(root / "state"),
        "GB300LANE_RESULTS_DIR": str(root / "results"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "GB300LANE_RECIPES_DIR": str(root / "recipes"),
        "VLLM_CACHE_ROOT": str(root / "vllm-cache"),
        "DOCKER_HOST": f"unix://{root / 'no-docker.sock'}",
        "GB300LANE_SIGNING_KEY": None,
        "GB300LANE_ALLOWED_SIGNERS": None,
        "GB300LANE_PRINCIPALS": None,
    }
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    try:
        (root / "recipes").mkdir()
        (root / "results").mkdir()
        for f in paths.shipped("recipes").glob("*.yaml"):
            shutil.copy(f, root / "recipes" / f.name)
        sim = SimLane.create(root / "lane.json", {"local-v26": {}, "local-v27": {}})
        ops = CardsLane(sim)
        sim.describe = ops.describe  # type: ignore[method-assign]
        assert promote("local-v26", force=True, reason="production before the cards", ops=ops).ok
        yield World(root=root, ops=ops)
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        shutil.rmtree(root, ignore_errors=True)


def run_card_as(w: World, name: str, verdict: str, date: str) -> Receipts:
    text = CARD.read_text().replace("name: mini\n", f"name: {name}\n")
    card = parse_card(text, name)
    rec = register(card, text, date=date)
    factors = {"A": 1.0, "B": 1.05, "A2": 1.0} if verdict == "PASS" else {"A": 1.0, "B": 0.9, "A2": 1.0}
    run_card(rec, ops=fakes.FakeLane(card, factors).ops())
    assert score(rec).verdict == verdict
    w.cards[name] = rec
    return rec


def attempt(w: World, action: Callable[[], Any] | None = None) -> tuple[str, str]:
    """(outcome, message) of promoting local-v27 (or `action`): refused, or acted."""
    try:
        done = action() if action is not None else promote("local-v27", ops=w.ops)
    except LaneError as exc:
        return "refused", str(exc)
    return ("acted" if getattr(done, "ok", True) else "refused"), getattr(done, "message", "")


# -- the attacks --------------------------------------------------------------------------------------------


def _pass_then_fail(w: World) -> tuple[Receipts, Receipts]:
    return run_card_as(w, "mini", "PASS", "2026-11-01"), run_card_as(w, "mini-again", "FAIL", "2026-11-02")


def hide(how: str) -> Callable[[World], tuple[str, Callable[[], None], str]]:
    def case(w: World) -> tuple[str, Callable[[], None], str]:
        passed, failed = _pass_then_fail(w)
        w.backup()
        _writable(failed.root)
        if how == "directory deleted":
            shutil.rmtree(failed.root)
        elif how == "verdict and head manifest deleted":
            failed.verdict_file(1).unlink()
            (failed.root / "manifest-verdict-1.json").unlink()
        elif how == "registration overwritten":
            failed.registration_file.write_text('{"not": "a registration"}\n')
        elif how == "written_at moved earlier":
            data = json.loads(failed.verdict_file(1).read_text())
            data["written_at"] = "2000-01-01T00:00:00Z"
            failed.verdict_file(1).write_text(json.dumps(data))
        elif how == "the PASS copied over it":
            for p in [passed.verdict_file(1), *passed.root.glob("manifest*.json")]:
                shutil.copy(p, failed.root / p.relative_to(passed.root))
        return str(failed.root), lambda: w.restore("results"), "FAIL"

    return case


def edited_recipe(w: World) -> tuple[str, Callable[[], None], str]:
    run_card_as(w, "mini", "PASS", "2026-11-01")
    w.backup()
    path = w.root / "recipes" / "local-v27.yaml"
    path.write_text(path.read_text() + '  num_speculative_tokens: 3\nenv:\n  GB300LANE_EXTRA: "1"\n')
    return "speculative.num_speculative_tokens", lambda: w.restore("recipes"), "PASS"


def _forge_pass(rec: Receipts) -> tuple[Path, dict[str, Any]]:
    _writable(rec.root)
    data = json.loads(rec.verdict_file(1).read_text())
    data["verdict"] = "PASS"
    for r in data["results"]:
        r["status"] = "PASS"
    rec.verdict_file(1).write_text(json.dumps(data))
    manifest = rec.root / "manifest-verdict-1.json"
    body = json.loads(manifest.read_text())
    body.pop("seal")
    body["files"]["verdicts/verdict-1.json"] = sha256_file(rec.verdict_file(1))
    return manifest, body


def forged_signer(w: World) -> tuple[str, Callable[[], None], str]:
    """A team allowed-signers file: the operator for gb300lane, bob for git; bob re-signs a FAIL made PASS."""
    failed = run_card_as(w, "mini-again", "FAIL", "2026-11-02")
    w.backup()
    team = w.root / "config" / "team_signers"
    own = signing.public_key().split()[:2]
    bob = write_key(w.root / "bob" / "key", "bob")
    team.write_text(
        f'gb300lane namespaces="gb300lane" {own[0]} {own[1]}\n'
        f"bob {' '.join(Path(f'{bob}.pub').read_text().split()[:2])}\n"
    )
    os.environ["GB300LANE_ALLOWED_SIGNERS"] = str(team)
    manifest, body = _forge_pass(failed)
    os.environ["GB300LANE_SIGNING_KEY"] = str(bob)
    body["seal"] = {**keyed.seal(MANIFEST_SEAL, body), "signer": "bob"}
    os.environ.pop("GB300LANE_SIGNING_KEY")
    manifest.write_text(json.dumps(body))
    return "not an allowed signer", lambda: w.restore("results"), "FAIL"


def unsigned_receipts(w: World) -> tuple[str, Callable[[], None], str]:
    """A FAIL made PASS, its manifest sealed with a keyed HMAC under a fresh state key (no signature)."""
    import hashlib
    import hmac
    import secrets

    failed = run_card_as(w, "mini-again", "FAIL", "2026-11-02")
    w.backup()
    manifest, body = _forge_pass(failed)
    key = secrets.token_bytes(32)
    mac = hmac.new(key, MANIFEST_SEAL.encode() + b"\0" + keyed.canonical(body).encode(), hashlib.sha256).hexdigest()
    body["seal"] = {"key_id": keyed.key_id(key), "hmac_sha256": mac}
    manifest.write_text(json.dumps(body))
    return "keyed seal", lambda: w.restore("results"), "FAIL"


def handmade_copy(w: World) -> tuple[str, Callable[[], None], str]:
    """A FAIL is newest; a copy of the older PASS's directory is dropped in under a later date."""
    passed, _ = _pass_then_fail(w)
    w.backup()
    shutil.copytree(passed.root, passed.root.with_name("2026-11-03-mini"))
    return "never entered", lambda: w.restore("results"), "FAIL"


def broken_key(kind: str) -> Callable[[World], tuple[str, Callable[[], None], str]]:
    def case(w: World) -> tuple[str, Callable[[], None], str]:
        run_card_as(w, "mini", "PASS", "2026-11-01")
        key = signing.signing_key_path()
        good, pub = key.read_bytes(), Path(f"{key}.pub").read_text()
        if kind == "garbage":
            key.write_bytes(b"not a key at all\n")
        elif kind == "zeroed":
            key.write_bytes(b"\0" * len(good))
        else:
            other = write_key(w.root / "other" / "key", "someone else")
            key.write_bytes(other.read_bytes())
            Path(f"{key}.pub").write_text(Path(f"{other}.pub").read_text())

        def repair() -> None:
            key.write_bytes(good)
            Path(f"{key}.pub").write_text(pub)

        return str(key), repair, "PASS"

    return case


def log_tampered(how: str) -> Callable[[World], tuple[str, Callable[[], None], str]]:
    def case(w: World) -> tuple[str, Callable[[], None], str]:
        _pass_then_fail(w)
        w.backup()
        path = evidencelog.log_path()
        lines = path.read_text().splitlines(keepends=True)
        if how == "entries cut from its end":
            path.write_text("".join(lines[:-3]))
        elif how == "a line edited":
            path.write_text("".join(lines[:-1] + [lines[-1].replace('"FAIL"', '"PASS"')]))
        else:
            path.unlink()
        return str(path), lambda: w.restore("state"), "FAIL"

    return case


CASES: dict[str, Callable[[World], tuple[str, Callable[[], None], str]]] = {
    **{
        f"hide the newer FAIL: {h}": hide(h)
        for h in (
            "directory deleted",
            "verdict and head manifest deleted",
            "registration overwritten",
            "written_at moved earlier",
            "the PASS copied over it",
        )
    },
    "recipe edited after its PASS": edited_recipe,
    "a FAIL made PASS, re-signed by a team key outside the namespace": forged_signer,
    "a FAIL made PASS, sealed with a keyed HMAC (unsigned)": unsigned_receipts,
    "a copy of an older PASS dropped in under a later date": handmade_copy,
    **{f"signing key {k}": broken_key(k) for k in ("garbage", "zeroed", "foreign")},
    **{f"evidence log: {h}": log_tampered(h) for h in ("entries cut from its end", "a line edited", "deleted")},
}


def noise_copies() -> dict[str, Any]:
    """Four hand-made copies of a scored card with A2 = A: skipped by the noise ledger, the plan unchanged. Beside
    it, what the same ledger pools when nothing is left out (the copies counted), which is what the plan read
    before the filter."""
    from gb300lane.cards.record import noise
    from gb300lane.cards.record.receipts import lane_receipts
    from gb300lane.cards.record.verified import planning_receipts
    from gb300lane.instrument.plan import registration_plan

    with world():
        text = (
            (CARD.parent / "tested.yaml")
            .read_text()
            .replace("    mde: 0.02\n", "    mde: 0.02\n    scope: aggregate\n")
        )
        roots = []
        for i, (a, a2) in enumerate([(0.006, -0.004), (-0.005, 0.003), (0.002, -0.006)]):
            t = text.replace("name: tested\n", f"name: tested-{i}\n").replace(
                "seed_base: 1000", f"seed_base: {1000 + 7919 * (i + 1)}"
            )
            card = parse_card(t, f"tested-{i}")
            rec = register(card, t)
            run_card(rec, ops=fakes.FakeLane(card, {}, tps={"A": 1 + a, "A2": 1 + a2, "B": 1.0}, noise=0.02).ops())
            score(rec)
            roots.append(rec.root)
        card = parse_card(text.replace("name: tested\n", "name: tested-0\n"), "tested-0")

        def signed_sd() -> float:
            plan = registration_plan(card)
            assert plan is not None
            return next(g.boot_sd for g in plan.gates if g.gate == "tokens-per-step")

        before = signed_sd()
        for k in range(4):
            source = roots[k % len(roots)]
            copy = source.with_name(f"{source.name}-copy{k}")
            shutil.copytree(source, copy)
            _writable(copy)
            for window in (copy / "arms" / "A" / "attempt-1" / "windows").glob("*.json"):
                shutil.copy(window, copy / "arms" / "A2" / "attempt-1" / "windows" / window.name)
        after = signed_sd()
        key = next(k for k in noise.ledger() if k.metric == "tokens_per_step" and k.unit == noise.ALL_CELLS)
        unfiltered = noise.estimate(
            key, noise._distinct(s for rec in lane_receipts() if (s := noise.card_samples(rec).get(key)) is not None)
        )
        skipped = planning_receipts().skipped
        outcome = "refused" if after == before and len(skipped) == 4 else "lost"
        return {
            "case": "four hand-made copies with A2 = A in the noise ledger",
            "outcome": outcome,
            "repaired": None,
            "stopped": False,
            "said": f"registered boot sd of tokens-per-step {before:.3%} -> {after:.3%} with the copies "
            f"({unfiltered.sd:.3%} over {unfiltered.cards} cards had they been read); {len(skipped)} "
            "left out: " + (skipped[0].why if skipped else "-"),
        }


def main() -> int:
    t0 = time.monotonic()
    rows = []
    for name, case in CASES.items():
        with world() as w:
            expect, repair, honest = case(w)
            key_case = name.startswith("signing key")
            outcome, said = attempt(w)
            if key_case and outcome == "refused":
                outcome, said2 = attempt(w, lambda: rollback(ops=w.ops))
                outcome = "refused" if outcome == "refused" else "acted"
                said += " | rollback: " + said2
            stopped = w.stopped()
            refused = outcome == "refused" and expect in said and not stopped
            prod = current_production()
            lost = outcome == "acted" or stopped or prod is None or prod.recipe != "local-v26"
            repair()
            info = w.ops.verdict("local-v27")
            again, said_again = attempt(w)
            if honest == "FAIL":
                repaired = (
                    info is not None
                    and info.verdict == "FAIL"
                    and not info.evidence
                    and again == "refused"
                    and "newest verdict is FAIL" in said_again
                )
            else:
                repaired = again == "acted" and current_production() is not None
            rows.append(
                {
                    "case": name,
                    "outcome": "lost" if lost else "refused" if refused else "unnamed",
                    "repaired": repaired,
                    "stopped": stopped,
                    "said": said[:400],
                }
            )
    rows.append(noise_copies())
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("refused", "unnamed", "lost")}
    counts["repaired"] = sum(bool(r["repaired"]) for r in rows)
    print(f"tamper suite: {len(rows)} attacks ({time.monotonic() - t0:.0f} s)")
    print(f"{'attack':<66} {'outcome':<8} {'repaired':<9} production stopped")
    for r in rows:
        rep = "-" if r["repaired"] is None else "yes" if r["repaired"] else "NO"
        print(f"{r['case']:<66} {r['outcome']:<8} {rep:<9} {'YES' if r['stopped'] else 'no'}")
    print(
        f"refused {counts['refused']}, repaired {counts['repaired']}, refused without naming the tampered file "
        f"{counts['unnamed']}, lost {counts['lost']}"
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "tamper.json"
    out.write_text(json.dumps({"counts": counts, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if counts["lost"] or counts["unnamed"] else 0


if __name__ == "__main__":
    sys.exit(main())
