"""Whether a card's arms run on the embedded engine, and the fingerprint of what decides an in-process run.

The in-process fast path (`instrument.simulate`) drives only the embedded engine; a boot study records the engine's
fingerprint with what it measured (`cards.record.studies`).
"""

from __future__ import annotations

from gb300lane.cards.schema import Card


def engine_fingerprint(card: Card) -> str:
    """sha256 over what decides a fast-path run's numbers: the engine's and the verifier's files, and the
    card's recipes as loaded. Two calibrations with the same card hash, seed and fingerprint are the same run."""
    import hashlib
    import json
    from pathlib import Path

    import gb300lane.engine as engine_pkg
    import gb300lane.spec as spec_pkg
    from gb300lane.recipes import load_recipe

    h = hashlib.sha256()
    for pkg in (engine_pkg, spec_pkg):
        root = Path(str(pkg.__file__)).parent
        for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(f"{pkg.__name__}/{f.relative_to(root).as_posix()}\0".encode())
            h.update(f.read_bytes())
    for name in sorted({a.recipe for a in card.arms}):
        h.update(json.dumps(load_recipe(name).model_dump(mode="json"), sort_keys=True).encode())
    return h.hexdigest()


def runs_embedded(card: Card) -> bool:
    """Whether every arm of the card runs on the embedded engine (the in-process fast path can drive it)."""
    from gb300lane.recipes import load_recipe

    return all(load_recipe(a.recipe).engine == "embedded" for a in card.arms)


def check_embedded(card: Card) -> None:
    """Refuse a card whose arms do not all run on the embedded engine (the fast path drives only that)."""
    from gb300lane.errors import CardError
    from gb300lane.recipes import load_recipe

    others = sorted({a.recipe for a in card.arms if load_recipe(a.recipe).engine != "embedded"})
    if others:
        raise CardError(
            f"card {card.name}: recipes {', '.join(others)} do not run on the embedded engine; "
            "calibration drives the embedded engine in process: calibrate the local- card instead"
        )


__all__ = ["check_embedded", "engine_fingerprint", "runs_embedded"]
