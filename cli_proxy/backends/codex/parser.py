"""Reading ``codex app-server``: its JSON-RPC notifications and requests -> CLI events
(text and reasoning deltas, the client's tool calls, usage, failures), and the replies the
call writes back (the prompt once the thread is open, ``turn/interrupt`` after a call)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any

from cli_proxy.backends.base import (
    StreamParser,
    as_int,
    classify_failure,
    empty_answer,
    exit_failure,
    kind_for_status,
    load_json_line,
    retry_after_s,
)
from cli_proxy.backends.codex.items import Channel
from cli_proxy.backends.codex.login import RELOGIN
from cli_proxy.backends.codex.rpc import (
    CLIENT_NAME,
    INIT_ID,
    INJECT_ID,
    INTERRUPT_ID,
    THREAD_ID,
    TURN_ID,
    rpc,
)
from cli_proxy.failures import FailureKind
from cli_proxy.read.events import (
    CliEvent,
    CliText,
    CliThinking,
    CliToolCall,
    Failure,
    RateLimit,
    Truncated,
    UsageReport,
    window_name,
)

# Thread items that mean codex itself ran (or started) one of its own tools.
CLI_TOOL_ITEMS = frozenset(
    {
        "commandExecution",
        "fileChange",
        "mcpToolCall",
        "collabAgentToolCall",
        "subAgentActivity",
        "webSearch",
        "imageView",
        "imageGeneration",
        "sleep",
    }
)
USER_AGENT = re.compile(rf'"userAgent":"{CLIENT_NAME}/([0-9][\w.+-]*)')
_UNSUPPORTED_CALL = re.compile(r"unsupported (?:custom tool )?call: ?([\w.:-]*)")
_OVERLOADED = re.compile(r"experiencing high demand|server_is_overloaded|slow_down", re.I)
_TRUNCATED = re.compile(r"max_output_tokens|max output tokens", re.I)
_ERROR_KINDS = {
    "unauthorized": FailureKind.AUTH,
    "usageLimitExceeded": FailureKind.RATE_LIMITED,
    "rateLimitExceeded": FailureKind.RATE_LIMITED,
    "serverOverloaded": FailureKind.OVERLOADED,
    "internalServerError": FailureKind.OVERLOADED,  # codex drops the body: "high demand"
    "contextWindowExceeded": FailureKind.CONTEXT_LENGTH,
    "badRequest": FailureKind.BAD_REQUEST,
    "modelNotFound": FailureKind.BAD_REQUEST,
}


WARN_AT = 0.75
"""A codex window is ``allowed_warning`` from this used share on: the lowest share at which
claude warns of a window (its 7-day one; its 5-hour one at 0.9), so the two backends' gauges
read alike. ``rejected`` at 100 % or when the update says a limit is reached."""
# "try again at Nov 27th, 2026 6:20 PM" (another day) or "try again at 6:20 PM" (the same
# day): codex's text for a usage limit's reset, in the process's local time, to the minute.
_TRY_AGAIN_AT = re.compile(
    r"try again at (?:([A-Z][a-z]{2}) (\d{1,2})(?:st|nd|rd|th)?, (\d{4}) )?"
    r"(\d{1,2}):(\d{2}) ([AP]M)"
)


def cli_tool_failure(what: str) -> Failure:
    """A model call codex refused: one of its own (disabled) tools, or a name that is no tool
    at all. Codex would answer the model "unsupported call" and ask again without end."""
    return Failure(
        FailureKind.INVALID_ANSWER,
        f"the model called {what}, which is not one of the request's functions (the Codex "
        "CLI's own tools are disabled); the call was stopped (codex would otherwise ask the "
        "model again without end)",
    )


class CodexParser(StreamParser):
    """Drives one app-server call and reads it (JSON-RPC, one message per line).

    After the handshake's answer it sends ``thread/start``, then ``thread/inject_items``
    (when there are earlier turns), then ``turn/start``. Text deltas are answer text as they
    arrive; reasoning summary deltas are thinking. A model call of a client function comes
    as an ``item/tool/call`` request: it becomes a ``CliToolCall`` and is never answered;
    ``turn/interrupt`` then ends the turn with nothing more sent upstream. With
    ``parallel_tool_calls: false`` the interrupt goes out at once. Otherwise more calls of
    the same response may follow, and codex says nothing of the response's end while a call
    is unanswered (measured: no token usage, no notification for 40 s; an interrupt sent at
    the first call lost the second one), so the parser waits until no call came for
    ``call_window_s`` (its ``wake_s`` timer) and then interrupts. ``turn/completed`` ends
    the call. A model call of one of codex's own tools, or of a name that is no tool at all,
    shows only on stderr (merged): codex would answer "unsupported call" and ask again.
    """

    def __init__(
        self,
        channel: Channel | None = None,
        parallel: bool = True,
        call_window_s: float = 0.4,
    ) -> None:
        self.done = False
        self.wake_s = None
        self.channel = channel or Channel({"ephemeral": True})
        self.parallel = parallel
        self.call_window_s = call_window_s
        self._call_at = 0.0
        self._out = bytearray()
        self._thread_id: str | None = None
        self._turn_id: str | None = None
        self._texts: dict[str, str] = {}  # agent message id -> text sent so far
        self._thought: set[str] = set()  # reasoning items whose deltas were sent
        self._text_seen = False
        self._calls = 0
        self._interrupted = False
        self._failed = False
        self._truncated = False
        self._last_error = ""
        self._plain_lines: list[str] = []  # the last non-JSON lines: stderr, merged
        self._windows: dict[str, RateLimit] = {}  # the subscription's, as last updated

    def replies(self) -> bytes:
        out, self._out = bytes(self._out), bytearray()
        return out

    def _send(self, msg_id: int | None, method: str, params: dict[str, Any]) -> None:
        self._out += rpc(msg_id, method, params)

    def feed(self, line: bytes) -> list[CliEvent]:
        events = self._read(line)
        self._tick()
        return events

    def _read(self, line: bytes) -> list[CliEvent]:
        if not line:
            return []  # our timer (``wake_s``)
        obj = load_json_line(line)
        if obj is None:
            return self._plain(line)
        method = obj.get("method")
        params = obj.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(method, str):
            if "id" in obj:
                return self._request(obj["id"], method, params)
            return self._notification(method, params)
        if "id" in obj:
            return self._response(obj.get("id"), obj)
        return []

    # -------------------------------------------------------------------- our requests

    def _response(self, msg_id: Any, obj: dict[str, Any]) -> list[CliEvent]:
        error = obj.get("error")
        if msg_id == INTERRUPT_ID:
            return []  # refused only when the turn has already ended
        if error is not None:
            what = {INIT_ID: "initialize", THREAD_ID: "thread/start", INJECT_ID: "the history"}
            message = error.get("message") if isinstance(error, dict) else None
            text = f"codex app-server refused {what.get(msg_id, 'turn/start')}: {message}"
            return self._fail(Failure(FailureKind.CLI_ERROR, text))
        result = obj.get("result")
        result = result if isinstance(result, dict) else {}
        if msg_id == INIT_ID:
            self._send(THREAD_ID, "thread/start", self.channel.thread)
        elif msg_id == THREAD_ID:
            thread = result.get("thread")
            tid = thread.get("id") if isinstance(thread, dict) else None
            if not isinstance(tid, str):
                return self._fail(Failure(FailureKind.CLI_ERROR, "codex started no thread"))
            self._thread_id = tid
            if self.channel.items:
                items = list(self.channel.items)
                self._send(INJECT_ID, "thread/inject_items", {"threadId": tid, "items": items})
            else:
                self._start_turn()
        elif msg_id == INJECT_ID:
            self._start_turn()
        elif msg_id == TURN_ID:
            turn = result.get("turn")
            self._turn_id = _str(turn.get("id") if isinstance(turn, dict) else None)
        return []

    def _start_turn(self) -> None:
        params: dict[str, Any] = {"threadId": self._thread_id, "input": list(self.channel.input)}
        if self.channel.output_schema is not None:
            params["outputSchema"] = self.channel.output_schema
        self._send(TURN_ID, "turn/start", params)

    def _interrupt(self) -> None:
        """Hand the calls over: the turn ends with nothing more sent upstream."""
        self.wake_s = None
        if not self._interrupted:
            self._interrupted = True
            params = {"threadId": self._thread_id, "turnId": self._turn_id}
            self._send(INTERRUPT_ID, "turn/interrupt", params)

    def _tick(self) -> None:
        """After any line or timer: the call window is over when no call came for that long."""
        if self.wake_s is None or self._interrupted:
            return
        left = self._call_at + self.call_window_s - time.monotonic()
        if left <= 0:
            self._interrupt()
        else:
            self.wake_s = left

    # --------------------------------------------------------------- codex's requests

    def _request(self, msg_id: Any, method: str, params: dict[str, Any]) -> list[CliEvent]:
        if method == "item/tool/call":
            if self._failed or self._interrupted:
                return []
            self._calls += 1
            self._turn_id = self._turn_id or _str(params.get("turnId"))
            name = params.get("tool")
            args = params.get("arguments")
            text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            if self.parallel and self.call_window_s > 0:
                # more calls of the same response may follow: wait for a quiet window
                self._call_at = time.monotonic()
                self.wake_s = self.call_window_s
            else:
                self._interrupt()
            return [CliToolCall(str(name), text)]
        # approvals, user input, MCP elicitation...: nothing of the sort may happen sealed
        self._out += (
            json.dumps(
                {"id": msg_id, "error": {"code": -32601, "message": "not available"}}
            ).encode()
            + b"\n"
        )
        if method.endswith("requestApproval") or method in (
            "applyPatchApproval",
            "execCommandApproval",
        ):
            return self._fail(cli_tool_failure(f"({method})"))
        return []

    # ---------------------------------------------------------------- notifications

    def _notification(self, method: str, params: dict[str, Any]) -> list[CliEvent]:
        if method == "item/agentMessage/delta":
            delta = params.get("delta")
            return self._text(str(params.get("itemId")), delta) if isinstance(delta, str) else []
        if method in ("item/reasoning/summaryTextDelta", "item/reasoning/textDelta"):
            delta = params.get("delta")
            if isinstance(delta, str) and delta and not self._failed:
                self._thought.add(str(params.get("itemId")))
                return [CliThinking(delta)]
            return []
        if method == "item/reasoning/summaryPartAdded":
            index = params.get("summaryIndex")
            return [CliThinking("\n\n")] if isinstance(index, int) and index > 0 else []
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            return self._item(item, method == "item/completed") if isinstance(item, dict) else []
        if method == "thread/tokenUsage/updated":
            return self._usage(params)
        if method == "account/rateLimits/updated":
            limits = params.get("rateLimits")
            windows = rate_limit_windows(limits) if isinstance(limits, dict) else []
            self._windows.update((w.window, w) for w in windows)
            return list(windows)
        if method == "error":
            err = params.get("error")
            if isinstance(err, dict) and not params.get("willRetry"):
                self._last_error = _error_text(err)
            return []
        if method == "turn/completed":
            return self._completed(params.get("turn"))
        return []

    def _text(self, item_id: str, delta: str) -> list[CliEvent]:
        if self._failed or not delta:
            return []
        sent = self._texts.get(item_id)
        prefix = ""
        if sent is None:  # a later message of the same turn: keep the two apart
            prefix = "\n\n" if self._text_seen else ""
            sent = ""
        self._texts[item_id] = sent + delta
        self._text_seen = True
        return [CliText(prefix + delta)]

    def _item(self, item: dict[str, Any], completed: bool) -> list[CliEvent]:
        itype = item.get("type")
        if itype in CLI_TOOL_ITEMS:
            return self._fail(cli_tool_failure(f"({itype})"))
        if not completed:
            return []
        item_id = str(item.get("id"))
        if itype == "agentMessage":  # whatever no delta carried (a version without them)
            text = item.get("text")
            sent = self._texts.get(item_id, "")
            if isinstance(text, str) and text.startswith(sent) and len(text) > len(sent):
                return self._text(item_id, text[len(sent) :])
        if itype == "reasoning" and item_id not in self._thought and not self._failed:
            summary = item.get("summary")
            parts = (
                [s for s in summary if isinstance(s, str) and s]
                if isinstance(summary, list)
                else []
            )
            return [CliThinking("\n\n".join(parts))] if parts else []
        return []

    def _usage(self, params: dict[str, Any]) -> list[CliEvent]:
        usage = params.get("tokenUsage")
        total = usage.get("total") if isinstance(usage, dict) else None
        if not isinstance(total, dict):
            return []
        # inputTokens includes the cached part; outputTokens the reasoning tokens
        return [
            UsageReport(
                as_int(total.get("inputTokens")),
                as_int(total.get("outputTokens")),
                as_int(total.get("cachedInputTokens")),
                as_int(total.get("reasoningOutputTokens")),
            )
        ]

    def _completed(self, turn: Any) -> list[CliEvent]:
        self.done = True
        self.wake_s = None
        turn = turn if isinstance(turn, dict) else {}
        status = turn.get("status")
        if status == "failed":
            err = turn.get("error")
            failure = turn_failure(err if isinstance(err, dict) else {}, self._last_error)
            if isinstance(failure, Failure) and failure.kind is FailureKind.RATE_LIMITED:
                failure = exhausted(failure, list(self._windows.values()))
            return self._fail(failure)
        if status == "interrupted" and not (self._interrupted or self._calls):
            return self._fail(Failure(FailureKind.CLI_ERROR, "codex interrupted the turn"))
        return []

    def _plain(self, line: bytes) -> list[CliEvent]:
        """A non-JSON line: codex's stderr (merged into stdout, ``merge_stderr``)."""
        text = line.decode("utf-8", "replace").rstrip()
        self._plain_lines = [*self._plain_lines[-19:], text]
        m = _UNSUPPORTED_CALL.search(text)
        if m is None:
            return []
        return self._fail(cli_tool_failure(m.group(1) or "(unnamed)"))

    def _fail(self, failure: Failure | Truncated) -> list[CliEvent]:
        if self._failed or self._truncated:
            return []
        if isinstance(failure, Truncated):
            self._truncated = True
        else:
            self._failed = True
        self.done = True
        self.wake_s = None
        return [failure]

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        stderr = stderr or "\n".join(self._plain_lines)
        m = _UNSUPPORTED_CALL.search(stderr)
        if m is not None:
            return self._fail(cli_tool_failure(m.group(1) or "(unnamed)"))
        if self._failed or self._truncated:
            return []
        if not self.done:
            if self._last_error:
                return self._fail(codex_failure(self._last_error))
            failure = exit_failure(exit_code, stderr, "codex app-server", RELOGIN)
            if exit_code == 0:
                failure = Failure(FailureKind.CLI_ERROR, "codex app-server ended before its turn")
            return self._fail(codex_failure(failure.message))
        if not self._text_seen and not self._calls:
            return [empty_answer("codex")]
        return []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def rate_limit_windows(limits: dict[str, Any]) -> list[RateLimit]:
    """The windows of one ``account/rateLimits/updated`` (its ``rateLimits``), named by length
    as claude's are (``five_hour``, ``seven_day``, else ``<N>_min``; a window of a limit other
    than ``codex`` is prefixed with its id: ``codex_other.60_min``). A window that is ``null``
    was not said (a sparse update): it yields nothing, so the last known state stands."""
    limit = limits.get("limitId")
    prefix = f"{limit}." if isinstance(limit, str) and limit and limit != "codex" else ""
    found: list[tuple[str, float | None, float | None, int | None]] = []
    for slot in ("primary", "secondary"):
        window = limits.get(slot)
        if not isinstance(window, dict):
            continue
        used = _number(window.get("usedPercent"))
        minutes = _number(window.get("windowDurationMins"))
        length = int(minutes) if minutes is not None and minutes > 0 else None
        name = prefix + (window_name(length) if length is not None else slot)
        share = used / 100 if used is not None else None
        found.append((name, share, _number(window.get("resetsAt")), length))
    full = {name for name, share, _, _ in found if share is not None and share >= 1}
    shares = [(share, name) for name, share, _, _ in found if share is not None]
    if limits.get("rateLimitReachedType") and not full and shares:
        full = {max(shares)[1]}  # a limit is reached: the fullest window it must be
    return [
        RateLimit(
            window=name,
            status="rejected"
            if name in full
            else "allowed_warning"
            if share is not None and share >= WARN_AT
            else "allowed",
            utilization=share,
            resets_at=resets,
            window_minutes=length,
        )
        for name, share, resets, length in found
    ]


