"""Claude Code CLI: ``claude -p --output-format stream-json --verbose``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..events import CliEvent, Failure, TextDelta, UsageReport
from .base import (
    CallOptions,
    classify_failure,
    exit_failure,
    load_json_line,
    scrub_env,
    split_command,
)


class ClaudeBackend:
    name = "claude"

    def __init__(self, command: str = "claude", drop_env: frozenset[str] = frozenset()) -> None:
        self.command = split_command(command)
        self.drop_env = drop_env

    def argv(self, options: CallOptions) -> list[str]:
        argv = [
            *self.command,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            options.model,
            # The model must never act on the host: no built-in tools, no MCP servers.
            "--tools",
            "",
            "--strict-mcp-config",
        ]
        if options.stream_partial:
            argv.append("--include-partial-messages")
        return argv

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = scrub_env(base, self.drop_env)
        env.setdefault("DISABLE_AUTOUPDATER", "1")
        env.setdefault("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        # the CLI's default is 10 retries over ~3 minutes of silence; the OpenAI SDKs
        # retry 429/5xx themselves, honouring Retry-After
        env.setdefault("CLAUDE_CODE_MAX_RETRIES", "2")
        return env

    def prepare_workdir(self, path: Path) -> None:
        pass

    def new_parser(self) -> ClaudeParser:
        return ClaudeParser()


class ClaudeParser:
    """Reads system/assistant/stream_event/result lines.

    With ``--include-partial-messages`` the text arrives twice: as token deltas in
    ``stream_event`` lines and again whole in the ``assistant`` message that
    follows; the whole copy is skipped when deltas were seen for it.
    """

    def __init__(self) -> None:
        self._deltas_since_message = False
        self._text_seen = False
        self._failed = False
        self._result_seen = False

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if obj is None:
            return []
        kind = obj.get("type")
        if kind == "stream_event":
            return self._stream_event(obj.get("event"))
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "result":
            return self._result(obj)
        return []

    def _stream_event(self, event: Any) -> list[CliEvent]:
        if not isinstance(event, dict) or event.get("type") != "content_block_delta":
            return []
        delta = event.get("delta")
        if isinstance(delta, dict) and delta.get("type") == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                self._deltas_since_message = True
                self._text_seen = True
                return [TextDelta(text)]
        return []

    def _assistant(self, obj: dict[str, Any]) -> list[CliEvent]:
        message = obj.get("message")
        if self._deltas_since_message:
            self._deltas_since_message = False
            return []
        if not isinstance(message, dict):
            return []
        text = "".join(
            block.get("text", "")
            for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text"
        )
        if obj.get("error"):
            # API errors surface as a synthetic assistant message; the result line follows
            # with is_error, so hold the text back for the failure message.
            return []
        if text:
            self._text_seen = True
            return [TextDelta(text)]
        return []

    def _result(self, obj: dict[str, Any]) -> list[CliEvent]:
        self._result_seen = True
        events: list[CliEvent] = []
        usage = obj.get("usage")
        if isinstance(usage, dict):
            prompt = sum(
                _int(usage.get(k))
                for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
            events.append(UsageReport(prompt, _int(usage.get("output_tokens"))))
        result_text = obj.get("result")
        if obj.get("is_error") or (obj.get("subtype") not in (None, "success")):
            self._failed = True
            message = result_text if isinstance(result_text, str) and result_text else ""
            message = message or str(obj.get("subtype") or "the CLI reported an error")
            failure = classify_failure(message)
            status = obj.get("api_error_status")
            if isinstance(status, int) and 400 <= status < 600:
                failure = Failure(_client_status(status), message, failure.code)
            events.append(failure)
        elif not self._text_seen and isinstance(result_text, str) and result_text:
            self._text_seen = True
            events.insert(0, TextDelta(result_text))
        return events

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        if self._failed:
            return []
        if exit_code != 0:
            return [exit_failure(exit_code, stderr, "claude")]
        if not self._text_seen:
            return [Failure(502, "claude finished without an answer", "empty_answer")]
        return []


def _client_status(upstream: int) -> int:
    """The model API's status, as the gateway's client should see it."""
    if upstream in (401, 403):
        return 401
    if upstream == 429:
        return 429
    if upstream in (503, 529):
        return 503
    if upstream == 400:
        return 400
    return 502


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
