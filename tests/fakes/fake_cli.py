#!/usr/bin/env python3
"""A stand-in for the claude / gemini CLIs that prints their real stream-json format.

Usage: ``fake_cli.py claude|gemini|copilot <the CLI's own argv>``; the prompt arrives on stdin.
The event shapes are copied from real runs (shared/reference/real-cli-samples and
fixtures/). What it answers is scripted by the LAST ``@@fake {json}`` directive in
the prompt (XML-escaped, so it is unescaped first):

  answer      the model's text (default: a JSON reply when the prompt asks for the
              tool-call format, else "ok")
  chunks      split the answer into this many token deltas (default 3)
  delay       seconds to sleep between output lines (default 0)
  hang        seconds to sleep before printing anything
  exit        exit code (default 0)
  stderr      text printed to stderr
  is_error    report the call as failed (claude: result.is_error; gemini: status error)
  error_message / api_error_status   details of that failure
  garbage     print non-JSON noise lines between events
  no_result   omit the final result line
  repeat      the answer this many times over (large answers from a small prompt)
  linger      after the last line, keep running (stdout open) this many seconds
  close_linger  after the last line, close stdout and keep running this many seconds
  child       spawn a grandchild that sleeps this many seconds (tree-kill tests)
  escape      with child: the grandchild escapes the CLI's session ("setsid") or is
              re-parented by a double fork ("double_fork")
  per_cli     {"claude": {...}, "gemini": {...}}: a directive per CLI (the one prompt goes to
              each target of an alias in turn); a CLI not named gets none
  echo_prompt answer with the prompt itself (round-trip tests)
  echo_blocks claude only: answer with the stdin message's content blocks, as JSON: text
              blocks as {"text": ...}, image blocks as {"image": media_type, "sha256": ...}
  split_bytes write every output line in pieces of this many bytes, flushing (and pausing
              1 ms) after each: lines and UTF-8 characters arrive cut at byte boundaries
  cached      prompt tokens the model API read from its cache (claude
              cache_read_input_tokens, gemini stats.cached)
  (an answer's "@SURROGATE@" is printed as the JSON escape \ud800, a lone surrogate)
  max_tokens  claude: the answer, then the CLI's real "exceeded the output token
              maximum" error (synthetic assistant message + is_error result); gemini --acp:
              the answer, then stopReason max_tokens
gemini --acp only (the CLI speaks JSON-RPC; the prompt is the text of its content blocks):
  thought     an agent_thought_chunk before the answer
  ask_permission  send session/request_permission (and an fs/read_text_file request) and
              answer with the client's replies, as JSON, joined by "|"
  tool_call   a tool_call update of this title (one of the CLI's own tools running)
  is_error    the prompt's JSON-RPC error (code api_error_status, default 500)
  echo_blocks also for gemini --acp: the session/prompt content blocks
  steps       an agent's task: a list of answers, the one used is indexed by the number of
              tool results in the prompt (the last one repeats); "{images}" in it becomes
              the number of image blocks the CLI got (gemini --acp)
  boot        burn CPU this many seconds before the first output line (a node CLI's start)
  record      with boot: append {"start": t, "booted": t} (time.time()) to this file, the
              start window as the CLI saw it: from its first statement to its first line
  progress    before answering, print a progress event every 0.2 s for this many seconds
              (claude: a stream_event ping, as a model API keep-alive passes through)
  stderr_progress  the same on stderr only, stdout silent
  silent_reads  after the init line, print nothing for this many seconds while reading
              bytes (as a CLI does whose model streams thoughts it does not print)
gemini --acp with a "Login with Google" (``$GEMINI_CLI_HOME/.gemini/oauth_creds.json``) whose
refresh token starts with "refused" and whose access token has expired: what 0.61.0 does
when the token endpoint refuses the refresh (capture gemini-0.61.0-acp-refresh-invalid-grant):
the interactive login's URL on stdout, one stdin line taken as the code, the code question
again, then it waits, even after stdin ends.
``fake_cli.py claude --version`` prints a version in the real CLI's format (for doctor).
Only the standard library: it runs with whatever python3 is on PATH.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import subprocess
import sys
import time
import uuid


def stream_json_blocks(data: str) -> list[dict[str, str]]:
    """The content blocks of a stream-json stdin, images by digest (echo_blocks)."""
    out: list[dict[str, str]] = []
    for line in data.split("\n"):  # like a JSON-lines reader
        if line.strip():
            for b in json.loads(line)["message"]["content"]:
                if b.get("type") == "image":
                    raw = base64.b64decode(b["source"]["data"])
                    digest = hashlib.sha256(raw).hexdigest()
                    out.append({"image": b["source"]["media_type"], "sha256": digest})
                else:
                    out.append({"text": b["text"]})
    return out


def stream_json_prompt(data: str) -> str:
    """claude --input-format stream-json: user messages of text blocks, one JSON per line."""
    texts: list[str] = []
    for line in data.split("\n"):  # like a JSON-lines reader
        if line.strip():
            msg = json.loads(line)
            assert msg["type"] == "user", msg
            texts += [b["text"] for b in msg["message"]["content"] if b.get("type") == "text"]
    return "".join(texts)


def option(argv: list[str], name: str) -> str | None:
    """An option's value, given as ``--name=VALUE`` (how the gateway passes values) or as
    ``--name VALUE``."""
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def directive(prompt: str) -> dict[str, object]:
    idx = prompt.rfind("@@fake ")
    if idx < 0:
        return {}
    text = html.unescape(prompt[idx + len("@@fake ") :])
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def split(text: str, n: int) -> list[str]:
    n = max(1, min(n, len(text) or 1))
    size = -(-len(text) // n) if text else 0
    return [text[i : i + size] for i in range(0, len(text), size)] if text else [""]


class Out:
    def __init__(self, spec: dict[str, object]) -> None:
        self.delay = float(spec.get("delay", 0) or 0)
        self.garbage = bool(spec.get("garbage"))
        self.split_bytes = int(spec.get("split_bytes", 0) or 0)  # type: ignore[call-overload]
        self.first = True

    def emit(self, obj: dict[str, object]) -> None:
        if not self.first and self.delay:
            time.sleep(self.delay)
        self.first = False
        if self.garbage:
            sys.stdout.write("Loading configuration... \x1b[32mdone\x1b[0m\n{not json\n")
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n"
        # a model's lone surrogate escape, as a real CLI would print it
        line = line.replace("@SURROGATE@", "\\ud800")
        if self.split_bytes:
            sys.stdout.flush()
            data = line.encode()
            for i in range(0, len(data), self.split_bytes):
                sys.stdout.buffer.write(data[i : i + self.split_bytes])
                sys.stdout.buffer.flush()
                time.sleep(0.001)
            return
        sys.stdout.write(line)
        sys.stdout.flush()


def run_claude(argv: list[str], prompt: str, spec: dict[str, object], answer: str) -> None:
    out = Out(spec)
    model = option(argv, "--model") or "claude-sonnet-4-6"
    session = str(uuid.uuid4())
    tools: list[str] = [] if "--tools" in argv else ["Bash", "Edit", "Read"]
    out.emit(
        {
            "type": "system",
            "subtype": "init",
            "cwd": os.getcwd(),
            "session_id": session,
            "tools": tools,
            "mcp_servers": [],
            "model": model,
            "permissionMode": "default",
            "apiKeySource": "none",
            "claude_code_version": "2.1.197-fake",
            "uuid": str(uuid.uuid4()),
        }
    )
    if spec.get("silent_reads"):
        silent_reads(float(spec["silent_reads"]))  # type: ignore[arg-type]
    usage = {"input_tokens": len(prompt) // 4, "output_tokens": len(answer) // 4 + 1}
    failed = bool(spec.get("is_error"))
    if isinstance(spec.get("rate_limit"), dict):  # a subscription's rate_limit_event
        info = spec["rate_limit"]
        out.emit({"type": "rate_limit_event", "rate_limit_info": info, "session_id": session})
    thought = str(spec.get("think", ""))  # the model thinks this before it answers
    if thought and not failed:
        if "--include-partial-messages" in argv:
            thinking_block = {"type": "thinking", "thinking": ""}
            start = {"type": "content_block_start", "index": 0, "content_block": thinking_block}
            out.emit({"type": "stream_event", "event": start, "session_id": session})
            for piece in split(thought, 3):
                delta = {"type": "thinking_delta", "thinking": piece}
                event = {"type": "content_block_delta", "index": 0, "delta": delta}
                out.emit({"type": "stream_event", "event": event, "session_id": session})
            stop = {"type": "content_block_stop", "index": 0}
            out.emit({"type": "stream_event", "event": stop, "session_id": session})
        block = {"type": "thinking", "thinking": thought, "signature": "c2lnbmF0dXJl"}
        message = {"id": "msg_fake", "type": "message", "role": "assistant", "model": model}
        out.emit(
            {
                "type": "assistant",
                "message": {**message, "content": [block], "stop_reason": None, "usage": usage},
                "parent_tool_use_id": None,
                "session_id": session,
                "uuid": str(uuid.uuid4()),
            }
        )
    if "--include-partial-messages" in argv and not failed:
        msg = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "usage": usage,
        }
        out.emit(
            {
                "type": "stream_event",
                "event": {"type": "message_start", "message": msg},
                "session_id": session,
            }
        )
        out.emit(
            {
                "type": "stream_event",
                "event": {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
                "session_id": session,
            }
        )
        for piece in split(answer, int(spec.get("chunks", 3))):  # type: ignore[call-overload]
            out.emit(
                {
                    "type": "stream_event",
                    "event": {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                    "session_id": session,
                }
            )
        out.emit(
            {
                "type": "stream_event",
                "event": {"type": "content_block_stop", "index": 0},
                "session_id": session,
            }
        )
    text = str(spec.get("error_message", "API Error: 500 internal error")) if failed else answer
    assistant: dict[str, object] = {
        "type": "assistant",
        "message": {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": None,
            "usage": usage,
        },
        "parent_tool_use_id": None,
        "session_id": session,
        "uuid": str(uuid.uuid4()),
    }
    if failed:
        assistant["error"] = "unknown"
    out.emit(assistant)
    if spec.get("max_tokens"):
        text = "API Error: Claude's response exceeded the 32000 output token maximum."
        failed = True
        out.emit(
            {
                "type": "assistant",
                "error": "max_output_tokens",
                "session_id": session,
                "message": {
                    "id": "synthetic",
                    "model": "<synthetic>",
                    "role": "assistant",
                    "content": [{"type": "text", "text": text}],
                },
            }
        )
    if spec.get("no_result"):
        return
    out.emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": failed,
            "api_error_status": spec.get("api_error_status"),
            "duration_ms": 5,
            "num_turns": 1,
            "result": text,
            "stop_reason": "end_turn",
            "session_id": session,
            "total_cost_usd": 0.0,
            "usage": {
                **usage,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": int(spec.get("cached", 0)),  # type: ignore[call-overload]
            },
            "permission_denials": [],
            "uuid": str(uuid.uuid4()),
        }
    )


def run_gemini(argv: list[str], prompt: str, spec: dict[str, object], answer: str) -> None:
    out = Out(spec)
    model = option(argv, "--model") or "gemini-2.5-flash"
    stamp = "2026-11-22T18:22:40.354Z"
    out.emit({"type": "init", "timestamp": stamp, "session_id": str(uuid.uuid4()), "model": model})
    out.emit({"type": "message", "timestamp": stamp, "role": "user", "content": prompt})
    failed = bool(spec.get("is_error"))
    if not failed:
        for piece in split(answer, int(spec.get("chunks", 3))):  # type: ignore[call-overload]
            out.emit(
                {
                    "type": "message",
                    "timestamp": stamp,
                    "role": "assistant",
                    "content": piece,
                    "delta": True,
                }
            )
    if spec.get("no_result"):
        return
    stats = {
        "total_tokens": 0,
        "input_tokens": len(prompt) // 4 + int(spec.get("cached", 0)),  # type: ignore[call-overload]
        "output_tokens": len(answer) // 4 + 1,
        "cached": int(spec.get("cached", 0)),  # type: ignore[call-overload]
        "duration_ms": 5,
        "tool_calls": 0,
    }
    stats["total_tokens"] = stats["input_tokens"] + stats["output_tokens"]
    result: dict[str, object] = {
        "type": "result",
        "timestamp": stamp,
        "status": "error" if failed else "success",
        "stats": stats,
    }
    if failed:
        result["error"] = {
            "type": "Error",
            "message": str(spec.get("error_message", "internal error")),
        }
    out.emit(result)


class AcpSession:
    """gemini --acp: JSON-RPC 2.0 lines on stdio (the shapes of 0.61.0's, see
    tests/data/real-cli/gemini-acp-*.stdout.jsonl). Answers initialize and session/new at
    once (a pre-started process does both before its prompt), then waits for the prompt."""

    def __init__(self) -> None:
        self.session = str(uuid.uuid4())
        self.prompt_id: object = None
        self.blocks: list[dict[str, object]] = []

    @staticmethod
    def send(obj: dict[str, object]) -> None:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **obj}, ensure_ascii=False) + "\n")
        sys.stdout.flush()

    def open(self) -> bool:
        """Serve the set-up until the prompt arrives; False when stdin ended first."""
        for line in sys.stdin:
            if not line.strip():
                continue
            msg = json.loads(line)
            method, params = msg.get("method"), msg.get("params") or {}
            if method == "initialize":
                caps = {"loadSession": True, "promptCapabilities": {"image": True}}
                info = {"name": "gemini-cli", "title": "Gemini CLI", "version": "0.61.0-fake"}
                result = {"protocolVersion": 1, "agentCapabilities": caps, "agentInfo": info}
                self.send({"id": msg["id"], "result": {**result, "authMethods": []}})
            elif method == "session/new":
                assert params.get("mcpServers") == [], params
                modes = {"currentModeId": "default", "availableModes": []}
                self.send({"id": msg["id"], "result": {"sessionId": self.session, "modes": modes}})
            elif method == "session/prompt":
                assert params.get("sessionId") == self.session, params
                self.prompt_id, self.blocks = msg["id"], list(params["prompt"])
                return True
        return False

    def text(self) -> str:
        return "".join(str(b["text"]) for b in self.blocks if b.get("type") == "text")

    def echo_blocks(self) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        for b in self.blocks:
            if b.get("type") == "image":
                digest = hashlib.sha256(base64.b64decode(str(b["data"]))).hexdigest()
                out.append({"image": str(b["mimeType"]), "sha256": digest})
            else:
                out.append({"text": str(b["text"])})
        return out

    def wait_answer(self, rid: int) -> dict[str, object]:
        """The client's answer to our request ``rid`` (a permission request)."""
        for line in sys.stdin:
            if line.strip():
                msg = json.loads(line)
                if msg.get("id") == rid and "method" not in msg:
                    return dict(msg)
        return {}