def exhausted(failure: Failure, windows: list[RateLimit]) -> Failure:
    """A rate-limited turn with the windows that refused it: the message names them, and
    the wait runs to the last of their resets (the update before the error says when); else
    to the reset the error text names (local time, to the minute); else what the text says."""
    used_up = [w for w in windows if w.status == "rejected"]
    resets = [w.resets_at for w in used_up if w.resets_at is not None]
    reset_at = max(resets) if resets else _text_reset(failure.message)
    wait = failure.retry_after_s
    if reset_at is not None:
        wait = max(1.0, reset_at - time.time())
    message = failure.message
    if used_up:
        names = " and ".join(
            f"{w.window}" + (f" ({w.window_minutes} min)" if w.window_minutes else "")
            for w in used_up
        )
        noun = "windows are" if len(used_up) > 1 else "window is"
        message += f" (codex's {names} {noun} used up"
        if resets:
            when = datetime.fromtimestamp(max(resets)).astimezone().isoformat(timespec="minutes")
            message += f"; it resets at {when}" if len(used_up) == 1 else f"; the last at {when}"
        message += ")"
    return Failure(failure.kind, message, wait)


def _text_reset(message: str) -> float | None:
    """The reset a usage-limit text names ("try again at Nov 27th, 2026 6:20 PM"), read in
    the gateway's local time zone, which the CLI inherits."""
    m = _TRY_AGAIN_AT.search(message)
    if m is None:
        return None
    month, day, year, hour, minute, half = m.groups()
    clock = f"{int(hour)}:{minute} {half}"
    try:
        if month is None:
            today = datetime.now().date()
            at = datetime.strptime(f"{today.isoformat()} {clock}", "%Y-%m-%d %I:%M %p")
        else:
            at = datetime.strptime(f"{month} {int(day)} {year} {clock}", "%b %d %Y %I:%M %p")
    except ValueError:
        return None
    return at.timestamp()  # a naive time: local


