#!/usr/bin/env python3
"""A stand-in for ``codex exec --json`` that prints the real 0.169.0 event format (copied
from the captures beside it), for gateway tests that run without the real binary.

Usage: ``codex-fake-cli.py <codex's own argv>``; the prompt arrives on stdin. The LAST
``@@fake {json}`` directive in the prompt (XML-escaped, so unescaped first) scripts it:

  answer         the model's text (default: a JSON reply when the prompt asks for the
                 tool-call format, else "ok"); printed whole, as codex does
  error_message  fail the turn with this message (exit 1), as codex reports upstream errors
  cli_tool_call  print codex's stderr line for a call to one of its own tools, then loop
                 silently (what the real CLI does) until killed
  input_tokens / output_tokens / cached   usage numbers
Only the standard library.
"""

from __future__ import annotations

import html
import json
import sys
import time
import uuid


def directive(prompt: str) -> dict[str, object]:
    idx = prompt.rfind("@@fake ")
    if idx < 0:
        return {}
    try:
        obj, _ = json.JSONDecoder().raw_decode(html.unescape(prompt[idx + 7 :]).lstrip())
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def emit(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    argv = sys.argv[1:]
    if argv == ["--version"]:  # the real CLI's format, a version no test pins
        print("codex-cli 0.169.0-fake")
        return 0
    assert argv[:2] == ["exec", "--json"], argv
    sys.stderr.write("Reading prompt from stdin...\n")
    prompt = sys.stdin.read()
    spec = directive(prompt)
    default = '{"tool_call":null,"response":"ok"}' if "<json_format>" in prompt else "ok"
    answer = spec.get("answer", default)
    emit({"type": "thread.started", "thread_id": str(uuid.uuid4())})
    emit({"type": "turn.started"})
    if isinstance(spec.get("cli_tool_call"), str):
        line = "ERROR codex_core::tools::router: error=unsupported call: "
        sys.stderr.write(time.strftime("%Y-%m-%dT%H:%M:%S.000000Z ") + line)
        sys.stderr.write(f"{spec['cli_tool_call']}\n")
        sys.stderr.flush()
        time.sleep(3600)
        return 0
    if isinstance(spec.get("error_message"), str):
        emit({"type": "error", "message": spec["error_message"]})
        emit({"type": "turn.failed", "error": {"message": spec["error_message"]}})
        return 1
    emit(
        {
            "type": "item.completed",
            "item": {"id": "item_0", "type": "agent_message", "text": str(answer)},
        }
    )
    usage = {
        "input_tokens": int(str(spec.get("input_tokens", len(prompt) // 4))),
        "cached_input_tokens": int(str(spec.get("cached", 0))),
        "cache_write_input_tokens": 0,
        "output_tokens": int(str(spec.get("output_tokens", len(str(answer)) // 4 + 1))),
        "reasoning_output_tokens": 0,
    }
    emit({"type": "turn.completed", "usage": usage})
    return 0


if __name__ == "__main__":
    sys.exit(main())
