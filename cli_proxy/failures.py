"""Domain failures: what can go wrong with a call, said without HTTP.

The planner, fixtures, process, launch and parser layers raise these (or, for parsers, emit
a ``Failure`` event); ``server/errors.py`` (``api_error``) maps them to an HTTP status and
code in one place, and each wire format renders that as its own error body, for the
middleware and the SSE error path alike. Nothing below the HTTP edge names a status.
"""

from __future__ import annotations

from enum import StrEnum


class FailureKind(StrEnum):
    """Why a CLI call failed, as the CLI reported it or as the gateway saw it."""

    AUTH = "auth"  # the CLI's key was refused
    LOGIN_EXPIRED = "login_expired"  # the CLI's subscription login is gone (refresh failed)
    RATE_LIMITED = "rate_limited"  # upstream 429 / quota
    OVERLOADED = "overloaded"  # upstream 503 / 529
    CONTEXT_LENGTH = "context_length"  # the prompt is too long for the model
    BAD_REQUEST = "bad_request"  # upstream refused the request as malformed
    TIMEOUT = "timeout"  # the CLI (or upstream) timed out
    EMPTY_ANSWER = "empty_answer"  # the CLI finished without any answer text
    OVERSIZED_OUTPUT = "oversized_output"  # a CLI output line beyond the stream limit
    ANSWER_TOO_LARGE = "answer_too_large"  # the answer grew beyond max_answer_bytes
    INVALID_ANSWER = "invalid_answer"  # e.g. only calls to functions the request does not offer
    INVALID_JSON = "invalid_json"  # a response_format answer with no (valid) JSON object
    BILLING = "billing"  # a subscription refused the call as billed elsewhere (extra usage)
    CLI_ERROR = "cli_error"  # anything else the CLI reported or exited with


class CallError(Exception):
    """Base of every domain failure of a call."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(CallError):
    """The request cannot be served as it stands: the client must change it (the planner's
    checks, an image that cannot be used, a prompt over the gateway's limit). ``param`` names
    the offending field, ``code`` says what is wrong in a word a program can test."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_value"):
        super().__init__(message)
        self.param = param
        self.code = code


class NotFound(InvalidRequest):
    """What the request names is not here: a model no backend serves, a recorded run no
    fixture holds."""


class CliFailed(CallError):
    """The CLI reported a failure (or exited without an answer)."""

    def __init__(self, kind: FailureKind, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.retry_after_s = retry_after_s


class SlotsBusy(CallError):
    """Every CLI slot is in use and the queue is full (or waiting for one timed out)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShuttingDown(CallError):
    """The gateway is stopping; no new CLI is started. ``retry_after_s``: when to retry (a
    restarted gateway, or another instance behind the same address, takes the call)."""

    def __init__(self, retry_after_s: float | None = None) -> None:
        super().__init__("the gateway is shutting down; retry later")
        self.retry_after_s = retry_after_s


class CliMissing(CallError):
    """The configured CLI binary cannot be started."""

    def __init__(self, binary: str, executable: bool = False) -> None:
        what = "is not executable" if executable else "not found"
        hint = "" if executable else "; install it or set its path (see docs/configuration.md)"
        super().__init__(f"CLI binary {what}: {binary!r}{hint}")
        self.binary = binary


class CliTimeout(CallError):
    """The CLI ran past the total timeout or printed nothing for the idle timeout."""


class NotAllowed(CallError):
    """The client's key may not use the model it asked for (its ``models`` list)."""

    def __init__(self, message: str, param: str | None = "model") -> None:
        super().__init__(message)
        self.param = param


class OverLimit(CallError):
    """A limit of the client's key refuses the call now (``code`` says which:
    ``key_concurrency_limit``, ``window_limit``, ``token_budget_exhausted``,
    ``no_model_available``); ``retry_after_s``: when it may pass."""

    def __init__(self, message: str, code: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s
