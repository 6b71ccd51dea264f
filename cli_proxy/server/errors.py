"""Errors at the HTTP edge: ``APIError`` (status, code, message, param, headers: no wire
format yet) and the one mapping from domain failures (``failures.py``) to it, as httpx maps
its transport's exceptions once. Each wire format's table entry renders an ``APIError`` as
its own status and body (``WireFormat.error_status`` / ``error_body``; after a stream's head
``Format.fail``); nothing below this layer names a status."""

from __future__ import annotations

import math

from cli_proxy.failures import (
    CallError,
    CliFailed,
    CliMissing,
    CliTimeout,
    FailureKind,
    InvalidRequest,
    NotAllowed,
    NotFound,
    OverLimit,
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
    # 503, with ``x-should-retry: false`` (the official SDKs obey it).
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
    if isinstance(exc, NotAllowed):  # the client's key may not use that model (docs/keys.md)
        return APIError(403, exc.message, param=exc.param, code="model_not_allowed")
    if isinstance(exc, OverLimit):  # a limit of the client's key: it may pass later
        return APIError(429, exc.message, code=exc.code, headers=_retry_after(exc.retry_after_s))
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
