"""The autotune fingerprint of a recipe and the key-by-key diff of two recipes.

The fingerprint covers exactly the image's `hash_inputs`, so it predicts
whether a boot can reuse the compile/autotune cache of another recipe: the
write-up booted v26 -> v27 and v27 -> k9 as hash hits because neither
`rejection_sample_method` nor `num_speculative_tokens` is a hash input there.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field, JsonValue

from gb300lane.models import FrozenModel
from gb300lane.recipes.loader import flatten, get_key
from gb300lane.recipes.schema import Recipe

#: Keys that name a recipe rather than configure the lane; a diff skips them.
IDENTITY_KEYS = frozenset({"name", "description", "extends"})


def hash_values(recipe: Recipe) -> dict[str, JsonValue]:
    """{hash input key: resolved value}, in the order the image lists them."""
    return {key: get_key(recipe, key) for key in recipe.image.hash_inputs}


def fingerprint(recipe: Recipe) -> str:
    """First 16 hex chars of sha256 over the canonical JSON of the hash-input values."""
    canonical = json.dumps(hash_values(recipe), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def is_hash_input(key: str, hash_inputs: tuple[str, ...] | list[str]) -> bool:
    """A key is a hash input when it, or a mapping above it, is listed."""
    return any(key == h or key.startswith(h + ".") or h.startswith(key + ".") for h in hash_inputs)


class KeyChange(FrozenModel):
    """One changed leaf key."""

    key: str = Field(description="Dotted recipe key.")
    old: JsonValue = Field(description="Value in the first recipe (None when absent).")
    new: JsonValue = Field(description="Value in the second recipe (None when absent).")
    hash_input: bool = Field(description="Whether either recipe's image hashes this key.")


class RecipeDiff(FrozenModel):
    """Every changed key between two recipes, and the boot it predicts."""

    a: str = Field(description="First recipe name.")
    b: str = Field(description="Second recipe name.")
    changes: tuple[KeyChange, ...] = Field(description="Changed leaf keys, sorted by key.")
    fingerprint_a: str = Field(description="Fingerprint of the first recipe.")
    fingerprint_b: str = Field(description="Fingerprint of the second recipe.")
    hash_changed: bool = Field(description="Whether the fingerprints differ (a tuning boot).")
    hash_keys: tuple[str, ...] = Field(description="Changed keys that are hash inputs.")

    @property
    def prediction(self) -> str:
        """The last line of `recipes diff`."""
        if not self.hash_changed:
            return "hash unchanged: expect a hash-hit boot"
        keys = ", ".join(self.hash_keys) or "image.hash_inputs"
        return f"hash changed ({keys}): expect a tuning boot"


def diff_recipes(a: Recipe, b: Recipe) -> RecipeDiff:
    """Changed leaf keys (lists compared whole), each marked as hash input or not."""
    flat_a = {k: v for k, v in flatten(a.model_dump(mode="json")).items() if k.split(".")[0] not in IDENTITY_KEYS}
    flat_b = {k: v for k, v in flatten(b.model_dump(mode="json")).items() if k.split(".")[0] not in IDENTITY_KEYS}
    hash_inputs = tuple(dict.fromkeys([*a.image.hash_inputs, *b.image.hash_inputs]))
    changes = []
    for key in sorted(set(flat_a) | set(flat_b)):
        old, new = flat_a.get(key), flat_b.get(key)
        if old != new:
            changes.append(KeyChange(key=key, old=old, new=new, hash_input=is_hash_input(key, hash_inputs)))
    fa, fb = fingerprint(a), fingerprint(b)
    return RecipeDiff(
        a=a.name,
        b=b.name,
        changes=tuple(changes),
        fingerprint_a=fa,
        fingerprint_b=fb,
        hash_changed=fa != fb,
        hash_keys=tuple(c.key for c in changes if c.hash_input),
    )