def _error_text(err: dict[str, Any]) -> str:
    message = err.get("message")
    text = message if isinstance(message, str) else ""
    details = err.get("additionalDetails")
    if isinstance(details, str) and details and details not in text:
        text = f"{text} ({details})" if text else details
    return text


def turn_failure(err: dict[str, Any], fallback: str = "") -> Failure | Truncated:
    """A failed turn's ``TurnError``: codex's own error class first, its message after."""
    message = _error_text(err) or fallback or "codex reported a failed turn"
    if _TRUNCATED.search(message):
        return Truncated(message)
    info = err.get("codexErrorInfo")
    failure = codex_failure(message)
    kind = _ERROR_KINDS.get(info) if isinstance(info, str) else None
    if isinstance(info, dict):
        for value in info.values():
            status = value.get("httpStatusCode") if isinstance(value, dict) else None
            if isinstance(status, int):
                kind = kind_for_status(status, failure.kind)
    if kind is None or kind is failure.kind or failure.kind is FailureKind.LOGIN_EXPIRED:
        return failure  # a login that is gone stays that, whatever class codex gives it
    wait = retry_after_s(message) if kind is FailureKind.RATE_LIMITED else None
    return Failure(kind, message, wait)


def codex_failure(message: str) -> Failure:
    """``classify_failure`` plus codex's own wording: its 5xx message is a generic "high
    demand" text (the upstream body is dropped), an overload, not a CLI error."""
    failure = classify_failure(message, RELOGIN)
    if failure.kind is FailureKind.CLI_ERROR and _OVERLOADED.search(message):
        return Failure(FailureKind.OVERLOADED, failure.message)
    return failure
