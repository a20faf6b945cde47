"""The error a client caused, as the engine's API answers it (vLLM's `{"error": {...}}` body)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import JsonValue


class ApiError(Exception):
    """An error the client caused; becomes `{"error": {...}}` with `status`."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    def body(self) -> dict[str, JsonValue]:
        kind = {
            400: "BadRequestError",
            404: "NotFoundError",
            408: "RequestTimeoutError",
            413: "RequestEntityTooLarge",
            503: "ServiceUnavailableError",
        }.get(self.status, "Error")
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.status}}
