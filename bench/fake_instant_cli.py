"""A stand-in CLI for benchmarks: prints a fixed Claude stream-json run at once.

Stdlib only and tiny, so its own start-up is as small as a Python process allows. When the
prompt contains STREAM_BENCH it instead prints 20 text deltas 20 ms apart, each carrying the
wall-clock time it was written (``T<ns>|``), so a client can measure pass-through latency.
"""

import json
import sys
import time

prompt = sys.stdin.read()
out = sys.stdout
init = {"type": "system", "subtype": "init", "tools": [], "mcp_servers": [], "model": "bench"}
out.write(json.dumps(init) + "\n")
if "STREAM_BENCH" in prompt:
    gap = 0.05 if "SLOW" in prompt else 0.02
    for _ in range(20):
        time.sleep(gap)
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": f"T{time.time_ns()}|"},
        }
        out.write(json.dumps({"type": "stream_event", "event": delta}) + "\n")
        out.flush()
    text = "done"
    out.write(json.dumps({"type": "assistant", "message": {"content": []}}) + "\n")
else:
    text = "Hello! This is a fixed answer from the benchmark CLI."
    msg = {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}
    out.write(json.dumps(msg) + "\n")
result = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "result": text,
    "usage": {"input_tokens": len(prompt) // 4, "output_tokens": 12},
}
out.write(json.dumps(result) + "\n")
out.flush()
