"""A card's arms on a shared host: moved to free ports when the recipes' own are taken (and said), or refused
with `--take-lane` named when production serves them.

The recipes here are copies of the shipped ones on ports of their own (`free_port`), so holding "the default
ports" never takes the real defaults (30106/30107) from a test of the default lane running beside these.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import yaml
from cli.test_hints import command_line_problems, flag_problems

from gb300lane import lane
from gb300lane.cards import LiveArmOps, run_card
from gb300lane.cards.cardfile import load_card, read_card_text
from gb300lane.cards.record.receipts import register
from gb300lane.cards.reproduce import arm_port
from gb300lane.cards.run import lane_taken_by_protected
from gb300lane.errors import CardError
from gb300lane.lane import Protected
from gb300lane.lane.records import InstanceRecord, save
from gb300lane.recipes import load_recipe
from gb300lane.testing.free_ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def _pair() -> int:
    """A port P with P+1 free too (the local recipes' sidecar runs beside main)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no free pair of ports")


@pytest.fixture
def own_ports(recipes: Path) -> int:
    """local-v26, local-v27 and local-k9 moved to a free pair of ports P/P+1; returns P."""
    port = _pair()
    for name in ("local-v26", "local-v27", "local-k9"):
        f = recipes / f"{name}.yaml"
        data = yaml.safe_load(f.read_text())
        data.setdefault("lane", {})["port"] = port
        data.setdefault("sidecar", {})["port"] = port + 1
        f.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_recipe("local-v26").lane.port == port and load_recipe("local-v27").sidecar.port == port + 1
    return port


@contextmanager
def held(*ports: int) -> Iterator[None]:
    with ExitStack() as stack:
        for port in ports:
            s = stack.enter_context(socket.socket())
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
        yield


def test_the_arms_keep_their_recipes_ports_when_free(own_ports: int) -> None:
    notes: list[str] = []
    card, _ = load_card("local-br1")
    assert arm_port(card, None, notes.append) is None and not notes
    assert arm_port(card, 4242, notes.append) == 4242 and not notes


@pytest.mark.parametrize("taken", ["main", "sidecar", "both"])
def test_the_arms_move_to_the_nearest_free_lane_and_say_so(own_ports: int, taken: str) -> None:
    ports = {"main": [own_ports], "sidecar": [own_ports + 1], "both": [own_ports, own_ports + 1]}[taken]
    notes: list[str] = []
    card, _ = load_card("local-br1")
    with held(*ports):
        moved = arm_port(card, None, notes.append)
        assert moved is not None and moved > own_ports
        assert not lane.busy_ports([moved, moved + 1]), "the place chosen must be free"
    [note] = notes
    assert all(f"{p} by " in note for p in ports) and f"boot on {moved}, {moved + 1}" in note, note
    assert "--port P" in note and not list(flag_problems(note, ("card", "reproduce"))), note


def test_production_on_the_arms_port_names_take_lane(own_ports: int) -> None:
    card, path = load_card("local-br1")
    recipe = load_recipe("local-v26")
    save(InstanceRecord(
        name="local-v26", lane="local", recipe="local-v26", runtime="process", fingerprint="0" * 16,
        endpoint=f"http://127.0.0.1:{own_ports}", port=own_ports, served_model="m", dark=False, run="r",
        containers=("local-v26-main",), recipe_json=recipe.model_dump(mode="json"), phase="up",
        created_at=time.time(), updated_at=time.time(),
    ))  # fmt: skip
    production = Protected(instances={"local-v26": "production"})
    lane_taken_by_protected(card, production, None)  # nothing listens there: nothing to say
    with held(own_ports):
        lane_taken_by_protected(card, production, own_ports + 10)  # --port: beside production
        with pytest.raises(CardError) as err:
            lane_taken_by_protected(card, production, None)
        message = str(err.value)
        assert "--take-lane" in message and "local-v26, the lane's production" in message, message
        assert not [*command_line_problems(message), *flag_problems(message, ("card", "run"))], message
        # run_card says it before anything is booted or written.
        rec = register(card, read_card_text(path), fresh=True)
        with pytest.raises(CardError, match="--take-lane"):
            run_card(rec, ops=LiveArmOps(production), protected=production)
        assert not list(rec.root.glob("arms/*"))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_reproduce_runs_while_something_holds_the_recipes_ports(own_ports: int, tmp_path: Path) -> None:
    with held(own_ports, own_ports + 1):
        done = subprocess.run(
            [sys.executable, "-m", "gb300lane", "card", "reproduce", "br1", "--part", "2"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=1700,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"ports in use ({own_ports} by " in done.stderr and "instead (pass --port P to choose)" in done.stderr
    assert "verdict 1" in done.stdout, done.stdout[-2000:]
