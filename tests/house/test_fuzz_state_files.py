"""Every state and results file, damaged every way: one line naming the file, never a traceback, never unsafe.

A real lane (production local-v27, the kept pair local-v26, process runtime)
and a scored card. Each file type the tool keeps (the promotion ledger, the
production witness, the state key, instance records and their folder, boot
reports, process records, the boot-hash ledger, smoke reports, the card's
registration, manifests, verdicts, window and boot receipts, the signing key and
its allowed signers; 17 types) is damaged five ways: random bytes, truncated, zero
length, valid JSON of the wrong type, a directory in its place. After each
damage the commands that read it run (status, status --json, verify, history,
down --all, rollback --dry-run, prune --dry-run, promote without a verdict,
card score). Counted:

- tracebacks: a command that raised instead of answering (must be 0);
- unsafe outcomes: production or the pair stopped or removed, or `status`
  exiting 0 with "production: none recorded" (must be 0);
- unnamed failures: a failing command whose message does not name the file
  or its folder (must be 0).

The counts are printed (`-s`) as `fuzz: N files x M corruptions = K cases, ...`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import lane, paths
from gb300lane import promote as pm
from gb300lane.cli.main import app

from fakes import cards as fakes
from production import write_recipes

DATA = Path(__file__).parents[1] / "data" / "cards"

CORRUPTIONS: dict[str, Callable[[Path, bytes], None]] = {
    "random bytes": lambda p, old: p.write_bytes(os.urandom(max(64, min(len(old), 4096)))),
    "truncated": lambda p, old: p.write_bytes(old[: max(1, len(old) // 2)]),
    "zero length": lambda p, old: p.write_bytes(b""),
    "wrong type": lambda p, old: p.write_bytes(b'["not", "the", "expected", "type"]\n'),
    "directory": lambda p, old: (p.mkdir(), (p / "x").write_text("x")),
}


@pytest.fixture(scope="module")
def lane_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    base = tmp_path_factory.mktemp("fuzz")
    saved = dict(os.environ)
    env = dict(
        GB300LANE_STATE_DIR=str(base / "state"), GB300LANE_RESULTS_DIR=str(base / "results"),
        XDG_CONFIG_HOME=str(base / "config"), VLLM_CACHE_ROOT=str(base / "vllm-cache"),
        GB300LANE_RECIPES_DIR=str(base / "recipes"), COLUMNS="400",
    )  # fmt: skip
    os.environ.update(env)
    os.environ.pop("GB300LANE_LANE_OPS", None)
    try:
        write_recipes(base / "recipes")
        assert pm.promote("local-v26", force=True, reason="first").ok
        assert pm.promote("local-v27", force=True, reason="second").ok
        from gb300lane.cards import load_card, register, run_card, score

        card, p = load_card(DATA / "mini.yaml")
        rec = register(card, p.read_text())
        fl = fakes.FakeLane(
            card, {"A": 1.0, "B": 1.03, "A2": 1.025}, jitter={"A": {1: 0.0, 2: 0.03}, "A2": {1: 0.03, 2: 0.0}}
        )
        run_card(rec, ops=fl.ops())
        score(rec)
        yield {"rec": rec, "card": card.name, "candidate": card.candidate.recipe, "env": env}
    finally:
        lane.down(all=True, yes=True)
        os.environ.clear()
        os.environ.update(saved)


def _targets(st: dict[str, object]) -> dict[str, Path]:
    state, rec = paths.state_root(), st["rec"]
    root = rec.root  # type: ignore[attr-defined]
    prod = pm.current_production()
    assert prod is not None and prod.instance and prod.rollback_pair
    newest = max((state / "lane" / "boots").glob(f"{prod.instance}-*.json"), key=lambda p: p.stat().st_mtime)
    smoke = sorted((state / "smoke").glob("*/*-report.json"))[-1]
    try:
        from gb300lane import signing

        signers, key = signing.allowed_signers_path(), signing.signing_key_path()
    except ImportError:  # a tool without signatures: measured over the files it has
        signers = key = Path(os.environ["XDG_CONFIG_HOME"]) / "none"
    found = {
        "promotion ledger": state / "promote.sqlite3",
        "production witness": state / "production.json",
        "state key": state / "state.key",
        "production's instance record": state / "lane" / "instances" / f"{prod.instance}.json",
        "the pair's instance record": state / "lane" / "instances" / f"{prod.rollback_pair.instance}.json",
        "instance records folder": state / "lane" / "instances",
        "production's newest boot report": newest,
        "production's process record": state / "runtime" / "process" / f"{prod.instance}-main.json",
        "boot-hash ledger": state / "lane" / "hash-ledger.json",
        "smoke report": smoke,
        "card registration": root / "registration.json",
        "card manifest": root / "manifest.json",
        "card verdict": root / "verdicts" / "verdict-1.json",
        "card window receipt": next(iter(sorted(root.glob("arms/B/attempt-*/windows/*.json")))),
        "card arm boot report": next(iter(sorted(root.glob("arms/B/attempt-*/boot.json")))),
        "allowed signers": signers,
        "signing key": key,
    }
    return {what: p for what, p in found.items() if p.exists()}


def _commands(st: dict[str, object]) -> list[list[str]]:
    root = str(st["rec"].root)  # type: ignore[attr-defined]
    return [
        ["status"],
        ["status", "--json"],
        ["verify"],
        ["history"],
        ["down", "--all"],
        ["rollback", "--dry-run"],
        ["prune", "--dry-run"],
        ["promote", str(st["candidate"])],
        ["card", "score", root],
        ["verify", "--card", root],
    ]


def _names(out: str, path: Path) -> bool:
    """The message names the damaged file (absolute, or as its receipts folder lists it) or the folder it is in."""
    return any(text in out for text in (str(path), f"{path.parent.name}/{path.name}", str(path.parent)))


def _restore(path: Path, backup: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if backup.is_dir():
        shutil.copytree(backup, path)
    else:
        shutil.copy2(backup, path)
    q = paths.state_root() / "lane" / "quarantine"
    if q.is_dir():
        shutil.rmtree(q)


@pytest.mark.slow
def test_every_state_and_results_file_damaged_every_way(
    lane_state: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in lane_state["env"].items():  # type: ignore[attr-defined]
        monkeypatch.setenv(key, value)
    targets = _targets(lane_state)
    prod = pm.current_production()
    assert prod is not None and prod.rollback_pair is not None
    want = {prod.instance: "running", prod.rollback_pair.instance: "stopped"}
    runner = CliRunner()
    tracebacks, unsafe, unnamed, cases = [], [], [], 0
    # What each command answers on the intact lane: a failure it gives anyway (a verdict already recorded) is
    # not about the damage.
    baseline = {
        " ".join(a): " ".join(runner.invoke(app, a, env={"COLUMNS": "400"}).output.split())
        for a in _commands(lane_state)
    }
    for what, path in targets.items():
        backup = tmp_path / "backup" / what.replace(" ", "_").replace("'", "")
        backup.parent.mkdir(exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, backup)
        else:
            shutil.copy2(path, backup)
        old = b"" if path.is_dir() else path.read_bytes()
        for how, damage in CORRUPTIONS.items():
            if path.is_dir() and how == "directory":
                continue
            cases += 1
            if path.is_dir():
                shutil.rmtree(path)
                path.write_bytes(
                    os.urandom(64)
                    if how == "random bytes"
                    else b""
                    if how == "zero length"
                    else b'["wrong type"]'
                    if how == "wrong type"
                    else b"trunc"
                )
            else:
                if how == "directory":
                    path.unlink()
                else:
                    os.chmod(path, 0o600)
                damage(path, old)
            for args in _commands(lane_state):
                got = runner.invoke(app, args, env={"COLUMNS": "400"})
                out = " ".join(got.output.split())
                if (got.exception is not None and not isinstance(got.exception, SystemExit)) or "Traceback" in out:
                    tracebacks.append(
                        f"{what} / {how} / {' '.join(args)}: {type(got.exception).__name__}: {got.exception}"
                    )
                elif got.exit_code != 0 and out != baseline[" ".join(args)] and not _names(out, path):
                    unnamed.append(f"{what} / {how} / {' '.join(args)}: {out[:300]}")
                if args == ["status"] and got.exit_code == 0 and "production: none recorded" in out:
                    unsafe.append(f"{what} / {how}: status says none recorded")
            _restore(path, backup)
            states = {i.name: i.state for i in lane.list_instances()}
            if {k: states.get(k) for k in want} != want:
                unsafe.append(f"{what} / {how}: production or the pair changed: {states}")
                break
    print(
        f"\nfuzz: {len(targets)} files x {len(CORRUPTIONS)} corruptions = {cases} cases "
        f"({cases * len(_commands(lane_state))} commands); tracebacks {len(tracebacks)}, "
        f"unsafe outcomes {len(unsafe)}, unnamed failures {len(unnamed)}"
    )
    assert len(targets) == 17, sorted(targets)
    assert not tracebacks, "\n".join(tracebacks)
    assert not unsafe, "\n".join(unsafe)
    assert not unnamed, "\n".join(unnamed)