def gemini_login_refused() -> bool:
    """A Google login whose expired access token the token endpoint will not refresh."""
    creds = os.path.join(os.environ.get("GEMINI_CLI_HOME", ""), ".gemini", "oauth_creds.json")
    try:
        with open(creds, encoding="utf-8") as f:
            login = json.load(f)
    except (OSError, ValueError):
        return False
    expired = float(login.get("expiry_date") or 0) < time.time() * 1000
    return expired and str(login.get("refresh_token", "")).startswith("refused")


def gemini_interactive_login() -> None:
    """0.61.0's ``authWithUserCode`` over ACP, twice: the URL (after its terminal escapes),
    a stdin line read as the code (our initialize), refused; then it waits for ever."""
    url = "https://accounts.google.com/o/oauth2/v2/auth?redirect_uri=fake&response_type=code"
    question = "\x1b[1G\x1b[0JEnter the authorization code: \x1b[31G"
    screen = "\x1b[?1049h\x1b[2J\x1b[H\x1b[?1006l\x1b[?1002l\x1b[<u\x1b[?7h"
    visit = f"Please visit the following URL to authorize the application:\n\n{url}\n\n"
    sys.stdout.write(screen + visit + question)
    sys.stdout.flush()
    sys.stdin.readline()
    sys.stderr.write("Failed to authenticate with authorization code:invalid_grant\n")
    sys.stderr.write("\nFailed to authenticate with user code. Retrying...\n")
    sys.stderr.flush()
    sys.stdout.write(visit + question)
    sys.stdout.flush()
    for _ in sys.stdin:
        pass
    time.sleep(300)  # alive after its input ended: the gateway must end it


