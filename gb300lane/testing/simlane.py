"""A lane simulated in one JSON file: instances, ports, boots, smoke outcomes and verdicts.

A test double: it implements `gb300lane.promote.PromotionOps` the way the real runtimes behave where promotion cares:
a boot on a port something already listens on fails, a stopped instance is
kept until removed, a kept instance restarts on its own port. Because its
state is a file, a CLI process can be killed mid-transition (`kill -9`) and the
next process sees the lane exactly as it was left. Outcomes are set per
recipe (`fail_boot`, `fail_smoke`, `fail_start`), so every path of the state
machine can be driven. A boot lasts `boot_seconds`, or with `hold` until a test
calls `release(instance)`: a test that must act while an instance boots does so
whatever the machine's load. Select it with `GB300LANE_LANE_OPS=sim:<file>`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from gb300lane.errors import BootError, CardError, RecipeError, StateError
from gb300lane.fsio import atomic_write, dumps_json, sha256_bytes
from gb300lane.locks import FileLock
from gb300lane.promote.models import BootInfo, KeptCandidate, SmokeInfo, VerdictInfo
from gb300lane.promote.ops import InstanceFact

LANE_NAME = "lane"


class SimLane:
    """`PromotionOps` over a JSON file; every call reads, changes and writes it under a file lock."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise StateError(f"{self.path}: no simulated lane file; create one with SimLane.create(path, recipes)")

    @classmethod
    def create(
        cls,
        path: Path,
        recipes: Mapping[str, Mapping[str, object]],
        verdicts: Mapping[str, Mapping[str, object]] | None = None,
    ) -> SimLane:
        """A new simulated lane. `recipes`: name -> {port, fail_boot, fail_smoke, fail_start, boot_seconds, hold, refuse
        (the preflight's refusals, a list)}."""
        state = {
            "recipes": {name: {"port": 30106, **cfg} for name, cfg in recipes.items()},
            "verdicts": verdicts or {},
            "instances": {},
            "ops": [],
        }
        atomic_write(path, dumps_json(state))
        return cls(path)

    @contextmanager
    def _state(self, write: bool = True) -> Iterator[dict[str, Any]]:
        with FileLock(self.path.with_name(self.path.name + ".lock")):
            state = json.loads(self.path.read_text())
            yield state
            if write:
                atomic_write(self.path, dumps_json(state))

    def set_recipe(self, name: str, **cfg: object) -> None:
        """Change a simulated recipe's outcomes (e.g. fail_smoke=True) between commands."""
        with self._state() as st:
            st["recipes"].setdefault(name, {"port": 30106}).update(cfg)

    def set_verdict(
        self,
        recipe: str,
        verdict: str,
        reference: str,
        *,
        rescored: bool = False,
        receipts: str | None = None,
        evidence: tuple[str, ...] = (),
        binding: str | None = None,
        question: str | None = None,
    ) -> None:
        """A recipe's newest verdict; `evidence` (the log's breaks) and `binding` (the recipe changed since) refuse it."""
        with self._state() as st:
            st["verdicts"][recipe] = {
                "verdict": verdict,
                "reference": reference,
                "rescored": rescored,
                "receipts": receipts,
                "evidence": list(evidence),
                "binding": binding,
                "question": question,
            }

    def set_card(self, card: str, **fields: object) -> None:
        """A card's candidate as its receipts record it (KeptCandidate's fields; `problem` None unless given).

        The lane's side is the file's: an instance that is gone or not on the card's port is seen as such.
        """
        with self._state() as st:
            st.setdefault("cards", {})[card] = {"card": card, "problem": None, **fields}

    def operations(self) -> list[list[str]]:
        """Every side effect performed, in order: [op, instance]."""
        with self._state(write=False) as st:
            return [list(x) for x in st["ops"]]

    def running_on(self, port: int) -> list[str]:
        with self._state(write=False) as st:
            return sorted(n for n, i in st["instances"].items() if i["running"] and i["port"] == port)

    # -- PromotionOps -----------------------------------------------------------------------------

    def _cfg(self, st: dict[str, Any], recipe: str) -> dict[str, Any]:
        if recipe not in st["recipes"]:
            raise RecipeError(
                f"{self.path}: recipes.{recipe} does not exist; known: {', '.join(sorted(st['recipes']))}"
            )
        found: dict[str, Any] = st["recipes"][recipe]
        return found

    def describe(self, recipe: str) -> tuple[str, int]:
        with self._state(write=False) as st:
            cfg = self._cfg(st, recipe)
            return sha256_bytes(f"{recipe}:{cfg.get('image', '')}")[:16], int(cfg["port"])

    def plan_instance(self, recipe: str, tag: str) -> str:
        return f"{LANE_NAME}-{tag}"

    def boot(self, recipe: str, *, port: int, tag: str, baseline: str | None = None) -> BootInfo:
        name = self.plan_instance(recipe, tag)
        fp, _ = self.describe(recipe)
        with self._state() as st:
            cfg = self._cfg(st, recipe)
            if name in st["instances"]:
                raise BootError(f"instance {name} already exists; remove it or boot under another arm")
            st["ops"].append(["boot", name])
            holders = [n for n, i in st["instances"].items() if i["running"] and i["port"] == port]
            if holders:
                raise BootError(f"{name}: port {port} is already bound by {', '.join(holders)}")
            failed = bool(cfg.get("fail_boot"))
            secs = float(cfg.get("boot_seconds", 0.0))
            # A failed boot leaves a created-but-dead container behind, as a real runtime does; a running one
            # answers only once its boot is over (a process killed meanwhile leaves it booting).
            st["instances"][name] = {
                "recipe": recipe,
                "port": port,
                "running": not failed,
                "fingerprint": fp,
                "ready_at": None if cfg.get("hold") else time.time() + secs,
            }
        if failed:
            raise BootError(f"{name}: engine exited during boot (simulated)", log_tail="simulated boot failure\n")
        self._until_ready(name)
        return BootInfo(
            instance=name, endpoint=f"http://127.0.0.1:{port}", fingerprint=fp, boot_seconds=secs, engine_seconds=secs
        )

    def stop_keep(self, instance: str) -> None:
        with self._state() as st:
            if instance in st["instances"]:
                st["ops"].append(["stop", instance])
                st["instances"][instance]["running"] = False

    def start_kept(self, instance: str) -> BootInfo:
        with self._state() as st:
            inst = st["instances"].get(instance)
            if inst is None:
                raise BootError(f"{instance}: no kept instance of that name; it was removed")
            cfg = self._cfg(st, inst["recipe"])
            st["ops"].append(["start", instance])
            holders = [n for n, i in st["instances"].items() if i["running"] and i["port"] == inst["port"]]
            if holders and holders != [instance]:
                raise BootError(f"{instance}: port {inst['port']} is already bound by {', '.join(holders)}")
            if cfg.get("fail_start"):
                raise BootError(f"{instance}: engine exited during restart (simulated)")
            secs = float(cfg.get("boot_seconds", 0.0))
            inst["running"] = True
            inst["ready_at"] = None if cfg.get("hold") else time.time() + secs
        self._until_ready(instance)
        return BootInfo(
            instance=instance,
            endpoint=f"http://127.0.0.1:{inst['port']}",
            fingerprint=inst["fingerprint"],
            boot_seconds=secs,
            engine_seconds=secs,
        )

    def await_ready(self, instance: str, *, progress: Callable[[str], None] | None = None) -> BootInfo:
        with self._state() as st:
            inst = st["instances"].get(instance)
            if inst is None or not inst["running"]:
                raise BootError(f"{instance}: not running; start it again instead of waiting for it")
            st["ops"].append(["await", instance])
            cfg = self._cfg(st, inst["recipe"])
        ready_at = inst.get("ready_at", 0.0)
        if ready_at is None or ready_at > time.time():
            if progress is not None:
                to_go = "held until released" if ready_at is None else f"{ready_at - time.time():.1f} s to go"
                progress(f"waiting for {instance} to become ready: {to_go}")
            self._until_ready(instance)
        secs = float(cfg.get("boot_seconds", 0.0))
        return BootInfo(
            instance=instance,
            endpoint=f"http://127.0.0.1:{inst['port']}",
            fingerprint=inst["fingerprint"],
            boot_seconds=secs,
            engine_seconds=secs,
        )

    def release(self, instance: str) -> None:
        """A held boot of `instance` is over: it answers from now on."""
        with self._state() as st:
            st["instances"][instance]["ready_at"] = time.time()

    def _until_ready(self, instance: str) -> None:
        """Wait until the instance's boot is over (read from the file, so another process may release it)."""
        while True:
            with self._state(write=False) as st:
                inst = st["instances"].get(instance)
                ready_at = None if inst is None else inst.get("ready_at", 0.0)
            if inst is None or (ready_at is not None and ready_at <= time.time()):
                return
            time.sleep(min(0.05, ready_at - time.time()) if ready_at is not None else 0.05)

    def remove(self, instance: str) -> None:
        with self._state() as st:
            if st["instances"].pop(instance, None) is not None:
                st["ops"].append(["remove", instance])

    def instances(self) -> list[InstanceFact]:
        with self._state(write=False) as st:
            return [
                InstanceFact(
                    name=n,
                    recipe=i["recipe"],
                    running=i["running"],
                    port=i["port"],
                    endpoint=f"http://127.0.0.1:{i['port']}",
                )
                for n, i in sorted(st["instances"].items())
            ]

    def smoke(self, recipe: str, endpoint: str) -> SmokeInfo:
        with self._state() as st:
            cfg = self._cfg(st, recipe)
            port = int(endpoint.rsplit(":", 1)[-1])
            serving = [i for i in st["instances"].values() if i["running"] and i["port"] == port]
            st["ops"].append(["smoke", recipe])
        if not serving or serving[0]["recipe"] != recipe:
            return SmokeInfo(passed=False, summary=f"nothing of {recipe} answers on {endpoint}", seconds=0.0)
        ready_at = serving[0].get("ready_at", 0.0)
        if ready_at is None or time.time() < float(ready_at):
            return SmokeInfo(passed=False, summary=f"{endpoint} not ready (503); wait for gb300lane up", seconds=0.0)
        if cfg.get("fail_smoke"):
            return SmokeInfo(passed=False, summary="failing gates: parity-t0 (simulated)", seconds=0.0)
        return SmokeInfo(passed=True, summary="all 2 gates passed", seconds=0.0)

    def start_problem(self, instance: str) -> str | None:
        known = {f.name for f in self.instances()}
        return None if instance in known else "is not on the simulated lane"

    def production_custody(self) -> str | None:
        return None  # a simulated lane has no receipts, boot reports or recipes of its own to verify

    def verdict(self, recipe: str) -> VerdictInfo | None:
        with self._state(write=False) as st:
            v = st["verdicts"].get(recipe)
        if v is None:
            return None
        evidence, binding = tuple(v.get("evidence") or ()), v.get("binding")
        return VerdictInfo(
            passed=v["verdict"] == "PASS" and not evidence and binding is None,
            verdict=v["verdict"],
            reference=v["reference"],
            rescored=bool(v.get("rescored")),
            receipts=v.get("receipts"),
            evidence=evidence,
            binding=binding,
            question=v.get("question"),
        )

    def preflight(self, recipe: str, *, port: int, production: str | None) -> list[str]:
        """What the recipe's `refuse` outcome says (a list of refusals a boot would meet before any engine)."""
        with self._state(write=False) as st:
            cfg = self._cfg(st, recipe)
        return [str(x) for x in cfg.get("refuse") or ()]

    def recipe_content(self, recipe: str) -> dict[str, JsonValue] | None:
        return None  # a simulated recipe has no file

    def kept_candidate(self, card: str) -> KeptCandidate:
        with self._state(write=False) as st:
            fields = st.get("cards", {}).get(card)
            if fields is None:
                raise CardError(f"card {card}: no registered receipts; run `gb300lane card register {card}` first")
            kept = st["instances"].get(fields.get("instance"))
        problem = fields.get("problem")
        if problem is None and fields.get("instance") is not None and kept is None:
            problem = f"its kept candidate {fields['instance']} is no longer on the lane (removed since)"
        return KeptCandidate.model_validate({**fields, "problem": problem})

    def port_free(self, port: int) -> bool:
        return not self.running_on(port)
