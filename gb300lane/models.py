"""The base every value model in gb300lane derives from: frozen, and strict about keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    """A value object: immutable once built, and an unknown key is an error, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
