"""A stand-in claude CLI for the slow-model bench: asks a real HTTP model API, like the CLI.

Reads the stream-json prompt from stdin, prints claude's ``system`` init line, POSTs the
prompt to ``$ANTHROPIC_BASE_URL/v1/messages`` with ``stream: true`` and prints every text
delta as a ``stream_event`` line as it arrives, then the ``assistant`` and ``result`` lines.
So its latency is the model API's (bench/capacity.py delays it) plus a Python start: it
shows what the gateway adds around a CLI that waits on the network, without node's CPU.
Stdlib only; started with ``python -I -S``.
"""

import json
import os
import sys
import urllib.request

prompt = "".join(
    block.get("text", "")
    for line in sys.stdin.read().splitlines()
    if line.strip()
    for block in json.loads(line)["message"]["content"]
)
out = sys.stdout
init = {"type": "system", "subtype": "init", "tools": [], "mcp_servers": [], "model": "bench"}
out.write(json.dumps(init) + "\n")
out.flush()
body = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 1024,
    "stream": True,
    "messages": [{"role": "user", "content": prompt}],
}
req = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
    data=json.dumps(body).encode(),
    headers={"content-type": "application/json", "x-api-key": "bench"},
)
text = []
with urllib.request.urlopen(req, timeout=600) as resp:
    for raw in resp:
        if not raw.startswith(b"data: "):
            continue
        event = json.loads(raw[6:])
        if event.get("type") == "content_block_delta":
            delta = event["delta"].get("text", "")
            text.append(delta)
            line = {"type": "stream_event", "event": event}
            out.write(json.dumps(line) + "\n")
            out.flush()
answer = "".join(text)
msg = {"type": "assistant", "message": {"content": [{"type": "text", "text": answer}]}}
out.write(json.dumps(msg) + "\n")
result = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "result": answer,
    "usage": {"input_tokens": len(prompt) // 4, "output_tokens": len(answer) // 4 + 1},
}
out.write(json.dumps(result) + "\n")
out.flush()
