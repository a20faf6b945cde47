"""Provenance on the Docker runtime: the image a container runs, by id and repo digest, and a card whose tag moved.

The embedded engine's image is built here and pushed to a local registry (Debian's docker-registry, on a free
loopback port), which gives it a repo digest as a pulled image has one. A recipe pinned to that digest boots
and its report names the digest it runs; a card whose image tag is rebuilt between arm A and arm B is scored,
and its verdict names the one provenance field the arms differ in: `image.id`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from gb300lane.testing.free_ports import free_port

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow, pytest.mark.timeout(900)]

ENGINE = "gb300lane-engine:local"


def _docker(*args: str, timeout: float = 300) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A local registry on a free loopback port (Docker lets 127.0.0.0/8 registries speak plain HTTP)."""
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'blobs'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [shutil.which("docker-registry") or "docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "the registry did not answer in 30 s"
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _gb(*args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "gb300lane", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    if ok:
        assert done.returncode == 0, f"gb300lane {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done


def test_a_digest_pinned_recipe_reports_the_digest_it_runs(recipes: Path, registry: str, tmp_path: Path) -> None:
    from gb300lane.runtime.image import ensure_engine_image

    ensure_engine_image()
    pushed = f"{registry}/gb300lane-engine:local"
    _docker("tag", ENGINE, pushed)
    _docker("push", pushed, timeout=600)
    digest = json.loads(_docker("image", "inspect", pushed))[0]["RepoDigests"]
    ref = next(d for d in digest if d.startswith(f"{registry}/"))
    (recipes / "local-pinned.yaml").write_text(
        f"schema_version: 1\nname: local-pinned\nextends: local-v26\nruntime: docker\n"
        f"description: local-v26 on the engine image pinned by digest\nimage:\n  ref: {ref}\n"
    )
    port = free_port()
    up = json.loads(_gb("up", "local-pinned", "--dark", "--port", str(port), "--json", cwd=tmp_path).stdout)
    image = up["provenance"]["image"]
    assert image["pinned"] == ref.split("@", 1)[1] and image["pin_ok"] is True and ref in image["repo_digests"]
    assert image["id"].startswith("sha256:") and up["provenance"]["engine"]["version"] == "0.33.0"
    check = next(c for c in up["checks"] if c["name"] == "provenance")
    assert check["status"] == "pass" and ref.split("@", 1)[1][:19] in check["summary"]
    _gb("down", "local-pinned", cwd=tmp_path)


class _RebuildBeforeB:
    """The card's arms on the Docker runtime; the engine image's tag is rebuilt (a new image id, the same files)
    just before arm B boots, as a nightly tag moves under a running card."""

    def __init__(self, port: int) -> None:
        from gb300lane.cards.run import LiveArmOps

        self.live = LiveArmOps(port=port)
        self.port = port

    def instance(
        self, recipe: str, *, arm: str, check_keys: object, baseline: str | None, allow_outside_trained_block: bool
    ) -> AbstractContextManager[object]:
        from gb300lane import lane

        if arm == "B":
            ctx = Path(os.environ["GB300LANE_STATE_DIR"]) / "rebuild"
            ctx.mkdir(parents=True, exist_ok=True)
            (ctx / "Dockerfile").write_text(f"FROM {ENGINE}\nLABEL gb300lane.rebuilt={time.time_ns()}\n")
            _docker("build", "-q", "-t", ENGINE, str(ctx))
        return lane.instance(
            recipe,
            keep=True,
            dark=True,
            arm=arm,
            port=self.port,
            runtime="docker",
            check_keys=check_keys,
            baseline=baseline,
            baseline_role="control",
        )  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.live, name)


CARD = """schema_version: 1
name: rebuilt
title: "local-v27 against local-v26 on the engine image, its tag rebuilt before B"
description: "A card whose image tag moves between arms."
arms:
  - {name: A, recipe: local-v26, role: control}
  - {name: B, recipe: local-v27, role: candidate}
  - {name: A2, recipe: local-v26, role: control}
windows:
  - {name: primary, classes: [prose], transcripts_per_class: 4, rounds: 1, concurrency: [1], temperature: 1.0,
     top_p: 1.0, seed_base: 1000, forced_tokens: 16}
primary_window: primary
gates:
  - {id: hash-hit, kind: hash_hit, description: "B and A2 boot as hits", arms: [B, A2]}
  - {id: kv-pool, kind: kv_pool_equal, description: "Same KV pool"}
"""


def test_a_verdict_names_the_image_rebuilt_between_arms(recipes: Path, tmp_path: Path) -> None:
    from gb300lane.cards import load_card, register, run_card, score
    from gb300lane.runtime.image import ensure_engine_image

    ensure_engine_image()
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "rebuilt.yaml").write_text(CARD)
    card, path = load_card(cards / "rebuilt.yaml")
    rec = register(card, path.read_text(), base=tmp_path / "results")
    run_card(rec, ops=_RebuildBeforeB(free_port()))  # type: ignore[arg-type]
    verdict = score(rec)
    fields = {d.field: d.values for d in verdict.provenance_differs}
    # A tag pushed to a registry earlier (the `registry` tests do) also leaves A's image a repo digest that the
    # rebuilt one lacks: the verdict names that too, and nothing else.
    assert "image.id" in fields and set(fields) <= {"image.id", "image.repo_digests"}, fields
    ids = fields["image.id"]
    assert ids["A"] != ids["B"] == ids["A2"]
    assert any(f"provenance differs in {len(fields)} field(s): image.id (" in n for n in verdict.notes), verdict.notes
