"""The instances lane commands must leave alone, as the layer above tells the lane.

The lane knows instances, never roles: which instance is production or the
kept rollback pair is the promotion ledger's knowledge, one layer up. That
layer hands `up` and `down` a `Protected` set; when it cannot say (its ledger
cannot be read) it hands one whose `unknown` says why, and then every
existing instance is protected: the lane fails closed.
"""

from __future__ import annotations

from pydantic import Field

from gb300lane.models import FrozenModel


class Protected(FrozenModel):
    """Instances that must not be stopped, removed or replaced, each with its reason; or why the set is unknown."""

    instances: dict[str, str] = Field(
        default_factory=dict, description="Instance name -> why it is protected, e.g. 'production'."
    )
    unknown: str | None = Field(
        default=None,
        description="Why the protected set could not be read (and what fixes it); every instance is then protected.",
    )

    def why(self, instance: str) -> str | None:
        """Why `instance` is protected, or None when it is not."""
        if self.unknown is not None:
            return f"it may be production or the rollback pair, which cannot be read: {self.unknown}"
        role = self.instances.get(instance)
        return None if role is None else f"it is the lane's {role} in the promotion ledger"


#: Nothing protected: what `--force` asks for, and what code below promotion uses for its own instances.
NOTHING = Protected()
