"""The client side of one ACP session (``gemini --acp``): answers the CLI's requests, sends
the prompt, reads updates, usage and failures."""

from __future__ import annotations

import json
import re
from typing import Any

from cli_proxy.backends.acp.session import AcpSession, chunk_text
from cli_proxy.backends.base import (
    as_int,
    classify_failure,
    kind_for_status,
    login_expired_message,
)
from cli_proxy.backends.gemini.login import INELIGIBLE, RELOGIN, ineligible_message
from cli_proxy.backends.gemini.quota import quota_failure
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


class GeminiParser(AcpSession):
    """The client side of one ACP session (``acp/session.py``): reads gemini's updates, its
    prompt result and its JSON-RPC errors."""

    cli = "gemini"
    relogin = RELOGIN

    def __init__(self, blocks: list[dict[str, Any]], model: str = "") -> None:
        super().__init__(blocks)
        self._model = model  # the quota's window (quotas are per model); "": not reported
        self._truncated = False

    def _non_json(self, line: bytes) -> list[CliEvent]:
        return self._login_prompt() if _LOGIN_PROMPT.search(line) else []

    def _login_prompt(self) -> list[CliEvent]:
        """The CLI asks for an interactive Google login (its refresh was refused) on the
        protocol's stdout: it would wait on stdin for a code, and no code will come."""
        message = login_expired_message(
            "gemini's Google login could not be refreshed: it asked for a new interactive "
            "login (Please visit the following URL to authorize the application)",
            RELOGIN,
        )
        return self._fail(Failure(FailureKind.LOGIN_EXPIRED, message))

    def _update(self, update: dict[str, Any]) -> list[CliEvent]:
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            text = chunk_text(update)
            if text is None:
                return []
            if kind == "agent_thought_chunk":
                # the CLI formats each thought "**subject**\ndescription"; no subject: "****"
                return [CliThinking(text.removeprefix("****\n"))]
            self._text_seen = True
            return [CliText(text)]
        if kind in ("tool_call", "tool_call_update") and update.get("status") != "failed":
            # one of the CLI's own tools is running: the seal (no core tools) did not hold
            title = update.get("title") or update.get("toolCallId") or "a tool"
            message = f"gemini ran one of its own tools ({title}); the gateway allows none"
            return self._fail(Failure(FailureKind.INVALID_ANSWER, message))
        return []

    def _prompt_result(self, result: dict[str, Any]) -> list[CliEvent]:
        self.done = True
        events: list[CliEvent] = []
        usage = _usage(result)
        if usage is not None:
            events.append(usage)
        stop = result.get("stopReason")
        if stop == "max_tokens":
            if self._text_seen:
                self._truncated = True
                events.append(Truncated("gemini stopped at the token limit (max_tokens)"))
            else:
                # 0.61.0 sends max_tokens only when the prompt would overflow the model's
                # context window (no model call is made); an output cut by MAX_TOKENS
                # arrives as end_turn (docs/real-clis.md)
                events += self._fail(
                    Failure(
                        FailureKind.CONTEXT_LENGTH,
                        "gemini: the prompt does not fit the model's context window",
                    )
                )
        elif stop == "max_turn_requests":
            # the model called a tool; none is enabled, so the CLI refused it, and asking the
            # model again would pass the one-call limit (capture gemini-own-tool-call)
            message = (
                "gemini stopped at its turn limit (max_turn_requests): the model called one "
                "of the CLI's own tools, which the gateway does not offer"
            )
            events += self._fail(Failure(FailureKind.INVALID_ANSWER, message))
        elif stop not in (None, "end_turn"):  # refusal, cancelled
            events += self._fail(Failure(FailureKind.CLI_ERROR, f"gemini stopped: {stop}"))
        elif self._text_seen and _cut_stream(result):
            message = "gemini's model stream ended without a finish reason: the answer was cut off"
            events += self._fail(Failure(FailureKind.CLI_ERROR, message))
        if self._model and usage is not None:  # the model answered: its quota let it through
            events.append(RateLimit(self._model, "allowed"))
        return events

    def _rpc_failure(self, error: Any) -> list[CliEvent]:
        """A JSON-RPC error: its code is the upstream HTTP status when there was one."""
        error = error if isinstance(error, dict) else {}
        message = error.get("message")
        message = _upstream_message(message) if isinstance(message, str) and message else ""
        message = message or "gemini reported an error"
        failure = classify_failure(message, RELOGIN)
        code = error.get("code")
        if INELIGIBLE.search(message):  # Code Assist refuses this Google account's tier
            failure = Failure(FailureKind.AUTH, ineligible_message(message))
        elif _NOT_FOUND.search(message):
            failure = Failure(FailureKind.BAD_REQUEST, message)
        elif isinstance(code, int) and 400 <= code < 600 and code != 500:
            failure = Failure(kind_for_status(code, failure.kind), message, failure.retry_after_s)
        if failure.kind is not FailureKind.RATE_LIMITED:
            return self._fail(failure)
        failure, window = quota_failure(failure, self._model)
        return ([window] if window is not None else []) + self._fail(failure)

    def _answered(self) -> bool:
        return self._text_seen or self._truncated


def _usage(result: dict[str, Any]) -> UsageReport | None:
    meta = result.get("_meta")
    quota = meta.get("quota") if isinstance(meta, dict) else None
    count = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(count, dict):
        return None
    return UsageReport(as_int(count.get("input_tokens")), as_int(count.get("output_tokens")))


def _cut_stream(result: dict[str, Any]) -> bool:
    """0.61.0 ends a turn whose model stream broke off (no finish reason) as ``end_turn``
    too, but without that turn's usage: ``model_usage`` is empty (capture gemini-stream-cut;
    a whole answer always lists its model)."""
    meta = result.get("_meta")
    quota = meta.get("quota") if isinstance(meta, dict) else None
    return isinstance(quota, dict) and quota.get("model_usage") == []


def _upstream_message(message: str) -> str:
    """The API's own message when the CLI passed its error body through as the text."""
    try:
        body = json.loads(message)
    except ValueError:
        return message
    err = body.get("error") if isinstance(body, dict) else None
    inner = err.get("message") if isinstance(err, dict) else None
    return inner if isinstance(inner, str) and inner else message


# What 0.61.0's interactive login (``authWithUserCode``) writes to stdout (after terminal
# escapes, not JSON): the URL, then the code question (no newline: seen at exit).
_LOGIN_PROMPT = re.compile(
    rb"Please visit the following URL to authorize the application|Enter the authorization code"
)
_NOT_FOUND = re.compile(r"\bmodels?/\S+ is not found|\bmodel\b.*\bnot found\b", re.I)
