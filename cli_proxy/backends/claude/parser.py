"""Reading ``claude -p --output-format stream-json --verbose``: text, thinking, usage,
rate-limit windows and failures."""

from __future__ import annotations

import json
import time
from typing import Any

from cli_proxy.backends.base import (
    StreamParser,
    as_int,
    classify_failure,
    empty_answer,
    exit_failure,
    kind_for_status,
    load_json_line,
)
from cli_proxy.backends.claude.login import RELOGIN
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

# The length of claude's windows, known by name only: the 2.1.197 bundle's ``rateLimitType``
# enum (it counts 18000 s and 604800 s); ``overage`` is no window of fixed length.
WINDOW_MINUTES = {
    "five_hour": 300,
    "seven_day": 10080,
    "seven_day_opus": 10080,
    "seven_day_sonnet": 10080,
    "seven_day_overage_included": 10080,
}

_RATE_EVENT = b'"rate_limit_event"'
_RATE_EVENT_START = b'{"type":"rate_limit_event"'


class ClaudeParser(StreamParser):
    """Reads system/assistant/stream_event/result lines.

    With ``--include-partial-messages`` the text arrives twice: as token deltas in
    ``stream_event`` lines and again whole in the ``assistant`` message that
    follows; the whole copy is skipped when deltas were seen for it.
    """

    def __init__(self) -> None:
        self._streamed: list[str] = []  # text sent as deltas since the last whole message
        self.done = False
        self._text_seen = False
        self._failed = False
        self._error_kind = ""  # the synthetic assistant message's "error" field
        self._thought_streamed = False  # thinking deltas seen since the last whole message
        self._rate: RateLimit | None = None  # the latest rate_limit_event

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if obj is None:
            return self._interleaved(line) if _RATE_EVENT in line else []
        kind = obj.get("type")
        if kind == "rate_limit_event":
            return self._rate_limit(obj)
        if kind == "stream_event":
            return self._stream_event(obj.get("event"))
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "result":
            return self._result(obj)
        return []

    def _interleaved(self, line: bytes) -> list[CliEvent]:
        """A ``rate_limit_event`` written into the middle of another line (seen:
        anthropics/claude-code#49640): both objects are read."""
        at = line.find(_RATE_EVENT_START)
        if at < 0:
            return []
        text = line[at:].decode("utf-8", "replace")
        try:
            obj, end = json.JSONDecoder().raw_decode(text)
        except (ValueError, RecursionError):
            return []
        rest = line[:at] + text[end:].encode("utf-8")
        events = self._rate_limit(obj) if isinstance(obj, dict) else []
        return events + (self.feed(rest) if rest.strip() else [])

    def _rate_limit(self, obj: dict[str, Any]) -> list[CliEvent]:
        info = obj.get("rate_limit_info")
        if not isinstance(info, dict) or not isinstance(info.get("status"), str):
            return []
        utilization = info.get("utilization")
        resets = info.get("resetsAt")
        window = str(info.get("rateLimitType") or "unknown")
        event = RateLimit(
            window=window,
            status=info["status"],
            utilization=float(utilization) if isinstance(utilization, int | float) else None,
            resets_at=float(resets) if isinstance(resets, int | float) else None,
            window_minutes=WINDOW_MINUTES.get(window),
        )
        self._rate = event
        return [event]

    def _stream_event(self, event: Any) -> list[CliEvent]:
        if not isinstance(event, dict) or event.get("type") != "content_block_delta":
            return []
        delta = event.get("delta")
        if isinstance(delta, dict) and delta.get("type") == "thinking_delta":
            thought = delta.get("thinking")
            if isinstance(thought, str) and thought:
                self._thought_streamed = True
                return [CliThinking(thought)]
            return []
        if isinstance(delta, dict) and delta.get("type") == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                self._streamed.append(text)
                self._text_seen = True
                return [CliText(text)]
        return []

    def _assistant(self, obj: dict[str, Any]) -> list[CliEvent]:
        message = obj.get("message")
        streamed, self._streamed = "".join(self._streamed), []
        if obj.get("error") or not isinstance(message, dict):
            # API errors arrive as a synthetic assistant message; the result line that
            # follows carries is_error and the same text, which becomes the failure.
            self._error_kind = str(obj.get("error") or "")
            return []
        blocks = message.get("content")
        events: list[CliEvent] = []
        if not self._thought_streamed:  # thinking not seen as deltas: the whole blocks
            thought = _joined(blocks, "thinking")
            if thought:
                events.append(CliThinking(thought))
        self._thought_streamed = False
        text = _joined(blocks, "text")
        # The whole message repeats what the deltas carried. After a mid-stream API error
        # the CLI re-asks without streaming: only text beyond what was streamed is new.
        if streamed:
            text = text[len(streamed) :] if text.startswith(streamed) else ""
        if text:
            self._text_seen = True
            events.append(CliText(text))
        return events

    def _result(self, obj: dict[str, Any]) -> list[CliEvent]:
        self.done = True
        events: list[CliEvent] = []
        usage = _usage(obj)
        if usage is not None:
            events.append(usage)
        result_text = obj.get("result")
        if obj.get("is_error") or obj.get("subtype") not in (None, "success"):
            self._failed = True
            message = result_text if isinstance(result_text, str) and result_text else ""
            message = message or str(obj.get("subtype") or "the CLI reported an error")
            if self._error_kind == "max_output_tokens" and self._text_seen:
                # the CLI already re-asked the model to continue; keep what it wrote
                events.append(Truncated(message))
                return events
            failure = classify_failure(message, RELOGIN)
            status = obj.get("api_error_status")
            if isinstance(status, int) and 400 <= status < 600:
                kind = kind_for_status(status, failure.kind)
                failure = Failure(kind, failure.message, failure.retry_after_s)
            rate = self._rate
            if (
                failure.kind is FailureKind.RATE_LIMITED
                and failure.retry_after_s is None
                and rate is not None
                and rate.resets_at is not None
            ):  # the subscription's window says when: wait until it resets
                wait = max(1.0, rate.resets_at - time.time())
                failure = Failure(failure.kind, message, wait)
            events.append(failure)
        elif not self._text_seen and isinstance(result_text, str) and result_text:
            self._text_seen = True
            events.insert(0, CliText(result_text))
        return events

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        if self._failed:
            return []
        if exit_code != 0:
            return [exit_failure(exit_code, stderr, "claude", RELOGIN)]
        if not self._text_seen:
            return [empty_answer("claude")]
        return []


