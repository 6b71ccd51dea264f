#!/usr/bin/env python3
"""A hostile stand-in for the claude / gemini CLIs: it prints exactly the stdout the test
scripted, then exits, lingers or stalls (tests/read/test_cli_output_fuzz.py).

Usage: ``hostile_cli.py <the CLI's own argv>``; the prompt arrives on stdin (plain text,
claude's stream-json line, or gemini's ACP session/prompt) and carries the script as
``@@hostile <urlsafe base64 JSON>`` (the LAST one; base64 survives every prompt encoding and
XML escaping):

  out     urlsafe base64 of the bytes to print, as they are (no newline added)
  zout    the same, zlib-compressed first (a 100,000-deep answer fits in a prompt)
  huge    then this many bytes of "x" with no newline (one huge line)
  nest    then a JSON line nested this deep ([[[...1...]]]), newline-terminated
  stall   print nothing at all and sleep (a CLI that hangs)
  linger  after printing, keep stdout open and sleep (a CLI that never exits)
  exit    exit code (default 0)
Sleeping children give up after ``MAX_LIFE_S`` whatever happens, so a gateway that failed to
kill one cannot leave it running for long (the tests' leak checks still see it first).
Only the standard library.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import time
import zlib

MAX_LIFE_S = 60.0
MARK = re.compile(rb"@@hostile ([A-Za-z0-9_=-]+)")


def script(stdin: bytes) -> dict[str, object]:
    found = MARK.findall(stdin)
    if not found:
        return {}
    spec = json.loads(base64.urlsafe_b64decode(found[-1]))
    return spec if isinstance(spec, dict) else {}


def encode(spec: dict[str, object]) -> str:
    """The prompt text that scripts this CLI (used by the tests)."""
    return "@@hostile " + base64.urlsafe_b64encode(json.dumps(spec).encode()).decode()


ACP_SETUP = {
    "initialize": {"protocolVersion": 1, "authMethods": []},
    "session/new": {"sessionId": "hostile"},
}


def acp_prompt() -> bytes:
    """gemini --acp: the prompt comes only once the session is open, so the set-up requests
    get well-formed answers; the scripted bytes follow them (stdin stays open)."""
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("method") == "session/prompt":
            return line
        if msg.get("method") in ACP_SETUP:
            reply = {"jsonrpc": "2.0", "id": msg.get("id"), "result": ACP_SETUP[msg["method"]]}
            sys.stdout.buffer.write(json.dumps(reply).encode() + b"\n")
            sys.stdout.buffer.flush()
    return b""


def main() -> int:
    spec = script(acp_prompt() if "--acp" in sys.argv else sys.stdin.buffer.read())
    out = sys.stdout.buffer
    if spec.get("stall"):
        time.sleep(MAX_LIFE_S)
        return 0
    raw = base64.urlsafe_b64decode(str(spec.get("out", "")))
    if "zout" in spec:
        raw = zlib.decompress(base64.urlsafe_b64decode(str(spec["zout"])))
    if raw:
        out.write(raw)
        out.flush()
    huge = int(spec.get("huge", 0))  # type: ignore[call-overload]
    for _ in range(huge // 65536):
        out.write(b"x" * 65536)
    out.write(b"x" * (huge % 65536))
    depth = int(spec.get("nest", 0))  # type: ignore[call-overload]
    if depth:
        out.write(b"[" * depth + b"1" + b"]" * depth + b"\n")
    out.flush()
    if spec.get("linger"):
        time.sleep(MAX_LIFE_S)
    return int(spec.get("exit", 0))  # type: ignore[call-overload]


if __name__ == "__main__":
    sys.exit(main())