def run_gemini_acp(acp: AcpSession, spec: dict[str, object], answer: str) -> None:
    out = Out(spec)

    def update(kind: str, **fields: object) -> None:
        upd = {"sessionUpdate": kind, **fields}
        out.emit(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": acp.session, "update": upd},
            }
        )

    update("available_commands_update", availableCommands=[{"name": "memory"}])
    if spec.get("ask_permission"):  # a tool asks for approval: say what the client answered
        rid = 9001
        tool = {"toolCallId": "t1", "title": str(spec["ask_permission"]), "kind": "execute"}
        opts = [{"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"}]
        AcpSession.send(
            {
                "id": rid,
                "method": "session/request_permission",
                "params": {"sessionId": acp.session, "toolCall": tool, "options": opts},
            }
        )
        reply = acp.wait_answer(rid)
        answer = json.dumps(reply.get("result") or reply.get("error"))
        AcpSession.send({"id": 9002, "method": "fs/read_text_file", "params": {"path": "/etc/x"}})
        answer += "|" + json.dumps(acp.wait_answer(9002).get("error"))
    if spec.get("tool_call"):  # one of the CLI's own tools runs (an unsealed CLI)
        update("tool_call", toolCallId="t1", status="in_progress", title=spec["tool_call"])
    if spec.get("thought"):
        update("agent_thought_chunk", content={"type": "text", "text": str(spec["thought"])})
    failed = bool(spec.get("is_error"))
    if not failed:
        for piece in split(answer, int(spec.get("chunks", 3))):  # type: ignore[call-overload]
            if piece:
                update("agent_message_chunk", content={"type": "text", "text": piece})
    if spec.get("no_result"):
        return
    if failed:
        status = int(spec.get("api_error_status") or 500)  # type: ignore[call-overload]
        message = str(spec.get("error_message", "internal error"))
        out.emit(
            {"jsonrpc": "2.0", "id": acp.prompt_id, "error": {"code": status, "message": message}}
        )
        return
    tokens = {"input_tokens": len(acp.text()) // 4, "output_tokens": len(answer) // 4 + 1}
    quota = {"token_count": tokens, "model_usage": [{"model": "fake", "token_count": tokens}]}
    stop = "max_tokens" if spec.get("max_tokens") else "end_turn"
    out.emit(
        {
            "jsonrpc": "2.0",
            "id": acp.prompt_id,
            "result": {"stopReason": stop, "_meta": {"quota": quota}},
        }
    )


def run_copilot_acp(acp: AcpSession, spec: dict[str, object], answer: str) -> None:
    """copilot --acp (1.0.102's shapes, tests/data/real-cli/copilot-1.0.102-*): its own
    "Info:" lines first, a usage_update when the model request goes out, the text, and a
    result with ``usage``; an upstream error (``status``) is one "Error: ..." chunk and a
    result without usage."""
    out = Out(spec)

    def update(kind: str, **fields: object) -> None:
        upd = {"sessionUpdate": kind, **fields}
        out.emit(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": acp.session, "update": upd},
            }
        )

    def text(piece: str) -> None:
        update("agent_message_chunk", content={"type": "text", "text": piece})

    text("Info: Disabled tools: bash, view")
    text('Info: Unknown tool name in the tool allowlist: "none-offered-by-cli-proxy"')
    update("usage_update", used=2000, size=936000)
    if spec.get("thought"):
        update("agent_thought_chunk", content={"type": "text", "text": str(spec["thought"])})
    if spec.get("status"):
        text(f"Error: {spec['status']} {spec.get('error_message', 'Invalid request')}")
        out.emit({"jsonrpc": "2.0", "id": acp.prompt_id, "result": {"stopReason": "end_turn"}})
        return
    for piece in split(answer, int(spec.get("chunks", 3))):  # type: ignore[call-overload]
        if piece:
            text(piece)
    usage = {"inputTokens": len(acp.text()) // 4, "outputTokens": len(answer) // 4 + 1}
    stop = "max_tokens" if spec.get("max_tokens") else "end_turn"
    result = {"stopReason": stop, "usage": usage}
    out.emit({"jsonrpc": "2.0", "id": acp.prompt_id, "result": result})


def boot_and_record(spec: dict[str, object], started: float) -> None:
    """Burn CPU like a starting node CLI, then note the start window (``boot``)."""
    until = time.process_time() + float(spec["boot"])  # type: ignore[arg-type]
    while time.process_time() < until:
        pass
    if spec.get("record"):
        line = json.dumps({"start": started, "booted": time.time(), "pid": os.getpid()})
        fd = os.open(str(spec["record"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, (line + "\n").encode())
        os.close(fd)


def progress(spec: dict[str, object], flavour: str) -> None:
    """Progress output while the "model" thinks: never silent for long, no answer yet."""
    if spec.get("progress"):
        stream, seconds = sys.stdout, float(spec["progress"])  # type: ignore[arg-type]
        line = json.dumps({"type": "stream_event", "event": {"type": "ping"}})
    else:
        stream, seconds = sys.stderr, float(spec["stderr_progress"])  # type: ignore[arg-type]
        line = f"{flavour}: waiting for the model..."
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stream.write(line + "\n")
        stream.flush()
        time.sleep(0.2)


def silent_reads(seconds: float) -> None:
    """Print nothing, read 4 KiB every 0.2 s (a CLI receiving thoughts it does not print)."""
    end = time.monotonic() + seconds
    with open("/dev/zero", "rb", buffering=0) as src:
        while time.monotonic() < end:
            src.read(4096)
            time.sleep(0.2)


def main() -> int:
    started = time.time()
    flavour, argv = sys.argv[1], sys.argv[2:]
    if argv == ["--version"]:  # the real CLIs' format, a version no test pins
        print({"claude": "2.1.197-fake (Claude Code)"}.get(flavour, "0.61.0-fake"))
        return 0
    # like the real CLIs (Node's JSON.stringify): raw UTF-8 out, whatever the locale
    sys.stdin.reconfigure(encoding="utf-8")  # type: ignore[union-attr]
    sys.stdout.reconfigure(encoding="utf-8")  # type: ignore[union-attr]
    acp = AcpSession() if flavour in ("gemini", "copilot") and "--acp" in argv else None
    if acp is not None:
        if flavour == "gemini" and gemini_login_refused():
            gemini_interactive_login()
            return 41
        if not acp.open():
            return 0  # stdin ended before any prompt (a spare that was never used)
        prompt = raw = acp.text()
    else:
        prompt = raw = sys.stdin.read()
    if "--input-format" in sys.argv and "stream-json" in sys.argv:
        prompt = stream_json_prompt(raw)
    spec = directive(prompt)
    if isinstance(spec.get("per_cli"), dict):  # the directive of this flavour, else none
        spec = spec["per_cli"].get(flavour) or {}
    if spec.get("child"):
        sleep = f"time.sleep({float(spec['child'])})"  # type: ignore[arg-type]
        code = {
            "setsid": f"import os, time; os.setsid(); {sleep}",
            "double_fork": "import os, sys, time\n"
            "if os.fork(): sys.exit(0)\nos.setsid()\nif os.fork(): sys.exit(0)\n" + sleep,
        }.get(str(spec.get("escape")), f"import time; {sleep}")
        subprocess.Popen([sys.executable, "-c", code])
    if spec.get("boot"):
        boot_and_record(spec, started)
    if spec.get("hang"):
        time.sleep(float(spec["hang"]))  # type: ignore[arg-type]
    if spec.get("progress") or spec.get("stderr_progress"):
        progress(spec, flavour)
    if spec.get("stderr"):
        sys.stderr.write(str(spec["stderr"]) + "\n")
        sys.stderr.flush()
    if isinstance(spec.get("steps"), list) and spec["steps"]:
        # an agent's task: the answer for the step reached (tool results so far), with
        # "{images}" replaced by the number of images the CLI got with this prompt
        steps = [str(x) for x in spec["steps"]]
        answer = steps[min(prompt.count('role="tool_result"'), len(steps) - 1)]
        images = len([b for b in acp.blocks if b.get("type") == "image"]) if acp else 0
        answer = answer.replace("{images}", str(images))
    elif "answer" in spec:
        answer = str(spec["answer"])
    elif spec.get("echo_blocks"):
        answer = json.dumps(acp.echo_blocks() if acp else stream_json_blocks(raw))
    elif spec.get("echo_prompt"):
        wrap = "<json_format>" in prompt and "tool_call" in prompt
        answer = json.dumps({"tool_call": None, "response": prompt}) if wrap else prompt
    elif "<json_format>" in prompt:
        answer = '{"tool_call":null,"response":"ok"}'
    else:
        answer = "ok"
    answer *= int(spec.get("repeat", 1))  # type: ignore[call-overload]
    code = int(spec.get("exit", 0))  # type: ignore[call-overload]
    if code == 0 or spec.get("print_before_exit"):
        if acp is not None:
            (run_copilot_acp if flavour == "copilot" else run_gemini_acp)(acp, spec, answer)
        else:
            (run_claude if flavour == "claude" else run_gemini)(argv, prompt, spec, answer)
    if acp is not None and code == 0 and not (spec.get("close_linger") or spec.get("no_result")):
        for _ in sys.stdin:  # like gemini --acp: runs until its input ends
            pass
    if spec.get("close_linger"):
        sys.stdout.flush()
        os.close(1)
        time.sleep(float(spec["close_linger"]))  # type: ignore[arg-type]
    if spec.get("linger"):
        time.sleep(float(spec["linger"]))  # type: ignore[arg-type]
    return code


if __name__ == "__main__":
    sys.exit(main())
