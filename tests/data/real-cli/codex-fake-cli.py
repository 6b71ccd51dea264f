#!/usr/bin/env python3
"""A stand-in for ``codex app-server`` (JSON-RPC over stdio) that speaks the real 0.169.0
message shapes (copied from the ``codex-as-*`` captures beside it), for gateway tests that
run without the real binary.

Usage: ``codex-fake-cli.py app-server <codex's own flags>``. It answers ``initialize``,
``thread/start``, ``thread/inject_items`` (an empty list is refused, as codex does),
``turn/start`` and ``turn/interrupt``, and exits when stdin closes. The LAST ``@@fake {json}``
directive in the conversation (developer instructions, injected items, turn input, in that
order) scripts the turn:

  answer         the model's text (default "ok"), sent as ``chunks`` deltas (default 3),
                 ``delay`` seconds apart
  reasoning      a reasoning summary sent as deltas before the answer
  tool_calls     ``[{"name", "arguments"}]``: ``item/tool/call`` requests for these dynamic
                 tools (a name the thread did not declare is codex's "unsupported call"),
                 then nothing until ``turn/interrupt``, as codex waits for the answer
  error_message  fail the turn with this message; ``error_info`` its ``codexErrorInfo``
  stop_reason    "max_tokens": the turn fails with codex's incomplete-response message
  cli_tool_call  print codex's stderr line for a call to one of its own tools, then loop
                 silently (what the real CLI does) until stdin closes
  echo_channel   answer with the JSON of what it received: ``{"thread", "items", "input",
                 "outputSchema"}`` (tests check the mapping of a request onto the channel)
  input_tokens / output_tokens / cached / reasoning_tokens   usage numbers
  rate_limits    ``account/rateLimits/updated`` params' ``rateLimits`` objects (one or a
                 list), sent as the real one sends them: after the token usage, right before
                 ``turn/completed``, or before the ``error`` of a failed turn
Notifications the client opted out of at ``initialize`` (``optOutNotificationMethods``) are
never sent, as by codex. Only the standard library.
"""

from __future__ import annotations

import html
import json
import sys
import time
import uuid
from typing import Any

UNSUPPORTED = "ERROR codex_core::tools::router: error=unsupported call: "


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


QUIET: set[str] = set()  # the client's optOutNotificationMethods


def notify(method: str, params: dict[str, Any]) -> None:
    if method not in QUIET:
        emit({"method": method, "params": params})


