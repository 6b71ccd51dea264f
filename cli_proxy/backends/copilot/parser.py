"""The client side of one copilot ACP session (on the shared ``backends/acp`` client): its
answer, its own ``Info:`` lines kept from the client, and its upstream errors, which copilot
reports as answer text rather than as JSON-RPC errors.

Measured on 1.0.102 (tests/data/real-cli/copilot-1.0.102-*):

- after ``session/prompt`` copilot first says what it did with its tools, as ordinary
  ``agent_message_chunk`` pieces ("Info: Disabled tools: ...", "Info: Unknown tool name in the
  tool allowlist: ..."), then a ``usage_update`` (the context size) when it sends the
  upstream request, "Info: Request failed due to a transient API error. Retrying..." before
  each retry, then the model's text; the result carries ``usage``; those ``Info:`` pieces
  are never passed on (before the request any ``Info:`` piece, after it only the retry note:
  a model's answer may begin "Info: " too);
- an upstream failure, after copilot's own retries (a 401 twice, a 429 or 500 five times,
  following ``retry-after``; a 400 not at all), is ONE chunk "Error: ..." after the
  ``usage_update``, then ``end_turn`` with no ``usage``;
- a model turn with no content is the chunk "Error: No response was returned. Send your
  message again to retry." and a result WITH usage (an empty answer);
- with no login at all, ``session/new`` answers the JSON-RPC error -32000 "Authentication
  required".
"""

from __future__ import annotations

import logging
import re
from typing import Any

from cli_proxy.backends.acp.session import AcpSession, chunk_text
from cli_proxy.backends.base import (
    as_int,
    classify_failure,
    kind_for_status,
)
from cli_proxy.backends.copilot.login import NO_LOGIN, RELOGIN
from cli_proxy.failures import FailureKind
from cli_proxy.read.events import (
    CliEvent,
    CliText,
    CliThinking,
    Failure,
    RateLimit,
    Truncated,
    UsageReport,
)

log = logging.getLogger(__name__)

INFO = "Info: "
ERROR = "Error: "
# the upstream status in copilot's error text: "Error: 400 Invalid request", "... Last error:
# 429 Number of requests ...", "Authentication failed with provider at URL (HTTP 401)."
_RETRY_NOTE = re.compile(r"Info: Request failed due to .{0,200}Retrying\.\.\.\s*$", re.S)
_NO_RESPONSE = re.compile(r"Error: No response was returned\b")
"""Copilot's text for a model turn with no content (capture copilot-1.0.102-empty): it comes
WITH usage, as the model did answer."""
_STATUS = re.compile(r"(?:^Error: |Last error: |\(HTTP )(\d{3})\b")


class CopilotParser(AcpSession):
    """Reads one copilot session: text and thoughts, usage, and its error text."""

    cli = "copilot"
    relogin = RELOGIN

    def __init__(self, blocks: list[dict[str, Any]], model: str = "") -> None:
        super().__init__(blocks)
        self._model = model  # the rate-limit window (per model, as gemini's); "": none
        self._upstream = False  # a usage_update came: the model request was sent
        self._held: str | None = None  # a first chunk "Error: ...": copilot's or the model's

    def _update(self, update: dict[str, Any]) -> list[CliEvent]:
        kind = update.get("sessionUpdate")
        if kind == "usage_update":
            self._upstream = True
            return []
        if kind == "agent_thought_chunk":
            text = chunk_text(update)
            return [CliThinking(text)] if text is not None else []
        if kind == "agent_message_chunk":
            text = chunk_text(update)
            if text is None:
                return []
            if not self._text_seen and self._held is None and self._own_note(text):
                log.debug("copilot: %s", text[:200])  # copilot's own note, not the model's
                return []
            return self._text(text)
        if kind in ("tool_call", "tool_call_update") and update.get("status") != "failed":
            title = update.get("title") or update.get("toolCallId") or "a tool"
            message = f"copilot ran one of its own tools ({title}); the gateway allows none"
            return self._fail(Failure(FailureKind.INVALID_ANSWER, message))
        return []

    def _own_note(self, text: str) -> bool:
        """Copilot's own "Info: ..." line: any before the model request goes out (the tool
        notes), after it only its retry note, so a model's answer that happens to start
        with "Info: " stays the answer."""
        if not text.startswith(INFO):
            return False
        return not self._upstream or _RETRY_NOTE.match(text) is not None

    def _text(self, text: str) -> list[CliEvent]:
        """The model's text, except that a first chunk starting "Error: " waits for the
        result: copilot's error text ends a turn without usage, a model's answer with it."""
        if not self._text_seen and self._held is None and text.startswith(ERROR):
            self._held = text
            return []
        events: list[CliEvent] = []
        if self._held is not None:
            events.append(CliText(self._held))
            self._held = None
        self._text_seen = True
        events.append(CliText(text))
        return events

    def _prompt_result(self, result: dict[str, Any]) -> list[CliEvent]:
        self.done = True
        usage = _usage(result)
        if self._held is not None:
            if usage is None or _NO_RESPONSE.match(self._held):
                return self._error_text(self._held)
            self._text_seen = True
            held, self._held = self._held, None
            events: list[CliEvent] = [CliText(held)]
        else:
            events = []
        if usage is not None:
            events.append(usage)
        stop = result.get("stopReason")
        if stop == "max_tokens" and self._text_seen:
            events.append(Truncated("copilot stopped at the token limit (max_tokens)"))
        elif stop == "max_tokens":
            message = "copilot: the prompt does not fit the model's context window"
            events += self._fail(Failure(FailureKind.CONTEXT_LENGTH, message))
        elif stop not in (None, "end_turn"):  # refusal, cancelled, max_turn_requests
            events += self._fail(Failure(FailureKind.CLI_ERROR, f"copilot stopped: {stop}"))
        if self._model and usage is not None:
            events.append(RateLimit(self._model, "allowed"))
        return events

    def _error_text(self, text: str) -> list[CliEvent]:
        """Copilot's "Error: ..." answer: the upstream failure it gave up on."""
        message = "copilot: " + text.removeprefix(ERROR).strip()
        if _NO_RESPONSE.match(text):
            return self._fail(Failure(FailureKind.EMPTY_ANSWER, message))
        failure = classify_failure(message, RELOGIN)
        m = _STATUS.search(text)
        if m is not None:
            kind = kind_for_status(int(m.group(1)), failure.kind)
            failure = Failure(kind, message, failure.retry_after_s)
        if failure.kind is FailureKind.RATE_LIMITED:
            window = [RateLimit(self._model, "rejected")] if self._model else []
            return [*window, *self._fail(failure)]
        return self._fail(failure)

    def _rpc_failure(self, error: Any) -> list[CliEvent]:
        error = error if isinstance(error, dict) else {}
        message = error.get("message")
        message = message if isinstance(message, str) and message else "copilot reported an error"
        if re.search(r"authentication required", message, re.I):
            return self._fail(Failure(FailureKind.AUTH, f"copilot: {message} ({NO_LOGIN})"))
        return self._fail(classify_failure(f"copilot: {message}", RELOGIN))


def _usage(result: dict[str, Any]) -> UsageReport | None:
    usage = result.get("usage")
    if not isinstance(usage, dict):
        return None
    return UsageReport(
        as_int(usage.get("inputTokens")),
        as_int(usage.get("outputTokens")),
        cached_tokens=as_int(usage.get("cachedReadTokens")),
    )
