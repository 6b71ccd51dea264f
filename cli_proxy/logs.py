"""structlog setup: one line per event, JSON when asked (for log shippers)."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(
    _logger: Any, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Text values with control characters (a NUL, a newline, an escape sequence) or lone
    surrogates written escaped, so a request can neither forge log lines nor break the
    encoder. Non-text values are rendered with ``repr``, which escapes them already."""
    for key, value in event.items():
        if isinstance(value, str) and _CONTROL.search(value):
            event[key] = _CONTROL.sub(_escape, value)
    return event


def configure(level: str = "info", json_output: bool = False) -> None:
    """Tracebacks are plain, never with local variables: structlog's default formatter is
    rich's when rich is installed, which prints every frame's locals, and those hold the
    request's messages (a prompt at error level: issue 24, D1)."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    renderers: list[structlog.types.Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if json_output
        else [
            structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            )
        ]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            escape_controls,
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


log = structlog.get_logger("cli_proxy")
