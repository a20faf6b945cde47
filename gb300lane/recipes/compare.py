"""The autotune fingerprint of a recipe, its whole resolved content, and the key-by-key diff of two recipes.

The fingerprint covers exactly the image's `hash_inputs`, so it predicts
whether a boot can reuse the compile/autotune cache of another recipe: the
write-up booted v26 -> v27 and v27 -> k9 as hash hits because neither
`rejection_sample_method` nor `num_speculative_tokens` is a hash input there.

The content (`content_values`, `content_hash`) covers every key of the resolved
recipe (`extends` applied) but its name and description, and but keys at their schema default (so a schema that
gains a key does not change what earlier registrations froze): everything that reaches
the engine's argv and env, the volumes, the smoke gates, `speculative.*` and
`extra_args`. It is what a card's registration freezes for each arm and what
promotion compares with the recipe as it is now (`diff_values` names the keys).
A secret value is kept as its keyed digest (`gb300lane.redact`), never in clear.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import Field, JsonValue

from gb300lane.models import FrozenModel
from gb300lane.recipes.loader import flatten, get_key
from gb300lane.recipes.schema import Recipe
from gb300lane.redact import digest, is_secret, secret_name

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


def _leaves(recipe: Recipe) -> dict[str, JsonValue]:
    # A key at its schema default is left out: a recipe means the same whether it spells a default or not, and a
    # newer tool whose schema gains a key (at a default that keeps today's behaviour) must not change the content
    # every earlier registration and promotion froze.
    flat = flatten(recipe.model_dump(mode="json", exclude_defaults=True))
    return {k: v for k, v in flat.items() if k.split(".")[0] not in IDENTITY_KEYS}  # type: ignore[misc]


def _digested(key: str, value: JsonValue) -> JsonValue:
    """A leaf with its secrets as keyed digests: a secret string, or the secret items of an argv-like list."""
    if isinstance(value, str):
        return digest(value) if is_secret(key.rsplit(".", 1)[-1], value) else value
    if isinstance(value, list):
        out: list[JsonValue] = []
        hide_next = False
        for item in value:
            if isinstance(item, str) and (hide_next or is_secret("", item)):
                out.append(digest(item))
                hide_next = False
                continue
            hide_next = False
            if isinstance(item, str) and item.startswith("--"):
                name, eq, val = item[2:].partition("=")
                if secret_name(name.replace("-", "_")):
                    if eq:
                        out.append(f"--{name}={digest(val)}")
                        continue
                    hide_next = True
            out.append(item)
        return out
    return value


def content_values(recipe: Recipe) -> dict[str, JsonValue]:
    """Every leaf of the resolved recipe but its name and description, secrets as keyed digests."""
    return {k: _digested(k, v) for k, v in _leaves(recipe).items()}


def content_hash(values: dict[str, JsonValue]) -> str:
    """sha256 (64 hex chars) of the canonical JSON of `content_values`."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def diff_values(
    a: dict[str, JsonValue], b: dict[str, JsonValue], hash_inputs: tuple[str, ...] | list[str] = ()
) -> tuple[KeyChange, ...]:
    """Changed leaf keys between two flattened recipes (lists compared whole), sorted by key."""
    changes = []
    for key in sorted(set(a) | set(b)):
        old, new = a.get(key), b.get(key)
        if old != new:
            changes.append(KeyChange(key=key, old=old, new=new, hash_input=is_hash_input(key, hash_inputs)))
    return tuple(changes)


def diff_recipes(a: Recipe, b: Recipe) -> RecipeDiff:
    """Changed leaf keys (lists compared whole), each marked as hash input or not."""
    hash_inputs = tuple(dict.fromkeys([*a.image.hash_inputs, *b.image.hash_inputs]))
    changes = diff_values(_leaves(a), _leaves(b), hash_inputs)
    fa, fb = fingerprint(a), fingerprint(b)
    return RecipeDiff(
        a=a.name,
        b=b.name,
        changes=changes,
        fingerprint_a=fa,
        fingerprint_b=fb,
        hash_changed=fa != fb,
        hash_keys=tuple(c.key for c in changes if c.hash_input),
    )
