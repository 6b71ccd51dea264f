"""OpenAI-shaped errors: one exception type the HTTP layer turns into a response."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .protocol import ErrorBody, ErrorDetail

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    499: "client_closed_request",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class APIError(Exception):
    """An error a client should see, with the HTTP status the OpenAI SDKs map to exceptions."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        detail = ErrorDetail(message=self.message, type=self.type, param=self.param, code=self.code)
        return ErrorBody(error=detail).model_dump()


def from_validation_error(exc: ValidationError) -> APIError:
    """First pydantic error as a 400 whose ``param`` names the offending field path."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"] if not _is_union_tag(p)]
    param = _dotted(loc) or None
    msg = err["msg"]
    if param:
        msg = f"Invalid value for '{param}': {msg}"
    return APIError(400, msg, param=param, code="invalid_value")


def _is_union_tag(part: object) -> bool:
    # pydantic inserts discriminator/union member names ("user", "str", "list[...]") in loc
    return isinstance(part, str) and (
        part in {"system", "developer", "user", "assistant", "tool", "function"}
        or "[" in part
        or part
        in {"str", "int", "bool", "float", "NamedToolChoice", "literal['none','auto','required']"}
        or part.startswith(("function-", "literal["))
    )


def _dotted(loc: list[str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out
