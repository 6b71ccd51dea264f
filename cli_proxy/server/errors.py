"""Errors at the HTTP edge: ``APIError`` (status, code, message, param, headers: no wire
format yet) and the one mapping from domain failures (``failures.py``) to it, as httpx maps
its transport's exceptions once. Each wire format's table entry renders an ``APIError`` as
its own status and body (``WireFormat.error_status`` / ``error_body``; after a stream's head
``Format.fail``); nothing below this layer names a status."""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from cli_proxy.failures import (
    CallError,
    CliFailed,
    CliMissing,
    CliTimeout,
    FailureKind,
    InvalidRequest,
    NotFound,
    ShuttingDown,
    SlotsBusy,
)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    402: "billing_error",
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


# what each CLI-reported failure is to an OpenAI client: (status, code)
_KIND_STATUS: dict[FailureKind, tuple[int, str]] = {
    # The gateway's own credential (its CLI's API key, refused; its CLI's login, gone): not
    # 401, the client's own key is fine (an SDK user would look for a fault in it; Claude Code
    # pointed at the gateway says "Invalid API key · Fix external API key", docs/real-clis.md);
    # not 502, the CLI did not misbehave. The gateway cannot serve until its operator acts:
    # 503, with ``x-should-retry: false`` (the OpenAI and Anthropic SDKs obey it).
    FailureKind.AUTH: (503, "cli_auth_failed"),
    FailureKind.LOGIN_EXPIRED: (503, "login_expired"),
    FailureKind.RATE_LIMITED: (429, "rate_limit_exceeded"),
    FailureKind.OVERLOADED: (503, "cli_overloaded"),
    FailureKind.CONTEXT_LENGTH: (400, "context_length_exceeded"),
    FailureKind.BAD_REQUEST: (400, "cli_error"),
    FailureKind.TIMEOUT: (504, "cli_timeout"),
    FailureKind.EMPTY_ANSWER: (502, "empty_answer"),
    FailureKind.OVERSIZED_OUTPUT: (502, "oversized_output"),
    FailureKind.ANSWER_TOO_LARGE: (502, "answer_too_large"),
    FailureKind.INVALID_ANSWER: (502, "invalid_tool_call"),
    FailureKind.INVALID_JSON: (502, "invalid_json_answer"),
    FailureKind.BILLING: (402, "subscription_billing_refused"),
    FailureKind.CLI_ERROR: (502, "cli_error"),
}
BILLING_HINT = (
    " (the CLI's subscription refused this call as use billed outside the plan: enable or "
    "fund extra usage for the account, or run the gateway with an API key; docs/security.md)"
)


DEFAULT_RETRY_AFTER_S = 5.0  # a 429 always says when to retry; this when the CLI did not


def _retry_after(seconds: float | None) -> dict[str, str]:
    seconds = DEFAULT_RETRY_AFTER_S if seconds is None else seconds
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


def api_error(exc: CallError) -> APIError:
    """The one place where a domain failure becomes an HTTP status and error body."""
    if isinstance(exc, InvalidRequest):
        return APIError(
            404 if isinstance(exc, NotFound) else 400, exc.message, param=exc.param, code=exc.code
        )
    if isinstance(exc, CliFailed):
        status, code = _KIND_STATUS[exc.kind]
        headers = _retry_after(exc.retry_after_s) if status == 429 else {}
        if exc.kind is FailureKind.BILLING:  # not retried by SDKs (a 4xx other than 408/429)
            message = exc.message + BILLING_HINT
            return APIError(status, message, type="billing_error", code=code)
        if exc.kind in (FailureKind.AUTH, FailureKind.LOGIN_EXPIRED):
            headers = {"x-should-retry": "false"}  # no retry helps until the operator acts
        return APIError(status, exc.message, code=code, headers=headers)
    if isinstance(exc, SlotsBusy):
        return APIError(
            429,
            exc.message,
            code="too_many_concurrent_requests",
            headers=_retry_after(exc.retry_after_s),
        )
    if isinstance(exc, ShuttingDown):
        return APIError(
            503, exc.message, code="shutting_down", headers=_retry_after(exc.retry_after_s)
        )
    if isinstance(exc, CliMissing):
        return APIError(503, exc.message, code="cli_not_found")
    if isinstance(exc, CliTimeout):
        return APIError(504, exc.message, code="cli_timeout")
    return APIError(502, exc.message, code="cli_error")


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
    param = dotted(loc) or None
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


def dotted(loc: list[str]) -> str:
    """A field path as a client writes it: ``messages[0].content[1].text``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out