def texts(value: Any) -> list[str]:
    """Every string under ``text`` / ``output`` keys, in document order."""
    out: list[str] = []
    if isinstance(value, dict):
        for key, v in value.items():
            if key in ("text", "output", "developerInstructions") and isinstance(v, str):
                out.append(v)
            else:
                out.extend(texts(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(texts(v))
    return out


def directive(text: str) -> dict[str, Any]:
    idx = text.rfind("@@fake ")
    if idx < 0:
        return {}
    try:
        # html.unescape: a directive in the system context arrives XML-escaped
        obj, _ = json.JSONDecoder().raw_decode(html.unescape(text[idx + 7 :]).lstrip())
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def split(text: str, n: int) -> list[str]:
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]


class Server:
    def __init__(self) -> None:
        self.thread_id = str(uuid.uuid4())
        self.thread: dict[str, Any] = {}
        self.items: list[Any] = []
        self.turn_id = ""
        self.pending_turn = False  # waiting for an interrupt (tool calls out)
        self.request_id = 0
        self.usage: dict[str, int] = {}
        self.rate_limits: list[Any] = []  # to send once, before the turn ends

    def send_rate_limits(self) -> None:
        for limits in self.rate_limits:
            notify("account/rateLimits/updated", {"rateLimits": limits})
        self.rate_limits = []

    def handle(self, msg: dict[str, Any]) -> None:
        method, msg_id = msg.get("method"), msg.get("id")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if method == "initialize":
            capabilities = params.get("capabilities") or {}
            QUIET.update(capabilities.get("optOutNotificationMethods") or [])
            emit({"id": msg_id, "result": {"userAgent": "cli_proxy/0.169.0 (fake)"}})
        elif method == "thread/start":
            self.thread = params
            thread = {"id": self.thread_id, "ephemeral": True, "turns": []}
            emit({"id": msg_id, "result": {"thread": thread, "model": "gpt-5.5"}})
            notify("thread/started", {"thread": thread})
        elif method == "thread/inject_items":
            if not params.get("items"):
                error = {"code": -32600, "message": "items must not be empty"}
                emit({"id": msg_id, "error": error})
                return
            self.items.extend(params["items"])
            emit({"id": msg_id, "result": {}})
        elif method == "turn/start":
            self.turn_id = str(uuid.uuid4())
            turn = {"id": self.turn_id, "items": [], "status": "inProgress", "error": None}
            emit({"id": msg_id, "result": {"turn": turn}})
            notify("turn/started", {"threadId": self.thread_id, "turn": turn})
            self.run_turn(params)
        elif method == "turn/interrupt":
            emit({"id": msg_id, "result": {}})
            if self.pending_turn:
                self.pending_turn = False
                self.complete("interrupted")
        elif msg_id is not None and method is not None:
            emit({"id": msg_id, "error": {"code": -32601, "message": f"unknown {method}"}})

    def complete(self, status: str, error: dict[str, Any] | None = None) -> None:
        ids = {"threadId": self.thread_id, "turnId": self.turn_id}
        if self.usage:
            notify("thread/tokenUsage/updated", {**ids, "tokenUsage": {"total": self.usage}})
        self.send_rate_limits()
        turn = {"id": self.turn_id, "items": [], "status": status, "error": error}
        notify("turn/completed", {"threadId": self.thread_id, "turn": turn})

    def run_turn(self, params: dict[str, Any]) -> None:
        conversation = [self.thread.get("developerInstructions") or "", *texts(self.items)]
        conversation += texts(params.get("input"))
        spec = directive("\n".join(conversation))
        ids = {"threadId": self.thread_id, "turnId": self.turn_id}
        answer = str(spec.get("answer", "ok"))
        if spec.get("echo_channel"):
            received = {
                "thread": self.thread,
                "items": self.items,
                "input": params.get("input"),
                "outputSchema": params.get("outputSchema"),
            }
            answer = json.dumps(received)
        limits = spec.get("rate_limits")
        self.rate_limits = limits if isinstance(limits, list) else [limits] if limits else []
        size = sum(map(len, conversation))
        self.usage = {
            "inputTokens": int(spec.get("input_tokens", size // 4)),
            "cachedInputTokens": int(spec.get("cached", 0)),
            "outputTokens": int(spec.get("output_tokens", len(answer) // 4 + 1)),
            "reasoningOutputTokens": int(spec.get("reasoning_tokens", 0)),
            "totalTokens": 0,
        }
        if isinstance(spec.get("cli_tool_call"), str):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z ")
            sys.stderr.write(f"{stamp}{UNSUPPORTED}{spec['cli_tool_call']}\n")
            sys.stderr.flush()
            self.pending_turn = True  # codex asks the model again and again
            return
        if isinstance(spec.get("error_message"), str):
            info = spec.get("error_info")
            error = {"message": spec["error_message"], "codexErrorInfo": info}
            self.send_rate_limits()  # from the error's headers, before the error
            notify("error", {"error": error, "willRetry": False, **ids})
            self.complete("failed", error)
            return
        if isinstance(spec.get("reasoning"), str):
            item = {"type": "reasoning", "id": "rs_fake", "summary": [], "content": []}
            notify("item/started", {"item": item, **ids})
            for piece in split(spec["reasoning"], 2):
                delta = {"itemId": "rs_fake", "summaryIndex": 0, "delta": piece, **ids}
                notify("item/reasoning/summaryTextDelta", delta)
            item = {**item, "summary": [spec["reasoning"]]}
            notify("item/completed", {"item": item, **ids})
        calls = spec.get("tool_calls")
        if isinstance(calls, list) and calls:
            declared = {t.get("name") for t in self.thread.get("dynamicTools") or []}
            for n, call in enumerate(calls):
                name, args = call.get("name"), call.get("arguments", {})
                if name not in declared:
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z ")
                    sys.stderr.write(f"{stamp}{UNSUPPORTED}{name}\n")
                    sys.stderr.flush()
                    continue
                call_id = f"call_fake_{n}"
                item = {
                    "type": "dynamicToolCall",
                    "id": call_id,
                    "namespace": None,
                    "tool": name,
                    "arguments": args,
                    "status": "inProgress",
                }
                notify("item/started", {"item": item, **ids})
                request = {**ids, "callId": call_id, "namespace": None, "tool": name}
                emit(
                    {
                        "method": "item/tool/call",
                        "id": self.request_id,
                        "params": {**request, "arguments": args},
                    }
                )
                self.request_id += 1
            self.pending_turn = True
            return
        if isinstance(spec.get("delay_first"), (int, float)):
            time.sleep(float(spec["delay_first"]))
        item_id = "msg_fake"
        item = {"type": "agentMessage", "id": item_id, "text": ""}
        notify("item/started", {"item": item, **ids})
        delay = float(spec.get("delay", 0) or 0)
        for i, piece in enumerate(split(answer, int(spec.get("chunks", 3)))):
            if i and delay:
                time.sleep(delay)
            notify("item/agentMessage/delta", {**ids, "itemId": item_id, "delta": piece})
        if spec.get("stop_reason") == "max_tokens":
            message = "Incomplete response returned, reason: max_output_tokens"
            notify("error", {"error": {"message": message}, "willRetry": False, **ids})
            self.complete("failed", {"message": message, "codexErrorInfo": "other"})
            return
        notify("item/completed", {"item": {**item, "text": answer}, **ids})
        self.complete("completed")


def main() -> int:
    argv = sys.argv[1:]
    if argv == ["--version"]:  # the real CLI's format, a version no test pins (doctor)
        print("codex-cli 0.169.0-fake")
        return 0
    assert argv[:1] == ["app-server"], argv
    server = Server()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            server.handle(msg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
