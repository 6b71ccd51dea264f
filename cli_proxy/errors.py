"""OpenAI-shaped errors: one exception type the HTTP layer turns into a response."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

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


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: Any) -> M:
    """``model`` from request data, or the 400 that names the offending field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def from_validation_error(exc: ValidationError) -> APIError:
    """First pydantic error as a 400 whose ``param`` names the offending field path."""
    err = exc.errors(include_url=False)[0]
    loc = _field_path(err["loc"])
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        # a bad or missing ``role``: pydantic reports it on the message, not on the field
        tag = str((err.get("ctx") or {}).get("discriminator", "")).strip("'\"")
        if tag:
            loc.append(tag)
    param = _dotted(loc) or None
    msg = err["msg"]
    if param:
        msg = f"Invalid value for '{param}': {msg}"
    return APIError(400, msg, param=param, code="invalid_value")


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_MEMBERS = frozenset(
    {"str", "int", "bool", "float", "NamedToolChoice", "TextPart", "ImagePart", "RefusalPart"}
    | {"OtherPart"}
)


def _field_path(loc: tuple[int | str, ...]) -> list[str]:
    """The loc without the union member names pydantic inserts ("user", "str", "list[...]").

    A role name is a tag only right after ``messages[i]``; elsewhere ("function" in
    ``tools[0].function.name``) it is a real field.
    """
    out: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, str):
            if i == 2 and loc[0] == "messages" and isinstance(loc[1], int) and part in _ROLES:
                continue
            if part in _MEMBERS or "[" in part or part.startswith(("function-", "literal[")):
                continue
        out.append(str(part))
    return out


def _dotted(loc: list[str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out
