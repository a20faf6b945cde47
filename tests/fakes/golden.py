"""A golden card run: seeded cards end to end on the embedded engine in process, and the sha256 of every receipt.

Each arm's windows run on the engine core in this process (`instrument.simulate.InProcessLane`, each arm its own
pinned boot seed); the boot reports are the synthetic ones of `fakes.cards`. Register, run, score, rescore
and report go through the library as `card run` does, so every receipt the record writes (registration, attempt,
boot, window, foreign, done, looks, verdicts, manifests, report, figures, page) is hashed.

The wall clock is the one input that differs between two runs: every `datetime` a gb300lane module holds is
replaced by one frozen at `FROZEN`, so the timestamps in the receipts (`registered_at`, `started_at`,
`finished_at`, `written_at`, the run directory's date) are the same on every run and nothing is left out of
the hashes.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gb300lane.bench.models import CellResult, RequestRecord, WindowResult
from gb300lane.bench.stats import Percentiles
from gb300lane.lane.report import BootReport

from fakes.cards import boot_report
from fakes.sshkey import write_key

DATA = Path(__file__).resolve().parent.parent / "data" / "cards"
#: Each golden card and the gate change its second verdict (a re-score) makes.
CARDS = {"micro.yaml": "tokens-per-step.min_ratio=0.4", "sequential.yaml": "tokens-per-step.alpha=0.05"}
BOOT_SEEDS = {"A": 7, "B": 8, "A2": 9}
FROZEN = _dt.datetime(2026, 11, 1, 12, 0, 0, tzinfo=_dt.UTC)


class _FrozenDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> _FrozenDatetime:  # type: ignore[override]
        t = FROZEN if tz is not None else FROZEN.replace(tzinfo=None)
        return cls(t.year, t.month, t.day, t.hour, t.minute, t.second, tzinfo=t.tzinfo)

    @classmethod
    def utcnow(cls) -> _FrozenDatetime:  # type: ignore[override]
        return cls.now()


@contextmanager
def frozen_clock() -> Iterator[None]:
    """Every `datetime` class a loaded gb300lane module holds reads `FROZEN` for the length of the block, and
    the host facts a registration records (host name, platform, CPU count, Python) are fixed ones."""
    saved: list[tuple[Any, Any]] = []
    host = (socket.gethostname, platform.platform, os.cpu_count, sys.version)
    socket.gethostname = lambda: "golden-host"  # type: ignore[assignment]
    platform.platform = lambda *a, **k: "golden-platform"  # type: ignore[assignment]
    os.cpu_count = lambda: 2
    sys.version = "3.0.0 (golden, Nov  1 2026, 12:00:00) [golden]"
    for name, mod in list(sys.modules.items()):
        if (name == "gb300lane" or name.startswith("gb300lane.")) and getattr(mod, "datetime", None) is _dt.datetime:
            saved.append((mod, mod.datetime))
            mod.datetime = _FrozenDatetime
    try:
        yield
    finally:
        for mod, old in saved:
            mod.datetime = old
        socket.gethostname, platform.platform, os.cpu_count, sys.version = host  # type: ignore[assignment]


def environment() -> str:
    """What else the receipts' bytes depend on: the numerics and the figures' libraries."""
    import matplotlib
    import numpy
    import pydantic

    return (
        f"python {sys.version_info.major}.{sys.version_info.minor} {platform.machine()} ({_simd()}), "
        f"numpy {numpy.__version__}, matplotlib {matplotlib.__version__}, pydantic {pydantic.__version__}"
    )


def _simd() -> str:
    """The SIMD levels numpy dispatches to on this CPU: its float kernels (exp, sums) round differently on an
    AVX-512 host than on an AVX2 one, so the receipts' bytes are pinned per level."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:
        return "simd unknown"
    return " ".join(k for k in __cpu_dispatch__ if __cpu_features__.get(k)) or "baseline"