def _joined(blocks: object, kind: str) -> str:
    """The ``kind`` field of every content block of that type (``text``, ``thinking``), joined."""
    return "".join(
        block[kind]
        for block in (blocks if isinstance(blocks, list) else [])
        if isinstance(block, dict)
        and block.get("type") == kind
        and isinstance(block.get(kind), str)
    )


def _usage(obj: dict[str, Any]) -> UsageReport | None:
    """Token counts from result.usage, else the per-model totals in modelUsage."""
    usage = obj.get("usage")
    if isinstance(usage, dict):
        prompt = sum(
            as_int(usage.get(k))
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        completion = as_int(usage.get("output_tokens"))
        if prompt or completion:
            return UsageReport(prompt, completion, as_int(usage.get("cache_read_input_tokens")))
    per_model = obj.get("modelUsage")
    if isinstance(per_model, dict) and per_model:
        models = [m for m in per_model.values() if isinstance(m, dict)]
        prompt = sum(
            as_int(m.get(k))
            for m in models
            for k in ("inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
        )
        completion = sum(as_int(m.get("outputTokens")) for m in models)
        cached = sum(as_int(m.get("cacheReadInputTokens")) for m in models)
        return UsageReport(prompt, completion, cached)
    return UsageReport(0, 0) if isinstance(usage, dict) else None