def _window_result(raw: WindowResult, *, recipe: str, fingerprint: str | None, seed_base: int | None) -> WindowResult:
    """The in-process window's records and cells as the bench's result file (the fields the client measures
    on the wall clock are zero: the engine's modelled clock is the only one)."""
    forced = int(raw.window["forced_tokens"])
    records = []
    for r in raw.records:
        records.append(
            RequestRecord(
                transcript_id=r.transcript_id,
                cls=r.cls,
                round=r.round,
                concurrency=r.concurrency,
                seed=seed_base or 0,
                kind="completion",
                worker=0,
                start_s=0.0,
                ok=r.ok,
                error=None,
                http_status=200,
                expected_tokens=forced,
                output_tokens=forced,
                prompt_tokens=None,
                chunks=0,
                token_attribution="usage",
                ttft_s=None,
                e2e_s=None,
                done_s=None,
                token_times_s=[],
                engine=None,
                clock="modelled",
                decode_tok_s=r.decode_tok_s,
                tpot_s=None,
                text=r.text,
                spec_decode=r.spec_decode,
            )
        )
    empty = Percentiles.from_values([])
    cells = []
    for c in raw.cells:
        cells.append(
            CellResult(
                cls=c.cls,
                concurrency=c.concurrency,
                round=c.round,
                valid=c.valid,
                invalid_reasons=[],
                notes=[],
                requests=int(raw.window["transcripts_per_class"]),
                errors=0,
                expected_tokens=0,
                output_tokens=0,
                clock="modelled",
                span_s=None,
                wall_span_s=0.0,
                decode_tok_s=c.decode_tok_s,
                decode_tok_s_per_stream=empty,
                ttft_s=empty,
                tpot_s=empty,
                itl_s=empty,
                generation_tokens_delta=None,
                spec=c.spec,
                spec_absent_reason=None,
                counters_delta=None,
            )
        )
    return WindowResult(
        tool_version="golden",
        python="3",
        platform="golden",
        created_at=FROZEN.isoformat(),
        endpoint="http://127.0.0.1:1",
        model="m",
        server_version=None,
        recipe=recipe,
        fingerprint=fingerprint,
        window=raw.window,
        valid=all(c.valid for c in cells),
        cells=cells,
        records=records,
    )


class InProcessArmOps:
    """A card's arms on the embedded engine core in this process: one engine per boot, its own boot seed."""

    def __init__(self, card: Any) -> None:
        from gb300lane.instrument.simulate import InProcessLane

        self.card = card
        self.lane = InProcessLane()
        self._engines: dict[str, Any] = {}

    @contextmanager
    def instance(self, recipe: str, *, arm: str, check_keys: Any = None, **kw: Any) -> Iterator[BootReport]:
        rep = boot_report(arm, recipe, rejection="block" if arm == self.card.candidate.name else "standard")
        self._engines[rep.endpoint] = self.lane.boot(recipe, BOOT_SEEDS[arm])
        yield rep

    def discard(self, recipe: str, arm: str) -> None:
        pass

    def foreign(self, endpoint: str, sent: float) -> Any:
        from gb300lane.cards import ForeignCount

        return ForeignCount(foreign_clients=0, check={"sent": sent})

    def run_window(
        self, endpoint: str, window: Any, *, model: str, recipe: str, fingerprint: str | None
    ) -> WindowResult:
        raw = self.lane.run_window(self._engines[endpoint], window)
        return _window_result(raw, recipe=recipe, fingerprint=fingerprint, seed_base=window.seed_base)


def run_golden(results: Path) -> dict[str, str]:
    """Run the golden cards into `results` (which must not exist yet) and return {relative path: sha256}."""
    from gb300lane import signing
    from gb300lane.cards import load_card, register, render_report, rescore, run_card, score

    assert not results.exists(), results
    config, state = results.parent / f"{results.name}-config", results.parent / f"{results.name}-state"
    # the evidence log in the state directory remembers earlier runs: a golden run starts with none
    assert not config.exists() and not state.exists(), (config, state)
    env = {
        "GB300LANE_RESULTS_DIR": str(results),
        "GB300LANE_STATE_DIR": str(state),
        "XDG_CONFIG_HOME": str(config),
        "GB300LANE_SIGNING_KEY": None,
        "GB300LANE_ALLOWED_SIGNERS": None,
    }
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        # The manifests' signatures are the same on every run only with the same key: a fixed one.
        key = write_key(signing.signing_key_path())
        pub = Path(f"{key}.pub").read_text().split()
        signing.allowed_signers_path().write_text(
            f'{signing.PRINCIPAL} namespaces="{signing.NAMESPACE}" {pub[0]} {pub[1]}\n'
        )
        with frozen_clock():
            for name, change in CARDS.items():
                card, path = load_card(DATA / name)
                rec = register(card, path.read_text())
                run_card(rec, ops=InProcessArmOps(card))  # type: ignore[arg-type]
                score(rec)
                render_report(rec)
                rescore(rec, "a looser bar, to write a second verdict", [change])
                render_report(rec)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {
        p.relative_to(results).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(results.rglob("*"))
        if p.is_file()
    }


#: The pinned hashes, one file per environment (tests/cards/test_golden.py).
PINS = Path(__file__).resolve().parents[1] / "data" / "golden-card"


def pin_for() -> Path:
    """This environment's pinned hashes: named for the SIMD levels numpy dispatches to."""
    return PINS / f"{_simd().replace(' ', '-')}.sha256"


def main(argv: list[str]) -> int:
    """`python scripts/card_golden.py DIR [HASHES | --pin]`: run into DIR, print `sha256  path` lines (and write
    HASHES, or with --pin this environment's file under tests/data/golden-card/)."""
    hashes = run_golden(Path(argv[0]))
    text = f"# {environment()}\n" + "".join(f"{h}  {p}\n" for p, h in hashes.items())
    sys.stdout.write(text)
    if len(argv) > 1:
        out = pin_for() if argv[1] == "--pin" else Path(argv[1])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0
